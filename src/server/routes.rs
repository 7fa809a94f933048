//! The HTTP routes: the two admission endpoints ([`admission`]), the
//! probes, and a JSON 404 for every other path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::Semaphore;

use super::admission::{self, json_error, BodyBudget, Endpoint};
use crate::live_config::ConfigStore;
use crate::metrics::AdmissionMetrics;
use mrguard_policy::admission::decider::Webhook;

/// Bodies above this get 413 (docs/cli.md).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What the routes share.
#[derive(Clone)]
pub struct AppState {
    /// The configuration in force; reloads swap it.
    pub config: Arc<ConfigStore>,
    /// What this replica's watches know of the cluster; empty without them.
    pub cluster: Arc<mrguard_policy::cluster::Cluster>,
    /// The admission metrics; None in tests that need none.
    pub metrics: Option<Arc<AdmissionMetrics>>,
    /// What `/readyz` reports.
    pub ready: Arc<AtomicBool>,
}

/// Limits of the admission endpoints (docs/cli.md); probes have none.
#[derive(Debug, Clone)]
pub struct RouteLimits {
    /// Larger bodies get 413.
    pub max_body_bytes: usize,
    /// Time for the body to arrive, below the webhook's own timeout; 408 after.
    pub request_timeout: Duration,
    /// Admission requests handled at once, both webhooks together; more get 503.
    pub max_concurrent_requests: usize,
    /// Bytes of request bodies in flight, both webhooks together; more wait.
    pub max_inflight_body_bytes: usize,
    /// How long a request waits for room under `max_inflight_body_bytes`; 503 after.
    pub max_inflight_wait: Duration,
}

/// The webhook listener's routes: `/mutate`, `/validate` and the probes,
/// with the body, concurrency and in-flight byte limits of `limits`.
pub fn router(state: AppState, limits: &RouteLimits) -> Router {
    let in_flight = Arc::new(Semaphore::new(limits.max_concurrent_requests));
    let budget = BodyBudget::new(limits.max_inflight_body_bytes, limits.max_inflight_wait);
    let endpoint = |webhook| {
        admission::route(
            Endpoint {
                webhook,
                config: state.config.clone(),
                cluster: state.cluster.clone(),
                metrics: state.metrics.clone(),
                max_body_bytes: limits.max_body_bytes,
                request_timeout: limits.request_timeout,
                budget: budget.clone(),
            },
            in_flight.clone(),
        )
    };
    Router::new()
        .route("/mutate", endpoint(Webhook::Mutate))
        .route("/validate", endpoint(Webhook::Validate))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

async fn not_found(req: Request) -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

async fn readyz(State(state): State<AppState>) -> Response {
    // The identity index is synced unless the controller is filling it.
    if state.ready.load(Ordering::Acquire) && state.cluster.identities().is_synced() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RejectReason;
    use axum::body::{Body, Bytes};
    use axum::http::header;
    use serde_json::Value;
    use std::convert::Infallible;
    use tower::ServiceExt;

    fn review() -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/reviews/002_validate_CREATE_VPC_sample-vpc.json"),
        )
        .unwrap()
    }

    /// The router as `serve` builds it, with its own registry.
    fn build(limits: RouteLimits) -> (axum::Router, prometheus::Registry) {
        let registry = prometheus::Registry::new();
        let state = AppState {
            config: ConfigStore::new(mrguard_policy::admission::config::Config::builtin(), None),
            cluster: Default::default(),
            metrics: Some(Arc::new(AdmissionMetrics::register(&registry).unwrap())),
            ready: Arc::new(AtomicBool::new(true)),
        };
        (router(state, &limits), registry)
    }

    fn limits() -> RouteLimits {
        RouteLimits {
            max_body_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(5),
            max_concurrent_requests: 8,
            max_inflight_body_bytes: MAX_BODY_BYTES,
            max_inflight_wait: Duration::from_secs(5),
        }
    }

    async fn post(app: &axum::Router, path: &str, body: Body, length: Option<usize>) -> Response {
        let mut req = Request::post(path).header(header::CONTENT_TYPE, "application/json");
        if let Some(n) = length {
            req = req.header(header::CONTENT_LENGTH, n);
        }
        app.clone().oneshot(req.body(body).unwrap()).await.unwrap()
    }

    async fn json(resp: Response) -> Value {
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn metric(registry: &prometheus::Registry, line: &str) -> bool {
        let text = String::from_utf8(crate::metrics::render(registry).unwrap()).unwrap();
        text.lines().any(|l| l == line)
    }

    /// Asserts the answer is `status` with a JSON error naming `needle`,
    /// counted once as an error and once under `reason`.
    async fn assert_refused(
        resp: Response,
        registry: &prometheus::Registry,
        status: u16,
        needle: &str,
        reason: &str,
    ) {
        assert_eq!(resp.status().as_u16(), status);
        let v = json(resp).await;
        assert_eq!(v["code"], status, "{v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{v}");
        assert!(metric(
            registry,
            &format!(
                r#"mrguard_admission_rejected_total{{reason="{reason}",webhook="validate"}} 1"#
            )
        ));
        assert!(metric(
            registry,
            r#"mrguard_admission_requests_total{group="",kind="",operation="",result="error",webhook="validate"} 1"#
        ));
    }

    #[tokio::test]
    async fn oversized_bodies_are_refused_with_and_without_a_length() {
        let small = || RouteLimits {
            max_body_bytes: 1024,
            ..limits()
        };
        // Declared: refused before the body is read.
        let (app, registry) = build(small());
        let resp = post(&app, "/validate", Body::from(vec![b' '; 1025]), Some(1025)).await;
        assert_refused(
            resp,
            &registry,
            413,
            "1025 bytes, more than the limit of 1024",
            "too_large",
        )
        .await;
        // Streamed without a length: cut once it grows past the limit.
        let (app, registry) = build(small());
        let chunks =
            futures::stream::iter([vec![b' '; 1000], vec![b' '; 1000]].map(Ok::<_, Infallible>));
        let resp = post(&app, "/validate", Body::from_stream(chunks), None).await;
        assert_refused(resp, &registry, 413, "larger than 1024 bytes", "too_large").await;
    }

    #[tokio::test]
    async fn an_undecodable_body_is_a_counted_bad_request() {
        let (app, registry) = build(limits());
        let resp = post(&app, "/validate", Body::from("{"), None).await;
        assert_refused(
            resp,
            &registry,
            400,
            "failed to decode AdmissionReview",
            "bad_request",
        )
        .await;
    }

    #[tokio::test]
    async fn a_body_that_breaks_off_is_a_bad_request_naming_the_cause() {
        let (app, registry) = build(limits());
        let broken = futures::stream::iter([
            Ok(Bytes::from_static(b"{\"apiVersion\"")),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the client went away",
            )),
        ]);
        let resp = post(&app, "/validate", Body::from_stream(broken), None).await;
        assert_refused(
            resp,
            &registry,
            400,
            "failed to read the request body: the client went away",
            "bad_request",
        )
        .await;
    }

    #[tokio::test]
    async fn beyond_the_cap_requests_are_shed_and_counted_but_probes_are_not() {
        let (app, registry) = build(RouteLimits {
            max_concurrent_requests: 0,
            ..limits()
        });
        let resp = post(&app, "/validate", Body::from(review()), None).await;
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_refused(
            resp,
            &registry,
            503,
            "too many requests in flight",
            "overloaded",
        )
        .await;
        let probe = app
            .clone()
            .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(probe.status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_arrives_gets_408() {
        let (app, registry) = build(limits());
        let never = futures::stream::pending::<Result<Bytes, Infallible>>();
        let resp = post(&app, "/validate", Body::from_stream(never), None).await;
        assert_refused(resp, &registry, 408, "did not arrive in time", "timeout").await;
    }

    /// A request whose body arrives when `go` fires, announcing `len` bytes.
    fn held_request(len: usize, go: tokio::sync::oneshot::Receiver<()>) -> Request {
        let body = review();
        assert!(body.len() <= len);
        let padded = [body, vec![b' '; len - review().len()]].concat();
        let stream = futures::stream::once(async move {
            let _ = go.await;
            Ok::<_, Infallible>(Bytes::from(padded))
        });
        Request::post("/validate")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, len)
            .body(Body::from_stream(stream))
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn over_the_body_budget_a_request_waits_then_is_answered_not_refused() {
        let budget = |wait| RouteLimits {
            max_inflight_body_bytes: 48 * 1024,
            max_inflight_wait: wait,
            ..limits()
        };
        for (wait, expected) in [
            (Duration::from_secs(30), 200),
            (Duration::from_millis(100), 503),
        ] {
            let (app, registry) = build(budget(wait));
            // The first holds 40 KiB of the 48 KiB budget until its body comes.
            let (go, held) = tokio::sync::oneshot::channel();
            let first = tokio::spawn(app.clone().oneshot(held_request(40 * 1024, held)));
            tokio::time::sleep(Duration::from_millis(10)).await;
            let second = tokio::spawn(app.clone().oneshot(held_request(20 * 1024, {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(());
                rx
            })));
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!second.is_finished() || expected == 503, "did not wait");
            let _ = go.send(());
            assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
            let resp = second.await.unwrap().unwrap();
            assert_eq!(resp.status().as_u16(), expected);
            if expected == 503 {
                let v = json(resp).await;
                assert!(
                    v["error"]
                        .as_str()
                        .unwrap()
                        .contains("request bytes in flight"),
                    "{v}"
                );
                assert!(metric(
                    &registry,
                    r#"mrguard_admission_rejected_total{reason="overloaded",webhook="validate"} 1"#
                ));
            }
        }
    }

    #[tokio::test]
    async fn a_decision_is_answered_and_counted_with_its_labels() {
        let (app, registry) = build(limits());
        let resp = post(&app, "/validate", Body::from(review()), None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let v = json(resp).await;
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(v["response"]["allowed"], true, "{v}");
        assert!(metric(
            &registry,
            r#"mrguard_admission_requests_total{group="ec2.aws.upbound.io",kind="VPC",operation="CREATE",result="allowed",webhook="validate"} 1"#
        ));
        // No refusal: every rejected series is there, at 0.
        for reason in RejectReason::ALL {
            assert!(metric(
                &registry,
                &format!(
                    r#"mrguard_admission_rejected_total{{reason="{}",webhook="validate"}} 0"#,
                    reason.as_str()
                )
            ));
        }
    }
}
