//! `mrguard check --live` against a real API server: manifests judged as
//! the UPDATE (or CREATE) applying them would send, in both merge modes,
//! with the configuration read from a ConfigMap, and clear errors for what
//! the credentials may not do. No mrguard release is installed: the
//! preflight judges locally and needs none.

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::support::{self, wait_for, WAIT};

/// The field manager `kubectl apply` (client-side) writes with.
pub(crate) const KUBECTL: &str = "kubectl-client-side-apply";
/// The field manager of a Crossplane provider (its binary is `provider`).
pub(crate) const PROVIDER: &str = "provider";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Runs the built `mrguard` binary.
pub(crate) fn mrguard(args: &[&str]) -> Output {
    mrguard_in(Path::new("."), args)
}

/// Runs it in `dir`, as CI runs it at a repository's root.
pub(crate) fn mrguard_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(args)
        .current_dir(dir)
        .env_remove("KUBECONFIG")
        .output()
        .expect("mrguard runs")
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What `kubectl apply` does for an object that does not exist: a create
/// carrying the last-applied annotation, under kubectl's field manager.
pub(crate) async fn kubectl_apply_create(
    api: &Api<DynamicObject>,
    manifest: &Value,
) -> DynamicObject {
    let mut obj = manifest.clone();
    // kubectl records the manifest without the annotation itself, with an
    // annotations map even when the manifest has none.
    let mut recorded = manifest.clone();
    match recorded["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        Some(a) => {
            a.remove(LAST_APPLIED);
        }
        None => recorded["metadata"]["annotations"] = json!({}),
    }
    obj["metadata"]["annotations"][LAST_APPLIED] = json!(recorded.to_string());
    let pp = PostParams {
        field_manager: Some(KUBECTL.into()),
        ..PostParams::default()
    };
    api.create(&pp, &serde_json::from_value(obj).unwrap())
        .await
        .unwrap_or_else(|e| panic!("failed to create {manifest}: {e}"))
}

/// A write by the provider's field manager: a merge patch of the main
/// resource (late initialization, annotations), or of `status`.
pub(crate) async fn provider_patch(
    api: &Api<DynamicObject>,
    name: &str,
    patch: Value,
    status: bool,
) -> DynamicObject {
    let pp = PatchParams {
        field_manager: Some(PROVIDER.into()),
        ..PatchParams::default()
    };
    let r = if status {
        api.patch_status(name, &pp, &Patch::Merge(&patch)).await
    } else {
        api.patch(name, &pp, &Patch::Merge(&patch)).await
    };
    r.unwrap_or_else(|e| panic!("provider write to {name}: {e}"))
}

pub(crate) async fn ensure_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }
}

fn bucket_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &support::bucket_resource())
}

const CONFIG: &str = "\
resources:
  - apiGroups: [\"s3.aws.upbound.io\"]
    kinds: [\"Bucket\"]
    immutableFields: [spec.forProvider.region]
";

const MANIFESTS: &str = "\
# The database bucket: moved to another region by this pull request.
apiVersion: s3.aws.upbound.io/v1beta1
kind: Bucket
metadata:
  name: preflight-created
spec:
  forProvider:
    region: eu-west-1
---
# Not created yet: the provider has not made it, so it may still move.
apiVersion: s3.aws.upbound.io/v1beta1
kind: Bucket
metadata:
  name: preflight-pending
spec:
  forProvider:
    region: eu-west-1
---
apiVersion: s3.aws.upbound.io/v1beta1
kind: Bucket
metadata:
  name: preflight-new
spec:
  forProvider:
    region: eu-west-1
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-an-mr
data: {}
";

fn results(out: &Output) -> Vec<Value> {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\nstdout:\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn summary(results: &[Value]) -> Vec<(String, String, String)> {
    results
        .iter()
        .map(|r| {
            (
                r["object"].as_str().unwrap().to_string(),
                r["operation"].as_str().unwrap().to_string(),
                r["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The same change is denied on the created Bucket and allowed on the one
/// not created yet; a Bucket with no live object is a CREATE; both merge
/// modes agree; the findings point at the manifest's lines; nothing is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_live_judges_manifests_against_the_live_objects() {
    let Some(cluster) =
        support::require_cluster("check_live_judges_manifests_against_the_live_objects").await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_namespace(&admin, "preflight").await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "preflight");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "mrguard"}, "data": {"config.yaml": CONFIG}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let buckets = bucket_api(&admin);
    for name in ["preflight-created", "preflight-pending"] {
        kubectl_apply_create(
            &buckets,
            &support::bucket(name, json!({"region": "us-east-1"})),
        )
        .await;
    }
    // The provider created the first one.
    provider_patch(
        &buckets,
        "preflight-created",
        json!({"metadata": {"annotations": {
            "crossplane.io/external-name": "preflight-created",
            "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z",
            "crossplane.io/external-create-succeeded": "2024-05-01T10:00:02Z"}}}),
        false,
    )
    .await;
    let versions = |objs: Vec<DynamicObject>| -> Vec<Option<String>> {
        objs.into_iter()
            .map(|o| o.metadata.resource_version)
            .collect()
    };
    let before = versions(vec![
        buckets.get("preflight-created").await.unwrap(),
        buckets.get("preflight-pending").await.unwrap(),
    ]);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gitops")).unwrap();
    let file = dir.path().join("gitops/buckets.yaml");
    std::fs::write(&file, MANIFESTS).unwrap();
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();
    let run = |merge: &str, output: &str| {
        mrguard_in(
            dir.path(),
            &[
                "check",
                "--live",
                "-f",
                "gitops",
                "--kubeconfig",
                &kubeconfig,
                "--config-from-cluster",
                "preflight/mrguard",
                "--merge",
                merge,
                "-o",
                output,
            ],
        )
    };

    let client_mode = run("client", "json");
    assert_eq!(
        client_mode.status.code(),
        Some(1),
        "{}",
        text(&client_mode.stderr)
    );
    let r = results(&client_mode);
    let expected = vec![
        (
            "Bucket/preflight-created".into(),
            "UPDATE".into(),
            "denied".into(),
        ),
        (
            "Bucket/preflight-pending".into(),
            "UPDATE".into(),
            "allowed".into(),
        ),
        (
            "Bucket/preflight-new".into(),
            "CREATE".into(),
            "allowed".into(),
        ),
        (
            "ConfigMap/not-an-mr".into(),
            "NONE".into(),
            "skipped".into(),
        ),
    ];
    assert_eq!(summary(&r), expected);
    let f = &r[0]["findings"][0];
    assert_eq!(f["rule"], "immutable-field");
    assert_eq!(f["action"], "Deny");
    assert_eq!(f["field"], "spec.forProvider.region");
    assert_eq!(f["line"], 8, "the line of region in the first document");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("changed from \"us-east-1\" to \"eu-west-1\""),
        "{f}"
    );
    assert_eq!(r[1]["line"], 11);

    let server_mode = run("server", "json");
    assert_eq!(
        server_mode.status.code(),
        Some(1),
        "{}",
        text(&server_mode.stderr)
    );
    assert_eq!(summary(&results(&server_mode)), expected);

    let sarif = run("client", "sarif");
    assert_eq!(sarif.status.code(), Some(1));
    let log: Value = serde_json::from_slice(&sarif.stdout).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let res = &log["runs"][0]["results"];
    assert_eq!(res.as_array().unwrap().len(), 1, "{res}");
    assert_eq!(res[0]["ruleId"], "immutable-field");
    assert_eq!(res[0]["level"], "error");
    let loc = &res[0]["locations"][0]["physicalLocation"];
    assert_eq!(loc["artifactLocation"]["uri"], "gitops/buckets.yaml");
    assert_eq!(loc["region"]["startLine"], 8);

    let text_out = run("client", "text");
    assert_eq!(text_out.status.code(), Some(1));
    let t = text(&text_out.stdout);
    assert!(t.contains("Bucket/preflight-created: UPDATE denied"), "{t}");
    assert!(text(&text_out.stderr).contains("4 manifest(s): 1 denied"));
    assert!(
        t.starts_with("gitops/buckets.yaml:2: Bucket/preflight-created: UPDATE denied\n"),
        "{t}"
    );
    eprintln!("--- check --live (text) ---\n{t}{}", text(&text_out.stderr));
    eprintln!("--- check --live (json) ---\n{}", text(&client_mode.stdout));
    eprintln!("--- check --live (sarif) ---\n{}", text(&sarif.stdout));

    // Nothing was written, in either mode.
    let after = versions(vec![
        buckets.get("preflight-created").await.unwrap(),
        buckets.get("preflight-pending").await.unwrap(),
    ]);
    assert_eq!(before, after);
    assert!(buckets.get_opt("preflight-new").await.unwrap().is_none());

    // Applying the manifest unchanged would send nothing.
    let same = dir.path().join("same.yaml");
    std::fs::write(
        &same,
        "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: preflight-pending\nspec:\n  forProvider:\n    region: us-east-1\n",
    )
    .unwrap();
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &same.display().to_string(),
        "--kubeconfig",
        &kubeconfig,
        "--config-from-cluster",
        "preflight/mrguard",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(results(&out)[0]["verdict"], "unchanged");
}

async fn grant(client: &kube::Client, name: &str, sa_ns: &str, sa: &str, verbs: &[&str]) {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["s3.aws.upbound.io"], "resources": ["buckets"], "verbs": verbs}],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let b: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    }))
    .unwrap();
    bindings.create(&PostParams::default(), &b).await.unwrap();
}

/// A CI identity that may not read the object gets exit 2 and an error
/// naming the object and the verb; with `get` only, the client merge works
/// and the server-side dry run names `patch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_live_names_the_object_and_verb_the_credentials_lack() {
    let Some(cluster) =
        support::require_cluster("check_live_names_the_object_and_verb_the_credentials_lack").await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_namespace(&admin, "preflight-rbac").await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "preflight-rbac");
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "ci"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("ci.kubeconfig");
    cluster
        .service_account_kubeconfig("preflight-rbac", "ci", &kubeconfig)
        .await
        .unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let manifest = dir.path().join("b.yaml");
    std::fs::write(
        &manifest,
        serde_saphyr::to_string(&support::bucket(
            "preflight-secret",
            json!({"region": "us-east-1"}),
        ))
        .unwrap(),
    )
    .unwrap();
    let manifest = manifest.display().to_string();
    let check = |merge: &str| {
        mrguard(&[
            "check",
            "--live",
            "-f",
            &manifest,
            "--kubeconfig",
            &kubeconfig,
            "--merge",
            merge,
        ])
    };

    let out = check("client");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "failed to get buckets.s3.aws.upbound.io \"preflight-secret\": forbidden: the credentials lack \"get\""
        ),
        "{err}"
    );
    assert!(
        err.contains("system:serviceaccount:preflight-rbac:ci"),
        "{err}"
    );
    eprintln!("--- forbidden ---\n{err}");

    grant(
        &admin,
        "preflight-rbac-get",
        "preflight-rbac",
        "ci",
        &["get"],
    )
    .await;
    let ok = wait_for("the get permission to apply", WAIT, || async {
        let out = check("client");
        (out.status.code() == Some(0)).then_some(out)
    })
    .await
    .unwrap();
    let t = text(&ok.stdout);
    assert!(t.contains("Bucket/preflight-secret: CREATE allowed"), "{t}");
    // Without access to CRDs, the schema is not checked, and it says so.
    assert!(
        t.contains("note: judged without the CRD's defaults and schema: failed to read customresourcedefinitions.apiextensions.k8s.io \"buckets.s3.aws.upbound.io\""),
        "{t}"
    );
    // Without `list`, the other claimants of its identity are unknown, not none.
    assert!(
        t.contains("  claimed by: unknown (the live MRs were not listed)\n"),
        "{t}"
    );
    // The first kind of the family it fails to list: the legacy kind, or
    // the `.m.` one when another test on this API server installed it.
    assert!(
        ["buckets.s3.aws.upbound.io", "buckets.s3.aws.m.upbound.io"]
            .iter()
            .any(|k| t.contains(&format!(
                "note: other claimants of its identity unknown: failed to list {k} in all namespaces"
            ))),
        "{t}"
    );
    let out = check("server");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("failed to patch buckets.s3.aws.upbound.io \"preflight-secret\" (server-side apply, dry run): forbidden: the credentials lack \"patch\""),
        "{err}"
    );
}
