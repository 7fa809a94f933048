//! Crossplane v2's activation of MR kinds (docs/activation.md): a
//! provider ships each kind as a ManagedResourceDefinition (MRD), and a
//! ManagedResourceActivationPolicy (MRAP) activates MRDs by name.
//!
//! What Crossplane does, and so what this module models:
//! - An MRD is cluster-scoped and named `<plural>.<group>`, like the CRD it
//!   stands for; its spec is a CRD's (group, names, scope, versions with
//!   their schemas) plus `state`, `Inactive` by default.
//! - The activation controller matches every `activate` entry of every
//!   MRAP against every MRD's name with Go's `filepath.Match`
//!   ([`pattern`]); a match sets the MRD's `state` to `Active`. A malformed
//!   pattern matches nothing: Crossplane drops the error.
//! - Only an `Active` MRD gets its CRD (safe-start: before activation the
//!   kind is not served at all), and `Active` cannot go back to
//!   `Inactive`, so an MRD stays active after its MRAP is deleted.
//!
//! [`Activations`] holds the MRDs and MRAPs known (from files, or kept by
//! the runtime's watch in [`ActivationIndex`]) and answers which kinds are
//! active, by which MRAP, and which MRD names a pattern that matches
//! nothing was probably meant to name.

pub mod pattern;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::cluster::documented::KindFields;

/// The API group of both kinds.
pub const GROUP: &str = "apiextensions.crossplane.io";
/// The version of both kinds.
pub const VERSION: &str = "v1alpha1";
/// The kind of an MRD.
pub const MRD_KIND: &str = "ManagedResourceDefinition";
/// The kind of an MRAP.
pub const MRAP_KIND: &str = "ManagedResourceActivationPolicy";
/// The resource (plural) of MRDs.
pub const MRD_PLURAL: &str = "managedresourcedefinitions";
/// The resource (plural) of MRAPs.
pub const MRAP_PLURAL: &str = "managedresourceactivationpolicies";

/// Whether `object` is an MRD (any version of Crossplane's group).
pub fn is_mrd(object: &Value) -> bool {
    is(object, MRD_KIND)
}

/// Whether `object` is an MRAP (any version of Crossplane's group).
pub fn is_mrap(object: &Value) -> bool {
    is(object, MRAP_KIND)
}

fn is(object: &Value, kind: &str) -> bool {
    object.get("kind").and_then(Value::as_str) == Some(kind)
        && object
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|a| a.split_once('/'))
            .is_some_and(|(g, _)| g == GROUP)
}

/// What one MRD says of its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Mrd {
    /// `metadata.name`, `<plural>.<group>`: what MRAP patterns match.
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.names.plural`.
    pub plural: String,
    /// `spec.state` is `Active`.
    pub active: bool,
    /// The documented-immutable fields of its schema, as a CRD's.
    pub documented: Option<Arc<KindFields>>,
}

impl Mrd {
    /// Reads an MRD; `None` for any other object or one without a name,
    /// group or kind. A missing `state` is `Inactive`, the CRD's default.
    pub fn from_object(object: &Value) -> Option<Mrd> {
        if !is_mrd(object) {
            return None;
        }
        let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (name, group, kind) = (s("/metadata/name"), s("/spec/group"), s("/spec/names/kind"));
        if name.is_empty() || group.is_empty() || kind.is_empty() {
            return None;
        }
        Some(Mrd {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            plural: s("/spec/names/plural").into(),
            active: s("/spec/state") == "Active",
            documented: crate::cluster::documented::derive(object).map(Arc::new),
        })
    }

    /// `Active` or `Inactive`, as `spec.state` says.
    pub fn state(&self) -> &'static str {
        if self.active {
            "Active"
        } else {
            "Inactive"
        }
    }
}

/// What one MRAP activates.
#[derive(Debug, Clone, PartialEq)]
pub struct Mrap {
    /// `metadata.name`.
    pub name: String,
    /// `spec.activate`, in order.
    pub patterns: Vec<String>,
}

impl Mrap {
    /// Reads an MRAP; `None` for any other object. Entries that are not
    /// strings are skipped (the API server refuses them).
    pub fn from_object(object: &Value) -> Option<Mrap> {
        if !is_mrap(object) {
            return None;
        }
        Some(Mrap {
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            patterns: object
                .pointer("/spec/activate")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        })
    }

    /// The first of its patterns that matches `mrd_name`.
    pub fn activating(&self, mrd_name: &str) -> Option<&str> {
        self.patterns
            .iter()
            .find(|p| pattern::matches(p, mrd_name).unwrap_or(false))
            .map(String::as_str)
    }
}

/// Where a kind stands.
#[derive(Debug, Clone, PartialEq)]
pub enum KindState<'a> {
    /// No MRD defines the kind: the CRD, if any, was installed directly.
    NoMrd,
    /// The MRD is `Active`; `by` is the MRAP and pattern that match it
    /// now, if one does (it stays active without).
    Active {
        /// The MRD.
        mrd: &'a Mrd,
        /// The MRAP and its matching pattern.
        by: Option<(&'a str, &'a str)>,
    },
    /// The MRD is `Inactive` but an MRAP matches it: Crossplane will
    /// activate it (or its activation failed).
    Pending {
        /// The MRD.
        mrd: &'a Mrd,
        /// The MRAP and its matching pattern.
        by: (&'a str, &'a str),
    },
    /// The MRD is `Inactive` and no MRAP matches it: the kind has no CRD,
    /// and the API server answers "no matches for kind".
    Inactive(&'a Mrd),
}

impl KindState<'_> {
    /// For a kind that cannot be used yet, why, in one sentence; `None`
    /// when it is active or has no MRD.
    pub fn problem(&self) -> Option<String> {
        match self {
            KindState::Inactive(m) => Some(inactive_message(m)),
            KindState::Pending { mrd, by } => Some(format!(
                "kind {}.{} is served by MRD {}, which MRAP {} activates (pattern {:?}) but whose \
                 state is still Inactive: Crossplane has not activated it yet, or failed to (see the \
                 MRAP's conditions)",
                mrd.kind, mrd.group, mrd.name, by.0, by.1
            )),
            _ => None,
        }
    }
}

/// "kind X is served by MRD x, which no MRAP activates (state Inactive)",
/// with the entry that would activate it.
pub fn inactive_message(m: &Mrd) -> String {
    format!(
        "kind {}.{} is served by MRD {}, which no MRAP activates (state {}); add {:?} (or a \
         pattern that matches it) to an MRAP's spec.activate",
        m.kind,
        m.group,
        m.name,
        m.state(),
        m.name
    )
}

/// The MRDs and MRAPs known, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activations {
    mrds: BTreeMap<String, Mrd>,
    mraps: BTreeMap<String, Mrap>,
}

impl Activations {
    /// Adds `object` when it is an MRD or MRAP (or a `List` of them);
    /// returns whether it was one.
    pub fn add(&mut self, object: &Value) -> bool {
        if object.get("kind").and_then(Value::as_str) == Some("List") {
            let mut any = false;
            for item in object
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                any |= self.add(item);
            }
            return any;
        }
        if let Some(m) = Mrd::from_object(object) {
            self.mrds.insert(m.name.clone(), m);
            true
        } else if let Some(p) = Mrap::from_object(object) {
            self.mraps.insert(p.name.clone(), p);
            true
        } else {
            false
        }
    }

    /// Adds an MRD read already.
    pub fn insert_mrd(&mut self, mrd: Mrd) {
        self.mrds.insert(mrd.name.clone(), mrd);
    }

    /// Whether no MRD is known (MRAPs alone say nothing of kinds).
    pub fn is_empty(&self) -> bool {
        self.mrds.is_empty()
    }

    /// The MRDs, by name.
    pub fn mrds(&self) -> impl Iterator<Item = &Mrd> {
        self.mrds.values()
    }

    /// The MRAPs, by name.
    pub fn mraps(&self) -> impl Iterator<Item = &Mrap> {
        self.mraps.values()
    }

    /// The MRD that defines `group`/`kind`.
    pub fn mrd_for(&self, group: &str, kind: &str) -> Option<&Mrd> {
        self.mrds
            .values()
            .find(|m| m.group == group && m.kind == kind)
    }

    /// The MRDs whose kind or plural is `name` (any case), as kubectl
    /// resolves a resource name, in `group` when given.
    pub fn find(&self, name: &str, group: Option<&str>) -> Vec<&Mrd> {
        let wanted = name.to_lowercase();
        self.mrds
            .values()
            .filter(|m| group.is_none_or(|g| g == m.group))
            .filter(|m| m.kind.to_lowercase() == wanted || m.plural == wanted)
            .collect()
    }

    /// The MRAP (first by name) and pattern that match `mrd_name`.
    pub fn activated_by(&self, mrd_name: &str) -> Option<(&str, &str)> {
        self.mraps
            .values()
            .find_map(|p| Some((p.name.as_str(), p.activating(mrd_name)?)))
    }

    /// Where `group`/`kind` stands.
    pub fn state(&self, group: &str, kind: &str) -> KindState<'_> {
        let Some(mrd) = self.mrd_for(group, kind) else {
            return KindState::NoMrd;
        };
        let by = self.activated_by(&mrd.name);
        match (mrd.active, by) {
            (true, by) => KindState::Active { mrd, by },
            (false, Some(by)) => KindState::Pending { mrd, by },
            (false, None) => KindState::Inactive(mrd),
        }
    }

    /// [`Activations::state`] for an object's `apiVersion` and kind.
    pub fn state_of(&self, api_version: &str, kind: &str) -> KindState<'_> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.state(group, kind)
    }

    /// The MRD names that `pattern` matches.
    pub fn matching(&self, pattern: &str) -> Vec<&str> {
        self.mrds
            .keys()
            .filter(|n| pattern::matches(pattern, n).unwrap_or(false))
            .map(String::as_str)
            .collect()
    }

    /// The MRD names that a pattern matching none was most likely meant
    /// to match, at most five, best first. First the singular/plural
    /// mistake (`bucket.s3…` for `buckets.s3…`): the pattern with its first
    /// label made plural or singular; else the names closest in edit
    /// distance, when close enough to be a typo.
    pub fn nearest(&self, pattern: &str) -> Vec<&str> {
        const MAX: usize = 5;
        let mut out: Vec<&str> = Vec::new();
        for variant in number_variants(pattern) {
            for n in self.matching(&variant) {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        if !out.is_empty() {
            out.truncate(MAX);
            return out;
        }
        // A typo: within a quarter of the pattern's length (at least 2).
        let budget = (pattern.chars().count() / 4).max(2);
        let mut scored: Vec<(usize, &str)> = self
            .mrds
            .keys()
            .map(|n| (edit_distance(pattern, n), n.as_str()))
            .filter(|(d, _)| *d <= budget)
            .collect();
        scored.sort();
        scored.into_iter().take(MAX).map(|(_, n)| n).collect()
    }

    /// What an MRAP's `activate` entries get from admission: denials for
    /// malformed patterns (Crossplane would silently activate nothing
    /// with them), warnings for well-formed ones that match no MRD known.
    pub fn review_mrap(&self, mrap: &Mrap) -> MrapReview {
        let mut review = MrapReview::default();
        for (i, p) in mrap.patterns.iter().enumerate() {
            if let Err(e) = pattern::validate(p) {
                review.denials.push(format!(
                    "spec.activate[{i}]: {e}; Crossplane matches entries with Go's filepath.Match \
                     and activates nothing with a malformed one"
                ));
                continue;
            }
            if self.mrds.is_empty() || !self.matching(p).is_empty() {
                continue;
            }
            let near = self.nearest(p);
            review.warnings.push(if near.is_empty() {
                format!(
                    "spec.activate[{i}]: {p:?} matches no ManagedResourceDefinition; MRD names are \
                     <plural>.<group>, e.g. {:?}",
                    self.mrds.keys().next().map_or("", String::as_str)
                )
            } else {
                format!(
                    "spec.activate[{i}]: {p:?} matches no ManagedResourceDefinition; did you mean {}? \
                     (MRD names are <plural>.<group>)",
                    near.iter()
                        .map(|n| format!("{n:?}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            });
        }
        review
    }
}

impl Activations {
    /// The MRDs no MRAP activates, in one line for a summary: how many,
    /// and the first `max` names. `None` when there are none.
    pub fn inactive_summary(&self, max: usize) -> Option<String> {
        let inactive: Vec<&str> = self
            .mrds
            .values()
            .filter(|m| matches!(self.state(&m.group, &m.kind), KindState::Inactive(_)))
            .map(|m| m.name.as_str())
            .collect();
        if inactive.is_empty() {
            return None;
        }
        let more = inactive.len().saturating_sub(max);
        Some(format!(
            "{} kind(s) are served by MRDs which no MRAP activates (state Inactive), so no MR of \
             them exists and none is audited: {}{}",
            inactive.len(),
            inactive[..inactive.len().min(max)].join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ))
    }
}

/// What admission answers for one MRAP.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MrapReview {
    /// Reasons to deny, one per malformed pattern.
    pub denials: Vec<String>,
    /// Warnings, one per pattern that matches no MRD.
    pub warnings: Vec<String>,
}

/// `pattern` with its first label made plural and singular, the usual
/// English ways: `bucket` → `buckets`, `policy` → `policies`, `address`
/// → `addresses`, and back.
fn number_variants(pattern: &str) -> Vec<String> {
    let (first, rest) = match pattern.split_once('.') {
        Some((f, r)) => (f, format!(".{r}")),
        None => (pattern, String::new()),
    };
    if first.is_empty() || !pattern::is_literal(first) {
        return Vec::new();
    }
    let mut forms = vec![format!("{first}s"), format!("{first}es")];
    if let Some(stem) = first.strip_suffix('y') {
        forms.push(format!("{stem}ies"));
    }
    if let Some(stem) = first.strip_suffix("ies") {
        forms.push(format!("{stem}y"));
    }
    if let Some(stem) = first.strip_suffix("es") {
        forms.push(stem.to_string());
    }
    if let Some(stem) = first.strip_suffix('s') {
        forms.push(stem.to_string());
    }
    forms
        .into_iter()
        .filter(|f| !f.is_empty())
        .map(|f| format!("{f}{rest}"))
        .filter(|p| pattern::validate(p).is_ok())
        .collect()
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The MRDs and MRAPs the runtime's watch sees (`Cluster::activations`):
/// swapped whole on each change, read as a snapshot by each decision.
#[derive(Debug, Default)]
pub struct ActivationIndex {
    current: RwLock<Arc<Activations>>,
    /// Whether the MRD API was listed at least once.
    watched: std::sync::atomic::AtomicBool,
}

impl ActivationIndex {
    /// Replaces what is known.
    pub fn replace(&self, activations: Activations) {
        // A poisoned lock only means a writer panicked mid-swap of an Arc.
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(activations);
        self.watched
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// What is known now.
    pub fn snapshot(&self) -> Arc<Activations> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether a watch has filled it: without one, an MRAP's patterns can
    /// be checked for syntax but not for what they match.
    pub fn is_watched(&self) -> bool {
        self.watched.load(std::sync::atomic::Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests;
