//! The companion controller (SPEC §8), run inside `mrguard serve`.
//!
//! Every replica:
//! - watches the TLS Secret and swaps the server's certificate
//!   ([`certs::run_loader`]); `/readyz` turns true once one is loaded;
//! - competes for a `coordination.k8s.io` Lease ([`leader`]).
//!
//! Only the Lease holder writes to the cluster. While it leads it runs:
//! - [`certs::CertReconciler`]: the CA and serving certificate in the Secret,
//!   with a two-CA caBundle while the CA rotates;
//! - [`coverage`]: a watch over CRDs; the `managed` category names the MRs;
//! - [`webhooks`]: `caBundle` and `rules` of both webhook configurations,
//!   repaired from a watch, never recreated once deleted;
//! - [`watch`]: metadata-only watches over existing MRs (gauges, one
//!   `PossiblyLeaked` Event per creation-incomplete MR);
//! - [`audit`]: the validation rules over every existing MR.
//!
//! Losing the Lease stops those tasks; serving admission never stops.

pub mod audit;
pub mod certs;
pub mod connections;
pub mod coverage;
pub mod leader;
pub mod metrics;
pub(crate) mod retry;
pub mod watch;
pub mod webhooks;

#[cfg(test)]
pub(crate) mod mock;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use jiff::Timestamp;
use tokio::sync::watch as channel;
use tracing::Instrument;

use crate::cli::parse_duration;
use crate::config::ConfigStore;
use crate::shutdown::Signal;
use crate::tls::CertStore;

pub use metrics::ControllerMetrics;

/// The field manager of every server-side apply, and the Event reporter.
pub const FIELD_MANAGER: &str = "mrguard";

/// Where Kubernetes mounts the service account's namespace in a pod.
const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Run the controller; it also runs in a cluster (KUBERNETES_SERVICE_HOST
    /// set) when no --tls-cert-file/--self-signed is given.
    #[arg(long, env = "MRGUARD_CONTROLLER", conflicts_with = "no_controller")]
    pub controller: bool,
    /// Never run the controller, even in a cluster.
    #[arg(long, env = "MRGUARD_NO_CONTROLLER")]
    pub no_controller: bool,
    /// Kubeconfig for the controller [default: in-cluster, $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "MRGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the Service, Secret and Lease [default: $POD_NAMESPACE,
    /// the service account's namespace, or crossplane-system].
    #[arg(long, env = "MRGUARD_NAMESPACE")]
    pub namespace: Option<String>,
    /// The Service in front of the webhook; the certificate is issued for it.
    #[arg(long, env = "MRGUARD_SERVICE_NAME", default_value = "mrguard")]
    pub service_name: String,
    /// The Secret holding ca.crt, ca.key, tls.crt and tls.key.
    #[arg(long, env = "MRGUARD_TLS_SECRET_NAME", default_value = "mrguard-tls")]
    pub tls_secret_name: String,
    /// The MutatingWebhookConfiguration whose caBundle and rules are kept.
    #[arg(long, env = "MRGUARD_MUTATING_WEBHOOK_NAME", default_value = "mrguard")]
    pub mutating_webhook_name: String,
    /// The ValidatingWebhookConfiguration whose caBundle and rules are kept.
    #[arg(
        long,
        env = "MRGUARD_VALIDATING_WEBHOOK_NAME",
        default_value = "mrguard"
    )]
    pub validating_webhook_name: String,
    /// The coordination.k8s.io Lease that elects the one writing replica.
    #[arg(long, env = "MRGUARD_LEASE_NAME", default_value = "mrguard-leader")]
    pub lease_name: String,
    /// How long a Lease stays valid without renewal.
    #[arg(long, env = "MRGUARD_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How often existing MRs are audited against the validation rules.
    #[arg(long, env = "MRGUARD_AUDIT_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub audit_interval: Duration,
    /// Lifetime of a generated CA.
    #[arg(long, env = "MRGUARD_CA_LIFETIME", default_value = "8760h", value_parser = parse_duration)]
    pub ca_lifetime: Duration,
    /// Lifetime of a generated serving certificate.
    #[arg(long, env = "MRGUARD_CERT_LIFETIME", default_value = "2160h", value_parser = parse_duration)]
    pub cert_lifetime: Duration,
    /// Renew a certificate when less than this part of its lifetime is left
    /// ("1/3" or "0.25").
    #[arg(long, env = "MRGUARD_CERT_RENEW_FRACTION", default_value = "1/3", value_parser = parse_fraction)]
    pub cert_renew_fraction: f64,
    /// Extra DNS names or IP addresses for the serving certificate
    /// (comma-separated), e.g. for a webhook reached by URL.
    #[arg(long, env = "MRGUARD_CERT_EXTRA_NAMES", value_delimiter = ',')]
    pub cert_extra_names: Vec<String>,
    /// Requests (watches included) per HTTP/2 connection to the API server;
    /// another connection opens when every one is full. Keep it below the
    /// API server's --http2-max-streams-per-connection (250 by default).
    /// 0 speaks HTTP/1.1: one connection per request in flight.
    #[arg(long, env = "MRGUARD_API_STREAMS_PER_CONNECTION", default_value_t = connections::DEFAULT_STREAMS_PER_CONNECTION)]
    pub api_streams_per_connection: usize,
}

/// Parses "1/3" or "0.25" into a fraction strictly between 0 and 1.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let value = match s.split_once('/') {
        Some((n, d)) => {
            let n: f64 = n
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a fraction like 1/3"))?;
            let d: f64 = d
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a fraction like 1/3"))?;
            n / d
        }
        None => s
            .parse()
            .map_err(|_| format!("{s:?} is not a fraction like 1/3 or 0.25"))?,
    };
    if value.is_finite() && value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(format!("{s:?} must be between 0 and 1"))
    }
}

impl ControllerArgs {
    /// Whether the controller runs. In a cluster it is on by default, unless
    /// certificates come from files or --self-signed.
    pub fn enabled(&self, has_cert_source: bool) -> Result<bool, ControllerError> {
        if self.no_controller {
            return Ok(false);
        }
        if self.controller && has_cert_source {
            return Err(ControllerError::Setup(
                "--controller manages the certificate in a Secret; drop --tls-cert-file/--self-signed, \
                 or pass --no-controller"
                    .into(),
            ));
        }
        Ok(self.controller || (in_cluster() && !has_cert_source))
    }
}

fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty())
}

/// Resolves the namespace: the flag, $POD_NAMESPACE, the service account's
/// namespace file, then crossplane-system.
pub fn resolve_namespace(flag: Option<&str>) -> String {
    if let Some(ns) = flag.filter(|s| !s.is_empty()) {
        return ns.to_string();
    }
    if let Some(ns) = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
    {
        return ns;
    }
    if let Ok(ns) = std::fs::read_to_string(SA_NAMESPACE_FILE) {
        let ns = ns.trim();
        if !ns.is_empty() {
            return ns.to_string();
        }
    }
    "crossplane-system".to_string()
}

/// A unique identity for the Lease: the pod name plus a random suffix, so a
/// restarted pod never mistakes its predecessor's lease for its own.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "mrguard".into());
    format!("{host}_{:08x}", fastrand::u32(..))
}

/// Everything the controller needs to know, resolved from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub service: String,
    pub secret: String,
    pub webhooks: webhooks::WebhookNames,
    pub lease: String,
    pub lease_duration: Duration,
    pub audit_interval: Duration,
    pub identity: String,
    pub certs: certs::CertSettings,
    /// The port every replica serves admission on, for the rotation probe.
    pub serving_port: u16,
}

impl Settings {
    pub fn from_args(args: &ControllerArgs, serving_port: u16) -> Self {
        let namespace = resolve_namespace(args.namespace.as_deref());
        let mut names = certs::service_names(&args.service_name, &namespace);
        for extra in &args.cert_extra_names {
            let extra = extra.trim();
            if !extra.is_empty() && !names.iter().any(|n| n == extra) {
                names.push(extra.to_string());
            }
        }
        Self {
            service: args.service_name.clone(),
            secret: args.tls_secret_name.clone(),
            webhooks: webhooks::WebhookNames {
                mutating: args.mutating_webhook_name.clone(),
                validating: args.validating_webhook_name.clone(),
            },
            lease: args.lease_name.clone(),
            lease_duration: args.lease_duration.max(Duration::from_secs(3)),
            audit_interval: args.audit_interval.max(Duration::from_secs(1)),
            identity: identity(),
            certs: certs::CertSettings {
                names,
                ca_lifetime: args.ca_lifetime,
                cert_lifetime: args.cert_lifetime,
                renew_fraction: args.cert_renew_fraction,
                settle: certs::BUNDLE_SETTLE,
            },
            serving_port,
            namespace,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("failed to {verb} {resource}{}: {source}", object_suffix(.object))]
    Api {
        verb: &'static str,
        resource: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to generate a certificate: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("failed to set up the controller: {0}")]
    Setup(String),
    #[error("failed to connect to the Kubernetes API: {0}")]
    Client(String),
}

fn object_suffix(object: &str) -> String {
    if object.is_empty() {
        String::new()
    } else {
        format!(" {object}")
    }
}

impl ControllerError {
    /// The HTTP status of a failed API call, when the API server answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            ControllerError::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    pub fn is_conflict(&self) -> bool {
        self.status_code() == Some(409)
    }

    pub fn is_not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    /// Counts a failed API call in `mrguard_controller_api_errors_total`.
    pub fn count(&self, metrics: Option<&ControllerMetrics>) {
        if let (Some(m), ControllerError::Api { verb, resource, .. }) = (metrics, self) {
            m.api_error(verb, resource, self.status_code());
        }
    }

    /// Counts and logs the error, naming the refused verb and resource on
    /// an RBAC denial.
    pub fn log(&self, metrics: Option<&ControllerMetrics>, what: &str) {
        self.count(metrics);
        if let ControllerError::Api {
            verb,
            resource,
            object,
            source,
        } = self
        {
            if self.status_code() == Some(403) {
                tracing::error!(
                    verb,
                    resource,
                    object = %object,
                    error = %source,
                    "RBAC denied the controller: grant verb {verb:?} on {resource:?} to mrguard's service account ({what})"
                );
                return;
            }
        }
        tracing::warn!(error = %self, "{what}");
    }
}

/// Wraps a kube call's error with the verb and resource it was for.
pub(crate) fn api_err(
    verb: &'static str,
    resource: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> ControllerError {
    let object = object.into();
    move |source| ControllerError::Api {
        verb,
        resource,
        object,
        source,
    }
}

/// The time source of every decision that depends on the wall clock, so
/// tests can move it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Exponential backoff with jitter for retrying failed API calls: each delay
/// is drawn from [d/2, d] while d doubles up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d.mul_f64(0.5 + fastrand::f64() * 0.5)
    }

    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(500), Duration::from_secs(60))
    }
}

/// Builds the Kubernetes client: an explicit kubeconfig (and context), else
/// $KUBECONFIG or ~/.kube/config, else in-cluster; over HTTP/2 with
/// `streams_per_connection` (see [`connections`]).
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    streams_per_connection: usize,
) -> Result<kube::Client, ControllerError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(String::from),
        ..Default::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ControllerError::Client(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| ControllerError::Client(format!("{}: {e}", path.display())))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| ControllerError::Client(e.to_string()))?,
        (None, None) => kube::Config::infer()
            .await
            .map_err(|e| ControllerError::Client(e.to_string()))?,
    };
    connections::client(config, streams_per_connection)
}

/// The running controller's shared pieces.
pub struct Controller {
    pub client: kube::Client,
    pub settings: Settings,
    pub certs: Arc<CertStore>,
    pub config: Arc<ConfigStore>,
    pub ready: Arc<AtomicBool>,
    pub metrics: Arc<ControllerMetrics>,
    pub clock: Arc<dyn Clock>,
}

impl Controller {
    /// Runs until `shutdown` fires; releases the Lease on the way out.
    pub async fn run(self, shutdown: Signal) {
        let Controller {
            client,
            settings,
            certs,
            config,
            ready,
            metrics,
            clock,
        } = self;
        let settings = Arc::new(settings);
        tracing::info!(
            namespace = %settings.namespace,
            identity = %settings.identity,
            secret = %settings.secret,
            "controller starting"
        );

        let (secret_tx, secret_rx) = channel::channel(certs::SecretView::default());
        let loader = tokio::spawn(
            certs::run_loader(
                kube::Api::namespaced(client.clone(), &settings.namespace),
                settings.secret.clone(),
                certs.clone(),
                ready,
                secret_tx,
                shutdown.clone(),
            )
            .instrument(tracing::info_span!("secret_loader")),
        );

        let (leader_tx, mut leader_rx) = channel::channel(false);
        let elector = leader::LeaderElector::new(
            kube::Api::namespaced(client.clone(), &settings.namespace),
            &settings.lease,
            &settings.identity,
            settings.lease_duration,
            clock.clone(),
        );
        let election = tokio::spawn(
            elector
                .run(leader_tx, shutdown.clone())
                .instrument(tracing::info_span!("leader_election")),
        );

        let dedup = watch::EventDedup::default();
        loop {
            tokio::select! {
                r = leader_rx.wait_for(|l| *l) => if r.is_err() { break },
                _ = shutdown.wait() => break,
            }
            metrics.leader.set(1);
            tracing::info!("leading: managing certificates, webhook configurations and MR watches");
            let mut tasks = tokio::task::JoinSet::new();
            let shared = LeaderContext {
                client: client.clone(),
                settings: settings.clone(),
                certs: certs.clone(),
                config: config.clone(),
                metrics: metrics.clone(),
                clock: clock.clone(),
                secret: secret_rx.clone(),
                dedup: dedup.clone(),
            };
            shared.spawn_all(&mut tasks);
            tokio::select! {
                r = leader_rx.wait_for(|l| !*l) => { let _ = r; }
                _ = shutdown.wait() => {}
            }
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            metrics.clear_leader_state();
            tracing::info!("no longer leading: stopped writing");
            if shutdown.is_fired() {
                break;
            }
        }
        // The elector releases the Lease when shutdown fires; an API server
        // that does not answer must not hold the shutdown up.
        let abort = election.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), election)
            .await
            .is_err()
        {
            abort.abort();
            tracing::warn!("gave up releasing the lease; it expires on its own");
        }
        loader.abort();
        let _ = loader.await;
    }
}

/// What every leader-only task shares.
#[derive(Clone)]
pub(crate) struct LeaderContext {
    pub client: kube::Client,
    pub settings: Arc<Settings>,
    pub certs: Arc<CertStore>,
    pub config: Arc<ConfigStore>,
    pub metrics: Arc<ControllerMetrics>,
    pub clock: Arc<dyn Clock>,
    pub secret: channel::Receiver<certs::SecretView>,
    pub dedup: watch::EventDedup,
}

impl LeaderContext {
    fn spawn_all(self, tasks: &mut tokio::task::JoinSet<()>) {
        let (coverage_tx, coverage_rx) = channel::channel(None);
        let s = &self.settings;

        let reconciler = certs::CertReconciler {
            secrets: kube::Api::namespaced(self.client.clone(), &s.namespace),
            name: s.secret.clone(),
            settings: s.certs.clone(),
            clock: self.clock.clone(),
            webhooks: webhooks::WebhookApi::new(self.client.clone(), s.webhooks.clone()),
            probe: Arc::new(certs::EndpointProbe {
                slices: kube::Api::namespaced(self.client.clone(), &s.namespace),
                service: s.service.clone(),
                port: s.serving_port,
                server_name: certs::service_names(&s.service, &s.namespace)
                    .pop()
                    .unwrap_or_default(),
                local: self.certs.clone(),
            }),
        };
        tasks.spawn(
            reconciler
                .run(self.secret.clone(), self.metrics.clone())
                .instrument(tracing::info_span!("certificates")),
        );
        tasks.spawn(
            coverage::run_crd_watch(self.client.clone(), coverage_tx, self.metrics.clone())
                .instrument(tracing::info_span!("crd_watch")),
        );
        tasks.spawn(
            webhooks::run(
                webhooks::WebhookApi::new(self.client.clone(), s.webhooks.clone()),
                self.secret.clone(),
                coverage_rx.clone(),
                self.metrics.clone(),
            )
            .instrument(tracing::info_span!("webhooks")),
        );
        let states = watch::MrStates::new(self.metrics.clone());
        let recorder =
            watch::EventRecorder::new(self.client.clone(), s.identity.clone(), self.dedup.clone());
        tasks.spawn(
            watch::run(
                self.client.clone(),
                coverage_rx.clone(),
                states.clone(),
                recorder,
                self.metrics.clone(),
            )
            .instrument(tracing::info_span!("mr_watch")),
        );
        tasks.spawn(
            audit::run(
                self.client.clone(),
                coverage_rx,
                self.config.clone(),
                states,
                self.metrics.clone(),
                s.audit_interval,
            )
            .instrument(tracing::info_span!("audit")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert!((parse_fraction("1/3").unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(parse_fraction("0.25").unwrap(), 0.25);
        assert!(parse_fraction("1").is_err());
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("3/2").is_err());
        assert!(parse_fraction("a/b").is_err());
    }

    #[test]
    fn backoff_grows_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let d: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[3] >= Duration::from_millis(400) && d[3] <= Duration::from_millis(800));
        assert!(d[5] <= Duration::from_millis(800));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn enabling_rules() {
        let mut a = ControllerArgs {
            controller: false,
            no_controller: false,
            kubeconfig: None,
            namespace: None,
            service_name: "mrguard".into(),
            tls_secret_name: "mrguard-tls".into(),
            mutating_webhook_name: "mrguard".into(),
            validating_webhook_name: "mrguard".into(),
            lease_name: "mrguard-leader".into(),
            lease_duration: Duration::from_secs(15),
            audit_interval: Duration::from_secs(600),
            ca_lifetime: Duration::from_secs(3600),
            cert_lifetime: Duration::from_secs(600),
            cert_renew_fraction: 1.0 / 3.0,
            cert_extra_names: vec!["127.0.0.1".into()],
            api_streams_per_connection: 100,
        };
        a.controller = true;
        assert!(a.enabled(false).unwrap());
        assert!(a.enabled(true).is_err());
        a.no_controller = true;
        assert!(!a.enabled(false).unwrap());
        let s = Settings::from_args(&a, 9443);
        assert_eq!(s.certs.names.last().unwrap(), "127.0.0.1");
        assert_eq!(s.certs.names[0], "mrguard");
    }

    #[test]
    fn namespace_flag_wins() {
        assert_eq!(resolve_namespace(Some("team")), "team");
    }

    /// The whole controller against a small in-memory API server: it takes
    /// the Lease, creates the Secret, loads it (readiness), and writes the
    /// Secret's CA and the fixture CRDs' rules into both configurations;
    /// on shutdown it releases the Lease.
    #[tokio::test]
    async fn a_leader_bootstraps_certificates_and_webhooks() {
        use crate::controller::coverage::tests::fixture_crds;
        use crate::controller::coverage::{Coverage, MUTATE_OPERATIONS, VALIDATE_OPERATIONS};
        use crate::controller::mock::{self, list, status, Reply};
        use crate::controller::webhooks::{tests_support::config_json, ConfigKind};
        use serde_json::{json, Value};
        use std::collections::BTreeMap;
        use std::sync::atomic::Ordering;
        use std::sync::Mutex;

        #[derive(Default)]
        struct Cluster {
            lease: Option<Value>,
            secret: Option<Value>,
            configs: BTreeMap<&'static str, Value>,
        }
        let cluster = Arc::new(Mutex::new(Cluster::default()));
        for (res, kind) in [
            ("mutatingwebhookconfigurations", ConfigKind::Mutating),
            ("validatingwebhookconfigurations", ConfigKind::Validating),
        ] {
            cluster
                .lock()
                .unwrap()
                .configs
                .insert(res, config_json(kind, "mrguard", b"", json!([]), "1"));
        }
        let crds = fixture_crds();
        let c = cluster.clone();
        let (client, api) = mock::client(move |r| {
            let mut c = c.lock().unwrap();
            let watch = r.query.contains("watch=true");
            let path = r.path.as_str();
            if path.contains("/leases/") || path.ends_with("/leases") {
                return match r.method.as_str() {
                    "GET" => match &c.lease {
                        Some(l) => Reply::Json(200, l.clone()),
                        None => Reply::Json(404, status(404, "NotFound", "not found")),
                    },
                    _ => {
                        let mut l = r.body.clone();
                        l["metadata"]["resourceVersion"] = json!("2");
                        c.lease = Some(l.clone());
                        Reply::Json(200, l)
                    }
                };
            }
            if path.contains("/secrets") {
                return match (r.method.as_str(), watch) {
                    ("GET", true) => Reply::Watch(vec![]),
                    ("GET", false) if path.ends_with("/secrets") => Reply::Json(
                        200,
                        list("SecretList", "v1", c.secret.iter().cloned().collect()),
                    ),
                    ("GET", false) => match &c.secret {
                        Some(s) => Reply::Json(200, s.clone()),
                        None => Reply::Json(404, status(404, "NotFound", "not found")),
                    },
                    _ => {
                        let mut s = r.body.clone();
                        s["metadata"]["resourceVersion"] = json!("7");
                        s["metadata"]["namespace"] = json!("crossplane-system");
                        c.secret = Some(s.clone());
                        Reply::Json(201, s)
                    }
                };
            }
            for res in [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ] {
                if !path.contains(res) {
                    continue;
                }
                let cur = c.configs[res].clone();
                return match (r.method.as_str(), watch) {
                    ("GET", true) => Reply::Watch(vec![]),
                    ("GET", false) if path.ends_with(res) => Reply::Json(
                        200,
                        list("List", "admissionregistration.k8s.io/v1", vec![cur]),
                    ),
                    ("GET", false) => Reply::Json(200, cur),
                    _ => {
                        let mut obj = cur;
                        let w = &r.body["webhooks"][0];
                        obj["webhooks"][0]["clientConfig"]["caBundle"] =
                            w["clientConfig"]["caBundle"].clone();
                        obj["webhooks"][0]["rules"] = w["rules"].clone();
                        obj["metadata"]["resourceVersion"] = json!("2");
                        c.configs.insert(res, obj.clone());
                        Reply::Json(200, obj)
                    }
                };
            }
            if path.contains("customresourcedefinitions") {
                return if watch {
                    Reply::Watch(vec![])
                } else {
                    Reply::Json(
                        200,
                        list(
                            "CustomResourceDefinitionList",
                            "apiextensions.k8s.io/v1",
                            crds.clone(),
                        ),
                    )
                };
            }
            if path.contains("endpointslices") {
                return Reply::Json(
                    200,
                    list("EndpointSliceList", "discovery.k8s.io/v1", vec![]),
                );
            }
            if path.contains("/events") {
                return Reply::Json(200, list("EventList", "events.k8s.io/v1", vec![]));
            }
            // Every MR kind: none exist.
            if watch {
                Reply::Watch(vec![])
            } else {
                Reply::Json(200, list("List", "v1", vec![]))
            }
        });

        let args = ControllerArgs {
            controller: true,
            no_controller: false,
            kubeconfig: None,
            namespace: Some("crossplane-system".into()),
            service_name: "mrguard".into(),
            tls_secret_name: "mrguard-tls".into(),
            mutating_webhook_name: "mrguard".into(),
            validating_webhook_name: "mrguard".into(),
            lease_name: "mrguard-leader".into(),
            lease_duration: Duration::from_secs(15),
            audit_interval: Duration::from_secs(600),
            ca_lifetime: Duration::from_secs(365 * 86400),
            cert_lifetime: Duration::from_secs(90 * 86400),
            cert_renew_fraction: 1.0 / 3.0,
            cert_extra_names: vec![],
            api_streams_per_connection: 100,
        };
        let (pair, _) = crate::tls::self_signed(&crate::tls::local_names()).unwrap();
        let certs = CertStore::new(pair.certified_key().unwrap(), None);
        let ready = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let controller = Controller {
            client,
            settings: Settings::from_args(&args, 9443),
            certs: certs.clone(),
            config: ConfigStore::new(mrguard_policy::config::Config::builtin(), None),
            ready: ready.clone(),
            metrics: metrics.clone(),
            clock: Arc::new(SystemClock),
        };
        let (trigger, signal) = crate::shutdown::channel();
        let task = tokio::spawn(controller.run(signal));

        // The leader creates the Secret; the API server tells every replica.
        api.wait_for("the Secret", |r| {
            r.iter()
                .any(|r| r.method == "POST" && r.path.ends_with("/secrets"))
        })
        .await;
        assert!(
            !ready.load(Ordering::Acquire),
            "ready before a certificate was loaded"
        );
        api.wait_watch("/secrets").await;
        let secret = cluster.lock().unwrap().secret.clone().unwrap();
        assert_eq!(api.push("/secrets", "ADDED", secret.clone()), 1);

        // Both configurations get the Secret's ca.crt and the exact rules.
        let ca = secret["data"]["ca.crt"].clone();
        let cov = Coverage::from_crds(&crate::controller::coverage::tests::summaries(
            &fixture_crds(),
        ));
        api.wait_for("both configurations", |_| {
            let c = cluster.lock().unwrap();
            c.configs
                .values()
                .all(|v| v["webhooks"][0]["clientConfig"]["caBundle"] == ca)
        })
        .await;
        {
            let c = cluster.lock().unwrap();
            assert_eq!(
                c.configs["mutatingwebhookconfigurations"]["webhooks"][0]["rules"],
                json!(cov.rules(MUTATE_OPERATIONS))
            );
            assert_eq!(
                c.configs["validatingwebhookconfigurations"]["webhooks"][0]["rules"],
                json!(cov.rules(VALIDATE_OPERATIONS))
            );
        }
        assert!(ready.load(Ordering::Acquire));
        assert_eq!(metrics.leader.get(), 1);
        assert_eq!(metrics.covered_kinds.get(), 7);
        // The server now serves the Secret's certificate.
        let served = certs.current();
        let leaf = crate::controller::certs::SecretContents::from_secret(
            &serde_json::from_value(secret).unwrap(),
        )
        .leaf
        .unwrap();
        assert_eq!(
            served.cert[0],
            crate::tls::parse_certs(&leaf.cert, "leaf").unwrap()[0]
        );

        trigger.fire();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let lease = cluster.lock().unwrap().lease.clone().unwrap();
        assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
        assert_eq!(metrics.leader.get(), 0);
    }
}
