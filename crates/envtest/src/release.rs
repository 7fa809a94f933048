//! One mrguard "release" per test: the chart rendered with helm, its
//! ServiceAccount, (Cluster)Roles, bindings and webhook configurations
//! applied to the shared API server, and the real `mrguard` binary run with
//! the Deployment's arguments and environment as the kubelet would, under
//! the ServiceAccount's own token. A permission the chart lacks fails the
//! test, not a cluster.
//!
//! How the API server reaches the webhooks on loopback: there is no
//! kube-proxy, and Endpoints may not point at 127.0.0.0/8, so a
//! `clientConfig.service` cannot be reached. The test rewrites each
//! webhook's `clientConfig.service` into `clientConfig.url`
//! (`https://127.0.0.1:<port>/<path>`), the chart's `extraArgs` add
//! `--cert-extra-names=127.0.0.1` (a flag made for webhooks reached by URL)
//! so the serving certificate is valid for that address, and a small TCP
//! forwarder on that port stands in for the Service in front of the
//! replicas. The controller only owns `caBundle` and `rules`, so nothing it
//! manages in production differs, and no controller setting exists only for
//! tests.
//!
//! Isolation: every test's webhooks have an `objectSelector` on the label
//! [`Release::label`], so only the test's own objects reach its mrguard.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{json, Value};

use super::chart::Rendered;
use super::cluster::{free_port, Cluster};
use super::metrics::Metrics;
use super::process::Guarded;
use super::{wait_for, WAIT};

/// The label every object of a test carries, matched by its webhooks'
/// objectSelector.
pub const TEST_LABEL: &str = "e2e.mrguard.io/release";

/// What a test needs from its release.
#[derive(Debug, Clone)]
pub struct Options {
    /// mrguard processes to run (the chart's replicaCount is set to match).
    pub replicas: usize,
    /// The mrguard configuration (the chart's `config` value, YAML); the
    /// chart's default (the built-in configuration) when None.
    pub config: Option<String>,
    /// `controller.auditInterval`.
    pub audit_interval: String,
    /// `logLevel` (MRGUARD_LOG).
    pub log_level: String,
    /// More `extraArgs` after the harness's own.
    pub extra_args: Vec<String>,
    /// More chart values, merged over the harness's (YAML mapping).
    pub values: Option<String>,
    /// Wait until admission works before returning.
    pub wait_ready: bool,
    /// The `mrguard` binary to run: `env!("CARGO_BIN_EXE_mrguard")` of the
    /// test or bench that installs the release.
    pub binary: Option<PathBuf>,
    /// More environment variables for every mrguard process.
    pub env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            replicas: 1,
            config: None,
            audit_interval: "2s".into(),
            log_level: "info".into(),
            extra_args: Vec::new(),
            values: None,
            wait_ready: true,
            binary: None,
            env: Vec::new(),
        }
    }
}

/// One running mrguard process.
pub struct Replica {
    pub pod: String,
    pub port: u16,
    pub metrics_port: u16,
    pub process: Guarded,
    /// Killed on purpose by the test: not a failure.
    pub killed: bool,
}

impl Replica {
    pub async fn metrics(&self) -> Result<Metrics, String> {
        Metrics::scrape(self.metrics_port).await
    }

    /// The replica's log (JSON lines, the chart's `logFormat`).
    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// A test's mrguard release on the shared API server.
pub struct Release {
    pub cluster: &'static Cluster,
    /// The release name; also the value of [`TEST_LABEL`].
    pub name: String,
    /// The release namespace: ServiceAccount, Secret, Lease.
    pub namespace: String,
    /// A namespace for the test's namespaced MRs (the webhooks exclude
    /// the release namespace).
    pub workload_ns: String,
    /// The chart's base name of every object.
    pub fullname: String,
    pub rendered: Rendered,
    pub client: kube::Client,
    pub options: Options,
    pub replicas: Vec<Replica>,
    /// The port of the stand-in Service.
    pub service_port: u16,
    backends: Arc<Mutex<Vec<u16>>>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    config_dir: PathBuf,
    pods: AtomicUsize,
}

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

impl Release {
    /// Installs the chart for test `name` (a DNS label, unique per test)
    /// and starts mrguard.
    pub async fn install(
        cluster: &'static Cluster,
        name: &str,
        options: Options,
    ) -> Result<Self, String> {
        let client = cluster.admin().await?;
        let namespace = format!("{name}-system");
        let workload_ns = name.to_string();
        let ns_api: Api<Namespace> = Api::all(client.clone());
        for ns in [&namespace, &workload_ns] {
            // The API server labels it kubernetes.io/metadata.name, which the
            // chart's namespaceSelector excludes namespaces by.
            let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            ns_api
                .create(&PostParams::default(), &obj)
                .await
                .map_err(|e| format!("failed to create namespace {ns}: {e}"))?;
        }

        let mut dir = tempfile::Builder::new()
            .prefix(&format!("mrguard-e2e-{name}-"))
            .tempdir()
            .map_err(|e| e.to_string())?;
        // MRGUARD_E2E_KEEP=1 keeps the replicas' logs for a look afterwards.
        if std::env::var("MRGUARD_E2E_KEEP").is_ok_and(|v| v == "1") {
            dir.disable_cleanup(true);
        }
        let service_port = free_port();
        let rendered = Rendered::render_for(
            name,
            &namespace,
            &Self::values(name, &options, &[])?,
            Some(&cluster.version),
        )?;
        let fullname = rendered.one("ServiceAccount")?["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();

        let mut release = Release {
            cluster,
            name: name.to_string(),
            namespace,
            workload_ns,
            fullname,
            rendered,
            client,
            replicas: Vec::new(),
            service_port,
            backends: Arc::new(Mutex::new(Vec::new())),
            kubeconfig: dir.path().join("kubeconfig"),
            config_dir: dir.path().join("config"),
            dir,
            pods: AtomicUsize::new(0),
            options,
        };
        release.apply_chart_objects().await?;
        std::fs::create_dir_all(&release.config_dir).map_err(|e| e.to_string())?;
        std::fs::write(release.config_file(), release.rendered.config_yaml()?)
            .map_err(|e| e.to_string())?;
        // The pod's token, as the kubelet mounts it.
        cluster
            .service_account_kubeconfig(&release.namespace, &release.fullname, &release.kubeconfig)
            .await?;
        release.start_service();
        for _ in 0..release.options.replicas {
            release.start_replica().await?;
        }
        if release.options.wait_ready {
            release.wait_admission().await?;
        }
        Ok(release)
    }

    /// The chart values of this test; `extra_args` are per replica.
    fn values(name: &str, o: &Options, extra_args: &[String]) -> Result<String, String> {
        let mut args: Vec<String> = extra_args.to_vec();
        args.push("--cert-extra-names=127.0.0.1".into());
        args.extend(o.extra_args.iter().cloned());
        let mut v = json!({
            "replicaCount": o.replicas,
            "controller": {"auditInterval": o.audit_interval},
            "logLevel": o.log_level,
            "logFormat": "json",
            "extraArgs": args,
            "webhooks": {"objectSelector": {"matchLabels": {TEST_LABEL: name}}},
            // The suite's tests share one API server; each judges its own
            // objects through the webhooks (objectSelector). The in-process
            // mode (the chart's default) is switched on by the tests of it
            // (tests/e2e/in_process.rs), through `values`.
            "admission": {"inProcess": "off"},
        });
        if let Some(c) = &o.config {
            let config: Value = serde_saphyr::from_str(c).map_err(|e| format!("config: {e}"))?;
            // helm merges it over the chart's default (the built-in
            // configuration): maps key by key, lists replaced.
            v["config"] = config;
        }
        if let Some(extra) = &o.values {
            let extra: Value = serde_saphyr::from_str(extra).map_err(|e| format!("values: {e}"))?;
            merge(&mut v, extra);
        }
        serde_json::to_string(&v).map_err(|e| e.to_string())
    }

    /// The API resource of a chart object, at the apiVersion the chart
    /// rendered it with (which the chart chooses by the server's version,
    /// as for the PodDisruptionBudget), and whether it is namespaced.
    fn resource(obj: &Value) -> Option<(ApiResource, bool)> {
        let kind = obj["kind"].as_str()?;
        let (plural, namespaced) = match kind {
            "ServiceAccount" => ("serviceaccounts", true),
            "Service" => ("services", true),
            "ConfigMap" => ("configmaps", true),
            "Secret" => ("secrets", true),
            "NetworkPolicy" => ("networkpolicies", true),
            "Role" => ("roles", true),
            "RoleBinding" => ("rolebindings", true),
            "ClusterRole" => ("clusterroles", false),
            "ClusterRoleBinding" => ("clusterrolebindings", false),
            "MutatingWebhookConfiguration" => ("mutatingwebhookconfigurations", false),
            "ValidatingWebhookConfiguration" => ("validatingwebhookconfigurations", false),
            "PodDisruptionBudget" => ("poddisruptionbudgets", true),
            _ => return None,
        };
        let api_version = obj["apiVersion"].as_str()?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Some((
            ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: api_version.into(),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced,
        ))
    }

    /// A webhook configuration with `clientConfig.service` turned into a
    /// loopback URL to the stand-in Service.
    pub fn loopback_webhooks(&self, config: &Value) -> Value {
        let mut c = config.clone();
        for w in c["webhooks"].as_array_mut().into_iter().flatten() {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/")
                .to_string();
            let cc = w["clientConfig"].as_object_mut().expect("clientConfig");
            cc.remove("service");
            cc.insert(
                "url".into(),
                json!(format!("https://127.0.0.1:{}{path}", self.service_port)),
            );
        }
        c
    }

    /// The chart's objects that a cluster would hold: ServiceAccount,
    /// RBAC, Service, ConfigMap, the TLS Secret, PodDisruptionBudget (a
    /// NetworkPolicy when enabled) and both webhook
    /// configurations (with loopback URLs). The Deployment is run by the
    /// harness instead.
    async fn apply_chart_objects(&self) -> Result<(), String> {
        for obj in &self.rendered.0 {
            let kind = obj["kind"].as_str().unwrap_or_default();
            if kind == "Deployment" {
                continue;
            }
            let (ar, namespaced) = Self::resource(obj)
                .ok_or_else(|| format!("the chart renders an unexpected {kind}"))?;
            let obj = if kind.ends_with("WebhookConfiguration") {
                self.loopback_webhooks(obj)
            } else {
                obj.clone()
            };
            let api: Api<DynamicObject> = if namespaced {
                // The release namespace, unless the chart names another
                // (the Events Role in "default").
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(&self.namespace);
                Api::namespaced_with(self.client.clone(), ns, &ar)
            } else {
                Api::all_with(self.client.clone(), &ar)
            };
            let dynamic: DynamicObject = serde_json::from_value(obj).map_err(|e| e.to_string())?;
            api.create(&PostParams::default(), &dynamic)
                .await
                .map_err(|e| format!("failed to create the chart's {kind}: {e}"))?;
        }
        Ok(())
    }

    /// The stand-in Service: forwards each connection to the first replica
    /// (round robin) that accepts it, like kube-proxy to ready endpoints.
    fn start_service(&self) {
        let backends = self.backends.clone();
        let port = self.service_port;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the service port");
        listener.set_nonblocking(true).expect("non-blocking");
        tokio::spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let next = AtomicUsize::new(0);
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let list = backends.lock().unwrap().clone();
                let start = next.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    for i in 0..list.len() {
                        let port = list[(start + i) % list.len()];
                        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
                        if let Ok(Ok(mut outbound)) =
                            tokio::time::timeout(Duration::from_secs(1), connect).await
                        {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                    // No endpoint: the connection is closed, as a Service
                    // without ready endpoints refuses it.
                });
            }
        });
    }

    /// Starts one more mrguard process with the chart's arguments.
    pub async fn start_replica(&mut self) -> Result<&Replica, String> {
        let i = self.pods.fetch_add(1, Ordering::Relaxed);
        let pod = format!("{}-{i}", self.fullname);
        let (port, metrics_port) = (free_port(), free_port());
        // Each pod has its own network namespace in a cluster; here each
        // gets its own loopback ports through the chart's extraArgs, which
        // override the chart's --listen and --metrics-listen.
        let per_pod = [
            format!("--listen=127.0.0.1:{port}"),
            format!("--metrics-listen=127.0.0.1:{metrics_port}"),
        ];
        let rendered = Rendered::render_for(
            &self.name,
            &self.namespace,
            &Self::values(&self.name, &self.options, &per_pod)?,
            Some(&self.cluster.version),
        )?;
        let mut cmd = rendered.pod_command(&self.namespace, &pod)?;
        cmd.remount("config", &self.config_dir)?;
        let mut env = cmd.env.clone();
        env.push(("KUBECONFIG".into(), self.kubeconfig.display().to_string()));
        env.push(("HOME".into(), self.dir.path().display().to_string()));
        env.extend(self.options.env.iter().cloned());
        let binary = self.options.binary.clone().ok_or_else(|| {
            "Options::binary is not set: pass env!(\"CARGO_BIN_EXE_mrguard\") of the test or bench"
                .to_string()
        })?;
        let process = Guarded::spawn(
            &pod,
            &binary,
            &cmd.args,
            &env,
            &self.dir.path().join(format!("{pod}.log")),
            None,
        )?;
        self.backends.lock().unwrap().push(port);
        self.replicas.push(Replica {
            pod,
            port,
            metrics_port,
            process,
            killed: false,
        });
        Ok(self.replicas.last().expect("just pushed"))
    }

    /// Removes a replica from the stand-in Service (it stays running).
    pub fn remove_endpoint(&self, port: u16) {
        self.backends.lock().unwrap().retain(|p| *p != port);
    }

    /// Kills replica `i` with SIGKILL, as a node failure would (the Lease
    /// is not released), and takes it out of the Service.
    pub fn kill_replica(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        r.process.kill();
        r.killed = true;
        let port = r.port;
        self.remove_endpoint(port);
    }

    /// Fails when a replica has exited (that a test did not kill).
    pub fn check_alive(&self) -> Result<(), String> {
        for r in self.replicas.iter().filter(|r| !r.killed) {
            r.process.check_alive()?;
        }
        Ok(())
    }

    pub fn secret_name(&self) -> String {
        format!("{}-tls", self.fullname)
    }

    pub fn lease_name(&self) -> String {
        format!("{}-leader", self.fullname)
    }

    pub fn mutating(&self) -> Api<MutatingWebhookConfiguration> {
        Api::all(self.client.clone())
    }

    pub fn validating(&self) -> Api<ValidatingWebhookConfiguration> {
        Api::all(self.client.clone())
    }

    /// The mrguard configuration file every replica reads (the chart's
    /// ConfigMap, mounted).
    pub fn config_file(&self) -> PathBuf {
        self.config_dir.join("config.yaml")
    }

    /// Replaces the configuration file, as a ConfigMap update reaches the
    /// pods: every replica reloads it within its poll interval.
    pub fn write_config(&self, yaml: &str) -> Result<(), String> {
        let path = self.config_file();
        // Renamed into place: a poll never reads half a file.
        let tmp = self.config_dir.join(".config.yaml.new");
        std::fs::write(&tmp, yaml)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("failed to write {}: {e}", path.display()))
    }

    /// `ca.crt` of the TLS Secret, once the controller created it.
    pub async fn secret_ca(&self) -> Option<Vec<u8>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let s = secrets.get_opt(&self.secret_name()).await.ok()??;
        Some(s.data?.get("ca.crt")?.0.clone())
    }

    /// Both configurations as JSON, when both exist.
    pub async fn configurations(&self) -> Option<(Value, Value)> {
        let m = self.mutating().get_opt(&self.fullname).await.ok()??;
        let v = self.validating().get_opt(&self.fullname).await.ok()??;
        Some((serde_json::to_value(m).ok()?, serde_json::to_value(v).ok()?))
    }

    /// Whether both configurations carry the Secret's CA and cover `plural`
    /// of `group`.
    pub async fn webhooks_ready(&self, group: &str, plural: &str) -> bool {
        let (Some(ca), Some((m, v))) = (self.secret_ca().await, self.configurations().await) else {
            return false;
        };
        let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
        [m, v].iter().all(|c| {
            c["webhooks"][0]["clientConfig"]["caBundle"] == json!(ca)
                && covers(&c["webhooks"][0]["rules"], group, plural)
        })
    }

    /// Waits until the API server calls this release's webhooks: caBundle
    /// and rules in place, a dry-run create mutated and a dry-run create
    /// with a duplicate policy denied by mrguard (its webhook, or the
    /// policy its leader wrote).
    pub async fn wait_admission(&self) -> Result<(), String> {
        wait_for(
            "caBundle and rules on both webhook configurations",
            WAIT,
            || async {
                self.check_alive().ok()?;
                self.webhooks_ready("s3.aws.upbound.io", "buckets")
                    .await
                    .then_some(())
            },
        )
        .await
        .map_err(|e| self.with_logs(e))?;
        let buckets = self.cluster_api(&super::bucket_resource());
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let probe = self.object(super::bucket(
            &format!("{}-probe", self.name),
            json!({"region": "us-east-1"}),
        ));
        wait_for("the mutating webhook to answer", WAIT, || async {
            let o = buckets.create(&dry, &probe).await.ok()?;
            o.metadata
                .annotations?
                .contains_key("crossplane.io/external-name")
                .then_some(())
        })
        .await
        .map_err(|e| self.with_logs(e))?;
        let mut bad = serde_json::to_value(&probe).unwrap();
        bad["spec"]["managementPolicies"] = json!(["Observe", "Observe"]);
        let bad: DynamicObject = serde_json::from_value(bad).unwrap();
        // With admission.inProcess auto the rule is mrguard's policy's once
        // the leader wrote it, and the webhook is not asked at all.
        let policy = format!("ValidatingAdmissionPolicy '{}-", self.fullname);
        wait_for("the validating webhook to answer", WAIT, || async {
            match buckets.create(&dry, &bad).await {
                Err(kube::Error::Api(s))
                    if s.message.contains("validate.mrguard.io") || s.message.contains(&policy) =>
                {
                    Some(())
                }
                _ => None,
            }
        })
        .await
        .map_err(|e| self.with_logs(e))
    }

    /// An error message with the replicas' last log lines.
    pub fn with_logs(&self, e: String) -> String {
        let mut out = e;
        out.push_str(&format!(
            "\n(kube-apiserver and etcd logs: {})",
            self.cluster.dir.display()
        ));
        for r in &self.replicas {
            out.push_str(&format!(
                "\n--- {} ({}):\n{}",
                r.pod,
                r.process.log_path().display(),
                r.process.log_tail(30)
            ));
        }
        out
    }

    /// Labels an object so this release's webhooks see it.
    pub fn object(&self, mut v: Value) -> DynamicObject {
        v["metadata"]["labels"][TEST_LABEL] = json!(self.name);
        serde_json::from_value(v).expect("a Kubernetes object")
    }

    /// The same, in the test's workload namespace.
    pub fn namespaced_object(&self, mut v: Value) -> DynamicObject {
        v["metadata"]["namespace"] = json!(self.workload_ns);
        self.object(v)
    }

    pub fn cluster_api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), ar)
    }

    pub fn namespaced_api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.workload_ns, ar)
    }

    /// The replica holding the Lease, by its Lease identity prefix.
    pub async fn leader(&self) -> Option<usize> {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let lease = leases.get_opt(&self.lease_name()).await.ok()??;
        let holder = lease.spec?.holder_identity?;
        self.replicas
            .iter()
            .position(|r| holder.starts_with(&format!("{}_", r.pod)))
    }
}

/// Whether webhook `rules` cover `plural` in `group`.
pub fn covers(rules: &Value, group: &str, plural: &str) -> bool {
    rules.as_array().into_iter().flatten().any(|r| {
        r["apiGroups"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|g| g == group)
            && r["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p == plural)
    })
}
