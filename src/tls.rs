//! TLS: rustls (ring) with TLS 1.2 and 1.3 and ALPN for h2 and http/1.1.
//!
//! The server resolves its certificate per handshake from a [`CertStore`],
//! so a reload swaps the pair for new connections while open ones keep the
//! session they negotiated. Certificates come from files (polled, because a
//! Secret volume swaps a `..data` symlink rather than writing in place), or
//! are generated with rcgen.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use prometheus::{Gauge, Registry};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::poll::{FilePoller, Polled};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse PEM in {what}: {reason}")]
    Pem { what: String, reason: String },
    #[error("failed to load the certificate pair: {0}")]
    Pair(String),
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("failed to write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A PEM certificate chain and key, as files or Secret keys hold them.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for PemPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemPair")
            .field("cert_bytes", &self.cert.len())
            .finish_non_exhaustive()
    }
}

impl PemPair {
    pub fn read(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Ok(Self {
            cert: read(cert)?,
            key: read(key)?,
        })
    }

    /// Parses and checks that the key belongs to the first certificate.
    pub fn certified_key(&self) -> Result<CertifiedKey, TlsError> {
        let chain = parse_certs(&self.cert, "the certificate")?;
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|e| TlsError::Pem {
            what: "the private key".into(),
            reason: e.to_string(),
        })?;
        let signing = provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::Pair(format!("unsupported private key: {e}")))?;
        let ck = CertifiedKey::new(chain, signing);
        ck.keys_match()
            .map_err(|e| TlsError::Pair(format!("the key does not match the certificate: {e}")))?;
        Ok(ck)
    }
}

pub fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            what: what.into(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            what: what.into(),
            reason: "no CERTIFICATE block found".into(),
        });
    }
    Ok(chain)
}

/// Seconds since the epoch at which the certificate stops being valid.
pub(crate) fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(c.validity().not_after.timestamp())
}

/// `(not_before, not_after)` in seconds since the epoch.
pub(crate) fn validity(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some((
        c.validity().not_before.timestamp(),
        c.validity().not_after.timestamp(),
    ))
}

pub struct TlsMetrics {
    expiry: Gauge,
    reloads: crate::poll::ReloadMetrics,
}

impl TlsMetrics {
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

/// A CA and its key, as PEM.
#[derive(Clone)]
pub struct CaPem {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for CaPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaPem")
    }
}

fn validity_window(params: &mut CertificateParams, now: SystemTime, lifetime: Duration) {
    let now = time::OffsetDateTime::from(now);
    // Allow for clock skew between the issuer and the API server.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::seconds(lifetime.as_secs() as i64);
}

/// Generates a self-signed CA.
pub fn generate_ca(common_name: &str, lifetime: Duration) -> Result<CaPem, TlsError> {
    generate_ca_at(common_name, SystemTime::now(), lifetime)
}

/// Generates a self-signed CA valid from `now` (minus the skew allowance).
pub(crate) fn generate_ca_at(
    common_name: &str,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CaPem, TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity_window(&mut params, now, lifetime);
    let cert = params.self_signed(&key)?;
    Ok(CaPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `names` (DNS names or IP addresses),
/// signed by `ca`. Returns the PEM pair.
pub fn issue_serving_cert(
    ca: &CaPem,
    names: &[String],
    lifetime: Duration,
) -> Result<PemPair, TlsError> {
    issue_serving_cert_at(ca, names, SystemTime::now(), lifetime)
}

/// Like [`issue_serving_cert`], valid from `now` (minus the skew allowance).
pub(crate) fn issue_serving_cert_at(
    ca: &CaPem,
    names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<PemPair, TlsError> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map(String::as_str).unwrap_or("mrguard"),
    );
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    validity_window(&mut params, now, lifetime);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(PemPair {
        cert: cert.pem().into_bytes(),
        key: key.serialize_pem().into_bytes(),
    })
}

/// A CA plus a serving certificate for local use. Returns the pair and the CA.
pub fn self_signed(names: &[String]) -> Result<(PemPair, CaPem), TlsError> {
    let ca = generate_ca("mrguard local CA", Duration::from_secs(365 * 24 * 3600))?;
    let pair = issue_serving_cert(&ca, names, Duration::from_secs(90 * 24 * 3600))?;
    Ok((pair, ca))
}

/// Writes `contents` to `path`, creating parent folders; private keys get
/// mode 0600.
pub(crate) fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    std::fs::write(path, contents).map_err(err)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = private;
    Ok(())
}

/// The DNS names and addresses a local self-signed certificate covers.
pub fn local_names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pair_loads_and_has_an_expiry() {
        let (pair, ca) = self_signed(&local_names()).unwrap();
        let ck = pair.certified_key().unwrap();
        let exp = not_after(&ck.cert[0]).unwrap();
        let now = jiff::Timestamp::now().as_second();
        assert!(exp > now + 80 * 24 * 3600 && exp < now + 100 * 24 * 3600);
        assert!(ca.cert.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn mismatched_key_is_rejected() {
        let (a, _) = self_signed(&local_names()).unwrap();
        let (b, _) = self_signed(&local_names()).unwrap();
        let mixed = PemPair {
            cert: a.cert,
            key: b.key,
        };
        let e = mixed.certified_key().err().unwrap().to_string();
        assert!(e.contains("does not match"), "{e}");
    }

    #[test]
    fn garbage_is_rejected_with_a_reason() {
        let p = PemPair {
            cert: b"nope".to_vec(),
            key: b"nope".to_vec(),
        };
        let e = p.certified_key().err().unwrap().to_string();
        assert!(
            e.starts_with("failed to parse PEM in the certificate"),
            "{e}"
        );
    }
}
