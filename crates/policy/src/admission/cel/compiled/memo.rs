//! The memo of what chains of selections reached during one request, and
//! the numbering that gives each distinct prefix of a rule set its slot.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};

use serde_json::Value;

use super::{Path, Root};

/// Slots of a [`PathMemo`]: distinct prefixes beyond these are walked.
const MEMO_SLOTS: usize = 32;

/// The objects chains of selections on `self` and `oldSelf` reached during
/// one request, shared by its rules. Rules read the same few objects over
/// and over (every rule of the bench config starts at
/// `self.spec.forProvider`), and each step is a search of a map's keys:
/// with the memo, a chain costs one step once its parent is known.
///
/// [`MemoNumbering`] gives each distinct prefix of a set of rules a slot;
/// a memo answers only paths numbered by its own numbering, so a rule
/// from another set is walked, never answered from a wrong slot.
pub struct PathMemo<'v> {
    owner: u32,
    slots: [Cell<Option<Option<&'v Value>>>; MEMO_SLOTS],
}

impl<'v> PathMemo<'v> {
    /// An empty memo for the paths `numbering` numbered.
    pub fn new(numbering: &MemoNumbering) -> Self {
        PathMemo {
            owner: numbering.owner,
            slots: Default::default(),
        }
    }

    pub(super) fn get_or(
        &self,
        path: &Path,
        walk: impl FnOnce() -> Option<&'v Value>,
    ) -> Option<&'v Value> {
        let slot = path.slot.load(AtomicOrdering::Relaxed);
        if slot >> 32 != u64::from(self.owner) {
            return walk();
        }
        let cell = &self.slots[(slot & 0xffff_ffff) as usize];
        if let Some(at) = cell.get() {
            return at;
        }
        let at = walk();
        cell.set(Some(at));
        at
    }
}

/// Slots for the distinct prefixes of a set of rules (see [`PathMemo`]),
/// numbered once by [`MemoNumbering::of`]. Nothing numbers more paths
/// afterwards, so clones (a cloned configuration's) stay the same numbering
/// under the same owner: two numberings diverging under one owner would
/// let a memo answer a path from another prefix's slot.
#[derive(Debug, Clone)]
pub struct MemoNumbering {
    /// Never 0, so that an unnumbered path matches no memo.
    owner: u32,
    pub(super) slots: HashMap<(Root, Vec<String>), u32>,
}

impl Default for MemoNumbering {
    fn default() -> Self {
        static OWNERS: AtomicU32 = AtomicU32::new(1);
        MemoNumbering {
            owner: OWNERS.fetch_add(1, AtomicOrdering::Relaxed).max(1),
            slots: HashMap::new(),
        }
    }
}

impl MemoNumbering {
    /// Numbers the prefixes of `programs`' selection chains, as one set.
    pub fn of<'p>(
        programs: impl IntoIterator<Item = &'p crate::admission::cel::CelProgram>,
    ) -> Self {
        let mut numbering = Self::default();
        for p in programs {
            p.number_paths(&mut numbering);
        }
        numbering
    }

    pub(super) fn number(&mut self, path: &Path) {
        let Some(prefix) = path.prefix() else {
            return;
        };
        let next = self.slots.len() as u32;
        let slot = *self
            .slots
            .entry((path.root, prefix.to_vec()))
            .or_insert(next);
        // A program numbered again (by another set it belongs to) answers
        // only to that set's memo.
        let value = if (slot as usize) < MEMO_SLOTS {
            u64::from(self.owner) << 32 | u64::from(slot)
        } else {
            0
        };
        path.slot.store(value, AtomicOrdering::Relaxed);
    }
}
