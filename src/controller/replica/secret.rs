//! The TLS Secret's keys, and the loader every replica runs: it serves the
//! Secret's certificate and publishes its CA bundle for the leader's tasks.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::Api;
use tokio::sync::watch;

use crate::kube::api::KubeError;
use crate::kube::retry::{backoff_watcher, watch_config, watcher_progress, ErrorOnce};
use crate::metrics::controller::ControllerMetrics;
use crate::pki::PemPair;
use crate::shutdown::Signal;
use crate::tls::CertStore;

pub(crate) const CA_CRT: &str = "ca.crt";
pub(crate) const CA_KEY: &str = "ca.key";
pub(crate) const TLS_CRT: &str = "tls.crt";
pub(crate) const TLS_KEY: &str = "tls.key";

/// A non-empty value of the Secret.
pub(crate) fn data<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty())
}

/// `tls.crt` and `tls.key`, when both are there.
pub(crate) fn tls_pair(secret: &Secret) -> Option<PemPair> {
    Some(PemPair {
        cert: data(secret, TLS_CRT)?.to_vec(),
        key: data(secret, TLS_KEY)?.to_vec(),
    })
}

/// The CA bundle every replica last read from the Secret.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct SecretView {
    /// The first list of the Secret finished.
    pub(crate) synced: bool,
    pub(crate) exists: bool,
    /// `ca.crt` as stored, which is what the caBundle must be.
    pub(crate) bundle: Option<Arc<Vec<u8>>>,
}

impl SecretView {
    /// Listed, and there is no Secret (or it was deleted).
    fn absent() -> Self {
        Self {
            synced: true,
            exists: false,
            bundle: None,
        }
    }
}

impl std::fmt::Debug for SecretView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretView")
            .field("synced", &self.synced)
            .field("exists", &self.exists)
            .field("bundle_bytes", &self.bundle.as_ref().map(|b| b.len()))
            .finish()
    }
}

/// Loads the serving certificate from the Secret into `store` on every
/// replica, publishes the CA bundle, and marks the server ready once a
/// certificate from the Secret is in place.
pub(crate) async fn run_loader(
    secrets: Api<Secret>,
    name: String,
    store: Arc<CertStore>,
    ready: Arc<crate::controller::replica::ReadyGate>,
    view: watch::Sender<SecretView>,
    shutdown: Signal,
    metrics: Option<Arc<ControllerMetrics>>,
) {
    let fields = format!("metadata.name={name}");
    let mut stream = backoff_watcher(watcher(secrets, watch_config().fields(&fields))).boxed();
    let mut last: Option<PemPair> = None;
    let mut seen_in_list = false;
    let mut watch_error = ErrorOnce::default();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = shutdown.wait() => return,
        };
        let Some(event) = event else { return };
        if watcher_progress(&event) {
            watch_error.ok("TLS Secret watch");
        }
        let secret = match event {
            Ok(watcher::Event::Apply(s)) | Ok(watcher::Event::InitApply(s)) => {
                seen_in_list = true;
                Some(s)
            }
            Ok(watcher::Event::Delete(_)) => None,
            Ok(watcher::Event::Init) => {
                seen_in_list = false;
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if !seen_in_list {
                    publish(&view, SecretView::absent());
                }
                continue;
            }
            Err(e) => {
                let e = KubeError::watch("secrets", name.clone(), e);
                watch_error.failed(
                    &e,
                    metrics.as_deref(),
                    "failed to watch the TLS Secret; retrying with backoff",
                );
                continue;
            }
        };
        let Some(secret) = secret else {
            tracing::warn!(secret = %name, "the TLS Secret was deleted; serving the last certificate");
            publish(&view, SecretView::absent());
            continue;
        };
        if let Some(pair) = tls_pair(&secret).filter(|p| last.as_ref() != Some(p)) {
            match pair.certified_key() {
                Ok(ck) => {
                    store.replace(ck);
                    last = Some(pair);
                    tracing::info!(secret = %name, "loaded the serving certificate from the Secret");
                    if !shutdown.is_fired() {
                        ready.cert_loaded();
                    }
                }
                Err(e) => {
                    store.record_failure();
                    tracing::warn!(error = %e, secret = %name, "the Secret's certificate pair is unusable; keeping the current one");
                }
            }
        }
        let bundle = data(&secret, CA_CRT).map(|b| Arc::new(b.to_vec()));
        publish(
            &view,
            SecretView {
                synced: true,
                exists: true,
                bundle,
            },
        );
    }
}

fn publish(tx: &watch::Sender<SecretView>, v: SecretView) {
    tx.send_if_modified(|cur| {
        if *cur == v {
            false
        } else {
            *cur = v;
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, Reply};
    use crate::pki;
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A Secret holding a fresh serving pair and its CA as `ca.crt`.
    fn secret_json() -> (Value, PemPair, String) {
        use base64::Engine;
        let b = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
        let (pair, ca) = pki::self_signed(&pki::local_names()).unwrap();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mrguard-tls", "namespace": "crossplane-system", "resourceVersion": "7"},
            "type": "kubernetes.io/tls",
            "data": {CA_CRT: b(ca.cert.as_bytes()), TLS_CRT: b(&pair.cert), TLS_KEY: b(&pair.key)},
        });
        (secret, pair, ca.cert)
    }

    struct Loader {
        store: Arc<CertStore>,
        ready: Arc<AtomicBool>,
        view: watch::Receiver<SecretView>,
        api: mock::MockApi,
        task: tokio::task::JoinHandle<()>,
        // Dropping the trigger would stop the loader.
        _trigger: crate::shutdown::Trigger,
    }

    /// Runs the loader against an API server listing `items` and watching
    /// nothing more.
    fn start_loader(items: Vec<Value>) -> Loader {
        let (client, api) = mock::client(move |r| {
            if r.query.contains("watch=true") {
                Reply::Hang
            } else {
                Reply::Json(
                    200,
                    json!({"apiVersion": "v1", "kind": "SecretList",
                    "metadata": {"resourceVersion": "10"}, "items": items.clone()}),
                )
            }
        });
        let (pair, _) = pki::self_signed(&pki::local_names()).unwrap();
        let store = CertStore::new(pair.certified_key().unwrap(), None);
        let ready = Arc::new(AtomicBool::new(false));
        let gate = crate::controller::replica::ReadyGate::new(ready.clone());
        // Only the certificate gates readiness here.
        gate.providers_synced();
        let (tx, rx) = watch::channel(SecretView::default());
        let (trigger, signal) = crate::shutdown::channel();
        let task = tokio::spawn(run_loader(
            Api::namespaced(client, "crossplane-system"),
            "mrguard-tls".into(),
            store.clone(),
            gate,
            tx,
            signal,
            None,
        ));
        Loader {
            store,
            ready,
            view: rx,
            api,
            task,
            _trigger: trigger,
        }
    }

    #[tokio::test]
    async fn every_replica_loads_the_secret_and_becomes_ready() {
        let (secret, pair, ca) = secret_json();
        let Loader {
            store,
            ready,
            view: mut rx,
            api,
            task,
            _trigger,
        } = start_loader(vec![secret]);
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| v.exists))
            .await
            .unwrap()
            .unwrap();
        assert!(ready.load(Ordering::Acquire));
        let served = store.current();
        assert_eq!(
            served.cert[0],
            pki::parse_certs(&pair.cert, "leaf").unwrap()[0]
        );
        assert_eq!(
            rx.borrow().bundle.as_deref().unwrap().as_slice(),
            ca.as_bytes()
        );
        let list = &api.requests()[0];
        assert!(
            list.query
                .contains("fieldSelector=metadata.name%3Dmrguard-tls"),
            "{}",
            list.query
        );
        task.abort();
    }

    #[tokio::test]
    async fn a_missing_secret_is_published_as_absent_and_readiness_waits() {
        let Loader {
            ready,
            view: mut rx,
            task,
            _trigger,
            ..
        } = start_loader(vec![]);
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| v.synced))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*rx.borrow(), SecretView::absent());
        assert!(!ready.load(Ordering::Acquire));
        task.abort();
    }
}
