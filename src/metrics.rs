//! Prometheus metrics (docs/metrics.md). Each component registers its own struct on
//! a shared [`Registry`]; this module owns the registry, the admission
//! metrics and the `/metrics` route. The controller's metrics, which the
//! Kubernetes layer (`crate::kube`) counts its API errors and retries in
//! too, are in `controller`: beside the others, so that layer needs
//! nothing of the controller.

use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use mrguard_policy::admission::decider::{Outcome, Webhook};
use mrguard_policy::admission::model::Finding;

pub(crate) mod controller;
mod per_thread;

use per_thread::PerThread;

type CounterVec = PerThread<IntCounterVec>;
type HistogramsVec = PerThread<HistogramVec>;

/// A registry with the standard process metrics.
pub fn registry() -> Registry {
    let r = Registry::new();
    #[cfg(target_os = "linux")]
    {
        let pc = prometheus::process_collector::ProcessCollector::for_self();
        if let Err(e) = r.register(Box::new(pc)) {
            tracing::warn!(error = %e, "failed to register process metrics");
        }
    }
    r
}

/// The admission webhooks' metrics: requests, rejections, durations,
/// findings and applied exceptions, with bounded kind labels.
///
/// What every request writes is kept per thread ([`per_thread`]).
pub struct AdmissionMetrics {
    requests: CounterVec,
    rejected: IntCounterVec,
    duration: HistogramsVec,
    findings: CounterVec,
    exceptions: IntCounterVec,
    cel_rules: HistogramsVec,
    /// `cel_rules`' series, found once per thread ([`Self::cel_rules`]).
    cel_series: RuleHistograms,
    known: Arc<KnownKinds>,
}

pub use crate::metrics::controller::KnownKinds;

impl AdmissionMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let requests = PerThread::new(|| {
            IntCounterVec::new(
                Opts::new(
                    "mrguard_admission_requests_total",
                    "Admission requests by webhook, operation, kind and result.",
                ),
                &["webhook", "operation", "group", "kind", "result"],
            )
        })?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "mrguard_admission_rejected_total",
                "Admission requests refused before a decision, by webhook and reason \
                 (overloaded, too_large, timeout, bad_request).",
            ),
            &["webhook", "reason"],
        )?;
        let duration = PerThread::new(|| {
            HistogramVec::new(
                HistogramOpts::new(
                    "mrguard_admission_duration_seconds",
                    "Time to answer an admission request.",
                )
                .buckets(vec![
                    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0,
                ]),
                &["webhook"],
            )
        })?;
        let findings = PerThread::new(|| {
            IntCounterVec::new(
                Opts::new(
                    "mrguard_rule_findings_total",
                    "Rule findings by rule and action (Audit, Warn or Deny).",
                ),
                &["rule", "action"],
            )
        })?;
        let exceptions = IntCounterVec::new(
            Opts::new(
                "mrguard_exceptions_applied_total",
                "Findings waived by a configured exception, by exception and rule.",
            ),
            &["exception", "rule"],
        )?;
        // Rule names come from the configuration, so the label is bounded
        // by it. Buckets from 1 µs: a compiled rule takes well under that
        // to a few µs, an interpreted one tens of µs, the limit is 250 ms.
        let cel_rules = PerThread::new(|| {
            HistogramVec::new(
                HistogramOpts::new(
                    "mrguard_cel_rule_duration_seconds",
                    "Time to evaluate one configured CEL rule (celRules), by rule (cel:<name>).",
                )
                .buckets(vec![
                    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                    0.001, 0.01, 0.1, 0.25,
                ]),
                &["rule"],
            )
        })?;
        let cel_series = RuleHistograms::new(cel_rules.clone());
        // Every series exists from the start, so a rate over it is 0, not absent.
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            for reason in RejectReason::ALL {
                rejected.with_label_values(&[webhook.as_str(), reason.as_str()]);
            }
        }
        let m = Self {
            requests,
            rejected,
            duration,
            findings,
            exceptions,
            cel_rules,
            cel_series,
            known: Arc::default(),
        };
        m.collectors()
            .into_iter()
            .try_for_each(|c| registry.register(c))?;
        Ok(m)
    }

    /// Every collector, as registered (and listed in docs/metrics.md).
    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.requests.clone()),
            Box::new(self.rejected.clone()),
            Box::new(self.duration.clone()),
            Box::new(self.findings.clone()),
            Box::new(self.exceptions.clone()),
            Box::new(self.cel_rules.clone()),
        ]
    }

    /// Records how long each configured CEL rule of a decision took
    /// ([`mrguard_policy::admission::decider::Decision::cel_timings`]) in
    /// `mrguard_cel_rule_duration_seconds`.
    pub fn cel_rules(&self, timings: &[mrguard_policy::admission::cel::CelTiming]) {
        for t in timings {
            self.cel_series.observe(&t.rule, t.took.as_secs_f64());
        }
    }

    /// Shares the controller's covered kinds with these metrics.
    pub fn with_known_kinds(mut self, known: Arc<KnownKinds>) -> Self {
        self.known = known;
        self
    }

    /// The kinds labelled by name besides the configuration's.
    pub fn known_kinds(&self) -> &Arc<KnownKinds> {
        &self.known
    }

    /// Counts a decided request.
    pub fn observe(
        &self,
        r: &RequestLabels<'_>,
        outcome: Outcome,
        seconds: f64,
        findings: &[Finding],
    ) {
        let webhook = r.webhook;
        let operation = r.operation;
        let (group, kind) = if r.configured || self.known.contains(r.group, r.kind) {
            (r.group, r.kind)
        } else {
            ("other", "other")
        };
        self.requests
            .with_label_values(&[webhook.as_str(), operation, group, kind, outcome.as_str()])
            .inc();
        self.duration
            .with_label_values(&[webhook.as_str()])
            .observe(seconds);
        for f in findings {
            // A waived finding is counted by its exception instead.
            match f.exception() {
                Some(e) => self.exceptions.with_label_values(&[e, &f.rule]).inc(),
                None => self
                    .findings
                    .with_label_values(&[&f.rule, f.action.as_str()])
                    .inc(),
            }
        }
    }

    /// Counts a request refused before a decision: in the requests total
    /// as an error without operation, group or kind (nothing was decoded),
    /// and by reason.
    pub(crate) fn rejected(&self, webhook: Webhook, reason: RejectReason, seconds: f64) {
        self.requests
            .with_label_values(&[webhook.as_str(), "", "", "", Outcome::Error.as_str()])
            .inc();
        self.rejected
            .with_label_values(&[webhook.as_str(), reason.as_str()])
            .inc();
        self.duration
            .with_label_values(&[webhook.as_str()])
            .observe(seconds);
    }
}

/// Why a request was refused before a decision: the `reason` label of
/// `mrguard_admission_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// Beyond the concurrency cap (503).
    Overloaded,
    /// The body is above the size limit (413).
    TooLarge,
    /// The body did not arrive within the request timeout (408).
    Timeout,
    /// The body is unreadable or not an AdmissionReview (400).
    BadRequest,
}

impl RejectReason {
    pub(crate) const ALL: [Self; 4] = [
        Self::Overloaded,
        Self::TooLarge,
        Self::Timeout,
        Self::BadRequest,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Overloaded => "overloaded",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::BadRequest => "bad_request",
        }
    }
}

/// The request labels of one decided request.
pub struct RequestLabels<'a> {
    /// `mutate` or `validate`.
    pub webhook: Webhook,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: &'a str,
    /// The object's API group.
    pub group: &'a str,
    /// The object's kind.
    pub kind: &'a str,
    /// Whether the configuration names the kind ([`Config::names_kind`]);
    /// if not, and the controller does not cover it either, it is counted
    /// as `other`.
    ///
    /// [`Config::names_kind`]: mrguard_policy::admission::config::Config::names_kind
    pub configured: bool,
}

/// One metric family mrguard exports, for the reference in docs/metrics.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricInfo {
    /// The metric name, e.g. `mrguard_admission_requests_total`.
    pub name: String,
    /// The help text `/metrics` shows.
    pub help: String,
    /// `counter`, `gauge`, `histogram`, ...
    pub kind: String,
    /// The label names, in order.
    pub labels: Vec<String>,
    /// Which part of `mrguard serve` exports it.
    pub source: &'static str,
}

/// Every metric family `mrguard serve` can export, read from the same
/// collectors `serve` registers: the process metrics, admission,
/// configuration, TLS and (with the controller) controller metrics. Empty
/// vectors are read from their collectors directly, as a registry's
/// `gather` leaves them out until they have a series.
pub fn catalogue() -> prometheus::Result<Vec<MetricInfo>> {
    use prometheus::core::Collector;
    let r = Registry::new();
    let mut sources: Vec<(&'static str, Vec<Box<dyn Collector>>)> = vec![
        ("admission", AdmissionMetrics::register(&r)?.collectors()),
        (
            "configuration",
            crate::live_config::ConfigMetrics::register(&r)?.collectors(),
        ),
        ("TLS", crate::tls::TlsMetrics::register(&r)?.collectors()),
        (
            "controller",
            crate::controller::ControllerMetrics::register(&r)?.collectors(),
        ),
    ];
    #[cfg(target_os = "linux")]
    sources.insert(
        0,
        (
            "process",
            vec![Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            )],
        ),
    );
    let mut out = Vec::new();
    for (source, collectors) in sources {
        for c in collectors {
            let labels: Vec<Vec<String>> =
                c.desc().iter().map(|d| d.variable_labels.clone()).collect();
            for (i, mf) in c.collect().into_iter().enumerate() {
                out.push(MetricInfo {
                    name: mf.name().to_string(),
                    help: mf.help().to_string(),
                    kind: format!("{:?}", mf.get_field_type()).to_lowercase(),
                    labels: labels.get(i).cloned().unwrap_or_default(),
                    source,
                });
            }
        }
    }
    Ok(out)
}

/// Renders the registry in the Prometheus text format.
pub fn render(registry: &Registry) -> Result<Vec<u8>, prometheus::Error> {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut buf)?;
    Ok(buf)
}

/// The metrics listener's routes: `GET /metrics` only. `serve` runs them on
/// the admission port's connection loop (docs/security.md).
pub(crate) fn app(registry: Registry) -> Router {
    let registry = Arc::new(registry);
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                match render(&registry) {
                    Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
                        .into_response(),
                    Err(e) => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("failed to encode metrics: {e}"),
                    )
                        .into_response(),
                }
            }
        }),
    )
}

/// `mrguard_cel_rule_duration_seconds`'s series, found once per thread and
/// rule. `with_label_values` hashes the name and clones the series (an
/// atomic reference count) on every call: ten rules per
/// request made it 3.9 k of the 27 k instructions the rules cost
/// (BENCHMARKS.md, "The compiled CEL path").
struct RuleHistograms {
    vec: HistogramsVec,
}

/// Series cached per thread; a configuration with more rules than this
/// times the rest through `with_label_values`.
const CACHED_RULES: usize = 64;

thread_local! {
    /// (vector id, rule name, its series).
    static RULE_SERIES: std::cell::RefCell<Vec<(usize, Box<str>, prometheus::Histogram)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl RuleHistograms {
    fn new(vec: HistogramsVec) -> Self {
        Self { vec }
    }

    fn observe(&self, rule: &str, seconds: f64) {
        let id = self.vec.id();
        RULE_SERIES.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some((_, _, h)) = cache
                .iter()
                .find(|(i, name, _)| *i == id && **name == *rule)
            {
                h.observe(seconds);
                return;
            }
            let h = self.vec.with_label_values(&[rule]);
            h.observe(seconds);
            if cache.len() < CACHED_RULES {
                cache.push((id, rule.into(), h));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(vec: &HistogramsVec, rule: &str) -> u64 {
        use prometheus::core::Collector;
        vec.collect()[0]
            .get_metric()
            .iter()
            .filter(|m| m.get_label()[0].value() == rule)
            .map(|m| m.get_histogram().get_sample_count())
            .sum()
    }

    /// Each registry's timings go into its own series, though the
    /// series are cached per thread.
    #[test]
    fn cached_series_stay_with_their_registry() {
        let vec = || {
            PerThread::new(|| HistogramVec::new(HistogramOpts::new("t", "t"), &["rule"])).unwrap()
        };
        let (a, b) = (RuleHistograms::new(vec()), RuleHistograms::new(vec()));
        for _ in 0..3 {
            a.observe("cel:x", 0.001);
            a.observe("cel:y", 0.001);
        }
        b.observe("cel:x", 0.001);
        assert_eq!(count(&a.vec, "cel:x"), 3);
        assert_eq!(count(&a.vec, "cel:y"), 3);
        assert_eq!(count(&b.vec, "cel:x"), 1);
        assert_eq!(count(&b.vec, "cel:y"), 0);
    }
}
