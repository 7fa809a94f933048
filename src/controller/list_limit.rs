//! At most a few lists and watch starts of one process in flight at once.
//!
//! kube-apiserver's priority and fairness puts every request of one user
//! in one flow, served in order, and every replica runs as the same
//! service account. At 1,000 MR kinds two replicas started 3,000 watchers
//! at once (then the leader's MR watch and every replica's identity watch,
//! each a list and then a watch): the Lease renewals queued behind them, were
//! refused with 429 after 3.7 s, and the leader lost its Lease for 47 s
//! (BENCHMARKS.md, "The controller at 100,000 MRs"). The same burst
//! follows an API server restart, when every watcher relists. Reads of a
//! collection (a list, or a watch until its response starts) now wait for
//! one of [`COLLECTION_READS`] places; reads and writes of one object (the
//! Lease, the webhook configurations, the Secret) never wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::http;
use tokio::sync::Semaphore;

/// Collection reads in flight per process: enough to keep the API server
/// busy (an audit pass lists one page at a time), few enough that a
/// Lease renewal queued behind them in the flow answers in well under a
/// second.
pub(crate) const COLLECTION_READS: usize = 8;

/// The longest a read keeps its place while its response has not started:
/// one that hangs must not stop every other list of the process.
const HOLD_AT_MOST: Duration = Duration::from_secs(30);

/// Whether a request reads a collection: a GET of `/api/v1/<plural>`,
/// `/apis/<group>/<version>/<plural>`, or either under
/// `namespaces/<namespace>/`, with or without `watch=true`.
pub(crate) fn reads_collection<B>(req: &http::Request<B>) -> bool {
    if req.method() != http::Method::GET {
        return false;
    }
    let segments: Vec<&str> = req
        .uri()
        .path()
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let rest = match segments.first() {
        Some(&"api") if segments.len() >= 2 => &segments[2..],
        Some(&"apis") if segments.len() >= 3 => &segments[3..],
        _ => return false,
    };
    rest.len() == 1 || (rest.len() == 3 && rest[0] == "namespaces")
}

/// A [`tower::Layer`] limiting collection reads to `permits` at once.
#[derive(Clone)]
pub(crate) struct CollectionReadLimit {
    permits: Arc<Semaphore>,
}

impl CollectionReadLimit {
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(permits.max(1))),
        }
    }
}

impl<S> tower::Layer<S> for CollectionReadLimit {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            permits: self.permits.clone(),
        }
    }
}

/// The service of [`CollectionReadLimit`].
#[derive(Clone)]
pub(crate) struct Limited<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

impl<S, B> tower::Service<http::Request<B>> for Limited<S>
where
    S: tower::Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !reads_collection(&req) {
            return Box::pin(self.inner.call(req));
        }
        // The clone that was polled ready goes into the future.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let permits = self.permits.clone();
        Box::pin(async move {
            // The semaphore is never closed.
            let permit = permits.acquire_owned().await.ok();
            // Held until the response starts (a list's body follows at
            // once, a watch's never ends), or for HOLD_AT_MOST.
            let call = inner.call(req);
            tokio::pin!(call);
            tokio::select! {
                r = &mut call => return r,
                _ = tokio::time::sleep(HOLD_AT_MOST) => {}
            }
            drop(permit);
            call.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, Service, ServiceExt};

    fn get(path: &str) -> http::Request<()> {
        http::Request::get(path).body(()).unwrap()
    }

    #[test]
    fn collections_are_told_from_objects() {
        for p in [
            "/api/v1/namespaces",
            "/api/v1/namespaces/ns/events?fieldSelector=reason%3DX",
            "/apis/ec2.aws.upbound.io/v1beta1/vpcs?limit=250",
            "/apis/ec2.aws.upbound.io/v1beta1/vpcs?watch=true&resourceVersion=5",
            "/apis/wgpolicyk8s.io/v1alpha2/namespaces/a/policyreports",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        ] {
            assert!(reads_collection(&get(p)), "{p}");
        }
        for p in [
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/mrguard-leader",
            "/api/v1/namespaces/ns",
            "/api/v1/namespaces/ns/secrets/tls",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/x",
            "/apis/ec2.aws.upbound.io/v1beta1/vpcs/a/status",
            "/apis",
            "/api/v1",
            "/version",
            "/metrics",
        ] {
            assert!(!reads_collection(&get(p)), "{p}");
        }
        let post = http::Request::post("/api/v1/namespaces/ns/events")
            .body(())
            .unwrap();
        assert!(!reads_collection(&post));
    }

    /// A stand-in API server: a list answers only when released; anything
    /// else at once. Counts the lists in flight.
    #[derive(Clone)]
    struct Server {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Service<http::Request<()>> for Server {
        type Response = &'static str;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<&'static str, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let s = self.clone();
            Box::pin(async move {
                if !req.uri().path().ends_with("/vpcs") {
                    return Ok("object");
                }
                let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                s.most.fetch_max(n, Ordering::SeqCst);
                s.release.notified().await;
                s.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok("list")
            })
        }
    }

    /// Regression (the leader lost its Lease while 3,000 watchers
    /// listed): 100 lists at once reach the server 8 at a time, and a
    /// Lease read meanwhile answers at once.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_lists_is_limited_and_a_lease_read_passes_it() {
        let server = Server {
            in_flight: Arc::default(),
            most: Arc::default(),
            release: Arc::new(tokio::sync::Notify::new()),
        };
        let svc = CollectionReadLimit::new(COLLECTION_READS).layer(server.clone());
        let mut lists = tokio::task::JoinSet::new();
        for _ in 0..100 {
            let svc = svc.clone();
            lists.spawn(async move {
                svc.oneshot(get("/apis/ec2.aws.upbound.io/v1beta1/vpcs"))
                    .await
                    .unwrap()
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(server.in_flight.load(Ordering::SeqCst), COLLECTION_READS);
        let lease = tokio::time::timeout(
            Duration::from_millis(1),
            svc.clone()
                .oneshot(get("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l")),
        )
        .await;
        assert_eq!(lease.unwrap().unwrap(), "object");
        let mut done = 0;
        while done < 100 {
            server.release.notify_waiters();
            tokio::time::sleep(Duration::from_millis(1)).await;
            while let Some(r) = lists.try_join_next() {
                assert_eq!(r.unwrap(), "list");
                done += 1;
            }
        }
        assert_eq!(server.most.load(Ordering::SeqCst), COLLECTION_READS);
    }

    /// Reads whose responses never start give up their places after
    /// HOLD_AT_MOST: the next list still reaches the server.
    #[tokio::test(start_paused = true)]
    async fn hanging_reads_do_not_hold_their_places_forever() {
        let server = Server {
            in_flight: Arc::default(),
            most: Arc::default(),
            release: Arc::new(tokio::sync::Notify::new()),
        };
        let svc = CollectionReadLimit::new(2).layer(server.clone());
        let mut lists = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let svc = svc.clone();
            lists.spawn(svc.oneshot(get("/apis/ec2.aws.upbound.io/v1beta1/vpcs")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(server.in_flight.load(Ordering::SeqCst), 2);
        tokio::time::sleep(HOLD_AT_MOST).await;
        assert_eq!(server.in_flight.load(Ordering::SeqCst), 3);
        lists.abort_all();
    }
}
