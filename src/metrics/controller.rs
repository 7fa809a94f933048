//! The controller's metrics, registered on the shared registry (docs/metrics.md).
//! Only the Lease holder exports the MR and audit gauges; the others clear
//! them, so summing over replicas does not double-count.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The controller's metrics; the leader-only gauges are cleared when
/// leadership ends.
pub struct ControllerMetrics {
    /// `mrguard_managed_resources{group,kind,state}`.
    pub managed_resources: IntGaugeVec,
    /// `mrguard_audit_violations{rule,group,kind}`.
    pub audit_violations: IntGaugeVec,
    /// `mrguard_controller_leader`: 1 while this replica leads.
    pub leader: IntGauge,
    /// `mrguard_controller_covered_kinds`.
    pub covered_kinds: IntGauge,
    /// `mrguard_controller_webhook_updates_total{kind}`.
    pub webhook_updates: IntCounterVec,
    /// `mrguard_controller_webhook_configuration_present{kind}`.
    pub webhook_configuration_present: IntGaugeVec,
    /// `mrguard_controller_events_total{reason,result}`.
    pub events: IntCounterVec,
    /// `mrguard_controller_api_errors_total{verb,resource,code}`.
    pub api_errors: IntCounterVec,
    /// `mrguard_audit_last_success_timestamp_seconds`.
    pub audit_last_success: IntGauge,
    /// `mrguard_controller_forbidden_kinds`.
    pub forbidden_kinds: IntGauge,
    /// `mrguard_controller_task_restarts_total{task}`.
    pub task_restarts: IntCounterVec,
    /// `mrguard_controller_watch_restarts_total{resource}`.
    pub watch_restarts: IntCounterVec,
    /// The covered kinds, for the admission metrics' labels.
    pub known_kinds: std::sync::Arc<KnownKinds>,
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            managed_resources: IntGaugeVec::new(
                Opts::new(
                    "mrguard_managed_resources",
                    "Existing MRs that are paused or creation-incomplete, by group and kind (leader only).",
                ),
                &["group", "kind", "state"],
            )?,
            audit_violations: IntGaugeVec::new(
                Opts::new(
                    "mrguard_audit_violations",
                    "Findings of the last audit pass over existing MRs, by rule, group and kind (leader only).",
                ),
                &["rule", "group", "kind"],
            )?,
            leader: IntGauge::new(
                "mrguard_controller_leader",
                "1 while this replica holds the controller Lease.",
            )?,
            covered_kinds: IntGauge::new(
                "mrguard_controller_covered_kinds",
                "MR kinds (CRDs in the managed category) the webhook rules cover.",
            )?,
            webhook_updates: IntCounterVec::new(
                Opts::new(
                    "mrguard_controller_webhook_updates_total",
                    "Server-side applies of caBundle and rules, by configuration kind.",
                ),
                &["kind"],
            )?,
            webhook_configuration_present: IntGaugeVec::new(
                Opts::new(
                    "mrguard_controller_webhook_configuration_present",
                    "1 when the webhook configuration exists; 0 after it was deleted (the emergency exit).",
                ),
                &["kind"],
            )?,
            events: IntCounterVec::new(
                Opts::new(
                    "mrguard_controller_events_total",
                    "Kubernetes Events written, by reason and result.",
                ),
                &["reason", "result"],
            )?,
            api_errors: IntCounterVec::new(
                Opts::new(
                    "mrguard_controller_api_errors_total",
                    "Failed Kubernetes API calls, by verb, resource and HTTP status (0: no answer).",
                ),
                &["verb", "resource", "code"],
            )?,
            audit_last_success: IntGauge::new(
                "mrguard_audit_last_success_timestamp_seconds",
                "When the last complete audit pass finished, in seconds since the epoch.",
            )?,
            forbidden_kinds: IntGauge::new(
                "mrguard_controller_forbidden_kinds",
                "MR kinds whose list or watch RBAC forbids (leader only); their gauges, Events and audit are missing.",
            )?,
            task_restarts: IntCounterVec::new(
                Opts::new(
                    "mrguard_controller_task_restarts_total",
                    "Leader tasks that ended or panicked, by task; each made the leader step down and restart its tasks.",
                ),
                &["task"],
            )?,
            watch_restarts: IntCounterVec::new(
                Opts::new(
                    "mrguard_controller_watch_restarts_total",
                    "Watches restarted with a fresh list because their resourceVersion expired (410 Gone), by resource.",
                ),
                &["resource"],
            )?,
            known_kinds: Default::default(),
        };
        m.collectors()
            .into_iter()
            .try_for_each(|c| registry.register(c))?;
        Ok(m)
    }

    /// Every collector, as registered (and listed in docs/metrics.md).
    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.managed_resources.clone()),
            Box::new(self.audit_violations.clone()),
            Box::new(self.leader.clone()),
            Box::new(self.covered_kinds.clone()),
            Box::new(self.forbidden_kinds.clone()),
            Box::new(self.webhook_updates.clone()),
            Box::new(self.webhook_configuration_present.clone()),
            Box::new(self.events.clone()),
            Box::new(self.api_errors.clone()),
            Box::new(self.audit_last_success.clone()),
            Box::new(self.task_restarts.clone()),
            Box::new(self.watch_restarts.clone()),
        ]
    }

    /// Counts one failed API call; `code` is the HTTP status, 0 without one.
    pub fn api_error(&self, verb: &str, resource: &str, code: Option<u16>) {
        let code = code.unwrap_or(0).to_string();
        self.api_errors
            .with_label_values(&[verb, resource, &code])
            .inc();
    }

    /// Drops what only the leader knows, when leadership ends.
    pub(crate) fn clear_leader_state(&self) {
        self.leader.set(0);
        self.managed_resources.reset();
        self.audit_violations.reset();
        self.covered_kinds.set(0);
        self.forbidden_kinds.set(0);
        self.webhook_configuration_present.reset();
    }
}

/// The kinds the controller covers (CRDs in the `managed` category), for
/// the `group`/`kind` labels: with the configuration's named kinds, the
/// only values those labels take; anything else is `other`, so no request
/// can add series. Filled by the leader's coverage task; kept when leadership
/// moves, as the CRDs do not change with it.
#[derive(Debug, Default)]
pub struct KnownKinds {
    by_group: RwLock<HashMap<String, HashSet<String>>>,
}

impl KnownKinds {
    /// Replaces the set with `kinds`, as (group, kind) pairs.
    pub fn replace<'a>(&self, kinds: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut by_group: HashMap<String, HashSet<String>> = HashMap::new();
        for (g, k) in kinds {
            by_group
                .entry(g.to_string())
                .or_default()
                .insert(k.to_string());
        }
        if let Ok(mut known) = self.by_group.write() {
            *known = by_group;
        }
    }

    /// Whether the pair is in the set; no allocation.
    pub fn contains(&self, group: &str, kind: &str) -> bool {
        self.by_group
            .read()
            .is_ok_and(|k| k.get(group).is_some_and(|kinds| kinds.contains(kind)))
    }
}
