//! End to end against a real kube-apiserver and etcd, following the envtest
//! convention: it runs when `KUBEBUILDER_ASSETS` names a folder holding the
//! `kube-apiserver` and `etcd` binaries, and otherwise prints that it was
//! skipped and passes.
//!
//! Both run on loopback. mrguard runs in this process with the controller
//! on, reached by the API server through `clientConfig.url`; the test
//! creates the fixture CRDs and the two webhook configurations the way the
//! chart would (no caBundle, no rules) and checks, with a real kube client,
//! that the controller fills them in, that a new MR gets mrguard's defaults,
//! that an immutable-field change is denied with mrguard's message, and
//! that a newly installed MR CRD is covered within seconds.

/// The few helpers this file needs; the rest of the integration tests and
/// their shared support live in `tests/it/` (this file stays apart until
/// `tests/e2e/` replaces it).
mod common {
    use std::path::{Path, PathBuf};

    use clap::Parser;
    use mrguard::cli::serve::ServeArgs;
    use mrguard::cli::{Cli, Command};
    use serde_json::Value;

    pub(crate) fn shared() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    /// The documents of an example manifest (fixtures/examples/).
    pub(crate) fn example(name: &str) -> Vec<Value> {
        let p = shared().join("examples").join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_saphyr::from_multiple::<Value>(&text)
            .unwrap()
            .into_iter()
            .filter(|v| !v.is_null())
            .collect()
    }

    pub(crate) fn serve_args(args: &[String]) -> ServeArgs {
        match Cli::try_parse_from(args)
            .expect("valid serve flags")
            .command
        {
            Command::Serve(a) => *a,
            _ => unreachable!(),
        }
    }
}

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

const TOKEN: &str = "mrguard-envtest-admin-token";
const WAIT: Duration = Duration::from_secs(60);

fn assets() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS")?);
    (dir.join("kube-apiserver").is_file() && dir.join("etcd").is_file()).then_some(dir)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills its processes when the test ends, passed or not.
struct Procs(Vec<(String, Child)>);

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in self.0.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Procs {
    fn spawn(&mut self, name: &str, bin: &Path, args: &[String], logs: &Path) {
        let out = std::fs::File::create(logs.join(format!("{name}.log"))).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {}: {e}", bin.display()));
        self.0.push((name.to_string(), child));
    }

    /// Fails with the process's log when it already exited.
    fn check_alive(&mut self, logs: &Path) {
        for (name, c) in self.0.iter_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                let log =
                    std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!("{name} exited with {status}:\n{tail}");
            }
        }
    }
}

async fn eventually<T, F, Fut>(what: &str, procs: &mut Procs, logs: &Path, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        procs.check_alive(logs);
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> String {
    std::fs::write(path, contents).unwrap();
    path.display().to_string()
}

fn fixture_crd(file: &str) -> CustomResourceDefinition {
    let p = common::shared().join("crds").join(file);
    let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    serde_json::from_value(v).unwrap()
}

const CONFIG: &str = r#"
providerConfig:
  defaultName: aws-default
resources:
  - apiGroups: ["s3.aws.upbound.io"]
    kinds: ["Bucket"]
    immutableFields: ["spec.forProvider.region"]
    tagsField: spec.forProvider.tags
"#;

fn webhook_configuration(kind: &str, webhook: &str, url: &str) -> Value {
    let mut w = json!({
        "name": webhook,
        "clientConfig": {"url": url},
        "rules": [],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 5,
    });
    if kind == "MutatingWebhookConfiguration" {
        w["reinvocationPolicy"] = json!("Never");
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "mrguard"},
        "webhooks": [w],
    })
}

fn covers(rules: &Value, group: &str, plural: &str) -> bool {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_and_webhooks_against_a_real_api_server() {
    let Some(bin) = assets() else {
        eprintln!(
            "envtest skipped: set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd \
             (see docs/controller.md)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut procs = Procs(Vec::new());

    // etcd on loopback.
    let (etcd_port, peer_port) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    procs.spawn(
        "etcd",
        &bin.join("etcd"),
        &[
            format!("--data-dir={}", d.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync".into(),
        ],
        d,
    );

    // kube-apiserver with its own serving certificate, a static admin
    // token and RBAC; the admin is in system:masters.
    let ca = mrguard::tls::generate_ca("envtest CA", Duration::from_secs(86400)).unwrap();
    let serving = mrguard::tls::issue_serving_cert(
        &ca,
        &["127.0.0.1".into(), "localhost".into()],
        Duration::from_secs(86400),
    )
    .unwrap();
    // The API server reads the verification key as a public key and the
    // signing key as PKCS#8.
    let sa = rcgen::KeyPair::generate().unwrap();
    let (sa_key, sa_pub) = (sa.serialize_pem(), sa.public_key_pem());
    let api_port = free_port();
    procs.spawn(
        "kube-apiserver",
        &bin.join("kube-apiserver"),
        &[
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", d.join("apiserver-certs").display()),
            format!(
                "--tls-cert-file={}",
                write(&d.join("apiserver.crt"), &serving.cert)
            ),
            format!(
                "--tls-private-key-file={}",
                write(&d.join("apiserver.key"), &serving.key)
            ),
            format!(
                "--token-auth-file={}",
                write(
                    &d.join("tokens.csv"),
                    format!("{TOKEN},admin,admin,\"system:masters\"\n")
                )
            ),
            format!(
                "--service-account-key-file={}",
                write(&d.join("sa.pub"), &sa_pub)
            ),
            format!(
                "--service-account-signing-key-file={}",
                write(&d.join("sa.key"), &sa_key)
            ),
            "--service-account-issuer=https://127.0.0.1".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--authorization-mode=RBAC".into(),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
        ],
        d,
    );

    let server = format!("https://127.0.0.1:{api_port}");
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let kubeconfig = write(
        &d.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    token: {TOKEN}\ncontexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: admin\n    namespace: default\ncurrent-context: envtest\n",
            b64(ca.cert.as_bytes())
        ),
    );
    let client = mrguard::controller::client(Some(Path::new(&kubeconfig)), None)
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(
        "the API server and the default namespace",
        &mut procs,
        d,
        || {
            let namespaces = namespaces.clone();
            async move { namespaces.get("default").await.ok() }
        },
    )
    .await;

    // The fixture MR CRDs, except provider-nop's, which comes later.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let files: Vec<String> = std::fs::read_dir(common::shared().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| !f.starts_with("nop."))
        .collect();
    for f in &files {
        crds.create(&PostParams::default(), &fixture_crd(f))
            .await
            .unwrap();
    }

    // mrguard with the controller, as in a cluster but reached by URL.
    let config_file = write(&d.join("mrguard.yaml"), CONFIG);
    let args: Vec<String> = [
        "mrguard",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--drain-delay",
        "0s",
        "--controller",
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        "default",
        "--cert-extra-names",
        "127.0.0.1,localhost",
        "--audit-interval",
        "2s",
        "--config",
        &config_file,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let running = mrguard::cli::serve::start(common::serve_args(&args))
        .await
        .unwrap();
    let ready = running.ready.clone();
    eventually(
        "readiness from the Secret's certificate",
        &mut procs,
        d,
        || {
            let ready = ready.clone();
            async move {
                ready
                    .load(std::sync::atomic::Ordering::Acquire)
                    .then_some(())
            }
        },
    )
    .await;
    let secret = Api::<Secret>::namespaced(client.clone(), "default")
        .get("mrguard-tls")
        .await
        .unwrap();
    let ca_bundle = secret.data.as_ref().unwrap()["ca.crt"].0.clone();

    // The chart's webhook configurations: no caBundle, no rules.
    let port = running.addr.port();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    mutating
        .create(
            &PostParams::default(),
            &serde_json::from_value(webhook_configuration(
                "MutatingWebhookConfiguration",
                "mutate.mrguard.io",
                &format!("https://127.0.0.1:{port}/mutate"),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    validating
        .create(
            &PostParams::default(),
            &serde_json::from_value(webhook_configuration(
                "ValidatingWebhookConfiguration",
                "validate.mrguard.io",
                &format!("https://127.0.0.1:{port}/validate"),
            ))
            .unwrap(),
        )
        .await
        .unwrap();

    // The controller fills in caBundle and the rules for every MR CRD.
    eventually(
        "caBundle and rules on both configurations",
        &mut procs,
        d,
        || {
            let (mutating, validating, ca_bundle) =
                (mutating.clone(), validating.clone(), ca_bundle.clone());
            async move {
                let m = serde_json::to_value(mutating.get("mrguard").await.ok()?).ok()?;
                let v = serde_json::to_value(validating.get("mrguard").await.ok()?).ok()?;
                let want = json!(b64(&ca_bundle));
                let ok = [&m, &v].iter().all(|c| {
                    c["webhooks"][0]["clientConfig"]["caBundle"] == want
                        && covers(&c["webhooks"][0]["rules"], "s3.aws.upbound.io", "buckets")
                        && covers(&c["webhooks"][0]["rules"], "ec2.aws.m.upbound.io", "vpcs")
                });
                ok.then_some(())
            }
        },
    )
    .await;

    // Creating an MR gets mrguard's defaults. Dry-run creates until the API
    // server has picked up the configuration.
    let bucket_ar = ApiResource {
        group: "s3.aws.upbound.io".into(),
        version: "v1beta1".into(),
        api_version: "s3.aws.upbound.io/v1beta1".into(),
        kind: "Bucket".into(),
        plural: "buckets".into(),
    };
    let buckets: Api<DynamicObject> = Api::all_with(client.clone(), &bucket_ar);
    let mut manifest = common::example("aws_s3_cluster_v1beta1_bucket.yaml")[0].clone();
    manifest["metadata"]["name"] = json!("e2e-bucket");
    let bucket: DynamicObject = serde_json::from_value(manifest).unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually("the mutating webhook to be called", &mut procs, d, || {
        let (buckets, bucket, dry) = (buckets.clone(), bucket.clone(), dry.clone());
        async move {
            let o = buckets.create(&dry, &bucket).await.ok()?;
            o.metadata
                .annotations
                .as_ref()?
                .contains_key("crossplane.io/external-name")
                .then_some(())
        }
    })
    .await;
    let created = buckets
        .create(&PostParams::default(), &bucket)
        .await
        .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(
        v["metadata"]["annotations"]["crossplane.io/external-name"],
        "e2e-bucket"
    );
    assert_eq!(
        v["spec"]["providerConfigRef"]["name"], "aws-default",
        "{v:#}"
    );
    assert_eq!(v["spec"]["deletionPolicy"], "Delete");
    assert_eq!(v["spec"]["managementPolicies"], json!(["*"]));
    let tags = &v["spec"]["forProvider"]["tags"];
    assert_eq!(tags["crossplane-kind"], "bucket.s3.aws.upbound.io");
    assert_eq!(tags["crossplane-name"], "e2e-bucket");
    assert_eq!(tags["crossplane-providerconfig"], "aws-default");
    assert_eq!(tags["Name"], "SampleBucket", "a user's tag is kept");

    // Once created, the region is immutable.
    let pp = PatchParams::default();
    buckets
        .patch(
            "e2e-bucket",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {
                "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}}})),
        )
        .await
        .unwrap();
    let err = buckets
        .patch(
            "e2e-bucket",
            &pp,
            &Patch::Merge(json!({"spec": {"forProvider": {"region": "eu-central-1"}}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a denial, got {err}");
    };
    assert!(
        status.message.contains("validate.mrguard.io"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("[immutable-field]"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("spec.forProvider.region"),
        "{}",
        status.message
    );

    // A new provider's MR CRD is covered within seconds.
    crds.create(
        &PostParams::default(),
        &fixture_crd("nop.crossplane.io_nopresources.yaml"),
    )
    .await
    .unwrap();
    eventually("coverage of nop.crossplane.io", &mut procs, d, || {
        let validating = validating.clone();
        async move {
            let v = serde_json::to_value(validating.get("mrguard").await.ok()?).ok()?;
            covers(
                &v["webhooks"][0]["rules"],
                "nop.crossplane.io",
                "nopresources",
            )
            .then_some(())
        }
    })
    .await;

    // Deleting a configuration is the emergency exit: it stays deleted.
    mutating
        .delete("mrguard", &Default::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(mutating.get_opt("mrguard").await.unwrap().is_none());

    running.shutdown().await;
}
