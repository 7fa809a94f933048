//! Leader election on a `coordination.k8s.io/v1` Lease, written directly on
//! kube's API with client-go's algorithm:
//!
//! - the holder renews `renewTime` every third of the lease duration, with
//!   the Lease's `resourceVersion` as a compare-and-swap;
//! - another replica takes over only after it has watched the same
//!   holder/renewTime pair stay unchanged for a whole lease duration on its
//!   own clock, so clock skew between nodes does not matter;
//! - a leader that cannot renew for two thirds of the duration steps down
//!   before anyone else may take over, and releases the Lease on shutdown;
//! - every call has a timeout of a quarter of the duration, so a round
//!   (read, then write) ends before that deadline even when the API server
//!   does not answer at all;
//! - on request (a leader task died) it releases the Lease and sits out a
//!   while before campaigning again.
//!
//! Why not a crate: `kube-leader-election` 0.44 is built on kube 4 (a second
//! kube in the tree), and `kube-lease-manager` 0.13 has no injectable clock
//! for tests and no way to step down on request. The algorithm is a
//! hundred lines.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;

use super::api::{api_err, with_timeout, Clock, KubeError};
use crate::metrics::controller::ControllerMetrics;
use crate::shutdown::Signal;

const RESOURCE: &str = "leases.coordination.k8s.io";

/// A holder and its last renewal, as read from the Lease.
type Record = (Option<String>, Option<Timestamp>);

pub(crate) struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    clock: Arc<dyn Clock>,
    /// The other holder's record and when this replica first saw it.
    observed: Option<(Record, Timestamp)>,
    metrics: Option<Arc<ControllerMetrics>>,
}

impl LeaderElector {
    pub(crate) fn new(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        duration: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            clock,
            observed: None,
            metrics: None,
        }
    }

    /// Counts failed Lease calls in `mrguard_controller_api_errors_total`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<ControllerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The deadline of each call: two calls a round stay well inside the
    /// two thirds of the duration after which a leader stops writing.
    fn call_timeout(&self) -> Duration {
        self.duration / 4
    }

    /// One Lease call with its timeout; a failure is counted.
    async fn call<T>(
        &self,
        verb: &'static str,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, KubeError> {
        let r = with_timeout(self.call_timeout(), verb, RESOURCE, &self.name, async {
            call.await.map_err(api_err(verb, RESOURCE, &self.name))
        })
        .await;
        if let Err(e) = &r {
            e.count(self.metrics.as_deref());
        }
        r
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1)
    }

    /// One round: acquire, renew, or observe. Ok(true) means this replica
    /// holds the Lease now.
    pub(crate) async fn try_acquire_or_renew(&mut self) -> Result<bool, KubeError> {
        let now = self.clock.now();
        let existing = self.call("get", self.api.get_opt(&self.name)).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let pp = PostParams::default();
            return match self.call("create", self.api.create(&pp, &lease)).await {
                Ok(_) => Ok(true),
                // Another replica created it first.
                Err(e) if e.is_conflict() => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let held_by_me = holder.as_deref() == Some(self.identity.as_str());
        let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0));
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record, now));
        }
        let lease_secs = i64::from(
            spec.lease_duration_seconds
                .unwrap_or(self.duration_secs())
                .max(1),
        );
        let seen_since = self.observed.as_ref().map(|(_, at)| *at).unwrap_or(now);
        let expired = holder.is_none() || now >= seen_since + SignedDuration::from_secs(lease_secs);
        if !held_by_me && !expired {
            return Ok(false);
        }
        let mut new = spec;
        if !held_by_me {
            new.acquire_time = Some(MicroTime(now));
            new.lease_transitions = Some(new.lease_transitions.unwrap_or(0) + 1);
            tracing::info!(previous = ?holder, "taking over the expired lease");
        }
        new.holder_identity = Some(self.identity.clone());
        new.lease_duration_seconds = Some(self.duration_secs());
        new.renew_time = Some(MicroTime(now));
        lease.spec = Some(new);
        lease.metadata.managed_fields = None;
        let pp = PostParams::default();
        match self
            .call("update", self.api.replace(&self.name, &pp, &lease))
            .await
        {
            Ok(_) => {
                self.observed = None;
                Ok(true)
            }
            // Someone else wrote in between; they won this round.
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up so another replica can take over at once.
    pub(crate) async fn release(&self) -> Result<(), KubeError> {
        let Some(mut lease) = self.call("get", self.api.get_opt(&self.name)).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        lease.metadata.managed_fields = None;
        let pp = PostParams::default();
        self.call("update", self.api.replace(&self.name, &pp, &lease))
            .await?;
        Ok(())
    }

    /// Campaigns until `shutdown`; publishes leadership on `tx`. A message
    /// on `step_down` makes a leader release the Lease and sit out for the
    /// duration it carries before campaigning again.
    pub(crate) async fn run(
        mut self,
        tx: watch::Sender<bool>,
        shutdown: Signal,
        mut step_down: tokio::sync::mpsc::UnboundedReceiver<Duration>,
    ) {
        let retry = self.duration / 3;
        let deadline =
            SignedDuration::try_from(self.duration * 2 / 3).unwrap_or(SignedDuration::ZERO);
        let mut last_renew: Option<Timestamp> = None;
        loop {
            let leading = match self.try_acquire_or_renew().await {
                Ok(held) => {
                    if held {
                        last_renew = Some(self.clock.now());
                    }
                    held
                }
                Err(e) => {
                    // Counted by `call`.
                    e.log(None, "failed to renew or acquire the lease");
                    // Keep leading only while the lease surely is still ours.
                    last_renew.is_some_and(|t| self.clock.now() < t + deadline) && *tx.borrow()
                }
            };
            if leading != *tx.borrow() {
                if leading {
                    tracing::info!(identity = %self.identity, lease = %self.name, "acquired the lease");
                } else {
                    tracing::warn!(identity = %self.identity, lease = %self.name, "lost the lease");
                    last_renew = None;
                }
                let _ = tx.send(leading);
            }
            let jittered = retry.mul_f64(1.0 + fastrand::f64() * 0.2);
            tokio::select! {
                _ = tokio::time::sleep(jittered) => {}
                _ = shutdown.wait() => break,
                Some(sit_out) = step_down.recv() => {
                    if *tx.borrow() {
                        let _ = tx.send(false);
                        last_renew = None;
                        match self.release().await {
                            Ok(()) => tracing::info!(lease = %self.name, "stepped down: released the lease"),
                            Err(e) => e.log(None, "failed to release the lease; it expires on its own"),
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(sit_out) => {}
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        let was_leading = *tx.borrow();
        let _ = tx.send(false);
        if was_leading {
            match self.release().await {
                Ok(()) => tracing::info!(lease = %self.name, "released the lease"),
                Err(e) => e.log(None, "failed to release the lease; it expires on its own"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, status, ManualClock, Reply};
    use serde_json::{json, Value};
    use std::sync::Mutex;

    /// An in-memory Lease with resourceVersion compare-and-swap.
    fn lease_server(
        lease: Arc<Mutex<Option<Value>>>,
    ) -> impl FnMut(&mock::Recorded) -> Reply + Send + 'static {
        move |r| {
            let mut cur = lease.lock().unwrap();
            match r.method.as_str() {
                "GET" => match cur.clone() {
                    Some(l) => Reply::Json(200, l),
                    None => Reply::Json(404, status(404, "NotFound", "not found")),
                },
                "POST" => {
                    if cur.is_some() {
                        return Reply::Json(409, status(409, "AlreadyExists", "exists"));
                    }
                    let mut l = r.body.clone();
                    l["metadata"]["resourceVersion"] = json!("1");
                    *cur = Some(l.clone());
                    Reply::Json(201, l)
                }
                "PUT" => {
                    let Some(existing) = cur.clone() else {
                        return Reply::Json(404, status(404, "NotFound", "not found"));
                    };
                    if existing["metadata"]["resourceVersion"]
                        != r.body["metadata"]["resourceVersion"]
                    {
                        return Reply::Json(
                            409,
                            status(409, "Conflict", "the object has been modified"),
                        );
                    }
                    let rv: u64 = existing["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    let mut l = r.body.clone();
                    l["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                    *cur = Some(l.clone());
                    Reply::Json(200, l)
                }
                _ => Reply::Json(500, status(500, "InternalError", "unexpected")),
            }
        }
    }

    #[tokio::test]
    async fn one_leader_takeover_after_expiry_and_release() {
        let lease = Arc::new(Mutex::new(None));
        let (client, _api) = mock::client(lease_server(lease.clone()));
        let clock = Arc::new(ManualClock::new(Timestamp::now()));
        let d = Duration::from_secs(15);
        let api: Api<Lease> = Api::namespaced(client, "crossplane-system");
        let mut a = LeaderElector::new(api.clone(), "mrguard-leader", "a", d, clock.clone());
        let mut b = LeaderElector::new(api, "mrguard-leader", "b", d, clock.clone());

        assert!(a.try_acquire_or_renew().await.unwrap());
        assert!(!b.try_acquire_or_renew().await.unwrap());
        // a keeps renewing: b never takes over.
        for _ in 0..5 {
            clock.advance(Duration::from_secs(5));
            assert!(a.try_acquire_or_renew().await.unwrap());
            assert!(!b.try_acquire_or_renew().await.unwrap());
        }
        // a stops renewing; b waits a full duration from when it saw the
        // last renewal, on its own clock.
        clock.advance(Duration::from_secs(10));
        assert!(!b.try_acquire_or_renew().await.unwrap());
        clock.advance(Duration::from_secs(6));
        assert!(b.try_acquire_or_renew().await.unwrap());
        let l = lease.lock().unwrap().clone().unwrap();
        assert_eq!(l["spec"]["holderIdentity"], "b");
        assert_eq!(l["spec"]["leaseTransitions"], 1);
        // a comes back and finds b holding it.
        assert!(!a.try_acquire_or_renew().await.unwrap());

        // b releases: a takes over without waiting.
        b.release().await.unwrap();
        assert!(a.try_acquire_or_renew().await.unwrap());
        assert_eq!(
            lease.lock().unwrap().as_ref().unwrap()["spec"]["holderIdentity"],
            "a"
        );
    }

    #[tokio::test]
    async fn a_lost_race_is_not_an_error() {
        // Every write conflicts, as when another replica wrote first.
        let (client, _api) = mock::client(|r| match r.method.as_str() {
            "GET" => Reply::Json(404, status(404, "NotFound", "not found")),
            _ => Reply::Json(409, status(409, "AlreadyExists", "exists")),
        });
        let clock = Arc::new(ManualClock::new(Timestamp::now()));
        let mut e = LeaderElector::new(
            Api::namespaced(client, "ns"),
            "l",
            "me",
            Duration::from_secs(15),
            clock,
        );
        assert!(!e.try_acquire_or_renew().await.unwrap());
    }

    /// An API server that accepts the request and never answers: the round
    /// ends after the call timeout, as an error counted with code 0,
    /// instead of hanging past the lease duration.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_gets_no_answer_times_out() {
        let (client, _api) = mock::client(|_| Reply::Hang);
        let registry = prometheus::Registry::new();
        let metrics = Arc::new(ControllerMetrics::register(&registry).unwrap());
        let mut e = LeaderElector::new(
            Api::namespaced(client, "ns"),
            "l",
            "me",
            Duration::from_secs(15),
            Arc::new(ManualClock::new(Timestamp::now())),
        )
        .with_metrics(metrics.clone());
        let start = tokio::time::Instant::now();
        let err = e.try_acquire_or_renew().await.unwrap_err();
        assert!(
            start.elapsed() <= Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
        assert!(err.to_string().contains("no answer within"), "{err}");
        assert_eq!(
            metrics
                .api_errors
                .with_label_values(&["get", RESOURCE, "0"])
                .get(),
            1
        );
    }

    #[tokio::test]
    async fn rbac_denial_names_verb_and_resource() {
        let (client, _api) = mock::client(|_| {
            Reply::Json(
                403,
                status(
                    403,
                    "Forbidden",
                    "leases.coordination.k8s.io \"l\" is forbidden",
                ),
            )
        });
        let mut e = LeaderElector::new(
            Api::namespaced(client, "ns"),
            "l",
            "me",
            Duration::from_secs(15),
            Arc::new(ManualClock::new(Timestamp::now())),
        );
        let err = e.try_acquire_or_renew().await.unwrap_err();
        assert_eq!(err.status_code(), Some(403));
        assert!(
            err.to_string()
                .starts_with("failed to get leases.coordination.k8s.io l:"),
            "{err}"
        );
    }
}
