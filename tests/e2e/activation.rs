//! Crossplane v2 activation through a real API server (docs/activation.md):
//! Crossplane's MRD and MRAP CRDs (from the third-party fixtures), an MRD
//! with no CRD (safe-start: nothing activates it, and no Crossplane runs
//! here to make its CRD), and mrguard's answers about it: `crd
//! immutables` and `explain` list the fields its schema documents,
//! `check --live` names the MRD, and the MRAP webhook warns about a
//! singular pattern and denies a malformed one.
//!
//! The tests need only what the oldest supported Kubernetes (1.30) has.

use kube::api::{Api, DynamicObject};
use serde_json::{json, Value};

use crate::check_live::{mrguard, text};
use crate::compositions::crossplane_crd;
use crate::support::{self, api, resource, wait_for, Options, WAIT};

/// The oldest API server these tests need: custom resources, Crossplane's
/// CRDs with their CEL rules and validating webhooks with warnings, which
/// every supported Kubernetes has.
const NEEDS: (u32, u32) = support::version::OLDEST_SUPPORTED;

const MRDS: &str = "managedresourcedefinitions.apiextensions.crossplane.io";
const MRAPS: &str = "managedresourceactivationpolicies.apiextensions.crossplane.io";

/// An MRD of `group`'s Bucket, as a provider ships it: Inactive, with a
/// field whose description says it forces a new resource.
fn mrd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
        "metadata": {"name": format!("buckets.{group}")},
        "spec": {
            "group": group, "scope": "Cluster", "state": "Inactive",
            "names": {"kind": "Bucket", "listKind": "BucketList", "plural": "buckets",
                      "singular": "bucket", "categories": ["crossplane", "managed"]},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "forProvider": {"type": "object", "properties": {
                            "region": {"type": "string", "description":
                                "Region is the region of the bucket. Changing this forces a new resource to be created."},
                            "tags": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}}]
        }
    })
}

/// Installs Crossplane's MRD and MRAP CRDs and one MRD of `group`.
async fn mrd_installed(client: &kube::Client, fixtures: &std::path::Path, group: &str) {
    crossplane_crd(client, fixtures, MRDS).await;
    crossplane_crd(client, fixtures, MRAPS).await;
    let obj: DynamicObject = serde_json::from_value(mrd(group)).unwrap();
    mrds_api(client)
        .create(&Default::default(), &obj)
        .await
        .unwrap();
}

fn mrds_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.crossplane.io",
            "v1alpha1",
            "ManagedResourceDefinition",
            "managedresourcedefinitions",
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mrd_without_a_crd_is_explained_and_named_by_check_live() {
    let test = "an_mrd_without_a_crd_is_explained_and_named_by_check_live";
    let Some(cluster) = support::require_cluster_at(test, NEEDS).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    let group = "e2e-inactive.example.org";
    mrd_installed(&admin, &fixtures, group).await;
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();

    // Safe-start: the MRD exists, its CRD does not.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(admin.clone());
    assert!(crds
        .get_opt(&format!("buckets.{group}"))
        .await
        .unwrap()
        .is_none());

    // crd immutables reads the MRD as the cluster stores it.
    let dir = tempfile::tempdir().unwrap();
    let stored = mrds_api(&admin)
        .get(&format!("buckets.{group}"))
        .await
        .unwrap();
    let file = dir.path().join("mrd.json");
    std::fs::write(&file, serde_json::to_string(&stored).unwrap()).unwrap();
    let out = mrguard(&["crd", "immutables", &file.display().to_string()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!(
            "{group}/Bucket (buckets.{group}): 1 documented-immutable field"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("  spec.forProvider.region [v1beta1]"),
        "{stdout}"
    );

    // explain: not "unknown kind", but the MRD, its state and its fields.
    let out = mrguard(&[
        "explain",
        &format!("buckets.{group}/my-bucket"),
        "--kubeconfig",
        &kubeconfig,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("Bucket.{group}/my-bucket: not served")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "kind Bucket.{group} is served by MRD buckets.{group}, which no MRAP activates (state Inactive)"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("    spec.forProvider.region [v1beta1]"),
        "{stdout}"
    );
    assert!(!stdout.contains("spec.forProvider.tags"), "{stdout}");
    let out = mrguard(&[
        "explain",
        &format!("bucket.{group}/my-bucket"),
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(v["served"], false, "{v}");
    assert_eq!(
        v["documentedImmutableFields"][0]["path"], "spec.forProvider.region",
        "{v}"
    );

    // check --live of an MR of that kind names the MRD.
    let manifest = dir.path().join("bucket.yaml");
    std::fs::write(
        &manifest,
        format!("apiVersion: {group}/v1beta1\nkind: Bucket\nmetadata:\n  name: my-bucket\nspec:\n  forProvider:\n    region: us-east-1\n"),
    )
    .unwrap();
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &manifest.display().to_string(),
        "--kubeconfig",
        &kubeconfig,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("Bucket/my-bucket: CREATE invalid"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "invalid: no matches for kind \"Bucket\" in version \"{group}/v1beta1\": kind Bucket.{group} is served by MRD buckets.{group}, which no MRAP activates (state Inactive)"
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_live_names_a_composed_kind_no_mrap_activates() {
    let test = "check_live_names_a_composed_kind_no_mrap_activates";
    let Some(cluster) = support::require_cluster_at(test, NEEDS).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    let group = "e2e-composed.example.org";
    mrd_installed(&admin, &fixtures, group).await;
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("composition.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\nmetadata:\n  name: xstorage\n\
             spec:\n  compositeTypeRef:\n    apiVersion: example.org/v1alpha1\n    kind: XStorage\n  mode: Pipeline\n\
             \x20 pipeline:\n    - step: pt\n      functionRef:\n        name: function-patch-and-transform\n\
             \x20     input:\n        apiVersion: pt.fn.crossplane.io/v1beta1\n        kind: Resources\n\
             \x20       resources:\n          - name: bucket\n            base:\n              apiVersion: {group}/v1beta1\n\
             \x20             kind: Bucket\n"
        ),
    )
    .unwrap();
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &file.display().to_string(),
        "--kubeconfig",
        &kubeconfig,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("Composition/xstorage: skipped"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "warning: {}:19: composed resource \"bucket\": kind Bucket.{group} is served by MRD buckets.{group}, which no MRAP activates (state Inactive)",
            file.display()
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_names_the_kinds_no_mrap_activates() {
    let test = "the_audit_names_the_kinds_no_mrap_activates";
    let Some(cluster) = support::require_cluster_at(test, NEEDS).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    let group = "e2e-audit.example.org";
    mrd_installed(&admin, &fixtures, group).await;
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();
    // Its MRs (none can exist) are not what is asserted: the closing note.
    let out = mrguard(&[
        "audit",
        "--kubeconfig",
        &kubeconfig,
        "--quiet",
        "-o",
        "json",
    ]);
    let stderr = text(&out.stderr);
    let note = stderr
        .lines()
        .find(|l| l.starts_with("mrguard audit: note: "))
        .unwrap_or_else(|| panic!("no note: {stderr}"));
    assert!(
        note.contains("kind(s) are served by MRDs which no MRAP activates (state Inactive)"),
        "{note}"
    );
    assert!(note.contains(&format!("buckets.{group}")), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mrap_in_the_singular_is_warned_about_and_a_malformed_one_denied() {
    let test = "an_mrap_in_the_singular_is_warned_about_and_a_malformed_one_denied";
    let Some(cluster) = support::require_cluster_at(test, NEEDS).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    let group = "e2e-mrap.example.org";
    // Before the release, so that its first list has the MRD.
    mrd_installed(&admin, &fixtures, group).await;
    let r = support::install(cluster, "e2e-activation", Options::default()).await;
    let ca = r.secret_ca().await.unwrap();
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    wait_for("the MRAP webhook's caBundle", WAIT, || async {
        let (_, v) = r.configurations().await?;
        let last = v["webhooks"].as_array()?.last()?.clone();
        (last["name"] == "activationpolicies.validate.mrguard.io"
            && last["clientConfig"]["caBundle"] == json!(ca))
        .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    let path = "/apis/apiextensions.crossplane.io/v1alpha1/managedresourceactivationpolicies";
    let mrap = |name: &str, patterns: &[&str]| {
        serde_json::to_value(r.object(json!({
            "apiVersion": "apiextensions.crossplane.io/v1alpha1",
            "kind": "ManagedResourceActivationPolicy",
            "metadata": {"name": name},
            "spec": {"activate": patterns},
        })))
        .unwrap()
    };
    let singular = format!("bucket.{group}");
    let plural = format!("buckets.{group}");
    // Every replica lists the MRDs once it runs; a dry run sees when the
    // webhook knows this one.
    wait_for("the webhook's warning about the singular", WAIT, || async {
        let resp = api::create(&r.client, path, &mrap("e2e-singular", &[&singular]), true)
            .await
            .ok()?;
        resp.warnings
            .iter()
            .any(|w| w.contains(&plural))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let resp = api::create(&r.client, path, &mrap("e2e-singular", &[&singular]), false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(
        resp.warnings,
        [format!(
            "spec.activate[0]: \"{singular}\" matches no ManagedResourceDefinition; did you mean \"{plural}\"? (MRD names are <plural>.<group>)"
        )]
    );

    // A malformed pattern can never activate anything: denied.
    let resp = api::create(
        &r.client,
        path,
        &mrap("e2e-malformed", &[&plural, "buckets.[e2e"]),
        false,
    )
    .await
    .unwrap();
    assert_ne!(resp.status, 201, "{}", resp.body);
    assert!(
        resp.message().contains(
            "mrguard denied CREATE of ManagedResourceActivationPolicy \"e2e-malformed\": spec.activate[1]: syntax error in pattern \"buckets.[e2e\""
        ),
        "{}",
        resp.body
    );
    // The pattern that names the MRD exactly is admitted with no warning.
    let resp = api::create(&r.client, path, &mrap("e2e-plural", &[&plural]), false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(resp.warnings.is_empty(), "{:?}", resp.warnings);
}
