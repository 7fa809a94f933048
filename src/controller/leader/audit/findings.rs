//! What the controller's audit keeps of its findings between passes: the
//! `mrguard_audit_violations` gauges, and which findings are new, logged
//! once each at debug and summed up in the pass's line
//! ([`FindingsSummary`]), instead of a WARN line per finding every pass.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::listing::AuditFinding;
use crate::controller::replica::coverage::MrKind;
use crate::metrics::controller::ControllerMetrics;
use mrguard_policy::commands::audit_pass::FindingsSummary;

/// The target of the per-finding debug lines, the same wherever the
/// module lives: `MRGUARD_LOG=info,mrguard::audit=debug` shows them.
const FINDING_TARGET: &str = "mrguard::audit";

/// Keeps the violation gauges and which findings are new across passes.
pub(crate) struct AuditState {
    metrics: Arc<ControllerMetrics>,
    /// Per kind: the gauge label sets last exported and the keys of the
    /// findings it had.
    kinds: HashMap<String, (Vec<[String; 3]>, HashSet<String>)>,
    /// The new findings of the pass under way, for its summary.
    news: FindingsSummary,
}

impl AuditState {
    pub(crate) fn new(metrics: Arc<ControllerMetrics>) -> Self {
        Self {
            metrics,
            kinds: HashMap::new(),
            news: FindingsSummary::default(),
        }
    }

    /// The new findings recorded since the last call, for a pass summary.
    pub(crate) fn take_news(&mut self) -> FindingsSummary {
        std::mem::take(&mut self.news)
    }

    /// Records one kind's pass: sets its gauges, drops series that no
    /// longer apply, and notes findings its last pass did not have (each
    /// at debug, and in the pass summary). Returns how many were new.
    pub(crate) fn record(&mut self, kind: &MrKind, findings: &[AuditFinding]) -> usize {
        let mut counts: BTreeMap<[String; 3], i64> = BTreeMap::new();
        for f in findings {
            *counts
                .entry([f.rule.clone(), kind.group.clone(), kind.kind.clone()])
                .or_default() += 1;
        }
        let (labels, seen) = self.kinds.entry(kind.key()).or_default();
        for old in labels.iter().filter(|l| !counts.contains_key(*l)) {
            let _ = self
                .metrics
                .audit_violations
                .remove_label_values(&[&old[0], &old[1], &old[2]]);
        }
        for (l, n) in &counts {
            self.metrics
                .audit_violations
                .with_label_values(&[&l[0], &l[1], &l[2]])
                .set(*n);
        }
        *labels = counts.into_keys().collect();
        let mut now_seen = HashSet::new();
        let mut new = 0;
        for f in findings {
            let key = f.key();
            if !seen.contains(&key) {
                new += 1;
                self.news.new_finding(f.at());
                tracing::debug!(
                    target: FINDING_TARGET,
                    group = %f.group,
                    kind = %f.kind,
                    namespace = %f.namespace,
                    name = %f.name,
                    rule = %f.rule,
                    action = %f.action,
                    message = %f.message,
                    "audit: existing MR violates a rule"
                );
            }
            now_seen.insert(key);
        }
        // A finding that went away and comes back is new again.
        *seen = now_seen;
        new
    }

    /// Drops the series of every kind not in `keys` (by CRD name): those
    /// kinds are gone.
    pub(crate) fn forget_all_but(&mut self, keys: &HashSet<String>) {
        let gone: Vec<String> = self
            .kinds
            .keys()
            .filter(|k| !keys.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.forget(&k);
        }
    }

    /// The kind is gone: drop its series.
    pub(crate) fn forget(&mut self, key: &str) {
        if let Some((labels, _)) = self.kinds.remove(key) {
            for l in labels {
                let _ = self
                    .metrics
                    .audit_violations
                    .remove_label_values(&[&l[0], &l[1], &l[2]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::leader::audit::listing::audit_object;
    use crate::controller::leader::audit::listing::tests::{bucket, bucket_kind};
    use mrguard_policy::admission::config::Config;
    use mrguard_policy::cluster::Cluster;
    use serde_json::json;

    #[test]
    fn gauges_follow_passes_and_each_finding_is_new_once() {
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let mut s = AuditState::new(metrics.clone());
        let kind = bucket_kind();
        let bad = bucket(
            "bad",
            "u1",
            json!({"forProvider": {}, "deletionPolicy": "delete"}),
        );
        let findings = audit_object(
            &kind,
            bad,
            &Config::builtin(),
            Cluster::empty(),
            jiff::Timestamp::now(),
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(s.record(&kind, &findings), 1);
        let news = s.take_news();
        assert_eq!(news.new_findings(), 1);
        assert_eq!(
            news.examples(),
            "Bucket.s3.aws.upbound.io/bad deletion-policy"
        );
        let g = || {
            metrics
                .audit_violations
                .with_label_values(&["deletion-policy", "s3.aws.upbound.io", "Bucket"])
                .get()
        };
        assert_eq!(g(), 1);
        // The same finding on the next pass is not new.
        assert_eq!(s.record(&kind, &findings), 0);
        assert_eq!(s.take_news(), FindingsSummary::default());
        // Fixed: the series goes away.
        assert_eq!(s.record(&kind, &[]), 0);
        let families = prometheus::core::Collector::collect(&metrics.audit_violations);
        assert!(
            families.iter().all(|f| f.get_metric().is_empty()),
            "{families:?}"
        );
        // Broken again: new again.
        assert_eq!(s.record(&kind, &findings), 1);
        assert_eq!(g(), 1);
    }
}
