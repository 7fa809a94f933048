//! The leader's `PossiblyLeaked` Events: one Warning Event per
//! creation-incomplete MR, from the states every replica's identity watches
//! keep (`replica::mr_states`).
//!
//! One Event per incomplete creation (its UID and `external-create-pending`
//! time), not one per resync: the keys already reported are remembered
//! across leadership changes ([`EventDedup`], kept with the states) and
//! seeded from the Events that exist when leadership starts. Events go
//! through kube's `events::Recorder`. It names them `<name>.<hex time>`; the
//! hand-written `generateName: "<name>."` before it was rejected by the API
//! server (a name prefix may not end in a dot), so no Event was ever
//! written and the write was retried forever.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use kube::runtime::utils::Backoff as _;
use kube::Api;
use tokio::sync::mpsc;

use crate::controller::replica::mr_states::{event_key, EventDedup, MrStates, ObjRef, Pending};
use crate::kube::api::{api_err, until_due, Backoff, KubeError};
use crate::metrics::controller::ControllerMetrics;

pub(crate) const POSSIBLY_LEAKED: &str = "PossiblyLeaked";
pub(crate) const REPORTING_CONTROLLER: &str = "mrguard.io/controller";

/// The Event's `regarding`. No resourceVersion: kube's Recorder keys its
/// series on the whole reference, and a repeat about the same MR must count
/// into the same Event.
fn reference(obj: &ObjRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(obj.api_version.clone()),
        kind: Some(obj.kind.clone()),
        name: Some(obj.name.clone()),
        namespace: obj.namespace.clone(),
        uid: Some(obj.uid.clone()),
        ..ObjectReference::default()
    }
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

/// Writes `PossiblyLeaked` Events with kube's [`Recorder`]
/// (`events.k8s.io/v1`; an Event about a cluster-scoped MR goes to
/// "default"): at most one per incomplete creation, and a repeat about the
/// same MR (a new incomplete creation within kube's six-minute series
/// window) counts into the existing Event's series instead of adding
/// another.
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
    pub(crate) async fn seed(&self) -> Result<usize, KubeError> {
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
    ) -> Result<bool, KubeError> {
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
            .publish(&event, &reference(obj))
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

/// Writes a `PossiblyLeaked` Event for every incomplete creation the
/// states hold or learn of. Runs only on the Lease holder.
pub(crate) async fn report_leaks(
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
    let (tx, mut rx) = mpsc::unbounded_channel();
    states.report_to(tx);
    let mut retry: Vec<Pending> = Vec::new();
    let mut backoff = Backoff::default();
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let due = retry_at;
        let report = tokio::select! {
            p = rx.recv() => match p {
                Some(p) => vec![p],
                // Only another writer replaces this one's channel.
                None => return,
            },
            _ = until_due(due) => {
                retry_at = None;
                std::mem::take(&mut retry)
            }
        };
        let mut failed = false;
        for p in report {
            match recorder.possibly_leaked(&p.obj, &p.at).await {
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
                    retry.push(p);
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
    use crate::controller::replica::mr_states::tests::{objects, state, vpc, vpc_kind};
    use crate::kube::mock::{self, list, status, Reply};
    use mrguard_policy::admission::mr::CREATE_PENDING;
    use serde_json::{json, Value};
    use std::sync::Mutex;

    pub(crate) fn events_posted(reqs: &[mock::Recorded]) -> Vec<mock::Recorded> {
        reqs.iter()
            .filter(|r| r.method == "POST" && r.path.contains("/events"))
            .cloned()
            .collect()
    }

    /// One Event per incomplete creation: those known when leadership
    /// starts and those learned later, none that a predecessor reported,
    /// none twice across relists and leaders.
    #[tokio::test]
    async fn one_event_per_incomplete_creation_across_relists_and_leaders() {
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
            Reply::Json(500, status(500, "InternalError", "unexpected"))
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        let kind = vpc_kind();
        let listed = |extra: Option<Value>| {
            let mut items = objects();
            items.push(vpc(
                "reported-before",
                "u9",
                json!({CREATE_PENDING: "2024-01-01T00:00:10Z"}),
                json!({}),
            ));
            items.extend(extra);
            items
                .iter()
                .map(|o| (o["metadata"]["uid"].as_str().unwrap().to_string(), state(o)))
                .collect::<Vec<_>>()
        };
        // Listed while following: nothing is written.
        states.replace_kind(&kind, listed(None));
        let recorder = EventRecorder::new(client.clone(), "pod_1".into(), states.dedup());
        let task = tokio::spawn(report_leaks(states.clone(), recorder, metrics.clone()));
        let reqs = api
            .wait_for("the first event", |r| !events_posted(r).is_empty())
            .await;
        let posted = events_posted(&reqs);
        assert_eq!(posted.len(), 1, "{posted:#?}");
        let e = &posted[0];
        assert_eq!(e.path, "/apis/events.k8s.io/v1/namespaces/default/events");
        assert_eq!(e.body["reason"], POSSIBLY_LEAKED);
        assert_eq!(e.body["type"], "Warning");
        assert_eq!(e.body["regarding"]["name"], "leaky");
        assert_eq!(e.body["regarding"]["uid"], "u1");
        assert_eq!(e.body["regarding"]["kind"], "VPC");
        assert_eq!(
            e.body["regarding"]["apiVersion"],
            "ec2.aws.upbound.io/v1beta1"
        );
        // generateName "leaky." is not a valid name prefix (422). The
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
        let note = e.body["note"].as_str().unwrap();
        assert!(note.contains("possibly leaked external resource"));
        assert!(note.contains("remove the crossplane.io/external-create-pending"));

        // A relist of the same objects writes nothing; a new one learned
        // from the watch is written.
        states.replace_kind(&kind, listed(None));
        let new = vpc(
            "new-leak",
            "u7",
            json!({CREATE_PENDING: "2024-01-02T00:00:00Z"}),
            json!({}),
        );
        states.upsert(&kind, "u7", state(&new));
        let reqs = api
            .wait_for("the second event", |r| events_posted(r).len() >= 2)
            .await;
        assert_eq!(events_posted(&reqs)[1].body["regarding"]["uid"], "u7");
        states.replace_kind(&kind, listed(Some(new)));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(events_posted(&api.requests()).len(), 2);
        task.abort();
        let _ = task.await;

        // The next leader, in the same process, repeats nothing.
        let recorder = EventRecorder::new(client.clone(), "pod_1".into(), states.dedup());
        let task = tokio::spawn(report_leaks(states.clone(), recorder, metrics.clone()));
        api.wait_for("the new leader's seed", |r| {
            r.iter()
                .filter(|r| r.path == "/apis/events.k8s.io/v1/events")
                .count()
                == 2
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(events_posted(&api.requests()).len(), 2);
        // A deleted MR's keys are forgotten: the same UID's incomplete
        // creation after a recreation is reported.
        states.remove(&kind, "u7");
        assert!(!states
            .dedup()
            .contains(&event_key("u7", "2024-01-02T00:00:00Z")));
        task.abort();

        // A new incomplete creation of the same MR is reported again, and
        // kube's Recorder counts it into the same Event's series.
        let (events_client, events_api) = api_client_for_events();
        let recorder = EventRecorder::new(events_client, "pod_2".into(), states.dedup());
        let r = state(&objects()[0]).pending.unwrap().obj;
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
    }

    fn api_client_for_events() -> (kube::Client, mock::MockApi) {
        mock::client(|r| Reply::Json(if r.method == "POST" { 201 } else { 200 }, r.body.clone()))
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
            Reply::Json(200, list("EventList", "events.k8s.io/v1", vec![]))
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        states.upsert(&vpc_kind(), "u1", state(&objects()[0]));
        let recorder = EventRecorder::new(client.clone(), "pod".into(), states.dedup());
        let task = tokio::spawn(report_leaks(states, recorder, metrics.clone()));
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
