//! What a compiled program reads of its JSON variables, so that a request
//! converts only that much into CEL values.
//!
//! Converting the whole object (`self` and `oldSelf`, `metadata.managedFields`
//! and `status` included) cost about 72 k instructions per request where
//! evaluating two rules cost 5 k (callgrind, BENCHMARKS.md). The compiler
//! ([`super::limits`]) records every path a program selects from a variable:
//! `self.spec.forProvider.region` reads that string, `has(self.spec.tags)`
//! only whether `tags` is there. A variable used in any other way (handed
//! whole to a function, iterated, compared, indexed by a computed key) is
//! read whole from that point down, so the pruned value behaves exactly as
//! the full one for every expression the compiler saw.

use std::collections::BTreeMap;

/// What a program needs of one JSON node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Only whether it is there: `has(x.f)` asks this of `f`.
    Presence,
    /// Only these fields, when the node is an object (anything else is
    /// converted whole).
    Fields(BTreeMap<String, Need>),
    /// The whole subtree.
    Whole,
}

impl Need {
    fn merge(&mut self, other: Need) {
        match (&mut *self, other) {
            (Need::Whole, _) | (_, Need::Presence) => {}
            (_, Need::Whole) => *self = Need::Whole,
            (Need::Presence, other @ Need::Fields(_)) => *self = other,
            (Need::Fields(mine), Need::Fields(theirs)) => {
                for (k, n) in theirs {
                    match mine.get_mut(&k) {
                        Some(m) => m.merge(n),
                        None => {
                            mine.insert(k, n);
                        }
                    }
                }
            }
        }
    }

    /// Whether a value built for `self` serves a program that needs `other`.
    fn covers(&self, other: &Need) -> bool {
        match (self, other) {
            (Need::Whole, _) | (_, Need::Presence) => true,
            (_, Need::Whole) | (Need::Presence, Need::Fields(_)) => false,
            (Need::Fields(mine), Need::Fields(theirs)) => theirs
                .iter()
                .all(|(k, n)| mine.get(k).is_some_and(|m| m.covers(n))),
        }
    }

    fn describe(&self, at: &str, out: &mut Vec<String>) {
        match self {
            Need::Presence => out.push(format!("has({at})")),
            Need::Whole => out.push(at.to_string()),
            Need::Fields(fields) => {
                for (k, n) in fields {
                    n.describe(&format!("{at}.{k}"), out);
                }
            }
        }
    }
}

/// What one or more programs read of each variable. Variables not listed
/// are not read at all and need not be bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    vars: BTreeMap<String, Need>,
}

impl Reads {
    /// Records that a program reads `path` of `var`, and `leaf` of its end.
    pub(super) fn record(&mut self, var: &str, path: Vec<String>, leaf: Need) {
        let need = path
            .into_iter()
            .rev()
            .fold(leaf, |n, k| Need::Fields(BTreeMap::from([(k, n)])));
        match self.vars.get_mut(var) {
            Some(m) => m.merge(need),
            None => {
                self.vars.insert(var.to_string(), need);
            }
        }
    }

    /// All of each of `vars`: a scope built for it serves any program.
    pub fn whole(vars: &[&str]) -> Self {
        Reads {
            vars: vars.iter().map(|v| (v.to_string(), Need::Whole)).collect(),
        }
    }

    /// Adds what `other` reads: a scope built for the union serves both.
    pub fn union(&mut self, other: &Reads) {
        for (var, need) in &other.vars {
            match self.vars.get_mut(var) {
                Some(m) => m.merge(need.clone()),
                None => {
                    self.vars.insert(var.clone(), need.clone());
                }
            }
        }
    }

    /// What is read of `var`; `None` when it is not read at all.
    pub fn of(&self, var: &str) -> Option<&Need> {
        self.vars.get(var)
    }

    /// Whether anything at or under `path` of `var` is read, its presence
    /// included: a subtree read whole above it counts, `has()` of a parent
    /// does not.
    pub fn reaches(&self, var: &str, path: &[&str]) -> bool {
        fn go(need: &Need, path: &[&str]) -> bool {
            match (need, path) {
                (Need::Whole, _) | (_, []) => true,
                (Need::Presence, _) => false,
                (Need::Fields(fields), [key, rest @ ..]) => {
                    fields.get(*key).is_some_and(|n| go(n, rest))
                }
            }
        }
        self.vars.get(var).is_some_and(|n| go(n, path))
    }

    /// Whether a scope built for `self` holds everything `other` reads.
    pub fn covers(&self, other: &Reads) -> bool {
        other
            .vars
            .iter()
            .all(|(v, n)| self.vars.get(v).is_some_and(|m| m.covers(n)))
    }

    /// The read paths, one per leaf, sorted: `self.spec.region` for a
    /// subtree read whole, `has(self.spec.tags)` for a presence test.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (var, need) in &self.vars {
            need.describe(var, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaches_a_path_read_whole_in_part_or_for_presence_only() {
        let mf: &[&str] = &["metadata", "managedFields"];
        let fields = |k: &str, n: Need| Need::Fields(BTreeMap::from([(k.to_string(), n)]));
        let cases = [
            (Need::Whole, true),
            (fields("metadata", Need::Whole), true),
            (
                fields("metadata", fields("managedFields", Need::Presence)),
                true,
            ),
            (
                fields(
                    "metadata",
                    fields("managedFields", fields("x", Need::Whole)),
                ),
                true,
            ),
            (fields("metadata", Need::Presence), false),
            (fields("metadata", fields("name", Need::Whole)), false),
            (fields("spec", Need::Whole), false),
        ];
        for (need, expected) in cases {
            let r = Reads {
                vars: BTreeMap::from([("self".to_string(), need.clone())]),
            };
            assert_eq!(r.reaches("self", mf), expected, "{need:?}");
            assert!(!r.reaches("oldSelf", mf));
        }
    }

    fn reads(paths: &[(&str, &[&str], Need)]) -> Reads {
        let mut r = Reads::default();
        for (var, path, leaf) in paths {
            r.record(
                var,
                path.iter().map(|s| s.to_string()).collect(),
                leaf.clone(),
            );
        }
        r
    }

    #[test]
    fn merging_keeps_the_strongest_need() {
        let r = reads(&[
            ("self", &["a", "b"], Need::Presence),
            ("self", &["a", "b", "c"], Need::Whole),
            ("self", &["a", "d"], Need::Whole),
            ("self", &["a", "d", "e"], Need::Presence),
        ]);
        assert_eq!(r.paths(), ["self.a.b.c", "self.a.d"]);
        let whole = reads(&[("self", &["a"], Need::Presence), ("self", &[], Need::Whole)]);
        assert_eq!(whole.paths(), ["self"]);
    }

    #[test]
    fn coverage() {
        let small = reads(&[("self", &["a", "b"], Need::Whole)]);
        let presence = reads(&[("self", &["a", "b"], Need::Presence)]);
        let deeper = reads(&[("self", &["a", "b", "c"], Need::Whole)]);
        let other = reads(&[("oldSelf", &["a"], Need::Whole)]);
        assert!(small.covers(&presence));
        assert!(small.covers(&deeper));
        assert!(!presence.covers(&small));
        assert!(!deeper.covers(&small));
        assert!(!small.covers(&other));
        let mut both = small.clone();
        both.union(&other);
        assert!(both.covers(&small) && both.covers(&other) && both.covers(&deeper));
        assert!(small.covers(&Reads::default()));
    }
}
