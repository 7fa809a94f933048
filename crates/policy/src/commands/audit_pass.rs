//! The audit's passes, as pure functions: which kinds a pass lists again
//! (the incremental schedule) and the one log line that sums up what a pass
//! found. The runtime (`src/controller/leader/audit/`) lists, judges, keeps
//! each kind's last results and logs the line; what it writes to the
//! cluster is [`super::reports`]'s, from a [`super::reports::PassInput`].
//!
//! A pass trusts the replica's watches: a kind whose MRs were not seen to
//! change keeps its last findings instead of being listed again, as at
//! 5,000 kinds a pass that listed every kind took 42 to 53 s, one list
//! every 8 to 11 ms with kube-apiserver's CPU the limit (BENCHMARKS.md).
//! What bounds that trust is here, apart from the I/O, so that it is
//! decided at a given instant and tested without an API server.

use std::collections::BTreeMap;

use jiff::Timestamp;

/// Passes a kind's findings may be kept for while its watch sees no
/// change, before it is listed again anyway: the watches are what a pass
/// trusts, and this bounds what trusting them wrongly could hide (a lost
/// event, a rule reading what no watch follows).
pub const REFRESH_PASSES: u64 = 10;

/// Whether a pass at `now` judges every kind again: when the configuration
/// is not the one the kept findings were judged with (`same_config`
/// false), or when `now` has reached `judged_until`, the moment that
/// configuration's verdicts change by themselves (a staged Deny starting,
/// an exception expiring). Kept findings are only as good as the
/// configuration and the instant they were judged with.
pub fn starts_over(same_config: bool, judged_until: Option<Timestamp>, now: Timestamp) -> bool {
    !same_config || judged_until.is_some_and(|t| now >= t)
}

/// A kind's last listing, as the schedule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastListing<S> {
    /// The kind's change stamp when it was listed: equal stamps mean its
    /// watch saw nothing change that its findings depend on.
    pub stamp: S,
    /// The number of the pass that listed it.
    pub pass: u64,
}

/// One kind as a pass starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindNow<K, S> {
    /// The kind, as the caller names it.
    pub kind: K,
    /// Its change stamp now, taken before any list starts, so that a
    /// change seen during the pass makes the next one list it again.
    pub stamp: S,
    /// Its last listing that still counts; `None` when never listed, or
    /// when the pass starts over ([`starts_over`]).
    pub last: Option<LastListing<S>>,
}

/// The kinds a pass judges again, each in the order it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<K> {
    /// Never listed, or changed since, and the replica's watch holds none
    /// of its MRs: judged empty without a list. At 5,000 kinds a new
    /// leader's first pass, or a new configuration's, was one list a kind
    /// (45 s), most of them empty in a cluster with whole provider families
    /// installed.
    pub empty: Vec<K>,
    /// Never listed, or changed since: listed.
    pub changed: Vec<K>,
    /// Kept, and listed now because they were kept longest: these check
    /// what the watches said, so an empty kind is listed too.
    pub refresh: Vec<K>,
}

impl<K> Due<K> {
    /// The kinds to list: the changed ones, then the refreshes.
    pub fn listing(self) -> (Vec<K>, Vec<K>) {
        let mut list = self.changed;
        list.extend(self.refresh);
        (self.empty, list)
    }
}

/// The kinds pass number `pass` judges again: those never listed or
/// changed since (by their stamp), those listed [`REFRESH_PASSES`] passes
/// ago, and the longest-kept share of the rest, so that the refreshes are
/// spread over the passes instead of all falling on one. Of the changed
/// kinds, those for which `watched_none` says the replica's watch holds no
/// MR are judged empty; it is asked of the changed kinds only, as it reads
/// a shared index.
pub fn due<K: Copy, S: PartialEq>(
    kinds: impl IntoIterator<Item = KindNow<K, S>>,
    pass: u64,
    mut watched_none: impl FnMut(K) -> bool,
) -> Due<K> {
    let mut due = Due {
        empty: Vec::new(),
        changed: Vec::new(),
        refresh: Vec::new(),
    };
    let mut kept = Vec::new();
    for k in kinds {
        match k.last {
            Some(l) if l.stamp == k.stamp && pass - l.pass < REFRESH_PASSES => {
                kept.push((l.pass, k.kind));
            }
            Some(l) if l.stamp == k.stamp => due.refresh.push(k.kind),
            _ if watched_none(k.kind) => due.empty.push(k.kind),
            _ => due.changed.push(k.kind),
        }
    }
    let share = kept.len().div_ceil(REFRESH_PASSES as usize);
    // Stable: among equals, the order given.
    kept.sort_by_key(|(pass, _)| *pass);
    due.refresh
        .extend(kept.into_iter().take(share).map(|(_, k)| k));
    due
}

/// Findings a pass summary names as examples.
const SUMMARY_EXAMPLES: usize = 5;
/// Kinds a pass summary counts by name; the others are summed. At 400
/// kinds with findings, naming each makes a line of about 20 KB.
const SUMMARY_KINDS: usize = 10;

/// Where a finding is and which rule made it: what a summary counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FindingRef<'a> {
    /// The MR's API group.
    pub group: &'a str,
    /// The MR's kind.
    pub kind: &'a str,
    /// The MR's namespace; empty for a cluster-scoped MR.
    pub namespace: &'a str,
    /// The MR's name.
    pub name: &'a str,
    /// The rule that found it.
    pub rule: &'a str,
}

/// What a pass found, for its one log line: findings counted by rule and
/// by kind, how many are new since the last pass, and the first new ones.
/// A WARN line per finding, where 4,000 MRs name a ProviderConfig not
/// created yet, is 4,000 lines from each leader (8,004 WARN and ERROR
/// lines over a leader change in the e2e test `quiet::`, against 4).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FindingsSummary {
    by_rule: BTreeMap<String, usize>,
    /// By `Kind.group`.
    by_kind: BTreeMap<String, usize>,
    new: usize,
    /// `Kind.group/namespace/name rule` (no namespace for a cluster-scoped
    /// MR), the first [`SUMMARY_EXAMPLES`] new findings.
    examples: Vec<String>,
}

impl FindingsSummary {
    /// Counts one of the pass's findings, listed now or kept.
    pub fn count(&mut self, f: FindingRef<'_>) {
        *self.by_rule.entry(f.rule.to_string()).or_default() += 1;
        *self
            .by_kind
            .entry(format!("{}.{}", f.kind, f.group))
            .or_default() += 1;
    }

    /// Notes a finding not seen in the last pass.
    pub fn new_finding(&mut self, f: FindingRef<'_>) {
        self.new += 1;
        if self.examples.len() < SUMMARY_EXAMPLES {
            let at = if f.namespace.is_empty() {
                f.name.to_string()
            } else {
                format!("{}/{}", f.namespace, f.name)
            };
            self.examples
                .push(format!("{}.{}/{at} {}", f.kind, f.group, f.rule));
        }
    }

    /// How many findings were new: the pass's line is a WARN when any was.
    pub fn new_findings(&self) -> usize {
        self.new
    }

    /// `rule=n` for every rule, most findings first.
    pub fn by_rule(&self) -> String {
        most_first(&self.by_rule, usize::MAX)
    }

    /// `Kind.group=n` for the [`SUMMARY_KINDS`] kinds with most findings,
    /// then how many more kinds and findings there are.
    pub fn by_kind(&self) -> String {
        let mut s = most_first(&self.by_kind, SUMMARY_KINDS);
        if self.by_kind.len() > SUMMARY_KINDS {
            let mut counts: Vec<usize> = self.by_kind.values().copied().collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            let rest: usize = counts[SUMMARY_KINDS..].iter().sum();
            s.push_str(&format!(
                ",{} more kinds={rest}",
                self.by_kind.len() - SUMMARY_KINDS
            ));
        }
        s
    }

    /// The first new findings, comma-separated.
    pub fn examples(&self) -> String {
        self.examples.join(", ")
    }
}

/// `key=n,…` for the `limit` keys of `counts` with the highest counts,
/// highest first; ties by key.
fn most_first(counts: &BTreeMap<String, usize>, limit: usize) -> String {
    let mut v: Vec<(&String, &usize)> = counts.iter().collect();
    // Stable: ties keep the map's (the keys') order.
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .take(limit)
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Never listed or changed: listed. Unchanged: kept, but the
    /// longest-kept tenth is listed each pass, and none is kept for
    /// REFRESH_PASSES passes.
    #[test]
    fn a_pass_lists_changed_kinds_and_spreads_the_refreshes() {
        let kinds: Vec<usize> = (0..25).collect();
        // The stamps now: kind 7 changes before pass 2.
        let mut stamps: Vec<u64> = vec![0; kinds.len()];
        let mut listed: HashMap<usize, LastListing<u64>> = HashMap::new();
        let now = |stamps: &[u64], listed: &HashMap<usize, LastListing<u64>>| {
            kinds
                .iter()
                .map(|&k| KindNow {
                    kind: k,
                    stamp: stamps[k],
                    last: listed.get(&k).copied(),
                })
                .collect::<Vec<_>>()
        };
        let to_list = |d: Due<usize>| d.listing().1;
        // Pass 1: nothing known, every kind.
        assert_eq!(to_list(due(now(&stamps, &listed), 1, |_| false)).len(), 25);
        for &k in &kinds {
            listed.insert(
                k,
                LastListing {
                    stamp: stamps[k],
                    pass: 1,
                },
            );
        }
        // Pass 2: one change; it and the first 3 of the 25 kept (a tenth,
        // rounded up) in the order given.
        stamps[7] += 1;
        assert_eq!(
            to_list(due(now(&stamps, &listed), 2, |_| false)),
            [7, 0, 1, 2]
        );
        // Simulate passes that list what they are told: every kind is
        // listed within REFRESH_PASSES passes, none twice in a row unless
        // it changed, and no pass lists more than a tenth plus the changed.
        let mut last: HashMap<usize, u64> = HashMap::new();
        for pass in 2..=30 {
            let l = to_list(due(now(&stamps, &listed), pass, |_| false));
            // Pass 2 also lists the changed kind.
            let most = 3 + usize::from(pass == 2);
            assert!(l.len() <= most, "pass {pass} listed {}", l.len());
            for &k in &l {
                listed.insert(
                    k,
                    LastListing {
                        stamp: stamps[k],
                        pass,
                    },
                );
                last.insert(k, pass);
            }
            if pass > REFRESH_PASSES {
                for &k in &kinds {
                    let age = pass - last.get(&k).copied().unwrap_or(1);
                    assert!(age < REFRESH_PASSES, "kind {k} kept {age} passes");
                }
            }
        }
    }

    /// A changed kind whose watch holds no MR is judged empty, without a
    /// list; a refresh lists an empty kind anyway (it checks the watch),
    /// and the watch is asked of the changed kinds only.
    #[test]
    fn a_changed_kind_its_watch_holds_empty_is_not_listed() {
        let at = |pass| Some(LastListing { stamp: 0, pass });
        let kinds = [
            KindNow {
                kind: "new-empty",
                stamp: 0,
                last: None,
            },
            KindNow {
                kind: "changed",
                stamp: 1,
                last: at(1),
            },
            KindNow {
                kind: "old-empty",
                stamp: 0,
                last: at(1),
            },
        ];
        let mut asked = Vec::new();
        let d = due(kinds, 1 + REFRESH_PASSES, |k| {
            asked.push(k);
            k.ends_with("empty")
        });
        assert_eq!(asked, ["new-empty", "changed"]);
        assert_eq!(
            d,
            Due {
                empty: vec!["new-empty"],
                changed: vec!["changed"],
                refresh: vec!["old-empty"],
            }
        );
        assert_eq!(
            d.listing(),
            (vec!["new-empty"], vec!["changed", "old-empty"])
        );
    }

    /// A new configuration, or the moment its verdicts change by
    /// themselves, starts over; until then the kept findings stand.
    #[test]
    fn a_pass_starts_over_on_a_new_configuration_or_when_verdicts_change() {
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let until = Some(t("2030-01-01T00:00:00Z"));
        assert!(starts_over(false, None, t("2029-01-01T00:00:00Z")));
        assert!(!starts_over(true, None, t("2029-01-01T00:00:00Z")));
        assert!(!starts_over(true, until, t("2029-12-31T23:59:59Z")));
        assert!(starts_over(true, until, t("2030-01-01T00:00:00Z")));
    }

    fn finding<'a>(
        kind: &'a str,
        namespace: &'a str,
        name: &'a str,
        rule: &'a str,
    ) -> FindingRef<'a> {
        FindingRef {
            group: "ec2.aws.upbound.io",
            kind,
            namespace,
            name,
            rule,
        }
    }

    /// A pass's line counts every finding by rule and by kind (the ten
    /// kinds with most, then the rest summed) and names the first five
    /// new ones.
    #[test]
    fn a_pass_summary_counts_by_rule_and_kind_and_names_the_first_new_findings() {
        let mut s = FindingsSummary::default();
        let db = finding("K0", "team", "db", "deletion-policy");
        s.count(db);
        s.new_finding(db);
        // Kind K<i> has i + 1 findings.
        for i in 0..12 {
            for j in 0..=i {
                let (kind, name) = (format!("K{i}"), format!("mr-{j}"));
                let f = finding(&kind, "", &name, "provider-config-exists");
                s.count(f);
                s.new_finding(f);
            }
        }
        assert_eq!(s.new_findings(), 79);
        assert_eq!(s.by_rule(), "provider-config-exists=78,deletion-policy=1");
        let kinds: Vec<String> = (2..12)
            .rev()
            .map(|i| format!("K{i}.ec2.aws.upbound.io={}", i + 1))
            .collect();
        assert_eq!(s.by_kind(), format!("{},2 more kinds=4", kinds.join(",")));
        assert_eq!(
            s.examples(),
            "K0.ec2.aws.upbound.io/team/db deletion-policy, \
             K0.ec2.aws.upbound.io/mr-0 provider-config-exists, \
             K1.ec2.aws.upbound.io/mr-0 provider-config-exists, \
             K1.ec2.aws.upbound.io/mr-1 provider-config-exists, \
             K2.ec2.aws.upbound.io/mr-0 provider-config-exists"
        );
        // Kept findings are counted, not new.
        let mut kept = FindingsSummary::default();
        kept.count(db);
        assert_eq!((kept.new_findings(), kept.examples()), (0, String::new()));
        assert_eq!(kept.by_kind(), "K0.ec2.aws.upbound.io=1");
    }
}
