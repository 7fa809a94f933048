//! Serving TLS: rustls (ring) with TLS 1.2 and 1.3 and ALPN for h2 and
//! http/1.1.
//!
//! The server resolves its certificate per handshake from a [`CertStore`],
//! so a reload swaps the pair for new connections while open ones keep the
//! session they negotiated. Certificates come from files (polled, because a
//! Secret volume swaps a `..data` symlink rather than writing in place), or
//! from [`crate::pki`], which issues, parses and matches them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus::{Gauge, Registry};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::pki::{not_after, provider, PemPair};
use crate::poll::{FilePoller, Polled};

/// The serving certificate's expiry and reload metrics.
pub struct TlsMetrics {
    expiry: Gauge,
    reloads: crate::poll::ReloadMetrics,
}

impl TlsMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            expiry: Gauge::new(
                "mrguard_tls_certificate_expiry_timestamp_seconds",
                "When the serving certificate expires, in seconds since the epoch.",
            )?,
            reloads: crate::poll::ReloadMetrics::new("mrguard_tls", "Certificate")?,
        };
        m.collectors()
            .into_iter()
            .try_for_each(|c| registry.register(c))?;
        Ok(m)
    }

    /// Every collector, as registered (and listed in docs/metrics.md).
    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut all: Vec<Box<dyn prometheus::core::Collector>> =
            vec![Box::new(self.expiry.clone())];
        all.extend(self.reloads.collectors());
        all
    }
}

/// The current serving certificate, swapped atomically on reload.
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
    metrics: Option<TlsMetrics>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertStore")
    }
}

impl CertStore {
    /// A store serving `initial`; `metrics` follow its expiry.
    pub fn new(initial: CertifiedKey, metrics: Option<TlsMetrics>) -> Arc<Self> {
        let store = Arc::new(Self {
            current: ArcSwap::from_pointee(initial),
            metrics,
        });
        store.update_expiry();
        store
    }

    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    pub(crate) fn replace(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
        self.update_expiry();
        if let Some(m) = &self.metrics {
            m.reloads.success();
        }
    }

    pub(crate) fn record_failure(&self) {
        if let Some(m) = &self.metrics {
            m.reloads.failure();
        }
    }

    fn update_expiry(&self) {
        if let (Some(m), Some(leaf)) = (&self.metrics, self.current.load().cert.first()) {
            if let Some(t) = not_after(leaf) {
                m.expiry.set(t as f64);
            }
        }
    }

    /// The rustls server configuration that resolves from this store.
    pub fn server_config(self: &Arc<Self>) -> Arc<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12]);
        let mut config = match builder {
            Ok(b) => b.with_no_client_auth().with_cert_resolver(self.clone()),
            // The ring provider supports both versions; unreachable in practice.
            Err(e) => panic!("ring does not support TLS 1.2 and 1.3: {e}"),
        };
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Swaps `store` to the certificate pair in `cert` and `key` whenever
/// their contents change, until shutdown. A broken pair (often one
/// half-written) is logged and counted, and the last good one stays.
pub(crate) async fn watch(
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    store: Arc<CertStore>,
    loaded: PemPair,
    shutdown: crate::shutdown::Signal,
) {
    let poller = FilePoller {
        paths: vec![cert.clone(), key],
        interval,
    };
    poller
        .run(vec![loaded.cert, loaded.key], shutdown, |polled| match polled {
            Polled::Unreadable(path, e) => {
                tracing::warn!(path = %path.display(), error = %e, "failed to read the certificate, keeping the current one");
            }
            Polled::Changed(contents) => {
                let pair = PemPair {
                    cert: contents[0].clone(),
                    key: contents[1].clone(),
                };
                match pair.certified_key() {
                    Ok(ck) => {
                        store.replace(ck);
                        tracing::info!(cert = %cert.display(), "reloaded the serving certificate");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, cert = %cert.display(), "new certificate pair rejected, keeping the last good one");
                        store.record_failure();
                    }
                }
            }
        })
        .await;
}
