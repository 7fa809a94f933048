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

use super::admission::{self, json_error, Endpoint};
use crate::config::ConfigStore;
use crate::metrics::AdmissionMetrics;
use mrguard_policy::admission::Webhook;

/// Bodies above this get 413 (SPEC §6).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What the routes share.
#[derive(Clone)]
pub struct AppState {
    /// The configuration in force; reloads swap it.
    pub config: Arc<ConfigStore>,
    pub metrics: Option<Arc<AdmissionMetrics>>,
    /// What `/readyz` reports.
    pub ready: Arc<AtomicBool>,
}

/// Limits of the admission endpoints (SPEC §6); probes have none.
#[derive(Debug, Clone)]
pub struct RouteLimits {
    /// Larger bodies get 413.
    pub max_body_bytes: usize,
    /// Time for the body to arrive, below the webhook's own timeout; 408 after.
    pub request_timeout: Duration,
    /// Admission requests handled at once, both webhooks together; more get 503.
    pub max_concurrent_requests: usize,
}

pub fn router(state: AppState, limits: &RouteLimits) -> Router {
    let in_flight = Arc::new(Semaphore::new(limits.max_concurrent_requests));
    let endpoint = |webhook| {
        admission::route(
            Endpoint {
                webhook,
                config: state.config.clone(),
                metrics: state.metrics.clone(),
                max_body_bytes: limits.max_body_bytes,
            },
            limits.request_timeout,
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
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}
