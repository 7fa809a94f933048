//! The webhook's certificates, kept in one Secret.
//!
//! The Secret holds `ca.crt` (the CA bundle: the current CA first, then any
//! CA still trusted during a rotation), `ca.key` (the current CA's key, so
//! serving certificates can be renewed without touching the bundle),
//! `tls.crt` and `tls.key`.
//!
//! A CA rotation never breaks admission:
//! 1. a new CA is added in front of the bundle; the old serving certificate
//!    stays, and the webhooks' caBundle gets both CAs;
//! 2. once both webhook configurations carry the bundle and it had
//!    [`BUNDLE_SETTLE`] to reach the API servers, a serving certificate from
//!    the new CA replaces the old one; every replica loads it from the
//!    Secret;
//! 3. once every replica (this one and every ready endpoint of the Service)
//!    answers a TLS handshake that only the new CA verifies, the old CA
//!    leaves the bundle.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::ByteString;
use kube::api::{ListParams, PostParams};
use kube::Api;
use rcgen::PublicKeyData;
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::sync::watch as channel;

use super::api::{api_err, Backoff, Clock, ControllerError};
use super::metrics::ControllerMetrics;
use super::secret::{data, tls_pair, SecretView, CA_CRT, CA_KEY, TLS_CRT, TLS_KEY};
use super::webhooks::WebhookApi;
use crate::tls::{self, CaPem, CertStore, PemPair};

/// When the current CA rotation began (RFC 3339); absent outside rotations.
pub(crate) const ROTATION_STARTED: &str = "mrguard.io/ca-rotation-started";
/// How long a new caBundle is published before a certificate from the new
/// CA is served, so every API server has seen it.
pub(crate) const BUNDLE_SETTLE: Duration = Duration::from_secs(15);
/// Most CAs kept in the bundle at once.
const MAX_BUNDLE: usize = 3;
/// Longest wait between two checks of a healthy Secret.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);
/// Wait between checks while a rotation waits for the replicas.
const ROTATION_POLL: Duration = Duration::from_secs(5);

/// The DNS names of the serving certificate for a Service.
pub(crate) fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
    ]
}

#[derive(Debug, Clone)]
pub(crate) struct CertSettings {
    /// Names the serving certificate must be valid for.
    pub(crate) names: Vec<String>,
    pub(crate) ca_lifetime: Duration,
    pub(crate) cert_lifetime: Duration,
    /// Renew when less than this part of the lifetime is left.
    pub(crate) renew_fraction: f64,
    pub(crate) settle: Duration,
}

/// One CA certificate of the bundle.
#[derive(Clone)]
pub(crate) struct CaCert {
    pub(crate) pem: String,
    pub(crate) der: CertificateDer<'static>,
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

impl std::fmt::Debug for CaCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaCert")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// PEM-encodes one DER certificate, 64 characters a line.
pub(crate) fn pem_encode(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Parses a PEM bundle into its certificates; unreadable input is empty.
pub(crate) fn parse_bundle(pem: &[u8]) -> Vec<CaCert> {
    let Ok(ders) = tls::parse_certs(pem, "ca.crt") else {
        return Vec::new();
    };
    ders.into_iter()
        .filter_map(|der| {
            let (not_before, not_after) = tls::validity(&der)?;
            Some(CaCert {
                pem: pem_encode(&der),
                der,
                not_before,
                not_after,
            })
        })
        .collect()
}

/// What the Secret holds, parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecretContents {
    pub(crate) bundle: Vec<CaCert>,
    pub(crate) ca_key: Option<String>,
    pub(crate) leaf: Option<PemPair>,
    pub(crate) rotation_started: Option<Timestamp>,
}

impl SecretContents {
    pub(crate) fn from_secret(secret: &Secret) -> Self {
        Self {
            bundle: data(secret, CA_CRT).map(parse_bundle).unwrap_or_default(),
            ca_key: data(secret, CA_KEY).and_then(|k| String::from_utf8(k.to_vec()).ok()),
            leaf: tls_pair(secret),
            rotation_started: secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ROTATION_STARTED))
                .and_then(|t| t.parse().ok()),
        }
    }
}

/// Whether `key_pem` is the private key of `cert`.
fn key_matches(cert: &CertificateDer<'_>, key_pem: &str) -> bool {
    let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return false;
    };
    parsed.tbs_certificate.subject_pki.raw == key.subject_public_key_info().as_slice()
}

/// Whether `chain` verifies against `ca` alone for every name at `now`.
pub(crate) fn chain_verifies(
    chain: &[CertificateDer<'static>],
    ca: &CertificateDer<'static>,
    names: &[String],
    now: Timestamp,
) -> bool {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return false;
    };
    let mut roots = RootCertStore::empty();
    if roots.add(ca.clone()).is_err() {
        return false;
    }
    let Ok(verifier) =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), tls::provider()).build()
    else {
        return false;
    };
    let at = UnixTime::since_unix_epoch(Duration::from_secs(
        u64::try_from(now.as_second()).unwrap_or(0),
    ));
    !names.is_empty()
        && names
            .iter()
            .all(|name| match ServerName::try_from(name.clone()) {
                Ok(sn) => verifier
                    .verify_server_cert(leaf, intermediates, &sn, &[], at)
                    .is_ok(),
                Err(_) => false,
            })
}

/// Less than `fraction` of the lifetime `[not_before, not_after]` is left.
fn in_renewal_window(not_before: i64, not_after: i64, now: Timestamp, fraction: f64) -> bool {
    let lifetime = (not_after - not_before).max(1) as f64;
    let remaining = (not_after - now.as_second()) as f64;
    remaining < lifetime * fraction
}

/// Seconds from `now` until the renewal window opens.
fn until_window(not_before: i64, not_after: i64, now: Timestamp, fraction: f64) -> i64 {
    let lifetime = (not_after - not_before).max(1) as f64;
    let opens = not_after as f64 - lifetime * fraction;
    opens as i64 - now.as_second()
}

/// The next step for the Secret.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CertPlan {
    /// In order; check again after this long.
    Keep { requeue: Duration },
    /// Nothing worth keeping: a new CA and serving certificate.
    Create,
    /// The CA is expiring or unusable while the serving certificate still
    /// works: put a new CA in front of the bundle, keep serving the old one.
    StartRotation,
    /// A serving certificate from the current CA (the bundle stays).
    IssueLeaf,
    /// The leaf still comes from an older CA and the settle time is over:
    /// issue from the new CA once the webhooks carry the whole bundle.
    AwaitBundle,
    /// The leaf comes from the current CA: the older CAs can go, once every
    /// replica serves it (`needs_probe`), or right away when they expired.
    DropOldCas { needs_probe: bool },
}

/// Decides the next step from the Secret's contents alone.
pub(crate) fn plan(
    contents: Option<&SecretContents>,
    now: Timestamp,
    s: &CertSettings,
) -> CertPlan {
    let Some(c) = contents else {
        return CertPlan::Create;
    };
    let ca = c.bundle.first();
    let ca_usable = ca.is_some_and(|ca| {
        c.ca_key.as_deref().is_some_and(|k| key_matches(&ca.der, k))
            && now.as_second() < ca.not_after
    });
    let ca_fresh = ca_usable
        && ca.is_some_and(|ca| {
            !in_renewal_window(ca.not_before, ca.not_after, now, s.renew_fraction)
        });

    let chain = c
        .leaf
        .as_ref()
        .filter(|p| p.certified_key().is_ok())
        .and_then(|p| tls::parse_certs(&p.cert, "tls.crt").ok());
    let leaf_from = |ca: &CaCert| {
        chain
            .as_deref()
            .is_some_and(|chain| chain_verifies(chain, &ca.der, &s.names, now))
    };
    let leaf_serving = c.bundle.iter().any(leaf_from);

    let Some(ca) = ca.filter(|_| ca_fresh) else {
        return if leaf_serving {
            CertPlan::StartRotation
        } else {
            CertPlan::Create
        };
    };
    if !leaf_from(ca) {
        if !leaf_serving {
            // Nothing that works today would break.
            return CertPlan::IssueLeaf;
        }
        let settle_end = c
            .rotation_started
            .map(|t| t.as_second() + s.settle.as_secs() as i64)
            .unwrap_or(0);
        if now.as_second() < settle_end {
            let left = (settle_end - now.as_second()).max(1) as u64;
            return CertPlan::Keep {
                requeue: Duration::from_secs(left),
            };
        }
        return CertPlan::AwaitBundle;
    }
    let leaf_window = chain.as_deref().and_then(|c| c.first()).and_then(|leaf| {
        let (nb, na) = tls::validity(leaf)?;
        Some((nb, na))
    });
    let Some((leaf_nb, leaf_na)) = leaf_window else {
        return CertPlan::IssueLeaf;
    };
    if in_renewal_window(leaf_nb, leaf_na, now, s.renew_fraction) {
        return CertPlan::IssueLeaf;
    }
    if c.bundle.len() > 1 {
        let all_expired = c.bundle[1..]
            .iter()
            .all(|old| old.not_after <= now.as_second());
        return CertPlan::DropOldCas {
            needs_probe: !all_expired,
        };
    }
    let next = until_window(leaf_nb, leaf_na, now, s.renew_fraction).min(until_window(
        ca.not_before,
        ca.not_after,
        now,
        s.renew_fraction,
    ));
    CertPlan::Keep {
        requeue: Duration::from_secs(next.max(5) as u64).min(MAX_REQUEUE),
    }
}

/// The Secret's new contents.
#[derive(Debug, Clone)]
pub(crate) struct NewContents {
    pub(crate) bundle: Vec<String>,
    pub(crate) ca_key: String,
    pub(crate) leaf: PemPair,
    pub(crate) rotation_started: Option<Timestamp>,
}

fn new_ca(s: &CertSettings, now: Timestamp) -> Result<CaPem, ControllerError> {
    Ok(tls::generate_ca_at(
        &format!("mrguard-ca-{}", now.as_second()),
        std::time::SystemTime::from(now),
        s.ca_lifetime,
    )?)
}

/// A serving certificate that does not outlive its CA.
fn new_leaf(
    ca: &CaPem,
    ca_not_after: i64,
    s: &CertSettings,
    now: Timestamp,
) -> Result<PemPair, ControllerError> {
    let ca_left = Duration::from_secs((ca_not_after - now.as_second()).max(60) as u64);
    Ok(tls::issue_serving_cert_at(
        ca,
        &s.names,
        std::time::SystemTime::from(now),
        s.cert_lifetime.min(ca_left),
    )?)
}

fn canonical(pem: &str) -> String {
    parse_bundle(pem.as_bytes())
        .into_iter()
        .map(|c| c.pem)
        .collect()
}

/// Computes the new contents for a plan that writes; `None` for the others.
pub(crate) fn execute(
    plan: &CertPlan,
    contents: Option<&SecretContents>,
    now: Timestamp,
    s: &CertSettings,
) -> Result<Option<NewContents>, ControllerError> {
    let empty = SecretContents::default();
    let c = contents.unwrap_or(&empty);
    // Expired CAs verify nothing; keep them out of every new bundle.
    let live_old = |skip_first: bool| -> Vec<String> {
        c.bundle
            .iter()
            .skip(usize::from(skip_first))
            .filter(|ca| ca.not_after > now.as_second())
            .map(|ca| ca.pem.clone())
            .collect()
    };
    match plan {
        CertPlan::Create => {
            let ca = new_ca(s, now)?;
            let ca_der = parse_bundle(ca.cert.as_bytes());
            let ca_na = ca_der.first().map(|c| c.not_after).unwrap_or(i64::MAX);
            let leaf = new_leaf(&ca, ca_na, s, now)?;
            Ok(Some(NewContents {
                bundle: vec![canonical(&ca.cert)],
                ca_key: ca.key,
                leaf,
                rotation_started: None,
            }))
        }
        CertPlan::StartRotation => {
            let ca = new_ca(s, now)?;
            let mut bundle = vec![canonical(&ca.cert)];
            for old in live_old(false) {
                if bundle.len() < MAX_BUNDLE && !bundle.contains(&old) {
                    bundle.push(old);
                }
            }
            let Some(leaf) = c.leaf.clone() else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            Ok(Some(NewContents {
                bundle,
                ca_key: ca.key,
                leaf,
                rotation_started: Some(now),
            }))
        }
        CertPlan::IssueLeaf | CertPlan::AwaitBundle => {
            let (Some(ca), Some(key)) = (c.bundle.first(), c.ca_key.clone()) else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            let issuer = CaPem {
                cert: ca.pem.clone(),
                key,
            };
            let leaf = new_leaf(&issuer, ca.not_after, s, now)?;
            let mut bundle = vec![ca.pem.clone()];
            bundle.extend(live_old(true));
            Ok(Some(NewContents {
                bundle,
                ca_key: issuer.key,
                leaf,
                rotation_started: c.rotation_started,
            }))
        }
        CertPlan::DropOldCas { .. } => {
            let (Some(ca), Some(key), Some(leaf)) =
                (c.bundle.first(), c.ca_key.clone(), c.leaf.clone())
            else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            Ok(Some(NewContents {
                bundle: vec![ca.pem.clone()],
                ca_key: key,
                leaf,
                rotation_started: None,
            }))
        }
        CertPlan::Keep { .. } => Ok(None),
    }
}

/// Whether every replica serves a certificate that `ca` alone verifies.
pub(crate) trait ServingProbe: Send + Sync {
    fn all_serve<'a>(
        &'a self,
        ca: &'a CertificateDer<'static>,
    ) -> BoxFuture<'a, Result<bool, ControllerError>>;
}

/// Probes this replica's own store and every ready endpoint of the Service
/// with a TLS handshake that trusts only the new CA.
pub(crate) struct EndpointProbe {
    pub(crate) slices: Api<EndpointSlice>,
    pub(crate) service: String,
    pub(crate) port: u16,
    pub(crate) server_name: String,
    pub(crate) local: Arc<CertStore>,
}

impl ServingProbe for EndpointProbe {
    fn all_serve<'a>(
        &'a self,
        ca: &'a CertificateDer<'static>,
    ) -> BoxFuture<'a, Result<bool, ControllerError>> {
        Box::pin(async move {
            let names = [self.server_name.clone()];
            if !chain_verifies(&self.local.current().cert, ca, &names, Timestamp::now()) {
                return Ok(false);
            }
            let selector = format!("kubernetes.io/service-name={}", self.service);
            let slices = self
                .slices
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(api_err("list", "endpointslices.discovery.k8s.io", ""))?;
            let mut addrs = Vec::new();
            for slice in slices.items {
                if slice.address_type == "FQDN" {
                    continue;
                }
                for ep in slice.endpoints.into_iter().flatten() {
                    if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                        continue;
                    }
                    for a in ep.addresses {
                        if let Ok(ip) = a.parse::<IpAddr>() {
                            addrs.push(SocketAddr::new(ip, self.port));
                        }
                    }
                }
            }
            for addr in addrs {
                if !handshake(addr, ca, &self.server_name).await {
                    tracing::debug!(%addr, "replica does not serve the new certificate yet");
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }
}

/// A TLS handshake with `addr` that only `ca` can verify.
async fn handshake(addr: SocketAddr, ca: &CertificateDer<'static>, server_name: &str) -> bool {
    let mut roots = RootCertStore::empty();
    if roots.add(ca.clone()).is_err() {
        return false;
    }
    let Ok(builder) = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    else {
        return false;
    };
    let config = builder.with_root_certificates(roots).with_no_client_auth();
    let Ok(name) = ServerName::try_from(server_name.to_string()) else {
        return false;
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        connector.connect(name, tcp).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(3), attempt).await,
        Ok(Some(_))
    )
}

/// Keeps the Secret valid. Runs only on the Lease holder.
pub(crate) struct CertReconciler {
    pub(crate) secrets: Api<Secret>,
    pub(crate) name: String,
    pub(crate) settings: CertSettings,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) webhooks: WebhookApi,
    pub(crate) probe: Arc<dyn ServingProbe>,
}

impl CertReconciler {
    /// One pass: read, decide, write at most once. Returns when to look again.
    pub(crate) async fn reconcile(&self) -> Result<Duration, ControllerError> {
        let now = self.clock.now();
        let existing = self
            .secrets
            .get_opt(&self.name)
            .await
            .map_err(api_err("get", "secrets", &self.name))?;
        // The chart creates the Secret; without `create` on Secrets the
        // controller can only fill and rotate an existing one.
        let Some(existing) = existing else {
            return Err(ControllerError::SecretMissing {
                namespace: self.secrets.namespace().unwrap_or_default().to_string(),
                name: self.name.clone(),
            });
        };
        let contents = Some(SecretContents::from_secret(&existing));
        let plan = plan(contents.as_ref(), now, &self.settings);
        match &plan {
            CertPlan::Keep { requeue } => return Ok(*requeue),
            CertPlan::AwaitBundle => {
                let ders: Vec<_> = contents
                    .iter()
                    .flat_map(|c| c.bundle.iter().map(|ca| ca.der.clone()))
                    .collect();
                if !self.webhooks.bundle_published(&ders).await? {
                    tracing::info!(
                        "waiting for both webhook configurations to carry the new CA bundle"
                    );
                    return Ok(ROTATION_POLL);
                }
            }
            CertPlan::DropOldCas { needs_probe: true } => {
                let Some(ca) = contents.as_ref().and_then(|c| c.bundle.first()) else {
                    return Ok(ROTATION_POLL);
                };
                if !self.probe.all_serve(&ca.der).await? {
                    tracing::info!("keeping the old CA in the bundle until every replica serves the new certificate");
                    return Ok(ROTATION_POLL);
                }
            }
            _ => {}
        }
        let Some(new) = execute(&plan, contents.as_ref(), now, &self.settings)? else {
            return Ok(ROTATION_POLL);
        };
        self.write(existing, &new).await?;
        tracing::info!(step = ?plan, bundle = new.bundle.len(), "updated the TLS Secret");
        // Look again soon: a rotation has further steps.
        Ok(if new.bundle.len() > 1 {
            ROTATION_POLL
        } else {
            Duration::from_secs(30)
        })
    }

    async fn write(&self, mut secret: Secret, new: &NewContents) -> Result<(), ControllerError> {
        let data: BTreeMap<String, ByteString> = [
            (CA_CRT, new.bundle.concat().into_bytes()),
            (CA_KEY, new.ca_key.clone().into_bytes()),
            (TLS_CRT, new.leaf.cert.clone()),
            (TLS_KEY, new.leaf.key.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v)))
        .collect();
        secret.metadata.annotations =
            rotation_annotations(secret.metadata.annotations.take(), new.rotation_started);
        secret.metadata.managed_fields = None;
        secret.data = Some(data);
        secret.string_data = None;
        // The resourceVersion read above makes this a compare-and-swap.
        self.secrets
            .replace(&self.name, &PostParams::default(), &secret)
            .await
            .map_err(api_err("update", "secrets", &self.name))?;
        Ok(())
    }

    /// Reconciles until aborted: on every Secret change, when a step is due,
    /// and with backoff after failures.
    pub(crate) async fn run(
        self,
        mut secret: channel::Receiver<SecretView>,
        metrics: Arc<ControllerMetrics>,
    ) {
        let mut backoff = Backoff::default();
        // A missing Secret stays missing until someone acts: say so once.
        let mut missing_reported = false;
        loop {
            let wait = match self.reconcile().await {
                Ok(d) => {
                    backoff.reset();
                    missing_reported = false;
                    d
                }
                Err(e @ ControllerError::SecretMissing { .. }) => {
                    if !std::mem::replace(&mut missing_reported, true) {
                        tracing::error!(error = %e, "cannot issue the serving certificate");
                    }
                    backoff.next_delay()
                }
                Err(e) => {
                    e.log(
                        Some(&metrics),
                        "failed to reconcile the TLS Secret; retrying",
                    );
                    backoff.next_delay()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                r = secret.changed() => if r.is_err() { return },
            }
        }
    }
}

fn rotation_annotations(
    existing: Option<BTreeMap<String, String>>,
    started: Option<Timestamp>,
) -> Option<BTreeMap<String, String>> {
    let mut a = existing.unwrap_or_default();
    match started {
        Some(t) => {
            a.insert(ROTATION_STARTED.to_string(), t.to_string());
        }
        None => {
            a.remove(ROTATION_STARTED);
        }
    }
    (!a.is_empty()).then_some(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::mock::{self, status, ManualClock, Reply};
    use serde_json::{json, Value};

    fn settings() -> CertSettings {
        CertSettings {
            names: service_names("mrguard", "crossplane-system"),
            ca_lifetime: Duration::from_secs(300 * 86400),
            cert_lifetime: Duration::from_secs(90 * 86400),
            renew_fraction: 1.0 / 3.0,
            settle: Duration::from_secs(15),
        }
    }

    fn day(n: i64) -> Timestamp {
        Timestamp::now() + jiff::SignedDuration::from_hours(24 * n)
    }

    fn contents(new: &NewContents) -> SecretContents {
        secret_contents(&secret_json(new))
    }

    fn secret_json(new: &NewContents) -> Value {
        use base64::Engine;
        let b = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
        let mut annotations = serde_json::Map::new();
        if let Some(t) = new.rotation_started {
            annotations.insert(ROTATION_STARTED.into(), json!(t.to_string()));
        }
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mrguard-tls", "namespace": "crossplane-system", "resourceVersion": "7",
                         "annotations": annotations},
            "type": "kubernetes.io/tls",
            "data": {
                "ca.crt": b(new.bundle.concat().as_bytes()),
                "ca.key": b(new.ca_key.as_bytes()),
                "tls.crt": b(&new.leaf.cert),
                "tls.key": b(&new.leaf.key),
            }
        })
    }

    fn secret_contents(v: &Value) -> SecretContents {
        SecretContents::from_secret(&serde_json::from_value(v.clone()).unwrap())
    }

    fn create(s: &CertSettings) -> NewContents {
        execute(&CertPlan::Create, None, Timestamp::now(), s)
            .unwrap()
            .unwrap()
    }

    /// A leaf as long-lived as the CA, so it still serves when the CA's
    /// renewal window opens.
    fn rotation_settings() -> CertSettings {
        CertSettings {
            cert_lifetime: Duration::from_secs(300 * 86400),
            ..settings()
        }
    }

    #[test]
    fn a_missing_secret_is_created_and_the_result_verifies_for_every_name() {
        let s = settings();
        assert_eq!(plan(None, Timestamp::now(), &s), CertPlan::Create);
        let new = create(&s);
        let c = contents(&new);
        assert_eq!(c.bundle.len(), 1);
        let chain = tls::parse_certs(&new.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(
            &chain,
            &c.bundle[0].der,
            &s.names,
            Timestamp::now()
        ));
        assert!(!chain_verifies(
            &chain,
            &c.bundle[0].der,
            &["other.svc".to_string()],
            Timestamp::now()
        ));
        assert!(matches!(
            plan(Some(&c), Timestamp::now(), &s),
            CertPlan::Keep { .. }
        ));
    }

    #[test]
    fn extra_names_may_be_addresses() {
        let s = CertSettings {
            names: vec![
                "mrguard.default.svc".into(),
                "127.0.0.1".into(),
                "::1".into(),
            ],
            ..settings()
        };
        let new = create(&s);
        let c = contents(&new);
        let chain = tls::parse_certs(&new.leaf.cert, "leaf").unwrap();
        for name in &s.names {
            assert!(
                chain_verifies(
                    &chain,
                    &c.bundle[0].der,
                    std::slice::from_ref(name),
                    Timestamp::now()
                ),
                "{name}"
            );
        }
        assert!(!chain_verifies(
            &chain,
            &c.bundle[0].der,
            &["10.0.0.1".into()],
            Timestamp::now()
        ));
    }

    #[test]
    fn renewal_follows_the_injected_clock() {
        let s = settings();
        let c = contents(&create(&s));
        // The 90-day leaf renews when less than 30 days are left.
        assert!(matches!(plan(Some(&c), day(59), &s), CertPlan::Keep { .. }));
        assert_eq!(plan(Some(&c), day(61), &s), CertPlan::IssueLeaf);
        // Keep's requeue points at the opening of the window, at most an
        // hour ahead.
        let requeue = |t| match plan(Some(&c), t, &s) {
            CertPlan::Keep { requeue } => requeue.as_secs(),
            other => panic!("{other:?}"),
        };
        assert_eq!(requeue(day(50)), 3600);
        let secs = requeue(day(60) - jiff::SignedDuration::from_mins(10));
        assert!((300..=700).contains(&secs), "{secs}");

        // A renewed leaf from the same CA keeps the bundle as it is.
        let renewed = execute(&CertPlan::IssueLeaf, Some(&c), day(61), &s)
            .unwrap()
            .unwrap();
        assert_eq!(renewed.bundle, vec![c.bundle[0].pem.clone()]);
        assert_ne!(renewed.leaf, c.leaf.clone().unwrap());

        // The 300-day CA rotates when less than 100 days are left, keeping
        // the leaf renewed on day 180 serving meanwhile.
        let on_180 = contents(
            &execute(&CertPlan::IssueLeaf, Some(&c), day(180), &s)
                .unwrap()
                .unwrap(),
        );
        assert!(matches!(
            plan(Some(&on_180), day(199), &s),
            CertPlan::Keep { .. }
        ));
        assert_eq!(plan(Some(&on_180), day(201), &s), CertPlan::StartRotation);
        // Nothing serves any more (the day-0 leaf expired): start over.
        assert_eq!(plan(Some(&c), day(201), &s), CertPlan::Create);
        assert_eq!(plan(Some(&on_180), day(301), &s), CertPlan::Create);
    }

    #[test]
    fn invalid_contents_are_replaced() {
        let s = settings();
        let good = create(&s);
        // Wrong names: issue a new leaf from the same CA right away.
        let other = CertSettings {
            names: service_names("renamed", "crossplane-system"),
            ..settings()
        };
        assert_eq!(
            plan(Some(&contents(&good)), Timestamp::now(), &other),
            CertPlan::IssueLeaf
        );
        // A key that does not match the certificate.
        let mut broken = good.clone();
        broken.leaf.key = create(&s).leaf.key;
        assert_eq!(
            plan(Some(&contents(&broken)), Timestamp::now(), &s),
            CertPlan::IssueLeaf
        );
        // A lost CA key while the leaf still serves: rotate with overlap.
        let mut lost = good.clone();
        lost.ca_key = create(&s).ca_key;
        assert_eq!(
            plan(Some(&contents(&lost)), Timestamp::now(), &s),
            CertPlan::StartRotation
        );
        // Garbage everywhere.
        let garbage = SecretContents {
            bundle: parse_bundle(b"nope"),
            ca_key: Some("nope".into()),
            leaf: Some(PemPair {
                cert: b"x".to_vec(),
                key: b"y".to_vec(),
            }),
            rotation_started: None,
        };
        assert_eq!(plan(Some(&garbage), Timestamp::now(), &s), CertPlan::Create);
    }

    #[test]
    fn ca_rotation_keeps_both_cas_until_the_new_leaf_is_served() {
        let s = rotation_settings();
        let first = create(&s);
        let old_ca = contents(&first).bundle[0].clone();
        let t = day(201);
        // Phase 1: new CA in front, old CA kept, old leaf kept.
        let p1 = execute(&CertPlan::StartRotation, Some(&contents(&first)), t, &s)
            .unwrap()
            .unwrap();
        assert_eq!(p1.bundle.len(), 2);
        assert_eq!(p1.bundle[1], old_ca.pem);
        assert_eq!(p1.leaf, first.leaf);
        assert_eq!(p1.rotation_started, Some(t));
        let c1 = contents(&p1);
        // The old leaf still verifies against the bundle's old CA.
        let old_chain = tls::parse_certs(&first.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(&old_chain, &c1.bundle[1].der, &s.names, t));
        assert!(!chain_verifies(&old_chain, &c1.bundle[0].der, &s.names, t));

        // Phase 2 waits for the settle time, then for the webhooks.
        assert!(matches!(plan(Some(&c1), t, &s), CertPlan::Keep { .. }));
        let after_settle = t + jiff::SignedDuration::from_secs(16);
        assert_eq!(plan(Some(&c1), after_settle, &s), CertPlan::AwaitBundle);
        let p2 = execute(&CertPlan::AwaitBundle, Some(&c1), after_settle, &s)
            .unwrap()
            .unwrap();
        assert_eq!(p2.bundle, p1.bundle, "both CAs stay while replicas switch");
        let c2 = contents(&p2);
        let new_chain = tls::parse_certs(&p2.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(
            &new_chain,
            &c2.bundle[0].der,
            &s.names,
            after_settle
        ));

        // Phase 3 needs the probe; then the old CA goes.
        assert_eq!(
            plan(Some(&c2), after_settle, &s),
            CertPlan::DropOldCas { needs_probe: true }
        );
        let p3 = execute(
            &CertPlan::DropOldCas { needs_probe: true },
            Some(&c2),
            after_settle,
            &s,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p3.bundle, vec![c2.bundle[0].pem.clone()]);
        assert_eq!(p3.rotation_started, None);
        assert!(matches!(
            plan(Some(&contents(&p3)), after_settle, &s),
            CertPlan::Keep { .. }
        ));
    }

    struct FixedProbe(bool);
    impl ServingProbe for FixedProbe {
        fn all_serve<'a>(
            &'a self,
            _ca: &'a CertificateDer<'static>,
        ) -> BoxFuture<'a, Result<bool, ControllerError>> {
            Box::pin(async move { Ok(self.0) })
        }
    }

    fn reconciler(client: kube::Client, clock: Arc<ManualClock>, probe: bool) -> CertReconciler {
        CertReconciler {
            secrets: Api::namespaced(client.clone(), "crossplane-system"),
            name: "mrguard-tls".into(),
            settings: rotation_settings(),
            clock,
            webhooks: WebhookApi::new(
                client,
                crate::controller::webhooks::WebhookNames {
                    mutating: "mrguard".into(),
                    validating: "mrguard".into(),
                },
            ),
            probe: Arc::new(FixedProbe(probe)),
        }
    }

    fn decode_secret(body: &Value) -> SecretContents {
        secret_contents(body)
    }

    /// The Secret as the chart creates it: empty, of type kubernetes.io/tls.
    fn chart_secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "mrguard-tls", "namespace": "crossplane-system", "resourceVersion": "5"},
               "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}})
    }

    #[tokio::test]
    async fn reconcile_fills_the_empty_secret_the_chart_created() {
        let (client, api) = mock::client(|r| match (r.method.as_str(), r.path.as_str()) {
            ("GET", "/api/v1/namespaces/crossplane-system/secrets/mrguard-tls") => {
                Reply::Json(200, chart_secret())
            }
            ("PUT", "/api/v1/namespaces/crossplane-system/secrets/mrguard-tls") => {
                Reply::Json(200, r.body.clone())
            }
            _ => Reply::Json(500, status(500, "InternalError", "unexpected")),
        });
        let clock = Arc::new(ManualClock::new(Timestamp::now()));
        let r = reconciler(client, clock, true);
        r.reconcile().await.unwrap();
        let writes = api.writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].method, "PUT");
        let body = &writes[0].body;
        assert_eq!(body["type"], "kubernetes.io/tls");
        assert_eq!(body["metadata"]["name"], "mrguard-tls");
        // A compare-and-swap on what was read.
        assert_eq!(body["metadata"]["resourceVersion"], "5");
        let c = decode_secret(body);
        assert_eq!(c.bundle.len(), 1);
        let chain = tls::parse_certs(&c.leaf.unwrap().cert, "leaf").unwrap();
        assert!(chain_verifies(
            &chain,
            &c.bundle[0].der,
            &settings().names,
            Timestamp::now()
        ));
    }

    /// Issue 18: no `create` on Secrets. A missing Secret is reported,
    /// naming it and the way out, and nothing is created.
    #[tokio::test]
    async fn a_missing_secret_is_reported_not_created() {
        let (client, api) = mock::client(|r| match r.method.as_str() {
            "GET" => Reply::Json(
                404,
                status(404, "NotFound", "secrets \"mrguard-tls\" not found"),
            ),
            _ => Reply::Json(403, status(403, "Forbidden", "no create on secrets")),
        });
        let r = reconciler(client, Arc::new(ManualClock::new(Timestamp::now())), true);
        let e = r.reconcile().await.unwrap_err();
        assert!(matches!(e, ControllerError::SecretMissing { .. }), "{e:?}");
        let m = e.to_string();
        assert!(
            m.starts_with(
                "failed to update the TLS Secret crossplane-system/mrguard-tls: it does not exist"
            ),
            "{m}"
        );
        assert!(m.contains("helm upgrade"), "{m}");
        assert!(api.writes().is_empty(), "{:?}", api.writes().len());
    }

    #[tokio::test]
    async fn reconcile_walks_a_ca_rotation_and_waits_for_webhooks_and_replicas() {
        let s = rotation_settings();
        let first = create(&s);
        let current = Arc::new(std::sync::Mutex::new(secret_json(&first)));
        // The webhook configurations carry whatever bundle `published` holds.
        let published = Arc::new(std::sync::Mutex::new(first.bundle.concat()));
        let (cur, publ) = (current.clone(), published.clone());
        let (client, api) = mock::client(move |r| {
            let path = r.path.as_str();
            if path.ends_with("/secrets/mrguard-tls") && r.method == "GET" {
                return Reply::Json(200, cur.lock().unwrap().clone());
            }
            if path.ends_with("/secrets/mrguard-tls") && r.method == "PUT" {
                let mut body = r.body.clone();
                body["metadata"]["resourceVersion"] = json!("8");
                *cur.lock().unwrap() = body.clone();
                return Reply::Json(200, body);
            }
            if path.contains("webhookconfigurations/mrguard") {
                let kind = if path.contains("mutating") {
                    "Mutating"
                } else {
                    "Validating"
                };
                let bundle = base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    publ.lock().unwrap().as_bytes(),
                );
                return Reply::Json(
                    200,
                    json!({
                        "apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": format!("{kind}WebhookConfiguration"),
                        "metadata": {"name": "mrguard", "resourceVersion": "3"},
                        "webhooks": [{"name": "x.mrguard.io", "clientConfig": {"caBundle": bundle},
                                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
                    }),
                );
            }
            Reply::Json(500, status(500, "InternalError", "unexpected"))
        });
        let clock = Arc::new(ManualClock::new(day(201)));
        let r = reconciler(client.clone(), clock.clone(), false);

        // Phase 1.
        r.reconcile().await.unwrap();
        let c1 = secret_contents(&current.lock().unwrap());
        assert_eq!(c1.bundle.len(), 2);
        assert_eq!(c1.leaf.as_ref().unwrap(), &first.leaf);

        // Settle time not over: nothing written.
        let before = api.writes().len();
        r.reconcile().await.unwrap();
        assert_eq!(api.writes().len(), before);

        // Settled, but the webhooks still carry only the old CA.
        clock.advance(Duration::from_secs(20));
        r.reconcile().await.unwrap();
        assert_eq!(api.writes().len(), before);

        // The webhooks carry both CAs: the leaf switches to the new CA.
        *published.lock().unwrap() = c1.bundle.iter().map(|c| c.pem.as_str()).collect();
        r.reconcile().await.unwrap();
        let c2 = secret_contents(&current.lock().unwrap());
        assert_eq!(c2.bundle.len(), 2);
        assert_ne!(c2.leaf.as_ref().unwrap(), &first.leaf);

        // The probe says some replica still serves the old certificate.
        let before = api.writes().len();
        r.reconcile().await.unwrap();
        assert_eq!(api.writes().len(), before);
        assert_eq!(secret_contents(&current.lock().unwrap()).bundle.len(), 2);

        // Every replica serves the new one: the old CA leaves.
        let r = reconciler(client, clock, true);
        r.reconcile().await.unwrap();
        let c3 = secret_contents(&current.lock().unwrap());
        assert_eq!(c3.bundle.len(), 1);
        assert_eq!(c3.bundle[0].pem, c2.bundle[0].pem);
        assert!(c3.rotation_started.is_none());
    }

    #[tokio::test]
    async fn a_conflicting_write_is_an_error_to_retry_not_a_crash() {
        let (client, _api) = mock::client(|r| match r.method.as_str() {
            "GET" => Reply::Json(200, chart_secret()),
            _ => Reply::Json(
                409,
                status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version",
                ),
            ),
        });
        let r = reconciler(client, Arc::new(ManualClock::new(Timestamp::now())), true);
        let e = r.reconcile().await.unwrap_err();
        assert_eq!(e.status_code(), Some(409));
        assert!(
            e.to_string()
                .starts_with("failed to update secrets mrguard-tls"),
            "{e}"
        );
    }
}
