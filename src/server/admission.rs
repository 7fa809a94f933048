//! The admission endpoints, `/mutate` and `/validate`: a stack of tower
//! layers that refuse what must not reach a decision, around a handler that
//! decodes, decides and encodes.
//!
//! Outermost first:
//! - `HandleErrorLayer` turns the layers' errors into [`Rejection`]s;
//! - `LoadShedLayer` over a `GlobalConcurrencyLimitLayer`: beyond the cap,
//!   503 with `Retry-After` at once, never a queue;
//! - `FilterLayer`: 413 before reading a body whose `Content-Length` is
//!   above the limit.
//!
//! Then the handler waits for its share of the body budget ([`BodyBudget`]),
//! reads the body (408 when it has not arrived in time, 413 once a body
//! without a length grows past the limit), decodes it, drops the raw bytes,
//! decides and encodes, and only then gives its share back.
//!
//! Every refusal is a JSON error and is counted; a decision is never an
//! HTTP error (a panic in one is answered by failure policy).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use http_body_util::BodyExt;
use kube::core::admission::AdmissionResponse;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};

use crate::live_config::ConfigStore;
use crate::metrics::{AdmissionMetrics, RejectReason, RequestLabels};
use mrguard_policy::admission::decider::{Decider, Decision, Outcome, Webhook};
use mrguard_policy::admission::review::{self, DecodeError};
use mrguard_policy::cluster::Cluster;

/// What one admission endpoint needs per request.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) webhook: Webhook,
    pub(crate) config: Arc<ConfigStore>,
    /// What this replica's watches know of the cluster.
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) metrics: Option<Arc<AdmissionMetrics>>,
    pub(crate) max_body_bytes: usize,
    /// Time for the body to arrive once the budget let it in.
    pub(crate) request_timeout: Duration,
    /// Bytes of bodies in flight, shared by both endpoints.
    pub(crate) budget: BodyBudget,
}

/// The bytes of request bodies in flight across all connections. A request
/// holds its body's length from before the body is read until its answer
/// is encoded, so the budget covers the parsed tree as well (at most
/// [`AMPLIFICATION`] times the body: decoding refuses more). Over the budget a
/// request waits rather than being refused: the API server counts a refusal
/// as a denial.
#[derive(Clone)]
pub(crate) struct BodyBudget {
    /// One permit per KiB: `acquire_many` counts in `u32`.
    permits: Arc<Semaphore>,
    total_kib: u32,
    /// How long a request waits for room before 503.
    wait: Duration,
}

pub use mrguard_policy::admission::review::AMPLIFICATION;

impl BodyBudget {
    pub(crate) fn new(bytes: usize, wait: Duration) -> Self {
        let total_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        Self {
            permits: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            wait,
        }
    }

    /// A body's share: its length, at most the whole budget, so that a body
    /// larger than the budget runs alone instead of never.
    fn share(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total_kib)
    }

    async fn acquire(&self, bytes: usize) -> Result<OwnedSemaphorePermit, Rejection> {
        let share = self.share(bytes);
        // With room, no timer: the wait is armed only to wait. This cannot
        // pass a queued request: a waiter takes every permit released.
        if let Ok(permit) = self.permits.clone().try_acquire_many_owned(share) {
            return Ok(permit);
        }
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_many_owned(share)).await
        {
            Ok(Ok(permit)) => Ok(permit),
            // Closed never happens: nothing closes the semaphore.
            Ok(Err(_)) | Err(_) => Err(Rejection::OverBudget { waited: self.wait }),
        }
    }
}

/// The endpoint's layers around its handler. `in_flight` is shared by both
/// endpoints: they compete for the same CPUs.
pub(crate) fn route<S>(endpoint: Endpoint, in_flight: Arc<Semaphore>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let max = endpoint.max_body_bytes;
    // Cloned per request, by axum and by the error layer: one reference
    // count both server threads write, not one per field.
    let endpoint = Arc::new(endpoint);
    let refused = {
        let endpoint = endpoint.clone();
        move |arrived: Arrived, error: BoxError| {
            let endpoint = endpoint.clone();
            async move { endpoint.refuse(Rejection::from_layer(error), arrived) }
        }
    };
    let layers = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(refused))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(in_flight))
        .filter(move |req: Request| match declared_length(&req) {
            Some(declared) if declared > max as u64 => Err(Rejection::DeclaredTooLarge {
                declared,
                limit: max,
            }),
            _ => Ok(req),
        });
    post(answer).layer(layers).with_state(endpoint)
}

fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Budget → read → decode → decide → encode.
async fn answer(State(endpoint): State<Arc<Endpoint>>, arrived: Arrived, req: Request) -> Response {
    let declared = declared_length(&req).map(|n| n as usize);
    // Without a length, the largest body it may turn out to be.
    let mut permit = match endpoint
        .budget
        .acquire(declared.unwrap_or(endpoint.max_body_bytes))
        .await
    {
        Ok(p) => p,
        Err(rejection) => return endpoint.refuse(rejection, arrived),
    };
    // Bounds the body's arrival, never a decision under way. A body that
    // came with the head is read without arming a timer (a clock read and
    // two locks of the timer wheel a request).
    let mut read = std::pin::pin!(read_body(
        req.into_body(),
        declared,
        endpoint.max_body_bytes
    ));
    let read = match futures::poll!(read.as_mut()) {
        std::task::Poll::Ready(read) => read,
        std::task::Poll::Pending => tokio::time::timeout(endpoint.request_timeout, read)
            .await
            .unwrap_or(Err(Rejection::Timeout)),
    };
    let body = match read {
        Ok(b) => b,
        Err(rejection) => return endpoint.refuse(rejection, arrived),
    };
    // Give back what an unannounced body did not use.
    let used = endpoint.budget.share(body.len());
    if declared.is_none() && permit.num_permits() > used as usize {
        drop(permit.split(permit.num_permits() - used as usize));
    }
    let config = endpoint.config.load_for_admission();
    // Built per request from this snapshot of the configuration and the
    // replica's cluster view, judging at the time the request is decided.
    let decider = Decider::new(&config, &endpoint.cluster, jiff::Timestamp::now());
    // Each configured CEL rule is timed for the metrics' histogram: the
    // timings come back in the decision.
    let decider = match &endpoint.metrics {
        Some(_) => decider.timed(&std::time::Instant::now),
        None => decider,
    };
    let decoded = decider.decode(&body).map_err(Rejection::Undecodable);
    // The raw bytes are not needed once parsed.
    drop(body);
    let request = match decoded {
        Ok(r) => r,
        Err(rejection) => return endpoint.refuse(rejection, arrived),
    };
    let decision = decide(endpoint.webhook, &request, &decider);
    endpoint.observe(&request, &decision, arrived, &config);
    drop(request);
    let response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        review::encode(decision.response),
    )
        .into_response();
    drop(permit);
    response
}

/// Reads a body into one buffer of its announced length: no second copy
/// from joining chunks.
async fn read_body(
    mut body: Body,
    declared: Option<usize>,
    limit: usize,
) -> Result<Vec<u8>, Rejection> {
    let mut buf = Vec::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            // The innermost cause names the problem (a reset connection,
            // a malformed chunk); the wrappers do not.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            Rejection::Unreadable(cause.to_string())
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(Rejection::TooLarge { limit });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// The policy's decision. Decisions are pure; catching a panic is defence
/// in depth so one bad input can never take the answer down with it: the
/// validating webhook then denies, the mutating one allows unchanged with
/// a warning.
fn decide(webhook: Webhook, request: &review::Request, decider: &Decider<'_>) -> Decision {
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decider.decide(webhook, request)
    }));
    let decision = decided.unwrap_or_else(|_| {
        tracing::error!(uid = %request.uid, webhook = webhook.as_str(), "a rule panicked; answering by failure policy");
        let mut response = AdmissionResponse::from(request);
        match webhook {
            Webhook::Validate => {
                response = response
                    .deny("mrguard hit an internal error evaluating this object; please report it");
            }
            Webhook::Mutate => {
                response.warnings = Some(vec![
                    "mrguard: internal error during mutation; nothing was changed".into(),
                ]);
            }
        }
        Decision {
            response,
            outcome: Outcome::Error,
            findings: Vec::new(),
            mutated: None,
            cel_timings: Vec::new(),
        }
    });
    // Debug, not info: the user sees the denial through the API server and
    // metrics count it; a synchronous log line per denial cost about 5 % of
    // throughput under load (BENCHMARKS.md). Gatekeeper's --log-denies is
    // off by default for the same reason.
    if decision.outcome == Outcome::Denied {
        tracing::debug!(uid = %request.uid, kind = %request.kind.kind, name = %request.name, message = %decision.response.result.message, "denied");
    }
    decision
}

impl Endpoint {
    fn observe(
        &self,
        request: &review::Request,
        decision: &Decision,
        arrived: Arrived,
        config: &mrguard_policy::admission::config::Config,
    ) {
        if let Some(m) = &self.metrics {
            m.observe(
                &RequestLabels {
                    webhook: self.webhook,
                    operation: mrguard_policy::admission::model::Operation::from(
                        &request.operation,
                    )
                    .as_str(),
                    group: &request.kind.group,
                    kind: &request.kind.kind,
                    configured: config.names_kind(&request.kind.group, &request.kind.kind),
                },
                decision.outcome,
                arrived.elapsed(),
                &decision.findings,
            );
            m.cel_rules(&decision.cel_timings);
        }
    }

    /// Counts a refusal and answers it.
    fn refuse(&self, rejection: Rejection, arrived: Arrived) -> Response {
        if let Some(m) = &self.metrics {
            m.rejected(self.webhook, rejection.reason(), arrived.elapsed());
        }
        rejection.into_response()
    }
}

/// Why a request got no decision. The messages are the JSON answer's
/// `error`, for whoever reads the API server's log.
#[derive(Debug, thiserror::Error)]
enum Rejection {
    #[error("too many requests in flight; retry")]
    Overloaded,
    #[error("too many request bytes in flight for {waited:?}; retry")]
    OverBudget { waited: Duration },
    #[error("the request body is {declared} bytes, more than the limit of {limit} bytes")]
    DeclaredTooLarge { declared: u64, limit: usize },
    #[error("the request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive in time")]
    Timeout,
    #[error("failed to read the request body: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Undecodable(DecodeError),
}

impl Rejection {
    /// The layers' errors. None other exists; should one appear, 503 lets
    /// the API server apply the webhook's failure policy.
    fn from_layer(error: BoxError) -> Self {
        if error.is::<tower::load_shed::error::Overloaded>() {
            return Self::Overloaded;
        }
        if error.is::<tower::timeout::error::Elapsed>() {
            return Self::Timeout;
        }
        match error.downcast::<Self>() {
            Ok(rejection) => *rejection,
            Err(other) => {
                tracing::warn!(error = %other, "unexpected error from an admission layer");
                Self::Overloaded
            }
        }
    }

    fn reason(&self) -> RejectReason {
        match self {
            Self::Overloaded | Self::OverBudget { .. } => RejectReason::Overloaded,
            Self::DeclaredTooLarge { .. } | Self::TooLarge { .. } => RejectReason::TooLarge,
            Self::Timeout => RejectReason::Timeout,
            Self::Unreadable(_) | Self::Undecodable(_) => RejectReason::BadRequest,
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = match self.reason() {
            RejectReason::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RejectReason::Timeout => StatusCode::REQUEST_TIMEOUT,
            RejectReason::BadRequest => StatusCode::BAD_REQUEST,
        };
        let mut response = json_error(status, self.to_string());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The body of every answer that is not an AdmissionReview.
pub(crate) fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"error": message.into(), "code": status.as_u16()});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// When a request reached a point of the stack, to time its answer from:
/// refusals from where the stack begins, decisions from where the handler
/// begins (as the request duration always was).
#[derive(Debug, Clone, Copy)]
struct Arrived(Instant);

impl Arrived {
    fn elapsed(self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Arrived {
    type Rejection = Infallible;

    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(Instant::now()))
    }
}
