//! HTTP routes. Handlers decode, call a pure decision function, and encode;
//! every failure is a JSON error with the right status, never a panic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::Semaphore;

use crate::config::ConfigStore;
use crate::metrics::{AdmissionMetrics, Observed};
use mrguard_policy::admission::{self, Outcome, Webhook};

/// Bodies above this get 413 (SPEC §6).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<ConfigStore>,
    pub metrics: Option<Arc<AdmissionMetrics>>,
    pub ready: Arc<AtomicBool>,
    pub limits: Arc<RouteLimits>,
}

pub struct RouteLimits {
    pub max_body_bytes: usize,
    /// Bounds reading the body and deciding, below the webhook's own timeout.
    pub request_timeout: Duration,
    pub in_flight: Semaphore,
}

impl RouteLimits {
    pub fn new(max_body_bytes: usize, request_timeout: Duration, max_concurrent: usize) -> Self {
        Self {
            max_body_bytes,
            request_timeout,
            in_flight: Semaphore::new(max_concurrent),
        }
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"error": message.into(), "code": status.as_u16()});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn mutate(State(state): State<AppState>, req: Request) -> Response {
    handle(state, Webhook::Mutate, req).await
}

async fn validate(State(state): State<AppState>, req: Request) -> Response {
    handle(state, Webhook::Validate, req).await
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, Response> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes"),
        )),
        Err(e) => Err(json_error(
            StatusCode::BAD_REQUEST,
            format!("failed to read the request body: {e}"),
        )),
    }
}

async fn handle(state: AppState, webhook: Webhook, req: Request) -> Response {
    let started = Instant::now();
    let limits = state.limits.clone();
    let Ok(_permit) = limits.in_flight.try_acquire() else {
        let mut r = json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests in flight; retry",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    {
        if len > limits.max_body_bytes as u64 {
            observe_error(&state, webhook, started);
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is {len} bytes, more than the limit of {} bytes",
                    limits.max_body_bytes
                ),
            );
        }
    }
    let body = match tokio::time::timeout(
        limits.request_timeout,
        read_body(req.into_body(), limits.max_body_bytes),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(resp)) => {
            observe_error(&state, webhook, started);
            return resp;
        }
        Err(_) => {
            observe_error(&state, webhook, started);
            return json_error(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            );
        }
    };
    let request = match mrguard_policy::review::decode(&body) {
        Ok(r) => r,
        Err(e) => {
            observe_error(&state, webhook, started);
            return json_error(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let config = state.config.load();
    // Decisions are pure; catching a panic here is defence in depth so one
    // bad input can never take the answer down with it.
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match webhook {
        Webhook::Mutate => admission::mutate_patch_only(&request, &config),
        Webhook::Validate => admission::validate(&request, &config),
    }));
    let (response, outcome, findings) = match decided {
        Ok(d) => (d.response, d.outcome, d.findings),
        Err(_) => {
            tracing::error!(uid = %request.uid, webhook = webhook.as_str(), "a rule panicked; answering by failure policy");
            let mut r = kube::core::admission::AdmissionResponse::from(&request);
            if webhook == Webhook::Validate {
                r = r
                    .deny("mrguard hit an internal error evaluating this object; please report it");
            } else {
                r.warnings = Some(vec![
                    "mrguard: internal error during mutation; nothing was changed".into(),
                ]);
            }
            (r, Outcome::Error, vec![])
        }
    };
    // Debug, not info: the user sees the denial through the API server and
    // metrics count it; a synchronous log line per denial cost about 5 % of
    // throughput under load (BENCHMARKS.md). Gatekeeper's --log-denies is
    // off by default for the same reason.
    if outcome == Outcome::Denied {
        tracing::debug!(uid = %request.uid, kind = %request.kind.kind, name = %request.name, message = %response.result.message, "denied");
    }
    let encoded = mrguard_policy::review::encode(response);
    if let Some(m) = &state.metrics {
        m.observe(
            &Observed {
                webhook,
                operation: mrguard_policy::model::Operation::from(&request.operation).as_str(),
                group: &request.kind.group,
                kind: &request.kind.kind,
            },
            outcome,
            started.elapsed().as_secs_f64(),
            &findings,
        );
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        encoded,
    )
        .into_response()
}

fn observe_error(state: &AppState, webhook: Webhook, started: Instant) {
    if let Some(m) = &state.metrics {
        m.observe(
            &Observed {
                webhook,
                operation: "",
                group: "",
                kind: "",
            },
            Outcome::Error,
            started.elapsed().as_secs_f64(),
            &[],
        );
    }
}
