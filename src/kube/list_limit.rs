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
//! collection (a list, or a watch until its response starts) wait for
//! one of [`COLLECTION_READS`] places; reads and writes of one object (the
//! Lease, the webhook configurations, the Secret) never wait.
//!
//! Reads made [`in_background`] (the audit's and the policy reports') take
//! a place only while no other read waits for one. After an API-server
//! restart every watcher relists at once; the leader's audit pass (1,000
//! lists at 1,000 kinds) queued among them in arrival order delays them,
//! so it runs after them (BENCHMARKS.md).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::http;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

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

tokio::task_local! {
    /// Set while a future runs [`in_background`].
    static BACKGROUND: ();
}

/// Runs `f` with its collection reads in the background class: each waits
/// until no other read waits. kube's client hands the limited request's
/// future back to the caller's task (its `Buffer` only dispatches), so
/// the mark is seen where the place is taken.
pub(crate) async fn in_background<F: Future>(f: F) -> F::Output {
    BACKGROUND.scope((), f).await
}

/// The places, in two classes: a read in the background takes one only
/// while no foreground read is waiting.
struct Places {
    free: Arc<Semaphore>,
    /// Foreground reads waiting for a place.
    waiting: AtomicUsize,
    /// A place was freed, or no foreground read waits any more.
    changed: Notify,
}

/// A place, given back (and background reads told) when dropped.
struct Place {
    permit: Option<OwnedSemaphorePermit>,
    places: Arc<Places>,
}

impl Drop for Place {
    fn drop(&mut self) {
        // Given back first: a woken read may run at once on another thread.
        self.permit.take();
        self.places.changed.notify_waiters();
    }
}

/// A foreground read counted as waiting until dropped (taken or
/// cancelled).
struct Waiting<'a>(&'a Places);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.changed.notify_waiters();
        }
    }
}

impl Places {
    async fn foreground(self: Arc<Self>) -> Place {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let waiting = Waiting(&self);
        // The semaphore is never closed.
        let permit = self.free.clone().acquire_owned().await.ok();
        drop(waiting);
        Place {
            permit,
            places: self,
        }
    }

    async fn background(self: Arc<Self>) -> Place {
        let permit = loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the checks: a change after them wakes it.
            changed.as_mut().enable();
            if self.waiting.load(Ordering::Acquire) == 0 {
                if let Ok(permit) = self.free.clone().try_acquire_owned() {
                    break permit;
                }
            }
            changed.await;
        };
        Place {
            permit: Some(permit),
            places: self,
        }
    }

    async fn take(self: Arc<Self>) -> Place {
        if BACKGROUND.try_with(|_| ()).is_ok() {
            self.background().await
        } else {
            self.foreground().await
        }
    }
}

/// A [`tower::Layer`] limiting collection reads to `permits` at once.
#[derive(Clone)]
pub(crate) struct CollectionReadLimit {
    places: Arc<Places>,
}

impl CollectionReadLimit {
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            places: Arc::new(Places {
                free: Arc::new(Semaphore::new(permits.max(1))),
                waiting: AtomicUsize::new(0),
                changed: Notify::new(),
            }),
        }
    }
}

impl<S> tower::Layer<S> for CollectionReadLimit {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            places: self.places.clone(),
        }
    }
}

/// The service of [`CollectionReadLimit`].
#[derive(Clone)]
pub(crate) struct Limited<S> {
    inner: S,
    places: Arc<Places>,
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
        let places = self.places.clone();
        Box::pin(async move {
            // Polled first on the caller's task, where BACKGROUND is set.
            let place = places.take().await;
            // Held until the response starts (a list's body follows at
            // once, a watch's never ends), or for HOLD_AT_MOST.
            let call = inner.call(req);
            tokio::pin!(call);
            tokio::select! {
                r = &mut call => return r,
                _ = tokio::time::sleep(HOLD_AT_MOST) => {}
            }
            drop(place);
            call.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    #[derive(Clone, Default)]
    struct Server {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Notify>,
        /// The lists' queries, in the order they reached the server.
        order: Arc<std::sync::Mutex<Vec<String>>>,
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
                s.order
                    .lock()
                    .unwrap()
                    .push(req.uri().query().unwrap_or_default().to_string());
                let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                s.most.fetch_max(n, Ordering::SeqCst);
                s.release.notified().await;
                s.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok("list")
            })
        }
    }

    /// The leader must keep its Lease while 3,000 watchers list: 100 lists at once reach the server 8 at a time, and a
    /// Lease read meanwhile answers at once.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_lists_is_limited_and_a_lease_read_passes_it() {
        let server = Server::default();
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

    /// Sends a list of `tag` through `svc`, in the background or not.
    fn list(
        lists: &mut tokio::task::JoinSet<&'static str>,
        svc: &Limited<Server>,
        tag: &str,
        background: bool,
    ) -> tokio::task::AbortHandle {
        let read = svc
            .clone()
            .oneshot(get(&format!("/apis/ec2.aws.upbound.io/v1beta1/vpcs?{tag}")));
        if background {
            lists.spawn(async move { in_background(read).await.unwrap() })
        } else {
            lists.spawn(async move { read.await.unwrap() })
        }
    }

    /// Releases the lists in flight and lets the waiting ones in.
    async fn release(server: &Server) {
        server.release.notify_waiters();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    /// After an API-server restart the audit's lists must not queue among
    /// the watchers' relists in arrival order: a background read
    /// waits while foreground reads wait, even ones that came after it.
    #[tokio::test(start_paused = true)]
    async fn background_reads_let_waiting_reads_go_first() {
        let server = Server::default();
        let svc = CollectionReadLimit::new(2).layer(server.clone());
        let mut lists = tokio::task::JoinSet::new();
        for tag in ["w1", "w2"] {
            list(&mut lists, &svc, tag, false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        list(&mut lists, &svc, "audit", true);
        tokio::time::sleep(Duration::from_millis(1)).await;
        for tag in ["w3", "w4"] {
            list(&mut lists, &svc, tag, false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        for _ in 0..3 {
            release(&server).await;
        }
        assert_eq!(
            *server.order.lock().unwrap(),
            ["w1", "w2", "w3", "w4", "audit"]
        );
        release(&server).await;
        assert_eq!(lists.join_all().await.len(), 5);
    }

    /// With no read waiting, a background read takes a free place at
    /// once; a waiting read that gives up (its caller went away) no
    /// longer holds the background back.
    #[tokio::test(start_paused = true)]
    async fn background_reads_use_free_places() {
        let server = Server::default();
        let svc = CollectionReadLimit::new(2).layer(server.clone());
        let mut lists = tokio::task::JoinSet::new();
        list(&mut lists, &svc, "w1", false);
        list(&mut lists, &svc, "audit1", true);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(server.in_flight.load(Ordering::SeqCst), 2);
        let gone = list(&mut lists, &svc, "gone", false);
        tokio::time::sleep(Duration::from_millis(1)).await;
        list(&mut lists, &svc, "audit2", true);
        tokio::time::sleep(Duration::from_millis(1)).await;
        gone.abort();
        release(&server).await;
        assert_eq!(*server.order.lock().unwrap(), ["w1", "audit1", "audit2"]);
        release(&server).await;
        let mut answered = 0;
        while let Some(r) = lists.join_next().await {
            answered += usize::from(r.is_ok_and(|r| r == "list"));
        }
        assert_eq!(answered, 3);
    }

    /// Through kube's client, whose `Buffer` calls the layer on a task of
    /// its own: the background mark is still seen. One place; a list
    /// holds it, then the audit's and a watcher's wait: the watcher's
    /// goes first.
    #[tokio::test]
    async fn the_background_mark_passes_kubes_client() {
        use http_body_util::{BodyExt, Full};
        use hyper::body::Bytes;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, ListParams};
        type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<Body>>();
        let client = kube::Client::new(CollectionReadLimit::new(1).layer(service), "default");
        let lister = |ns: &'static str| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            async move {
                api.list(&ListParams::default())
                    .await
                    .map(|l| l.items.len())
            }
        };
        let first = tokio::spawn(lister("first"));
        let (req, first_reply) = handle.next_request().await.expect("the first list");
        assert!(req.uri().path().contains("/first/"), "{}", req.uri());
        let audit = tokio::spawn(in_background(lister("audit")));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let watcher = tokio::spawn(lister("watcher"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let empty = || {
            http::Response::builder()
                .header("content-type", "application/json")
                .body(
                    Full::new(Bytes::from_static(
                        br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]}"#,
                    ))
                    .boxed(),
                )
                .unwrap()
        };
        first_reply.send_response(empty());
        let mut order = Vec::new();
        for _ in 0..2 {
            let (req, reply) = handle.next_request().await.expect("a list");
            order.push(req.uri().path().split('/').nth(4).unwrap_or("").to_string());
            reply.send_response(empty());
        }
        assert_eq!(order, ["watcher", "audit"]);
        for t in [first, audit, watcher] {
            assert_eq!(t.await.unwrap().unwrap(), 0);
        }
    }

    /// Reads whose responses never start give up their places after
    /// HOLD_AT_MOST: the next list still reaches the server.
    #[tokio::test(start_paused = true)]
    async fn hanging_reads_do_not_hold_their_places_forever() {
        let server = Server::default();
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
