//! A real Crossplane beside mrguard: provider-kubernetes and Crossplane
//! core run as processes against the test API server, which is both the
//! control plane and the provider's "cloud": every external resource is an
//! object (a ConfigMap, say) on the same server, whose life a test watches.
//!
//! The programs and their CRDs come from the folder `MRGUARD_CROSSPLANE`
//! names (`scripts/crossplane.sh` builds it from the Go modules pinned in
//! `tools/`; `scripts/test.sh` and `scripts/e2e.sh` set it):
//! `provider-kubernetes`, `crossplane`, `crds/provider/*.yaml` and
//! `crds/core/*.yaml`, the CRDs of the same module versions.
//!
//! How they run, as a Crossplane install runs them:
//! - each under a ServiceAccount of its own in `crossplane-system`
//!   ([`PROVIDER_USER`], [`CORE_USER`]) bound to `cluster-admin` (what
//!   Crossplane's RBAC manager grants a provider for its own kinds is
//!   narrower; the tests need no narrower grant), so the API server and
//!   mrguard see their writes under their own names;
//! - the provider reaches its "cloud" with the admin's kubeconfig, from a
//!   Secret that a `ProviderConfig` and a `ClusterProviderConfig` named
//!   `default` (the name mrguard defaults) point at (`source: Secret`);
//! - every port on loopback and free (the programs default to 9443, 8080
//!   and 8081, which mrguard's replicas use): the provider's webhook,
//!   metrics and health probe; core's with `--enable-webhooks=false`, as
//!   it needs no webhook here, and the client TLS pair it always loads;
//! - the provider polls every hour (`--poll 1h`), so that a reconcile a
//!   test sees has a cause the test gave it;
//! - the cluster-scoped Object CRD's `conversion` block names a webhook
//!   Service that does not exist here: it is applied with `strategy: None`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use crate::cluster::{create_crd, free_port, Cluster};
use crate::process::Guarded;
use crate::{api, wait_for, WAIT};

/// Where the built programs and their CRDs are.
pub const CROSSPLANE_ENV: &str = "MRGUARD_CROSSPLANE";
/// The namespace both run in.
pub const NAMESPACE: &str = "crossplane-system";
/// The provider's user, as the API server and mrguard see it.
pub const PROVIDER_USER: &str = "system:serviceaccount:crossplane-system:provider-kubernetes";
/// Crossplane core's user.
pub const CORE_USER: &str = "system:serviceaccount:crossplane-system:crossplane";
/// The ProviderConfig and ClusterProviderConfig every Object may name.
pub const PROVIDER_CONFIG: &str = "default";

/// How the provider's Object kinds reach the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKinds {
    /// As CRDs, installed at start.
    Crds,
    /// As ManagedResourceDefinitions in state `Inactive`, which Crossplane
    /// core turns into CRDs once a ManagedResourceActivationPolicy
    /// activates them; the provider waits for the CRDs (safe start).
    InactiveMrds,
}

/// What [`Crossplane::start`] runs.
#[derive(Debug, Clone)]
pub struct CrossplaneOptions {
    pub objects: ObjectKinds,
    /// Run Crossplane core (the MRD and MRAP controllers among others).
    pub core: bool,
}

impl Default for CrossplaneOptions {
    fn default() -> Self {
        Self {
            objects: ObjectKinds::Crds,
            core: false,
        }
    }
}

/// The folder [`CROSSPLANE_ENV`] names, checked.
pub fn assets() -> Result<PathBuf, String> {
    let dir = std::env::var_os(CROSSPLANE_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("{CROSSPLANE_ENV} is not set"))?;
    for f in [
        "provider-kubernetes",
        "crossplane",
        "crds/provider",
        "crds/core",
    ] {
        if !dir.join(f).exists() {
            return Err(format!("{CROSSPLANE_ENV}={} has no {f}", dir.display()));
        }
    }
    Ok(dir)
}

/// One program's command line, to start it again the same way.
struct Program {
    name: &'static str,
    bin: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Its health probe port on loopback.
    health: u16,
    process: Mutex<Option<Guarded>>,
}

impl Program {
    fn log_path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.log", self.name))
    }

    fn start(&self, dir: &Path) -> Result<(), String> {
        let p = Guarded::spawn(
            self.name,
            &self.bin,
            &self.args,
            &self.env,
            &self.log_path(dir),
            None,
        )?;
        let old = self.lock().replace(p);
        if let Some(old) = old {
            old.stop();
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Guarded>> {
        self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until its health probe answers `/readyz` with 200.
    async fn ready(&self, dir: &Path) -> Result<(), String> {
        let url = format!("http://127.0.0.1:{}/readyz", self.health);
        let what = format!("{} to be ready ({url})", self.name);
        wait_for(&what, WAIT, || async {
            if let Some(p) = self.lock().as_ref() {
                if !p.alive() {
                    return Some(Err(format!(
                        "{} exited; its log:\n{}",
                        self.name,
                        p.log_tail(30)
                    )));
                }
            }
            http_ok(&url).await.then_some(Ok(()))
        })
        .await
        .map_err(|e| format!("{e}; its log:\n{}", tail(&self.log_path(dir), 30)))?
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether a plain HTTP/1.0 GET of `url` (`http://host:port/path`)
/// answers 200: enough for a health probe, without an HTTP client.
async fn http_ok(url: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = tokio::net::TcpStream::connect(authority).await else {
        return false;
    };
    let req = format!("GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut head))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    head[..n].starts_with(b"HTTP/1.1 200") || head[..n].starts_with(b"HTTP/1.0 200")
}

/// A real Crossplane on one API server.
pub struct Crossplane {
    pub cluster: &'static Cluster,
    /// Logs, certificates and kubeconfigs.
    pub dir: PathBuf,
    provider: Program,
    core: Option<Program>,
}

static SHARED: OnceCell<Result<Crossplane, String>> = OnceCell::const_new();

impl Crossplane {
    /// The provider on the shared API server ([`Cluster::shared`]), with
    /// the Object kinds as CRDs and without core, started on first use.
    pub async fn shared() -> Result<&'static Crossplane, String> {
        SHARED
            .get_or_init(|| async {
                let cluster = Cluster::shared().await?;
                Crossplane::start(cluster, &CrossplaneOptions::default()).await
            })
            .await
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Installs the CRDs, the identities and the provider configs on
    /// `cluster`, and starts the provider (and core, with
    /// [`CrossplaneOptions::core`]); returns once each is ready.
    pub async fn start(
        cluster: &'static Cluster,
        options: &CrossplaneOptions,
    ) -> Result<Crossplane, String> {
        let assets = assets()?;
        let client = cluster.admin().await?;
        let dir = tempfile::Builder::new()
            .prefix("mrguard-e2e-crossplane-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();

        for f in yaml_files(&assets.join("crds/core"))? {
            create(&client, read_crd(&f)?).await?;
        }
        for f in yaml_files(&assets.join("crds/provider"))? {
            let mut crd = read_crd(&f)?;
            // A webhook Service that does not exist here.
            crd["spec"]["conversion"] = json!({"strategy": "None"});
            let is_object = crd["spec"]["names"]["kind"] == "Object";
            if is_object && options.objects == ObjectKinds::InactiveMrds {
                create_mrd(&client, &crd).await?;
            } else {
                create(&client, crd).await?;
            }
        }

        identities(cluster, &client, &dir).await?;
        let ca = crate::certs::Ca::generate("mrguard e2e Crossplane CA")?;
        let pair = ca.issue(&["127.0.0.1", "localhost"])?;
        let write = |sub: &str, files: &[(&str, &str)]| -> Result<PathBuf, String> {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
            for (name, text) in files {
                std::fs::write(d.join(name), text).map_err(|e| e.to_string())?;
            }
            Ok(d)
        };
        let server_tls = write(
            "provider-tls",
            &[("tls.crt", &pair.cert), ("tls.key", &pair.key)],
        )?;
        let client_tls = write(
            "core-tls",
            &[
                ("ca.crt", &ca.cert),
                ("tls.crt", &pair.cert),
                ("tls.key", &pair.key),
            ],
        )?;

        let kubeconfig = |who: &str| dir.join(format!("{who}.kubeconfig")).display().to_string();
        let health = free_port();
        let provider = Program {
            name: "provider-kubernetes",
            bin: assets.join("provider-kubernetes"),
            args: vec![
                format!("--webhook-port={}", free_port()),
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
                format!("--health-probe-bind-addr=127.0.0.1:{health}"),
                "--poll=1h".into(),
                "--sync=1h".into(),
                "--debug".into(),
            ],
            env: vec![
                ("KUBECONFIG".into(), kubeconfig("provider-kubernetes")),
                (
                    "TLS_SERVER_CERTS_DIR".into(),
                    server_tls.display().to_string(),
                ),
            ],
            health,
            process: Mutex::new(None),
        };
        let core = options.core.then(|| {
            let health = free_port();
            Program {
                name: "crossplane",
                bin: assets.join("crossplane"),
                args: vec![
                    "core".into(),
                    "start".into(),
                    "--enable-webhooks=false".into(),
                    format!("--webhook-port={}", free_port()),
                    format!("--metrics-port={}", free_port()),
                    format!("--health-probe-port={health}"),
                ],
                env: vec![
                    ("KUBECONFIG".into(), kubeconfig("crossplane")),
                    (
                        "TLS_CLIENT_CERTS_DIR".into(),
                        client_tls.display().to_string(),
                    ),
                    ("POD_NAMESPACE".into(), NAMESPACE.into()),
                    ("POD_SERVICE_ACCOUNT".into(), "crossplane".into()),
                ],
                health,
                process: Mutex::new(None),
            }
        });
        let xp = Crossplane {
            cluster,
            dir,
            provider,
            core,
        };
        if let Some(core) = &xp.core {
            core.start(&xp.dir)?;
            core.ready(&xp.dir).await?;
        }
        xp.start_provider().await?;
        Ok(xp)
    }

    /// Starts the provider (again), and waits until it is ready.
    pub async fn start_provider(&self) -> Result<(), String> {
        self.provider.start(&self.dir)?;
        self.provider.ready(&self.dir).await
    }

    /// Kills the provider at once (SIGKILL), as a node failure would.
    pub fn kill_provider(&self) {
        if let Some(p) = self.provider.lock().take() {
            p.kill();
            p.stop();
        }
    }

    /// Kills Crossplane core at once (SIGKILL).
    pub fn kill_core(&self) {
        if let Some(core) = &self.core {
            if let Some(p) = core.lock().take() {
                p.kill();
                p.stop();
            }
        }
    }

    /// Starts Crossplane core again, and waits until it is ready.
    pub async fn start_core(&self) -> Result<(), String> {
        let core = self.core.as_ref().ok_or("this Crossplane runs no core")?;
        core.start(&self.dir)?;
        core.ready(&self.dir).await
    }

    /// The provider's log.
    pub fn provider_log(&self) -> String {
        std::fs::read_to_string(self.provider.log_path(&self.dir)).unwrap_or_default()
    }

    /// `e` with the last lines of the provider's (and core's) log, for a
    /// failing test.
    pub fn with_logs(&self, e: impl std::fmt::Display) -> String {
        let mut s = format!(
            "{e}\n--- provider-kubernetes ({}):\n{}",
            self.provider.log_path(&self.dir).display(),
            tail(&self.provider.log_path(&self.dir), 40)
        );
        if let Some(core) = &self.core {
            s.push_str(&format!(
                "\n--- crossplane ({}):\n{}",
                core.log_path(&self.dir).display(),
                tail(&core.log_path(&self.dir), 20)
            ));
        }
        s
    }
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("failed to read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

fn read_crd(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("failed to read {}: {e}", path.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| format!("failed to parse {}: {e}", path.display()))
}

/// Creates a CRD and waits until it is established; one that exists (two
/// Crossplanes on one server share them) is kept.
async fn create(client: &kube::Client, crd: Value) -> Result<(), String> {
    let crd: CustomResourceDefinition =
        serde_json::from_value(crd).map_err(|e| format!("not a CRD: {e}"))?;
    match create_crd(client, &crd).await {
        Err(e) if !e.contains("already exists") && !e.contains("AlreadyExists") => Err(e),
        _ => Ok(()),
    }
}

/// The MRD of an Object CRD, `Inactive`: the CRD's spec, as Crossplane's
/// package manager writes an MRD from a provider's CRD.
async fn create_mrd(client: &kube::Client, crd: &Value) -> Result<(), String> {
    let mut spec = crd["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        s.remove("conversion");
        s.insert("state".into(), json!("Inactive"));
    }
    let mrd = json!({
        "apiVersion": "apiextensions.crossplane.io/v1alpha1",
        "kind": "ManagedResourceDefinition",
        "metadata": {"name": crd["metadata"]["name"]},
        "spec": spec,
    });
    let r = api::create(
        client,
        "/apis/apiextensions.crossplane.io/v1alpha1/managedresourcedefinitions",
        &mrd,
        false,
    )
    .await?;
    if r.status >= 300 && r.status != 409 {
        return Err(format!(
            "failed to create the MRD {}: {}",
            mrd["metadata"]["name"], r.body
        ));
    }
    Ok(())
}

/// The namespace, the two ServiceAccounts bound to cluster-admin with a
/// kubeconfig each in `dir`, the "cloud" credentials and the provider
/// configs.
async fn identities(cluster: &Cluster, client: &kube::Client, dir: &Path) -> Result<(), String> {
    let ok = |what: &str, r: api::Response| {
        if r.status < 300 || r.status == 409 {
            Ok(())
        } else {
            Err(format!("failed to create {what}: {}", r.body))
        }
    };
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    ok(
        "the namespace",
        api::create(client, "/api/v1/namespaces", &ns, false).await?,
    )?;
    for sa in ["provider-kubernetes", "crossplane"] {
        let obj = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": sa, "namespace": NAMESPACE}});
        let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
        ok(sa, api::create(client, &path, &obj, false).await?)?;
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("e2e-{sa}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
        });
        let path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
        ok(
            "a binding",
            api::create(client, path, &binding, false).await?,
        )?;
        cluster
            .service_account_kubeconfig(NAMESPACE, sa, &dir.join(format!("{sa}.kubeconfig")))
            .await?;
    }
    let admin = std::fs::read_to_string(cluster.admin_kubeconfig()).map_err(|e| e.to_string())?;
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cloud-kubeconfig", "namespace": NAMESPACE},
        "stringData": {"kubeconfig": admin}});
    let path = format!("/api/v1/namespaces/{NAMESPACE}/secrets");
    ok(
        "the credentials",
        api::create(client, &path, &secret, false).await?,
    )?;
    let credentials = json!({"source": "Secret",
        "secretRef": {"namespace": NAMESPACE, "name": "cloud-kubeconfig", "key": "kubeconfig"}});
    for (path, kind) in [
        (
            "/apis/kubernetes.crossplane.io/v1alpha1/providerconfigs",
            "ProviderConfig",
        ),
        (
            "/apis/kubernetes.m.crossplane.io/v1alpha1/clusterproviderconfigs",
            "ClusterProviderConfig",
        ),
    ] {
        let api_version = path
            .trim_start_matches("/apis/")
            .rsplit_once('/')
            .unwrap_or_default()
            .0;
        let pc = json!({"apiVersion": api_version, "kind": kind,
                        "metadata": {"name": PROVIDER_CONFIG},
                        "spec": {"credentials": credentials}});
        ok(kind, api::create(client, path, &pc, false).await?)?;
    }
    Ok(())
}

/// A deadline for what the provider does: bounded, never a fixed sleep.
pub const RECONCILE: Duration = Duration::from_secs(60);
