//! `mrguard serve`: wires configuration, certificates, metrics and the
//! HTTPS server together, and handles signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use anyhow::{bail, Context};
use clap::Args;
use tracing::Instrument;

use super::controller_args::ControllerArgs;
use super::parse::parse_duration;
use crate::live_config::{ConfigMetrics, ConfigStore};
use crate::metrics::controller::ControllerMetrics;
use crate::metrics::AdmissionMetrics;
use crate::pki::{self, PemPair};
use crate::server::{ConnLimits, HttpsServer, RouteLimits};
use crate::shutdown;
use crate::tls::{self, CertStore, TlsMetrics};
use mrguard_policy::admission::config::Config;

/// Arguments of `mrguard serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS admission listener.
    #[arg(long, env = "MRGUARD_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// Address of the metrics listener (GET /metrics), plain HTTP unless --metrics-tls.
    #[arg(long, env = "MRGUARD_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// Serve metrics over HTTPS with the admission port's certificate.
    #[arg(long, env = "MRGUARD_METRICS_TLS")]
    pub metrics_tls: bool,
    /// Connections the metrics listener keeps open at once; more wait to be accepted.
    #[arg(long, env = "MRGUARD_METRICS_MAX_CONNECTIONS", default_value_t = 16)]
    pub metrics_max_connections: usize,
    /// PEM certificate chain to serve; reloaded when it changes.
    #[arg(
        long,
        env = "MRGUARD_TLS_CERT_FILE",
        requires = "tls_key_file",
        conflicts_with = "self_signed"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of the certificate; reloaded when it changes.
    #[arg(long, env = "MRGUARD_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Generate a CA and a certificate for localhost, for local use.
    #[arg(long, env = "MRGUARD_SELF_SIGNED")]
    pub self_signed: bool,
    /// Where --self-signed writes its CA certificate [default: <tmp>/mrguard-ca.crt].
    #[arg(long, env = "MRGUARD_SELF_SIGNED_CA_FILE")]
    pub self_signed_ca_file: Option<PathBuf>,
    /// Configuration file (YAML, docs/configuration.md); the built-in default when absent.
    #[arg(long, env = "MRGUARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// How often the config and certificate files are checked for changes.
    #[arg(long, env = "MRGUARD_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// Time a client gets for the TLS handshake and for each request's headers.
    #[arg(long, env = "MRGUARD_HEADER_READ_TIMEOUT", default_value = "1s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// How long an idle HTTP/1.1 keep-alive connection is kept; longer than
    /// clients keep theirs (Go: 90 s), so the client closes first.
    #[arg(long, env = "MRGUARD_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Time to receive a request body; below the webhooks' 2 s and 5 s timeouts.
    #[arg(long, env = "MRGUARD_REQUEST_TIMEOUT", default_value = "1500ms", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Admission requests handled at once; more get 503 with Retry-After.
    #[arg(long, env = "MRGUARD_MAX_CONCURRENT_REQUESTS", default_value_t = 512)]
    pub max_concurrent_requests: usize,
    /// Largest accepted request body in bytes; larger bodies get 413.
    #[arg(long, env = "MRGUARD_MAX_BODY_BYTES", default_value_t = crate::server::MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Bytes of request bodies in flight, both webhooks together; a request
    /// that does not fit waits. Memory is about 24 times this (docs/security.md).
    #[arg(long, env = "MRGUARD_MAX_INFLIGHT_BODY_BYTES", default_value_t = crate::server::MAX_BODY_BYTES)]
    pub max_inflight_body_bytes: usize,
    /// How long a request waits for room under --max-inflight-body-bytes; 503
    /// after. The API server may wait up to 30 s for a webhook.
    #[arg(long, env = "MRGUARD_MAX_INFLIGHT_WAIT", default_value = "30s", value_parser = parse_duration)]
    pub max_inflight_wait: Duration,
    /// After SIGTERM, how long /readyz fails before the listener closes.
    #[arg(long, env = "MRGUARD_DRAIN_DELAY", default_value = "2s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// After the listener closes, how long in-flight requests get to finish.
    #[arg(long, env = "MRGUARD_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// The controller's arguments.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// A started server, for the binary and for tests.
pub struct Running {
    /// The webhook listener's address.
    pub addr: SocketAddr,
    /// The metrics listener's address.
    pub metrics_addr: SocketAddr,
    /// The CA certificate written by --self-signed.
    pub ca_file: Option<PathBuf>,
    /// What `/readyz` reports.
    pub ready: Arc<AtomicBool>,
    trigger: shutdown::Trigger,
    drain_delay: Duration,
    tasks: JoinSet<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Readiness goes false first so endpoints stop routing here, then the
    /// listener closes and in-flight requests drain.
    pub async fn shutdown(mut self) {
        self.ready.store(false, Ordering::Release);
        tokio::time::sleep(self.drain_delay).await;
        self.trigger.fire();
        let _ = self.server.await;
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The configuration in force at start, kept in a store reloads replace,
/// and the file's bytes the watcher compares against.
fn load_config(
    args: &ServeArgs,
    registry: &prometheus::Registry,
) -> anyhow::Result<(Arc<ConfigStore>, Vec<u8>)> {
    let (config, bytes) = match &args.config {
        None => (Config::builtin(), Vec::new()),
        Some(path) => crate::live_config::load_file(path)?,
    };
    for w in config.privileged_exemptions() {
        tracing::warn!("{w}");
    }
    let store = ConfigStore::new(config, Some(ConfigMetrics::register(registry)?));
    Ok((store, bytes))
}

/// With `--controller`: the API client and the controller's metrics.
async fn controller_client(
    args: &ServeArgs,
    registry: &prometheus::Registry,
) -> anyhow::Result<(kube::Client, Arc<ControllerMetrics>)> {
    let client = crate::kube::connections::client(
        args.controller.kubeconfig.as_deref(),
        None,
        args.controller.api_streams_per_connection,
    )
    .await?;
    Ok((client, Arc::new(ControllerMetrics::register(registry)?)))
}

/// The serving certificate, with the files to watch and the CA file
/// `--self-signed` wrote, when they exist.
struct Certificates {
    store: Arc<CertStore>,
    files: Option<(PathBuf, PathBuf, PemPair)>,
    ca_file: Option<PathBuf>,
}

/// The certificate to serve first: the files, a self-signed one, or (in
/// controller mode) a throwaway one until the Secret's is loaded.
fn certificates(
    args: &ServeArgs,
    controller_mode: bool,
    metrics: TlsMetrics,
) -> anyhow::Result<Certificates> {
    let (store, files, ca_file) = match (&args.tls_cert_file, &args.tls_key_file, args.self_signed) {
        (Some(cert), Some(key), _) => {
            let pair = PemPair::read(cert, key)?;
            let ck = pair.certified_key().with_context(|| format!("failed to load {}", cert.display()))?;
            (CertStore::new(ck, Some(metrics)), Some((cert.clone(), key.clone(), pair)), None)
        }
        (None, None, true) => {
            let (pair, ca) = pki::self_signed(&pki::local_names())?;
            let ca_file = args
                .self_signed_ca_file
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("mrguard-ca.crt"));
            pki::write_file(&ca_file, ca.cert.as_bytes(), false)?;
            (CertStore::new(pair.certified_key()?, Some(metrics)), None, Some(ca_file))
        }
        // The controller swaps in the Secret's certificate; until then a
        // throwaway one serves and /readyz stays false.
        (None, None, false) if controller_mode => {
            let (pair, _) = pki::self_signed(&pki::local_names())?;
            (CertStore::new(pair.certified_key()?, Some(metrics)), None, None)
        }
        _ => bail!("no certificate: pass --tls-cert-file and --tls-key-file, or --self-signed for local use"),
    };
    Ok(Certificates {
        store,
        files,
        ca_file,
    })
}

/// Binds the admission listener (routes with their limits) and the
/// metrics listener (over TLS with `--metrics-tls`).
async fn bind(
    args: &ServeArgs,
    state: crate::server::AppState,
    certs: &Arc<CertStore>,
    registry: prometheus::Registry,
) -> anyhow::Result<(HttpsServer, HttpsServer)> {
    let limits = RouteLimits {
        max_body_bytes: args.max_body_bytes,
        request_timeout: args.request_timeout,
        max_concurrent_requests: args.max_concurrent_requests,
        max_inflight_body_bytes: args.max_inflight_body_bytes,
        max_inflight_wait: args.max_inflight_wait,
    };
    let listen = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("failed to listen on {addr}"))
    };
    let listener = listen(args.listen).await?;
    let metrics_listener = listen(args.metrics_listen).await?;
    let server = HttpsServer::new(
        listener,
        certs.server_config(),
        crate::server::router(state, &limits),
        ConnLimits {
            header_read_timeout: args.header_read_timeout,
            idle_timeout: args.idle_timeout,
            drain_timeout: args.drain_timeout,
            max_connections: None,
        },
    );
    let metrics_limits = ConnLimits {
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        // A scrape is answered at once: nothing to wait for.
        drain_timeout: Duration::from_secs(1),
        max_connections: Some(args.metrics_max_connections),
    };
    let app = crate::metrics::app(registry);
    let metrics_server = match args.metrics_tls {
        true => HttpsServer::new(metrics_listener, certs.server_config(), app, metrics_limits),
        false => HttpsServer::plain(metrics_listener, app, metrics_limits),
    };
    Ok((server, metrics_server))
}

/// The reloads: the configuration file and the certificate files, when
/// given, each polled on `--reload-interval`.
fn spawn_reloads(
    args: &ServeArgs,
    tasks: &mut JoinSet<()>,
    config: (&Arc<ConfigStore>, Vec<u8>),
    certs: (&Arc<CertStore>, Option<(PathBuf, PathBuf, PemPair)>),
    signal: &shutdown::Signal,
) {
    if let Some(path) = &args.config {
        tasks.spawn(
            crate::live_config::watch(
                path.clone(),
                args.reload_interval,
                config.0.clone(),
                config.1,
                signal.clone(),
            )
            .instrument(tracing::info_span!("config_watcher")),
        );
    }
    if let (store, Some((cert, key, pair))) = certs {
        tasks.spawn(
            tls::watch(
                cert,
                key,
                args.reload_interval,
                store.clone(),
                pair,
                signal.clone(),
            )
            .instrument(tracing::info_span!("cert_watcher")),
        );
    }
}

/// Binds, loads and starts everything; returns once the server is ready.
/// In order: configuration, controller client, certificate, listeners,
/// then the tasks (reloads, metrics, controller, the HTTPS server).
pub async fn start(args: ServeArgs) -> anyhow::Result<Running> {
    let registry = crate::metrics::registry();
    let (config, config_bytes) = load_config(&args, &registry)?;
    let has_cert_source = args.tls_cert_file.is_some() || args.self_signed;
    let controller_mode = args.controller.enabled(has_cert_source)?;
    let controller = match controller_mode {
        true => Some(controller_client(&args, &registry).await?),
        false => None,
    };
    let certs = certificates(&args, controller_mode, TlsMetrics::register(&registry)?)?;

    let mut admission_metrics = AdmissionMetrics::register(&registry)?;
    if let Some((_, metrics)) = &controller {
        admission_metrics = admission_metrics.with_known_kinds(metrics.known_kinds.clone());
    }
    let ready = Arc::new(AtomicBool::new(false));
    // What this replica's watches learn of the cluster, for admission.
    let cluster = Arc::new(mrguard_policy::cluster::Cluster::default());
    let state = crate::server::AppState {
        config: config.clone(),
        cluster: cluster.clone(),
        metrics: Some(Arc::new(admission_metrics)),
        ready: ready.clone(),
    };
    let (server, metrics_server) = bind(&args, state, &certs.store, registry).await?;
    let addr = server.local_addr()?;
    let metrics_addr = metrics_server.local_addr()?;

    let (trigger, signal) = shutdown::channel();
    let mut tasks = JoinSet::new();
    spawn_reloads(
        &args,
        &mut tasks,
        (&config, config_bytes),
        (&certs.store, certs.files),
        &signal,
    );
    tracing::info!(addr = %metrics_addr, tls = args.metrics_tls, "serving metrics");
    tasks.spawn(
        metrics_server
            .run(signal.clone())
            .instrument(tracing::info_span!("metrics")),
    );
    if let Some((client, metrics)) = controller {
        let controller = crate::controller::Controller {
            client,
            settings: args.controller.settings(addr.port()),
            certs: certs.store.clone(),
            config,
            ready: ready.clone(),
            metrics,
            clock: Arc::new(crate::kube::api::SystemClock),
            cluster,
        };
        tasks.spawn(
            controller
                .run(signal.clone())
                .instrument(tracing::info_span!("controller")),
        );
    }
    let server = tokio::spawn(server.run(signal).instrument(tracing::info_span!("https")));
    if !controller_mode {
        ready.store(true, Ordering::Release);
    }
    tracing::info!(%addr, %metrics_addr, "mrguard is serving");
    Ok(Running {
        addr,
        metrics_addr,
        ca_file: certs.ca_file,
        ready,
        trigger,
        drain_delay: args.drain_delay,
        tasks,
        server,
    })
}

async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub(crate) fn run(args: ServeArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("failed to start the async runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let running = match start(args).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("mrguard: {e:#}");
                return 1;
            }
        };
        if let Some(ca) = &running.ca_file {
            println!(
                "mrguard: serving https://{} with a self-signed certificate; CA written to {}",
                running.addr,
                ca.display()
            );
        }
        terminated().await;
        tracing::info!("shutting down: readiness off, draining");
        running.shutdown().await;
        0
    })
}
