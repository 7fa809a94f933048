//! ONE etcd and kube-apiserver per test-binary run, on loopback, started by
//! the first test that asks and shared by all of them. The processes run
//! under [`Guarded`] so they stop when the binary exits, whichever way.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::process::Guarded;
use super::{fixtures_dir, wait_for, WAIT};

/// The admin's static token (group system:masters). Loopback only.
const ADMIN_TOKEN: &str = "mrguard-e2e-admin";

/// A running API server: the one shared by every test of a binary
/// ([`Cluster::shared`]), or a benchmark's own ([`Cluster::start`]).
pub struct Cluster {
    pub server: String,
    /// PEM of the CA that signed the API server's serving certificate.
    pub ca_pem: String,
    pub dir: PathBuf,
    /// The version kube-apiserver reports (`/version`).
    pub version: crate::version::KubeVersion,
    admin_kubeconfig: PathBuf,
    /// kube-apiserver's command line, to restart it the same way.
    apiserver_bin: PathBuf,
    apiserver_args: Vec<String>,
    // Never dropped when shared: the guards stop both when the binary exits.
    etcd: Guarded,
    apiserver: Mutex<Guarded>,
}

/// How [`Cluster::start`] starts the API server.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// An audit policy (YAML): the API server then writes one JSON line per
    /// audited request to [`Cluster::audit_log`].
    pub audit_policy: Option<String>,
    /// More kube-apiserver flags, after the harness's own.
    pub extra_args: Vec<String>,
    /// Install the fixture CRDs (tests/fixtures/crds) and the loose MR CRD.
    pub fixture_crds: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            audit_policy: None,
            extra_args: Vec::new(),
            fixture_crds: true,
        }
    }
}

/// A loopback port that is free now, for a server a test starts.
///
/// It is taken below the kernel's ephemeral range: a port the kernel hands
/// out (`bind(:0)`) is also what it gives the next outgoing connection, and
/// with an API server, etcd and mrguard replicas connecting at once one of
/// them took a port between this call and the server's bind ("Address
/// already in use"; seen in CI's scale test). Ports already handed out in
/// this process are not handed out again.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: Mutex<std::collections::BTreeSet<u16>> =
        Mutex::new(std::collections::BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.saturating_sub(1));
    if high > low + 1_000 {
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..1_000 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(given.len());
            let port = low + (h.finish() % u64::from(high - low)) as u16;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The flag that spares etcd fsync where this etcd has one (3.5 and
/// later), and where the run's scratch folder goes: the temporary folder,
/// or /dev/shm for an etcd without the flag (Debian's 3.4), where fsync
/// costs nothing. A test run commits thousands of writes; each fsync on
/// disk costs milliseconds. Asked once: every cluster of a run uses the
/// same etcd.
fn etcd_storage(etcd: &Path) -> &'static (Option<String>, PathBuf) {
    static STORAGE: std::sync::OnceLock<(Option<String>, PathBuf)> = std::sync::OnceLock::new();
    STORAGE.get_or_init(|| etcd_storage_of(etcd))
}

fn etcd_storage_of(etcd: &Path) -> (Option<String>, PathBuf) {
    let help = std::process::Command::new(etcd)
        .arg("--help")
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default();
    let shm = Path::new("/dev/shm");
    if help.contains("--unsafe-no-fsync") {
        (Some("--unsafe-no-fsync".into()), std::env::temp_dir())
    } else if shm.is_dir() {
        (None, shm.to_path_buf())
    } else {
        (None, std::env::temp_dir())
    }
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> String {
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.display().to_string()
}

/// A kubeconfig for `server` with a bearer token.
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\n\
         contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {user}\n\
         current-context: e2e\n"
    )
}

static CLUSTER: OnceCell<Result<Cluster, String>> = OnceCell::const_new();

impl Cluster {
    /// The shared API server, started on first use. Err when the binaries
    /// are missing or it did not come up.
    pub async fn shared() -> Result<&'static Cluster, String> {
        CLUSTER
            .get_or_init(|| async { Cluster::start(&ClusterOptions::default()).await })
            .await
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Starts etcd and kube-apiserver with `options`, waits until the API
    /// server is ready. Both stop when the Cluster is dropped or the
    /// process exits.
    pub async fn start(options: &ClusterOptions) -> Result<Cluster, String> {
        let assets = crate::assets::assets()?;
        let assets = assets.as_path();
        let version = crate::version::of_assets()?;
        let floor = crate::version::OLDEST_SUPPORTED;
        if !version.at_least(floor) {
            return Err(format!(
                "kube-apiserver {version} is older than {}.{}, the oldest Kubernetes mrguard supports \
                 (charts/mrguard/Chart.yaml); build one with scripts/envtest.sh",
                floor.0, floor.1
            ));
        }
        let etcd_bin = assets.join("etcd");
        let (no_fsync, scratch) = etcd_storage(&etcd_bin).clone();
        let dir = tempfile::Builder::new()
            .prefix("mrguard-e2e-")
            .tempdir_in(scratch)
            .map_err(|e| e.to_string())?
            // The etcd guard removes it once etcd is gone.
            .keep();
        let d = dir.as_path();

        let (etcd_port, peer_port) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd_args = vec![
            format!("--data-dir={}", d.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            // No metrics or other listeners off loopback.
            format!("--listen-metrics-urls=http://127.0.0.1:{}", free_port()),
        ];
        etcd_args.extend(no_fsync);
        let etcd = Guarded::spawn(
            "etcd",
            &etcd_bin,
            &etcd_args,
            &[],
            &d.join("etcd.log"),
            Some(d),
        )?;

        // The API server's own CA and serving certificate; a service-account
        // signing key so TokenRequest can mint tokens for mrguard.
        let ca = crate::certs::Ca::generate("mrguard e2e API server CA")?;
        let serving = ca.issue(&["127.0.0.1", "localhost"])?;
        let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let port = free_port();
        let server = format!("https://127.0.0.1:{port}");
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", d.join("apiserver-certs").display()),
            format!("--tls-cert-file={}", write(&d.join("apiserver.crt"), &serving.cert)),
            format!("--tls-private-key-file={}", write(&d.join("apiserver.key"), &serving.key)),
            format!("--client-ca-file={}", write(&d.join("ca.crt"), &ca.cert)),
            format!(
                "--token-auth-file={}",
                write(
                    &d.join("tokens.csv"),
                    format!("{ADMIN_TOKEN},admin,admin,\"system:masters\"\n")
                )
            ),
            format!("--service-account-key-file={}", write(&d.join("sa.pub"), sa.public_key_pem())),
            format!(
                "--service-account-signing-key-file={}",
                write(&d.join("sa.key"), sa.serialize_pem())
            ),
            format!("--service-account-issuer={server}"),
            "--api-audiences=https://kubernetes.default.svc".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--authorization-mode=RBAC".into(),
            // The webhooks are what the suite is about; the rest are the
            // defaults of every version. ServiceAccount admission would wait for the
            // token controller, which does not run here (no pods either).
            "--enable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook"
                .into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--allow-privileged=false".into(),
            "--profiling=false".into(),
        ];
        // Gates only where this version needs and knows them.
        args.extend(version.flags());
        if let Some(policy) = &options.audit_policy {
            args.push(format!(
                "--audit-policy-file={}",
                write(&d.join("audit-policy.yaml"), policy)
            ));
            args.push(format!(
                "--audit-log-path={}",
                d.join("audit.log").display()
            ));
            args.push("--audit-log-format=json".into());
        }
        args.extend(options.extra_args.iter().cloned());
        let apiserver_bin = assets.join("kube-apiserver");
        let apiserver = Guarded::spawn(
            "kube-apiserver",
            &apiserver_bin,
            &args,
            &[],
            &d.join("kube-apiserver.log"),
            None,
        )?;

        let admin_kubeconfig = d.join("admin.kubeconfig");
        write(
            &admin_kubeconfig,
            kubeconfig(&server, &ca.cert, "admin", ADMIN_TOKEN),
        );
        let mut cluster = Cluster {
            server,
            ca_pem: ca.cert.clone(),
            dir: dir.clone(),
            version,
            admin_kubeconfig,
            apiserver_bin,
            apiserver_args: args,
            etcd,
            apiserver: Mutex::new(apiserver),
        };
        cluster.wait_ready().await?;
        let served = cluster.served_version().await?;
        if (served.major, served.minor) != (cluster.version.major, cluster.version.minor) {
            return Err(format!(
                "kube-apiserver --version said {} but /version says {served}",
                cluster.version
            ));
        }
        cluster.version = served;
        if options.fixture_crds {
            cluster.install_fixture_crds().await?;
        }
        Ok(cluster)
    }

    fn apiserver(&self) -> std::sync::MutexGuard<'_, Guarded> {
        self.apiserver.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_alive(&self) -> Result<(), String> {
        self.etcd.check_alive()?;
        self.apiserver().check_alive()
    }

    /// The kube-apiserver process id, for /proc.
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver().pid()
    }

    /// The API server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_default()
    }

    /// The audit log (with [`ClusterOptions::audit_policy`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// Stops kube-apiserver (SIGTERM, as a rolling upgrade of the control
    /// plane would) and starts it again with the same flags on the same
    /// port; returns once it is ready. etcd keeps running, so every object
    /// survives.
    pub async fn restart_apiserver(&self) -> Result<(), String> {
        self.apiserver().signal("TERM");
        // It drains for up to a minute (open watches hold it that long).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        while self.apiserver().alive() {
            if tokio::time::Instant::now() > deadline {
                self.apiserver().kill();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let fresh = Guarded::spawn(
            "kube-apiserver",
            &self.apiserver_bin,
            &self.apiserver_args,
            &[],
            &self.dir.join("kube-apiserver.log"),
            None,
        )?;
        // The old guard reaps what is left of the old process.
        let old = std::mem::replace(&mut *self.apiserver(), fresh);
        old.stop();
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), String> {
        // Thousands of CRDs take the API server minutes to serve again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            self.check_alive()?;
            if let Ok(client) = self.admin().await {
                let req = hyper::Request::get("/readyz").body(Vec::new()).unwrap();
                if let Ok(body) = client.request_text(req).await {
                    if body.trim() == "ok" {
                        // The default namespace appears shortly after.
                        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
                        if ns.get_opt("default").await.ok().flatten().is_some() {
                            return Ok(());
                        }
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "kube-apiserver was not ready within 300 s; last lines:\n{}",
                    self.apiserver().log_tail(40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What `/version` says.
    async fn served_version(&self) -> Result<crate::version::KubeVersion, String> {
        let client = self.admin().await?;
        let req = hyper::Request::get("/version").body(Vec::new()).unwrap();
        let body = client
            .request_text(req)
            .await
            .map_err(|e| format!("failed to read /version: {e}"))?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("failed to read /version: {e}: {body}"))?;
        crate::version::KubeVersion::parse(v["gitVersion"].as_str().unwrap_or_default())
    }

    /// A client with cluster-admin rights, bound to the calling runtime.
    pub async fn admin(&self) -> Result<kube::Client, String> {
        client_from(&self.admin_kubeconfig).await
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A token for a ServiceAccount, minted with TokenRequest as the
    /// kubelet would for a pod.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, String> {
        let api: Api<ServiceAccount> = Api::namespaced(self.admin().await?, namespace);
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec!["https://kubernetes.default.svc".into()]),
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let tr = api
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .map_err(|e| format!("failed to mint a token for {namespace}/{name}: {e}"))?;
        tr.status
            .and_then(|s| s.token)
            .ok_or_else(|| "TokenRequest returned no token".to_string())
    }

    /// A kubeconfig holding a ServiceAccount's token, written to `path`.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), String> {
        let token = self.service_account_token(namespace, name).await?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        write(path, kubeconfig(&self.server, &self.ca_pem, &user, &token));
        Ok(())
    }

    /// The fixture CRDs (tests/fixtures/crds), established. provider-nop's
    /// group is in none of the chart's default RBAC groups: with the
    /// chart's RBAC it is the forbidden kind of a default install.
    async fn install_fixture_crds(&self) -> Result<(), String> {
        let client = self.admin().await?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join("crds"))
            .map_err(|e| e.to_string())?
            .map(|e| e.map(|e| e.path()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        files.sort();
        let mut crds = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| e.to_string())?;
            let v: Value =
                serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
            let crd: CustomResourceDefinition =
                serde_json::from_value(v).map_err(|e| format!("{}: {e}", f.display()))?;
            crds.push(crd);
        }
        let loose = super::managed_crd(
            super::LOOSE_GROUP,
            super::LOOSE_VERSION,
            super::LOOSE_KIND,
            super::LOOSE_PLURAL,
            "Cluster",
        );
        crds.push(serde_json::from_value(loose).map_err(|e| e.to_string())?);
        for crd in &crds {
            create_crd(&client, crd).await?;
        }
        Ok(())
    }
}

/// Creates a CRD and waits until it is Established.
pub async fn create_crd(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), crd)
        .await
        .map_err(|e| format!("failed to create CRD {name}: {e}"))?;
    wait_for_crd_condition(client, &name, "Established", "True").await
}

/// Waits until the CRD `name` has the condition `type_` with `status`.
pub async fn wait_for_crd_condition(
    client: &kube::Client,
    name: &str,
    type_: &str,
    status: &str,
) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(&format!("CRD {name} to be {type_}={status}"), WAIT, || {
        let api = api.clone();
        async move {
            let c = api.get(name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == type_ && c.status == status)
                .then_some(())
        }
    })
    .await
}

pub async fn client_from(kubeconfig: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
