//! Metadata-only watches over existing MRs, one per MR kind.
//!
//! The annotations say everything these watches need: whether an MR is
//! paused by `crossplane.io/paused` and whether its creation is incomplete.
//! An MR paused by `managementPolicies: []` is only visible in its spec; the
//! audit pass, which reads whole objects, reports those.
//!
//! Each creation-incomplete MR gets one `PossiblyLeaked` Warning Event per
//! incomplete creation (its UID and `external-create-pending` time), not one
//! per resync: the keys already reported are remembered across leadership
//! changes and seeded from the Events that exist when leadership starts.
//! Events go through kube's `events::Recorder`. It names them
//! `<name>.<hex time>`; the hand-written `generateName: "<name>."` before it
//! was rejected by the API server (a name prefix may not end in a dot), so
//! no Event was ever written and the write was retried forever.
//!
//! A metadata-only watcher per kind feeds counts kept incrementally (one
//! update per event); kube's reflector would keep whole metadata of every
//! MR in memory and need a recount per event for the gauges.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::Api;
use serde_json::json;
use tokio::sync::watch as channel;

use super::api::{api_err, until_due, Backoff, ControllerError};
use super::coverage::{Coverage, MrKind};
use super::metrics::ControllerMetrics;
use super::retry::{backoff_watcher, watcher_progress, ErrorOnce};
use mrguard_policy::mr::{Mr, CREATE_PENDING};

pub(crate) const POSSIBLY_LEAKED: &str = "PossiblyLeaked";
pub(crate) const REPORTING_CONTROLLER: &str = "mrguard.io/controller";

/// 404s on a kind's watch logged at debug before one is a warning: the
/// backoff (0.8 s doubling to 30 s, jittered) makes that 50 to 100 s. With
/// 3 (5 to 10 s), 400 CRDs created at once logged 227 warnings while the
/// API server took its time to serve them.
pub(crate) const QUIET_NOT_FOUND: u32 = 6;

/// What the gauges count for one MR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjState {
    /// `crossplane.io/paused: "true"`.
    pub paused_annotation: bool,
    /// From the last audit pass: `managementPolicies: []`.
    pub paused_policy: bool,
    /// The `external-create-pending` time while creation is incomplete.
    pub pending: Option<String>,
}

impl ObjState {
    pub(crate) fn from_meta(meta: &ObjectMeta) -> Self {
        let annotations = meta.annotations.clone().unwrap_or_default();
        let pending = annotations.get(CREATE_PENDING).cloned();
        let v = json!({"metadata": {"annotations": annotations}});
        let mr = Mr(&v);
        Self {
            paused_annotation: mr.is_paused(),
            paused_policy: false,
            pending: pending.filter(|_| mr.creation_incomplete()),
        }
    }

    pub(crate) fn paused(&self) -> bool {
        self.paused_annotation || self.paused_policy
    }
}

/// One kind's MRs and the counts behind its gauges, kept as objects come
/// and go: an event costs O(1), not a recount of the kind.
#[derive(Default)]
struct KindStates {
    group: String,
    kind: String,
    objects: HashMap<String, ObjState>,
    paused: i64,
    incomplete: i64,
    /// No longer an MR kind: its series are gone and stay gone.
    dropped: bool,
}

impl KindStates {
    fn tally(&mut self, o: &ObjState, sign: i64) {
        self.paused += sign * i64::from(o.paused());
        self.incomplete += sign * i64::from(o.pending.is_some());
    }

    fn put(&mut self, uid: &str, state: ObjState) {
        self.tally(&state, 1);
        if let Some(old) = self.objects.insert(uid.to_string(), state) {
            self.tally(&old, -1);
        }
    }

    fn take(&mut self, uid: &str) {
        if let Some(old) = self.objects.remove(uid) {
            self.tally(&old, -1);
        }
    }

    /// After a change to every object (a list, an audit pass).
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
#[derive(Clone)]
pub struct MrStates {
    inner: Shared<BTreeMap<String, Shared<KindStates>>>,
    forbidden: Shared<BTreeSet<String>>,
    metrics: Arc<ControllerMetrics>,
}

impl MrStates {
    /// Empty counts that set the gauges of `metrics`.
    pub fn new(metrics: Arc<ControllerMetrics>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(BTreeMap::new())),
            forbidden: Arc::new(Mutex::new(BTreeSet::new())),
            metrics,
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
        self.metrics.forbidden_kinds.set(set.len() as i64);
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
        if k.dropped {
            return r;
        }
        let g = &self.metrics.managed_resources;
        g.with_label_values(&[&k.group, &k.kind, "paused"])
            .set(k.paused);
        g.with_label_values(&[&k.group, &k.kind, "creation_incomplete"])
            .set(k.incomplete);
        r
    }

    /// After a full list: the kind's objects are exactly these.
    pub(crate) fn replace_kind(&self, kind: &MrKind, objects: HashMap<String, ObjState>) {
        self.with_kind(kind, |k| {
            let old = std::mem::take(&mut k.objects);
            k.objects = objects;
            for (uid, o) in k.objects.iter_mut() {
                o.paused_policy = old.get(uid).is_some_and(|p| p.paused_policy);
            }
            k.recount();
        });
    }

    /// Records one MR's state from its watch; the audit's `paused_policy` is kept.
    pub fn upsert(&self, kind: &MrKind, uid: &str, mut state: ObjState) {
        self.with_kind(kind, |k| {
            state.paused_policy = k.objects.get(uid).is_some_and(|p| p.paused_policy);
            k.put(uid, state);
        });
    }

    pub(crate) fn remove(&self, kind: &MrKind, uid: &str) {
        self.with_kind(kind, |k| k.take(uid));
    }

    /// From the audit: which objects of the kind have `managementPolicies: []`.
    pub(crate) fn set_paused_by_policy(&self, kind: &MrKind, uids: &HashSet<String>) {
        self.with_kind(kind, |k| {
            for (uid, o) in k.objects.iter_mut() {
                o.paused_policy = uids.contains(uid);
            }
            k.recount();
        });
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
#[derive(Debug, Clone, PartialEq)]
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

    /// The Event's `regarding`. No resourceVersion: kube's Recorder keys
    /// its series on the whole reference, and a repeat about the same MR
    /// must count into the same Event.
    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.clone()),
            name: Some(self.name.clone()),
            namespace: self.namespace.clone(),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

pub(crate) fn event_key(uid: &str, pending: &str) -> String {
    format!("{uid}@{pending}")
}

/// The Event's note: names the incomplete creation, so that a new leader
/// can tell which ones its predecessor reported.
pub(crate) fn leak_note(pending: &str) -> String {
    format!("{LEAK_NOTE_HEAD} ({PENDING_MARK}{pending}). {LEAK_NOTE_TAIL}")
}

const LEAK_NOTE_HEAD: &str = "possibly leaked external resource: creation is incomplete";
const PENDING_MARK: &str = "crossplane.io/external-create-pending: ";
const LEAK_NOTE_TAIL: &str =
    "The provider stopped because it may have leaked an external resource; \
     check the external system for a leaked resource, then remove the \
     crossplane.io/external-create-pending annotation when safe";

/// The `external-create-pending` time in a note written by [`leak_note`].
fn pending_in_note(note: &str) -> Option<&str> {
    let rest = &note[note.find(PENDING_MARK)? + PENDING_MARK.len()..];
    Some(&rest[..rest.find(')')?])
}

/// Writes `PossiblyLeaked` Events with kube's [`Recorder`]: at most one
/// per incomplete creation, and a repeat about the same MR (a new
/// incomplete creation within kube's six-minute series window) counts
/// into the existing Event's series instead of adding another.
pub(crate) struct EventRecorder {
    client: kube::Client,
    recorder: Recorder,
    dedup: EventDedup,
}

impl EventRecorder {
    pub(crate) fn new(client: kube::Client, instance: String, dedup: EventDedup) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            // events.k8s.io limits reportingInstance to 128 characters.
            instance: Some(instance.chars().take(128).collect()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            dedup,
        }
    }

    /// Remembers the incomplete creations that existing `PossiblyLeaked`
    /// Events already report, so a new leader does not repeat its
    /// predecessor's.
    pub(crate) async fn seed(&self) -> Result<usize, ControllerError> {
        let api: Api<Event> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("reason={POSSIBLY_LEAKED}"));
        let list = api
            .list(&lp)
            .await
            .map_err(api_err("list", "events.events.k8s.io", ""))?;
        let mut n = 0;
        for e in list.items {
            if e.reporting_controller.as_deref() != Some(REPORTING_CONTROLLER) {
                continue;
            }
            let uid = e.regarding.as_ref().and_then(|r| r.uid.as_deref());
            let pending = e.note.as_deref().and_then(pending_in_note);
            if let (Some(uid), Some(pending)) = (uid, pending) {
                self.dedup.insert(event_key(uid, pending));
                n += 1;
            }
        }
        Ok(n)
    }

    /// Reports a possibly leaked external resource once per incomplete
    /// creation. Ok(true) when an Event was written.
    pub(crate) async fn possibly_leaked(
        &self,
        obj: &ObjRef,
        pending: &str,
    ) -> Result<bool, ControllerError> {
        let key = event_key(&obj.uid, pending);
        if self.dedup.contains(&key) {
            return Ok(false);
        }
        let event = RecordedEvent {
            type_: EventType::Warning,
            reason: POSSIBLY_LEAKED.into(),
            note: Some(leak_note(pending)),
            action: "Observe".into(),
            secondary: None,
        };
        // Events about cluster-scoped objects go to "default" (kube's rule).
        let namespace = obj.namespace.as_deref().unwrap_or("default");
        self.recorder
            .publish(&event, &obj.reference())
            .await
            .map_err(api_err(
                "create",
                "events.events.k8s.io",
                format!("{namespace}/{}", obj.name),
            ))?;
        self.dedup.insert(key);
        // The Warning Event and the gauge are the signal; at scale one
        // WARN line per MR drowned everything else in the log.
        tracing::info!(
            kind = %obj.kind,
            name = %obj.name,
            namespace = obj.namespace.as_deref().unwrap_or(""),
            pending,
            "creation incomplete: possibly leaked external resource"
        );
        Ok(true)
    }
}

/// Watches every MR kind of the coverage; starts and stops per-kind watches
/// as CRDs come and go. Runs only on the Lease holder.
pub(crate) async fn run(
    client: kube::Client,
    mut coverage: channel::Receiver<Option<Arc<Coverage>>>,
    states: MrStates,
    recorder: EventRecorder,
    metrics: Arc<ControllerMetrics>,
) {
    match recorder.seed().await {
        Ok(n) => tracing::debug!(events = n, "remembered existing PossiblyLeaked events"),
        Err(e) => e.log(
            Some(&metrics),
            "failed to list existing events; some may be repeated",
        ),
    }
    let recorder = Arc::new(recorder);
    let mut tasks = tokio::task::JoinSet::new();
    let mut running: HashMap<String, (MrKind, tokio::task::AbortHandle)> = HashMap::new();
    loop {
        let current = coverage.borrow_and_update().clone();
        if let Some(cov) = current {
            let wanted: HashMap<String, &MrKind> = cov.kinds().map(|k| (k.key(), k)).collect();
            running.retain(|key, (kind, handle)| {
                let keep = wanted.get(key).is_some_and(|w| *w == kind);
                if !keep {
                    handle.abort();
                    states.drop_kind(kind);
                }
                keep
            });
            for (key, kind) in wanted {
                if running.contains_key(&key) {
                    continue;
                }
                let handle = tasks.spawn(watch_kind(
                    client.clone(),
                    kind.clone(),
                    states.clone(),
                    recorder.clone(),
                    metrics.clone(),
                ));
                running.insert(key, (kind.clone(), handle));
            }
        }
        tokio::select! {
            r = coverage.changed() => if r.is_err() { return },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// One kind's metadata-only watch.
pub(crate) async fn watch_kind(
    client: kube::Client,
    kind: MrKind,
    states: MrStates,
    recorder: Arc<EventRecorder>,
    metrics: Arc<ControllerMetrics>,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &kind.api_resource());
    let mut stream = backoff_watcher(watcher(api, watcher::Config::default())).boxed();
    let mut listing: Option<HashMap<String, (ObjRef, ObjState)>> = None;
    let mut retry: Vec<(ObjRef, String)> = Vec::new();
    let mut backoff = Backoff::default();
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut watch_error = ErrorOnce::default();
    let mut not_found = 0u32;
    let what = format!("watch of {}", kind.key());
    loop {
        let due = retry_at;
        let mut report: Vec<(ObjRef, String)> = Vec::new();
        tokio::select! {
            ev = stream.next() => match ev.inspect(|e| if watcher_progress(e) {
                watch_error.ok(&what);
                not_found = 0;
                states.set_forbidden(&kind, false);
            }) {
                None => return,
                Some(Ok(watcher::Event::Init)) => listing = Some(HashMap::new()),
                Some(Ok(watcher::Event::InitApply(o))) => {
                    if let (Some(l), Some(r)) = (listing.as_mut(), ObjRef::new(&kind, &o.metadata)) {
                        l.insert(r.uid.clone(), (r, ObjState::from_meta(&o.metadata)));
                    }
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let l = listing.take().unwrap_or_default();
                    for (r, s) in l.values() {
                        if let Some(p) = &s.pending {
                            report.push((r.clone(), p.clone()));
                        }
                    }
                    states.replace_kind(&kind, l.into_iter().map(|(uid, (_, s))| (uid, s)).collect());
                }
                Some(Ok(watcher::Event::Apply(o))) => {
                    if let Some(r) = ObjRef::new(&kind, &o.metadata) {
                        let s = ObjState::from_meta(&o.metadata);
                        if let Some(p) = &s.pending {
                            report.push((r.clone(), p.clone()));
                        }
                        states.upsert(&kind, &r.uid, s);
                    }
                }
                Some(Ok(watcher::Event::Delete(o))) => {
                    if let Some(uid) = o.metadata.uid.as_deref() {
                        states.remove(&kind, uid);
                        recorder.dedup.forget_uid(uid);
                    }
                }
                Some(Err(e)) => {
                    let e = ControllerError::watch("managed resources", kind.key(), e);
                    // A kind the service account may not list (the chart's
                    // RBAC lists groups; a provider outside them) is
                    // reported by mrguard_controller_forbidden_kinds.
                    if e.status_code() == Some(403) {
                        states.set_forbidden(&kind, true);
                    }
                    // A CRD is not served for a moment after it is created
                    // (or before its deletion reaches the coverage): a 404
                    // on the first tries is expected, and installing a
                    // provider family logged a warning (and a "recovered")
                    // per kind, 1,000 of each. One that lasts is logged.
                    if e.is_not_found() && not_found < QUIET_NOT_FOUND {
                        not_found += 1;
                        e.count(Some(&metrics));
                        tracing::debug!(error = %e, "{what}: not served yet; retrying with backoff");
                    } else {
                        watch_error.failed(&e, Some(&metrics), "failed to watch MRs; retrying with backoff");
                    }
                }
            },
            _ = until_due(due) => {
                retry_at = None;
                report = std::mem::take(&mut retry);
            }
        }
        let mut failed = false;
        for (r, pending) in report {
            match recorder.possibly_leaked(&r, &pending).await {
                Ok(written) => {
                    if written {
                        metrics
                            .events
                            .with_label_values(&[POSSIBLY_LEAKED, "written"])
                            .inc();
                    }
                }
                Err(e) => {
                    metrics
                        .events
                        .with_label_values(&[POSSIBLY_LEAKED, "failed"])
                        .inc();
                    e.log(
                        Some(&metrics),
                        "failed to write a PossiblyLeaked event; retrying",
                    );
                    retry.push((r, pending));
                    failed = true;
                }
            }
        }
        if failed {
            retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
        } else if retry.is_empty() {
            backoff.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::coverage::tests::{fixture_crds, summaries};
    use crate::controller::mock::{self, list, status, Reply};
    use serde_json::Value;

    fn vpc_kind() -> MrKind {
        Coverage::from_crds(&summaries(&fixture_crds()))
            .kinds()
            .find(|k| k.group == "ec2.aws.upbound.io" && k.kind == "VPC")
            .unwrap()
            .clone()
    }

    fn meta(name: &str, uid: &str, annotations: Value) -> Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"name": name, "uid": uid, "resourceVersion": "3", "annotations": annotations}})
    }

    fn objects() -> Vec<Value> {
        vec![
            meta(
                "leaky",
                "u1",
                json!({CREATE_PENDING: "2024-01-01T00:00:10Z",
                "crossplane.io/external-create-failed": "2024-01-01T00:00:05Z"}),
            ),
            meta("paused", "u2", json!({"crossplane.io/paused": "true"})),
            meta(
                "fine",
                "u3",
                json!({CREATE_PENDING: "2024-01-01T00:00:10Z",
                "crossplane.io/external-create-succeeded": "2024-01-01T00:00:11Z"}),
            ),
            meta("resumed-later", "u4", json!({})),
        ]
    }

    #[test]
    fn states_from_annotations() {
        let m: ObjectMeta = serde_json::from_value(objects()[0]["metadata"].clone()).unwrap();
        assert_eq!(
            ObjState::from_meta(&m).pending.as_deref(),
            Some("2024-01-01T00:00:10Z")
        );
        let m: ObjectMeta = serde_json::from_value(objects()[2]["metadata"].clone()).unwrap();
        assert_eq!(ObjState::from_meta(&m), ObjState::default());
        let m: ObjectMeta = serde_json::from_value(objects()[1]["metadata"].clone()).unwrap();
        assert!(ObjState::from_meta(&m).paused());
    }

    /// The counts kept as objects come and go equal a recount, through
    /// upserts that change a state, removals, a relist and an audit pass;
    /// a dropped kind's series are removed.
    #[test]
    fn counts_kept_incrementally_match_a_recount() {
        let registry = prometheus::Registry::new();
        let metrics = Arc::new(ControllerMetrics::register(&registry).unwrap());
        let states = MrStates::new(metrics.clone());
        let kind = MrKind {
            group: "g.io".into(),
            kind: "K".into(),
            plural: "ks".into(),
            versions: vec!["v1".into()],
            read_version: "v1".into(),
            namespaced: false,
        };
        let gauge = |state: &str| {
            metrics
                .managed_resources
                .with_label_values(&["g.io", "K", state])
                .get()
        };
        let paused = ObjState {
            paused_annotation: true,
            ..ObjState::default()
        };
        let pending = ObjState {
            pending: Some("t".into()),
            ..ObjState::default()
        };
        for i in 0..10 {
            let s = if i % 2 == 0 {
                paused.clone()
            } else {
                pending.clone()
            };
            states.upsert(&kind, &format!("u{i}"), s);
        }
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (5, 5));
        // A state that changes, one upserted again unchanged, a removal.
        states.upsert(&kind, "u0", pending.clone());
        states.upsert(&kind, "u1", pending.clone());
        states.remove(&kind, "u2");
        states.remove(&kind, "nope");
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (3, 6));
        // The audit finds u1 paused by policy; an upsert keeps that.
        states.set_paused_by_policy(&kind, &HashSet::from(["u1".to_string()]));
        states.upsert(&kind, "u1", pending.clone());
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (4, 6));
        // A relist replaces everything.
        states.replace_kind(
            &kind,
            HashMap::from([("u1".to_string(), ObjState::default())]),
        );
        assert_eq!((gauge("paused"), gauge("creation_incomplete")), (1, 0));
        states.drop_kind(&kind);
        let families = registry.gather();
        assert!(
            !families
                .iter()
                .any(|f| f.name() == "mrguard_managed_resources" && !f.get_metric().is_empty()),
            "the dropped kind's series are gone"
        );
    }

    fn events_posted(reqs: &[mock::Recorded]) -> Vec<mock::Recorded> {
        reqs.iter()
            .filter(|r| r.method == "POST" && r.path.contains("/events"))
            .cloned()
            .collect()
    }

    #[tokio::test]
    async fn one_event_per_incomplete_creation_across_resyncs_and_leaders() {
        let lists = Arc::new(Mutex::new(0));
        let seen = lists.clone();
        // A predecessor already reported u9's incomplete creation.
        let (client, api) = mock::client(move |r| {
            if r.path == "/apis/events.k8s.io/v1/events" {
                let mut e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "old.1", "namespace": "default"},
                    "regarding": {"uid": "u9", "name": "reported-before"},
                    "note": leak_note("2024-01-01T00:00:10Z"),
                    "reason": POSSIBLY_LEAKED, "reportingController": REPORTING_CONTROLLER, "eventTime": "2024-01-01T00:00:10.000000Z"});
                e["metadata"]["resourceVersion"] = json!("1");
                return Reply::Json(200, list("EventList", "events.k8s.io/v1", vec![e]));
            }
            if r.method == "POST" {
                let mut b = r.body.clone();
                b["metadata"]["name"] = json!("generated");
                return Reply::Json(201, b);
            }
            if r.path.contains("/vpcs") && r.query.contains("watch=true") {
                // The first watch expires at once, forcing a resync.
                let n = *seen.lock().unwrap();
                if n == 1 {
                    return Reply::Watch(vec![
                        json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")}),
                    ]);
                }
                return Reply::Watch(vec![]);
            }
            if r.path.contains("/vpcs") {
                *seen.lock().unwrap() += 1;
                let mut items = objects();
                items.push(meta(
                    "reported-before",
                    "u9",
                    json!({CREATE_PENDING: "2024-01-01T00:00:10Z"}),
                ));
                return Reply::Json(
                    200,
                    list("PartialObjectMetadataList", "meta.k8s.io/v1", items),
                );
            }
            Reply::Json(500, status(500, "InternalError", "unexpected"))
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        let dedup = EventDedup::default();
        let recorder = EventRecorder::new(client.clone(), "pod_1".into(), dedup.clone());
        let (tx, rx) = channel::channel(None);
        tx.send(Some(Arc::new(Coverage::from_crds(
            &summaries(&fixture_crds())
                .into_iter()
                .filter(|c| c.metadata.name.as_deref() == Some("vpcs.ec2.aws.upbound.io"))
                .collect::<Vec<_>>(),
        ))))
        .unwrap();
        let task = tokio::spawn(run(client, rx, states.clone(), recorder, metrics.clone()));
        // Two lists, each followed by its watch: the resync happened and
        // its InitDone was handled.
        let reqs = api
            .wait_for("a resync", |r| {
                r.iter()
                    .filter(|r| r.path.contains("/vpcs") && r.query.contains("watch=true"))
                    .count()
                    >= 2
            })
            .await;
        assert_eq!(*lists.lock().unwrap(), 2);
        // Metadata-only requests.
        let vpc_list = reqs.iter().find(|r| r.path.contains("/vpcs")).unwrap();
        assert!(
            vpc_list.accept.contains("as=PartialObjectMetadataList"),
            "{}",
            vpc_list.accept
        );
        assert_eq!(vpc_list.path, "/apis/ec2.aws.upbound.io/v1beta1/vpcs");

        let posted = events_posted(&reqs);
        assert_eq!(posted.len(), 1, "{posted:#?}");
        let e = &posted[0];
        assert_eq!(e.path, "/apis/events.k8s.io/v1/namespaces/default/events");
        assert_eq!(e.body["reason"], POSSIBLY_LEAKED);
        assert_eq!(e.body["type"], "Warning");
        assert_eq!(e.body["regarding"]["name"], "leaky");
        assert_eq!(e.body["regarding"]["uid"], "u1");
        assert_eq!(e.body["regarding"]["kind"], "VPC");
        // Bug: generateName "leaky." is not a valid name prefix (422). The
        // Recorder names the Event "<name>.<hex time>".
        assert!(
            e.body["metadata"].get("generateName").is_none(),
            "{}",
            e.body
        );
        let name = e.body["metadata"]["name"].as_str().unwrap();
        let (head, hex) = name.split_once('.').unwrap();
        assert_eq!(head, "leaky");
        assert!(
            !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "{name}"
        );
        assert_eq!(
            pending_in_note(e.body["note"].as_str().unwrap()),
            Some("2024-01-01T00:00:10Z")
        );
        assert!(e.body["note"]
            .as_str()
            .unwrap()
            .contains("possibly leaked external resource"));
        assert!(e.body["note"]
            .as_str()
            .unwrap()
            .contains("remove the crossplane.io/external-create-pending"));

        let g = |state: &str| {
            metrics
                .managed_resources
                .with_label_values(&["ec2.aws.upbound.io", "VPC", state])
                .get()
        };
        assert_eq!(g("creation_incomplete"), 2);
        assert_eq!(g("paused"), 1);

        // The audit finds one MR paused by managementPolicies: [].
        states.set_paused_by_policy(&vpc_kind(), &["u4".to_string()].into());
        assert_eq!(g("paused"), 2);

        // A new incomplete creation of the same MR is reported again, and
        // kube's Recorder counts it into the same Event's series.
        let (events_client, events_api) = api_client_for_events();
        let recorder = EventRecorder::new(events_client, "pod_2".into(), dedup.clone());
        let r = ObjRef::new(
            &vpc_kind(),
            &serde_json::from_value(objects()[0]["metadata"].clone()).unwrap(),
        )
        .unwrap();
        assert!(!recorder
            .possibly_leaked(&r, "2024-01-01T00:00:10Z")
            .await
            .unwrap());
        assert!(recorder
            .possibly_leaked(&r, "2024-02-01T00:00:00Z")
            .await
            .unwrap());
        assert!(recorder
            .possibly_leaked(&r, "2024-03-01T00:00:00Z")
            .await
            .unwrap());
        let reqs = events_api.requests();
        let methods: Vec<&str> = reqs.iter().map(|r| r.method.as_str()).collect();
        assert_eq!(methods, ["POST", "PATCH"], "{reqs:#?}");
        assert_eq!(reqs[1].body["series"]["count"], 2);
        assert!(reqs[1].path.ends_with(&format!(
            "/events/{}",
            reqs[0].body["metadata"]["name"].as_str().unwrap()
        )));
        task.abort();
    }

    fn api_client_for_events() -> (kube::Client, mock::MockApi) {
        mock::client(|r| Reply::Json(if r.method == "POST" { 201 } else { 200 }, r.body.clone()))
    }

    /// A kind RBAC forbids counts in mrguard_controller_forbidden_kinds
    /// until a list works.
    #[tokio::test]
    async fn a_forbidden_kind_is_counted_until_its_list_works() {
        let allowed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let a = allowed.clone();
        let (client, _api) = mock::client(move |r| {
            if r.query.contains("watch=true") {
                return Reply::Watch(vec![]);
            }
            if a.load(std::sync::atomic::Ordering::SeqCst) {
                Reply::Json(
                    200,
                    list("PartialObjectMetadataList", "meta.k8s.io/v1", vec![]),
                )
            } else {
                Reply::Json(
                    403,
                    status(403, "Forbidden", "vpcs.ec2.aws.upbound.io is forbidden"),
                )
            }
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let recorder = Arc::new(EventRecorder::new(
            client.clone(),
            "pod".into(),
            EventDedup::default(),
        ));
        let task = tokio::spawn(watch_kind(
            client,
            vpc_kind(),
            MrStates::new(metrics.clone()),
            recorder,
            metrics.clone(),
        ));
        let wait = |want: i64| {
            let metrics = metrics.clone();
            async move {
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
                while metrics.forbidden_kinds.get() != want {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "forbidden_kinds never {want}"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        };
        wait(1).await;
        allowed.store(true, std::sync::atomic::Ordering::SeqCst);
        // The next relist (after the first backoff step) succeeds.
        wait(0).await;
        task.abort();
    }

    #[tokio::test]
    async fn a_failed_event_write_is_retried() {
        let attempts = Arc::new(Mutex::new(0));
        let a = attempts.clone();
        let (client, api) = mock::client(move |r| {
            if r.method == "POST" {
                let mut n = a.lock().unwrap();
                *n += 1;
                if *n == 1 {
                    return Reply::Json(
                        403,
                        status(403, "Forbidden", "events.events.k8s.io is forbidden"),
                    );
                }
                let mut b = r.body.clone();
                b["metadata"]["name"] = json!("x");
                return Reply::Json(201, b);
            }
            if r.query.contains("watch=true") {
                return Reply::Watch(vec![]);
            }
            Reply::Json(
                200,
                list(
                    "PartialObjectMetadataList",
                    "meta.k8s.io/v1",
                    vec![objects()[0].clone()],
                ),
            )
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let recorder = Arc::new(EventRecorder::new(
            client.clone(),
            "pod".into(),
            EventDedup::default(),
        ));
        let task = tokio::spawn(watch_kind(
            client,
            vpc_kind(),
            MrStates::new(metrics.clone()),
            recorder,
            metrics.clone(),
        ));
        api.wait_for("the retried event", |r| events_posted(r).len() == 2)
            .await;
        assert_eq!(
            metrics
                .api_errors
                .with_label_values(&["create", "events.events.k8s.io", "403"])
                .get(),
            1
        );
        task.abort();
    }
}
