//! The tally of existing MRs behind the gauges and the `PossiblyLeaked`
//! Events: what every replica counts, so a new leader has it at once.
//!
//! The annotations and `spec.managementPolicies` say everything needed:
//! whether an MR is paused (`crossplane.io/paused: "true"` or
//! `managementPolicies: []`) and whether its creation is incomplete.
//!
//! [`MrStates`] is fed by the identity index's watches (`identity.rs`), the
//! one watch per MR kind that every replica runs: at 1,000 kinds a second,
//! metadata-only watch per kind for this doubled the leader's per-kind
//! memory and its relists after an API-server restart (BENCHMARKS.md, "The
//! controller at 100,000 MRs"). Every replica keeps the states; only the
//! leader exports the gauges and hands the incomplete creations to its
//! Event writer (`leader::leak_events`).
//!
//! Only MRs that are paused or whose creation is incomplete are kept (the
//! counts are of those), so the states cost nothing per ordinary MR. The
//! keys of the Events already written ([`EventDedup`]) are kept here too:
//! they outlive a leadership term, and a deleted MR's keys go with it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::coverage::MrKind;
use crate::metrics::controller::ControllerMetrics;
use mrguard_policy::admission::mr::{Mr, CREATE_PENDING};

/// 404s on a kind's watch logged at debug before one is a warning: the
/// backoff (0.8 s doubling to 30 s, jittered) makes that 50 to 100 s. With
/// 3 (5 to 10 s), 400 CRDs created at once logged 227 warnings while the
/// API server took its time to serve them.
pub(crate) const QUIET_NOT_FOUND: u32 = 6;

/// What the gauges count for one MR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjState {
    /// `crossplane.io/paused: "true"` or `managementPolicies: []`.
    pub paused: bool,
    /// While creation is incomplete: what its Event needs.
    pub pending: Option<Pending>,
}

/// An incomplete creation: the MR and its `external-create-pending` time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub(crate) obj: ObjRef,
    pub(crate) at: String,
}

impl ObjState {
    /// The state of an MR of `kind` from its metadata and
    /// `spec.managementPolicies`.
    pub(crate) fn of(
        kind: &MrKind,
        meta: &ObjectMeta,
        management_policies: Option<&Value>,
    ) -> Self {
        let annotations = meta.annotations.as_ref();
        if annotations.is_none() && management_policies.is_none() {
            return Self::default();
        }
        let v = json!({"metadata": {"annotations": annotations},
                       "spec": {"managementPolicies": management_policies}});
        let mr = Mr(&v);
        let pending = match annotations.and_then(|a| a.get(CREATE_PENDING)) {
            Some(at) if mr.creation_incomplete() => ObjRef::new(kind, meta).map(|obj| Pending {
                obj,
                at: at.clone(),
            }),
            _ => None,
        };
        Self {
            paused: mr.is_paused(),
            pending,
        }
    }

    /// Counts for nothing: not kept.
    fn is_plain(&self) -> bool {
        !self.paused && self.pending.is_none()
    }
}

/// One kind's paused and creation-incomplete MRs and the counts behind its
/// gauges, kept as objects come and go: an event costs O(1), not a recount
/// of the kind.
#[derive(Default)]
struct KindStates {
    group: String,
    kind: String,
    /// Only the MRs that count (see [`ObjState::is_plain`]).
    objects: HashMap<String, ObjState>,
    paused: i64,
    incomplete: i64,
    /// No longer an MR kind: its series are gone and stay gone.
    dropped: bool,
}

impl KindStates {
    fn tally(&mut self, o: &ObjState, sign: i64) {
        self.paused += sign * i64::from(o.paused);
        self.incomplete += sign * i64::from(o.pending.is_some());
    }

    fn put(&mut self, uid: &str, state: ObjState) {
        self.tally(&state, 1);
        let old = if state.is_plain() {
            self.objects.remove(uid)
        } else {
            self.objects.insert(uid.to_string(), state)
        };
        if let Some(old) = old {
            self.tally(&old, -1);
        }
    }

    fn take(&mut self, uid: &str) {
        if let Some(old) = self.objects.remove(uid) {
            self.tally(&old, -1);
        }
    }

    /// After a list.
    fn recount(&mut self) {
        let objects = std::mem::take(&mut self.objects);
        (self.paused, self.incomplete) = (0, 0);
        for o in objects.values() {
            self.tally(o, 1);
        }
        self.objects = objects;
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Per-kind MR states behind the `mrguard_managed_resources` gauges, and
/// the kinds RBAC forbids listing (`mrguard_controller_forbidden_kinds`).
/// Each kind has its own lock; the map of kinds is locked only to find one.
/// Every replica keeps them; the gauges are set while [`MrStates::publish`]
/// says so (the leader), and incomplete creations go to the leader's Event
/// writer ([`MrStates::report_to`]).
#[derive(Clone)]
pub struct MrStates {
    inner: Shared<BTreeMap<String, Shared<KindStates>>>,
    forbidden: Shared<BTreeSet<String>>,
    metrics: Arc<ControllerMetrics>,
    publishing: Arc<AtomicBool>,
    leaks: Shared<Option<mpsc::UnboundedSender<Pending>>>,
    dedup: EventDedup,
    changes: crate::controller::changes::Changes,
}

impl MrStates {
    /// Empty states, whose gauges in `metrics` are set once published.
    pub fn new(metrics: Arc<ControllerMetrics>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(BTreeMap::new())),
            forbidden: Arc::new(Mutex::new(BTreeSet::new())),
            metrics,
            publishing: Arc::new(AtomicBool::new(false)),
            leaks: Arc::new(Mutex::new(None)),
            dedup: EventDedup::default(),
            changes: Default::default(),
        }
    }

    /// What the watches saw change, for the audit (`changes.rs`).
    pub(crate) fn changes(&self) -> &crate::controller::changes::Changes {
        &self.changes
    }

    /// The Event keys already reported, shared with the Event writer.
    pub(crate) fn dedup(&self) -> EventDedup {
        self.dedup.clone()
    }

    fn publishing(&self) -> bool {
        self.publishing.load(Ordering::SeqCst)
    }

    /// Starts (leadership won) or stops (lost) setting the gauges. Once it
    /// returns `false`, no gauge is written any more, so the caller may clear
    /// them.
    pub(crate) fn publish(&self, on: bool) {
        self.publishing.store(on, Ordering::SeqCst);
        let kinds: Vec<_> = lock(&self.inner).values().cloned().collect();
        // Taking each lock waits out a writer that saw the old flag.
        for k in kinds {
            let k = lock(&k);
            if on && !k.dropped {
                self.set_gauges(&k);
            }
        }
        let set = lock(&self.forbidden);
        if on {
            self.metrics.forbidden_kinds.set(set.len() as i64);
        }
    }

    fn set_gauges(&self, k: &KindStates) {
        let g = &self.metrics.managed_resources;
        g.with_label_values(&[&k.group, &k.kind, "paused"])
            .set(k.paused);
        g.with_label_values(&[&k.group, &k.kind, "creation_incomplete"])
            .set(k.incomplete);
    }

    /// Sends every incomplete creation, now and as they come, to `tx`
    /// until it is closed or replaced. Repeats are the writer's to skip.
    pub(crate) fn report_to(&self, tx: mpsc::UnboundedSender<Pending>) {
        *lock(&self.leaks) = Some(tx.clone());
        let kinds: Vec<_> = lock(&self.inner).values().cloned().collect();
        for k in kinds {
            for p in lock(&k).objects.values().filter_map(|o| o.pending.clone()) {
                if tx.send(p).is_err() {
                    return;
                }
            }
        }
    }

    fn report(&self, pending: impl IntoIterator<Item = Pending>) {
        let mut leaks = lock(&self.leaks);
        if let Some(tx) = leaks.as_ref() {
            for p in pending {
                if tx.send(p).is_err() {
                    *leaks = None;
                    return;
                }
            }
        }
    }

    /// Marks a kind as forbidden (a 403 on list or watch) or allowed (a
    /// list or watch that worked). Returns whether it changed.
    pub(crate) fn set_forbidden(&self, kind: &MrKind, forbidden: bool) -> bool {
        let mut set = lock(&self.forbidden);
        let changed = if forbidden {
            set.insert(kind.key())
        } else {
            set.remove(&kind.key())
        };
        if self.publishing() {
            self.metrics.forbidden_kinds.set(set.len() as i64);
        }
        changed
    }

    /// The kinds RBAC forbids listing, by CRD name.
    #[cfg(test)]
    pub(crate) fn forbidden(&self) -> Vec<String> {
        lock(&self.forbidden).iter().cloned().collect()
    }

    fn with_kind<R>(&self, kind: &MrKind, f: impl FnOnce(&mut KindStates) -> R) -> R {
        let entry = lock(&self.inner)
            .entry(kind.key())
            .or_insert_with(|| {
                Arc::new(Mutex::new(KindStates {
                    group: kind.group.clone(),
                    kind: kind.kind.clone(),
                    ..KindStates::default()
                }))
            })
            .clone();
        let mut k = lock(&entry);
        let r = f(&mut k);
        if !k.dropped && self.publishing() {
            self.set_gauges(&k);
        }
        r
    }

    /// After a full list: the kind's objects are exactly these.
    pub(crate) fn replace_kind(
        &self,
        kind: &MrKind,
        objects: impl IntoIterator<Item = (String, ObjState)>,
    ) {
        let pending = self.with_kind(kind, |k| {
            k.objects = objects.into_iter().filter(|(_, o)| !o.is_plain()).collect();
            k.recount();
            k.objects
                .values()
                .filter_map(|o| o.pending.clone())
                .collect::<Vec<_>>()
        });
        self.report(pending);
    }

    /// Records one MR's state from its watch.
    pub(crate) fn upsert(&self, kind: &MrKind, uid: &str, state: ObjState) {
        let pending = state.pending.clone();
        self.with_kind(kind, |k| k.put(uid, state));
        self.report(pending);
    }

    /// An MR is gone: its state, and the Events it was reported in.
    pub(crate) fn remove(&self, kind: &MrKind, uid: &str) {
        self.with_kind(kind, |k| k.take(uid));
        self.dedup.forget_uid(uid);
    }

    /// The kind is no longer an MR kind: forget it and its series.
    pub(crate) fn drop_kind(&self, kind: &MrKind) {
        self.set_forbidden(kind, false);
        let removed = lock(&self.inner).remove(&kind.key());
        if let Some(k) = removed {
            let mut k = lock(&k);
            k.dropped = true;
            for state in ["paused", "creation_incomplete"] {
                let _ = self
                    .metrics
                    .managed_resources
                    .remove_label_values(&[&k.group, &k.kind, state]);
            }
        }
    }
}

/// Event keys already reported, shared across leadership terms.
#[derive(Clone, Default)]
pub(crate) struct EventDedup(Arc<Mutex<HashSet<String>>>);

impl EventDedup {
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }

    pub(crate) fn insert(&self, key: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
    }

    /// Forgets every key of a deleted object.
    pub(crate) fn forget_uid(&self, uid: &str) {
        let prefix = format!("{uid}@");
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k| !k.starts_with(&prefix));
    }
}

/// Which object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjRef {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
    pub(crate) uid: String,
}

impl ObjRef {
    pub(crate) fn new(kind: &MrKind, meta: &ObjectMeta) -> Option<Self> {
        Some(Self {
            api_version: kind.api_resource().api_version,
            kind: kind.kind.clone(),
            name: meta.name.clone()?,
            namespace: meta.namespace.clone().filter(|n| !n.is_empty()),
            uid: meta.uid.clone()?,
        })
    }
}

/// The key of one incomplete creation's Event: its MR's UID first, so that
/// [`EventDedup::forget_uid`] finds every key of a deleted MR.
pub(crate) fn event_key(uid: &str, pending: &str) -> String {
    format!("{uid}@{pending}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::controller::replica::coverage::tests::{fixture_crds, summaries};
    use crate::controller::replica::coverage::Coverage;

    pub(crate) fn vpc_kind() -> MrKind {
        Coverage::from_crds(&summaries(&fixture_crds()))
            .kinds()
            .find(|k| k.group == "ec2.aws.upbound.io" && k.kind == "VPC")
            .unwrap()
            .clone()
    }

    /// A VPC as a list returns it.
    pub(crate) fn vpc(name: &str, uid: &str, annotations: Value, spec: Value) -> Value {
        json!({"metadata": {"name": name, "uid": uid, "resourceVersion": "3", "annotations": annotations},
               "spec": spec})
    }

    /// One MR of each state: creation incomplete, paused by annotation,
    /// creation complete, plain, paused by `managementPolicies: []`.
    pub(crate) fn objects() -> Vec<Value> {
        let fp = json!({"forProvider": {"region": "us-east-1"}});
        vec![
            vpc(
                "leaky",
                "u1",
                json!({CREATE_PENDING: "2024-01-01T00:00:10Z",
                "crossplane.io/external-create-failed": "2024-01-01T00:00:05Z"}),
                fp.clone(),
            ),
            vpc(
                "paused",
                "u2",
                json!({"crossplane.io/paused": "true"}),
                fp.clone(),
            ),
            vpc(
                "fine",
                "u3",
                json!({CREATE_PENDING: "2024-01-01T00:00:10Z",
                "crossplane.io/external-create-succeeded": "2024-01-01T00:00:11Z"}),
                fp.clone(),
            ),
            vpc("plain", "u4", json!({}), fp),
            vpc(
                "observed-nothing",
                "u5",
                json!({}),
                json!({"forProvider": {}, "managementPolicies": []}),
            ),
        ]
    }

    /// `o`'s state, as its watch records it.
    pub(crate) fn state(o: &Value) -> ObjState {
        let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone()).unwrap();
        ObjState::of(&vpc_kind(), &meta, o["spec"].get("managementPolicies"))
    }

    #[test]
    fn states_from_annotations_and_policies() {
        let o = objects();
        let p = state(&o[0]).pending.unwrap();
        assert_eq!(p.at, "2024-01-01T00:00:10Z");
        assert_eq!((p.obj.name.as_str(), p.obj.uid.as_str()), ("leaky", "u1"));
        assert_eq!(p.obj.api_version, "ec2.aws.upbound.io/v1beta1");
        assert!(state(&o[1]).paused);
        assert_eq!(state(&o[2]), ObjState::default());
        assert_eq!(state(&o[3]), ObjState::default());
        assert!(state(&o[4]).paused, "managementPolicies: [] pauses");
        let observe = vpc(
            "o",
            "u6",
            json!({}),
            json!({"managementPolicies": ["Observe"]}),
        );
        assert!(!state(&observe).paused);
    }

    fn kind_k() -> MrKind {
        MrKind {
            group: "g.io".into(),
            kind: "K".into(),
            plural: "ks".into(),
            versions: vec!["v1".into()],
            read_version: "v1".into(),
            namespaced: false,
        }
    }

    fn pending(uid: &str) -> ObjState {
        ObjState {
            paused: false,
            pending: Some(Pending {
                obj: ObjRef {
                    api_version: "g.io/v1".into(),
                    kind: "K".into(),
                    name: uid.into(),
                    namespace: None,
                    uid: uid.into(),
                },
                at: "t".into(),
            }),
        }
    }

    /// The counts kept as objects come and go equal a recount, through
    /// upserts that change a state, removals and a relist; only MRs that
    /// count are kept; a dropped kind's series are removed.
    #[test]
    fn counts_kept_incrementally_match_a_recount() {
        let registry = prometheus::Registry::new();
        let metrics = Arc::new(ControllerMetrics::register(&registry).unwrap());
        let states = MrStates::new(metrics.clone());
        states.publish(true);
        let kind = kind_k();
        let gauge = |state: &str| {
            metrics
                .managed_resources
                .with_label_values(&["g.io", "K", state])
                .get()
        };
        let paused = ObjState {
            paused: true,
            pending: None,
        };
        for i in 0..10 {
            let uid = format!("u{i}");
            let s = if i % 2 == 0 {
                paused.clone()
            } else {
                pending(&uid)
            };
            states.upsert(&kind, &uid, s);
        }
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (5, 5));
        // A state that changes, one upserted again unchanged, a removal,
        // one that stops counting.
        states.upsert(&kind, "u0", pending("u0"));
        states.upsert(&kind, "u1", pending("u1"));
        states.remove(&kind, "u2");
        states.remove(&kind, "nope");
        states.upsert(&kind, "u4", ObjState::default());
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (2, 6));
        let kept = |states: &MrStates| {
            let k = lock(&states.inner).get("ks.g.io").unwrap().clone();
            let n = lock(&k).objects.len();
            n
        };
        assert_eq!(kept(&states), 8, "the plain MR is not kept");
        // A relist replaces everything; plain MRs are not kept.
        states.replace_kind(
            &kind,
            (0..100).map(|i| {
                (
                    format!("n{i}"),
                    if i == 7 {
                        paused.clone()
                    } else {
                        ObjState::default()
                    },
                )
            }),
        );
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (1, 0));
        assert_eq!(kept(&states), 1);
        states.drop_kind(&kind);
        let families = registry.gather();
        assert!(
            !families
                .iter()
                .any(|f| f.name() == "mrguard_managed_resources" && !f.get_metric().is_empty()),
            "the dropped kind's series are gone"
        );
    }

    /// A follower keeps the states without exporting them; the gauges
    /// appear when it leads and stop with its leadership.
    #[test]
    fn only_a_leader_publishes() {
        let registry = prometheus::Registry::new();
        let metrics = Arc::new(ControllerMetrics::register(&registry).unwrap());
        let states = MrStates::new(metrics.clone());
        let kind = kind_k();
        let series = || {
            registry
                .gather()
                .iter()
                .filter(|f| f.name() == "mrguard_managed_resources")
                .map(|f| f.get_metric().len())
                .sum::<usize>()
        };
        states.upsert(&kind, "u1", pending("u1"));
        states.set_forbidden(&vpc_kind(), true);
        assert_eq!(series(), 0, "a follower exports no MR gauges");
        assert_eq!(metrics.forbidden_kinds.get(), 0);
        states.publish(true);
        assert_eq!(
            metrics
                .managed_resources
                .with_label_values(&["g.io", "K", "creation_incomplete"])
                .get(),
            1
        );
        assert_eq!(metrics.forbidden_kinds.get(), 1);
        states.publish(false);
        metrics.clear_leader_state();
        states.upsert(&kind, "u2", pending("u2"));
        states.set_forbidden(&kind, true);
        assert_eq!(series(), 0, "no gauge written after leadership ended");
        assert_eq!(metrics.forbidden_kinds.get(), 0);
    }
}
