//! The webhook's certificates, kept in one Secret: this module schedules
//! `pki::rotation`'s planner on the Lease holder, waits for the webhook
//! configurations and the replicas where a rotation step needs them, and
//! writes the Secret.

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
use kube::runtime::utils::Backoff as _;
use kube::Api;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::sync::watch;

use super::webhooks::WebhookApi;
use crate::controller::replica::secret::{
    data, tls_pair, SecretView, CA_CRT, CA_KEY, TLS_CRT, TLS_KEY,
};
use crate::kube::api::{api_err, Backoff, Clock, KubeError};
use crate::metrics::controller::ControllerMetrics;
use crate::pki::rotation::{execute, plan, CertPlan, CertSettings, NewContents, SecretContents};
use crate::pki::{self, chain_verifies, parse_bundle};
use crate::tls::CertStore;

/// When the current CA rotation began (RFC 3339); absent outside rotations.
pub(crate) const ROTATION_STARTED: &str = "mrguard.io/ca-rotation-started";
/// Wait between checks while a rotation waits for the replicas.
const ROTATION_POLL: Duration = Duration::from_secs(5);

/// What the Secret holds, parsed for the planner.
pub(crate) fn secret_contents(secret: &Secret) -> SecretContents {
    SecretContents {
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

/// Whether every replica serves a certificate that `ca` alone verifies.
pub(crate) trait ServingProbe: Send + Sync {
    fn all_serve<'a>(
        &'a self,
        ca: &'a CertificateDer<'static>,
    ) -> BoxFuture<'a, Result<bool, KubeError>>;
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
    ) -> BoxFuture<'a, Result<bool, KubeError>> {
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
    let Ok(builder) = rustls::ClientConfig::builder_with_provider(pki::provider())
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
    pub(crate) async fn reconcile(&self) -> Result<Duration, KubeError> {
        let now = self.clock.now();
        let existing = self
            .secrets
            .get_opt(&self.name)
            .await
            .map_err(api_err("get", "secrets", &self.name))?;
        // The chart creates the Secret; without `create` on Secrets the
        // controller can only fill and rotate an existing one.
        let Some(existing) = existing else {
            return Err(KubeError::SecretMissing {
                namespace: self.secrets.namespace().unwrap_or_default().to_string(),
                name: self.name.clone(),
            });
        };
        let contents = Some(secret_contents(&existing));
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

    async fn write(&self, mut secret: Secret, new: &NewContents) -> Result<(), KubeError> {
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
        mut secret: watch::Receiver<SecretView>,
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
                Err(e @ KubeError::SecretMissing { .. }) => {
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
    use crate::kube::mock::{self, status, ManualClock, Reply};
    use serde_json::{json, Value};

    fn settings() -> CertSettings {
        CertSettings {
            names: pki::serving_names(false, Some(("mrguard", "crossplane-system")), &[]),
            ca_lifetime: Duration::from_secs(300 * 86400),
            cert_lifetime: Duration::from_secs(90 * 86400),
            renew_fraction: 1.0 / 3.0,
            settle: Duration::from_secs(15),
        }
    }

    fn day(n: i64) -> Timestamp {
        Timestamp::now() + jiff::SignedDuration::from_hours(24 * n)
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

    fn contents_of(v: &Value) -> SecretContents {
        secret_contents(&serde_json::from_value(v.clone()).unwrap())
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

    struct FixedProbe(bool);
    impl ServingProbe for FixedProbe {
        fn all_serve<'a>(
            &'a self,
            _ca: &'a CertificateDer<'static>,
        ) -> BoxFuture<'a, Result<bool, KubeError>> {
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
                crate::controller::leader::webhooks::WebhookNames {
                    mutating: "mrguard".into(),
                    validating: "mrguard".into(),
                },
            ),
            probe: Arc::new(FixedProbe(probe)),
        }
    }

    fn decode_secret(body: &Value) -> SecretContents {
        contents_of(body)
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
        let chain = pki::parse_certs(&c.leaf.unwrap().cert, "leaf").unwrap();
        assert!(chain_verifies(
            &chain,
            &c.bundle[0].der,
            &settings().names,
            Timestamp::now()
        ));
    }

    /// No `create` on Secrets (the chart grants none): a missing Secret is reported,
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
        assert!(matches!(e, KubeError::SecretMissing { .. }), "{e:?}");
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
        let c1 = contents_of(&current.lock().unwrap());
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
        let c2 = contents_of(&current.lock().unwrap());
        assert_eq!(c2.bundle.len(), 2);
        assert_ne!(c2.leaf.as_ref().unwrap(), &first.leaf);

        // The probe says some replica still serves the old certificate.
        let before = api.writes().len();
        r.reconcile().await.unwrap();
        assert_eq!(api.writes().len(), before);
        assert_eq!(contents_of(&current.lock().unwrap()).bundle.len(), 2);

        // Every replica serves the new one: the old CA leaves.
        let r = reconciler(client, clock, true);
        r.reconcile().await.unwrap();
        let c3 = contents_of(&current.lock().unwrap());
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
