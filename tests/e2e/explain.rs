//! `mrguard explain` against live MRs whose managedFields a real API
//! server wrote: kubectl's create, the provider's late initialization and
//! status writes. With `MRGUARD_UPDATE_FIXTURES=1` the objects are also
//! saved to tests/fixtures/explain/ (as `kubectl get -o yaml
//! --show-managed-fields` prints them) for the offline tests.

use kube::api::{Api, DynamicObject};
use serde_json::{json, Value};

use crate::check_live::{
    ensure_namespace, kubectl_apply_create, mrguard, provider_patch, text, KUBECTL, PROVIDER,
};
use crate::support::{self, resource};

const CONFIG: &str = "\
resources:
  - apiGroups: [\"nop.crossplane.io\"]
    kinds: [\"NopResource\"]
    immutableFields: [spec.forProvider.fields.region]
    deletionProtection: true
  - apiGroups: [\"ec2.aws.m.upbound.io\"]
    kinds: [\"VPC\"]
    externalName: IdentifierFromProvider
    immutableFields: [spec.forProvider.region, spec.forProvider.cidrBlock]
";

fn save_fixture(name: &str, obj: &Value) {
    if std::env::var("MRGUARD_UPDATE_FIXTURES").as_deref() != Ok("1") {
        return;
    }
    let dir = support::fixtures_dir().join("explain");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), serde_saphyr::to_string(obj).unwrap()).unwrap();
}

fn row<'a>(e: &'a Value, path: &str) -> &'a Value {
    e["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("no field {path} in {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_a_live_mr_and_its_managed_fields() {
    let Some(cluster) =
        support::require_cluster("explain_reads_a_live_mr_and_its_managed_fields").await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    let nops: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &resource(
            "nop.crossplane.io",
            "v1alpha1",
            "NopResource",
            "nopresources",
        ),
    );
    // The user applies it; the provider creates the external resource,
    // late-initializes a list and a field, and reports Ready.
    kubectl_apply_create(
        &nops,
        &json!({
            "apiVersion": "nop.crossplane.io/v1alpha1", "kind": "NopResource",
            "metadata": {"name": "explain-db"},
            "spec": {"forProvider": {"fields": {"region": "us-east-1", "size": "small"}}},
        }),
    )
    .await;
    provider_patch(
        &nops,
        "explain-db",
        json!({
            "metadata": {"annotations": {
                "crossplane.io/external-name": "explain-db",
                "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z",
                "crossplane.io/external-create-succeeded": "2024-05-01T10:00:02Z"},
                "finalizers": ["finalizer.managedresource.crossplane.io"]},
            "spec": {"forProvider": {
                "fields": {"zone": "us-east-1a"},
                "connectionDetails": [{"name": "endpoint", "value": "db.example.internal"}]}},
        }),
        false,
    )
    .await;
    provider_patch(
        &nops,
        "explain-db",
        json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Available",
             "lastTransitionTime": "2024-05-01T10:00:05Z"},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
             "lastTransitionTime": "2024-05-01T10:00:05Z"}]}}),
        true,
    )
    .await;
    let live = serde_json::to_value(nops.get("explain-db").await.unwrap()).unwrap();
    let managers: Vec<&str> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(
        managers.contains(&KUBECTL) && managers.contains(&PROVIDER),
        "{managers:?}"
    );
    save_fixture("nopresource-late-initialized.yaml", &live);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mrguard.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let (config, kubeconfig) = (
        config.display().to_string(),
        cluster.admin_kubeconfig().display().to_string(),
    );
    let explain = |target: &str, extra: &[&str]| {
        let mut args = vec![
            "explain",
            target,
            "--kubeconfig",
            &kubeconfig,
            "--config",
            &config,
        ];
        args.extend_from_slice(extra);
        mrguard(&args)
    };

    let out = explain("nopresources.nop.crossplane.io/explain-db", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["created"]["value"], true);
    assert_eq!(e["creation"]["state"], "succeeded");
    assert_eq!(e["paused"]["value"], false);
    assert_eq!(e["deletion"]["outcome"], "Delete");
    assert_eq!(e["deletion"]["protectionApplies"], true);
    assert_eq!(e["deletion"]["deniedBy"], json!(["deletion-protection"]));
    let region = row(&e, "spec.forProvider.fields.region");
    assert_eq!(region["managers"], json!([KUBECTL]));
    assert_eq!(region["setBy"], "user");
    assert_eq!(region["immutable"], true);
    assert_eq!(region["changeDeniedBy"], json!(["immutable-field"]));
    let zone = row(&e, "spec.forProvider.fields.zone");
    assert_eq!(zone["setBy"], "provider");
    assert!(zone["hint"].is_null());
    let details = row(&e, "spec.forProvider.connectionDetails");
    assert_eq!(details["list"], true);
    assert_eq!(details["setBy"], "provider");
    assert!(details["hint"].as_str().unwrap().contains("LateInitialize"));

    // The kind alone resolves through discovery; text for people.
    let out = explain("NopResource/explain-db", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.starts_with("NopResource/explain-db (nop.crossplane.io/v1alpha1, cluster-scoped)"),
        "{t}"
    );
    assert!(t.contains("provider (late-init)"), "{t}");
    eprintln!("--- explain (text) ---\n{t}");

    // A namespaced MR, with -n.
    let ns = "explain-ns";
    ensure_namespace(&admin, ns).await;
    let vpcs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &support::namespaced_vpc_resource());
    let mut v = support::namespaced_vpc("explain-vpc", json!({}));
    v["metadata"]["namespace"] = json!(ns);
    kubectl_apply_create(&vpcs, &v).await;
    provider_patch(
        &vpcs,
        "explain-vpc",
        json!({"metadata": {"annotations": {"crossplane.io/external-name": "vpc-0abc",
               "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z"}},
               "spec": {"forProvider": {"instanceTenancy": "default"}}}),
        false,
    )
    .await;
    let live_vpc = serde_json::to_value(vpcs.get("explain-vpc").await.unwrap()).unwrap();
    save_fixture("vpc-creation-incomplete.yaml", &live_vpc);
    let out = explain(
        "vpc.ec2.aws.m.upbound.io/explain-vpc",
        &["-n", ns, "-o", "json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["namespace"], ns);
    assert_eq!(e["creation"]["state"], "incomplete");
    assert_eq!(e["creation"]["since"], "2024-05-01T10:00:00Z");
    assert_eq!(
        row(&e, "spec.forProvider.instanceTenancy")["setBy"],
        "provider"
    );
    // Not created: an immutable field may still change.
    let region = row(&e, "spec.forProvider.region");
    assert_eq!(region["immutable"], true);
    assert_eq!(region["changeDeniedBy"], json!([]));

    // What the credentials cannot find is named.
    let out = explain("nopresource/does-not-exist", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("failed to get nopresources.nop.crossplane.io \"does-not-exist\""),
        "{}",
        text(&out.stderr)
    );
}
