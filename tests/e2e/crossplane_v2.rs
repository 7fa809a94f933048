//! Crossplane v2's MRs through a real API server, under the chart's RBAC:
//! the reconcile annotations (`reconcile-annotations`), the provider-config
//! kinds of a namespaced MR (`provider-config-kind`, and
//! `provider-config-exists` looking each kind up in its scope), and the
//! deletion outcome of a namespaced MR, which has no deletionPolicy
//! (docs/rules.md).
//!
//! Every test here needs only what the oldest supported Kubernetes (1.30)
//! has: CRDs, webhooks and namespaced custom resources.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use serde_json::{json, Value};

use crate::identity::install_namespaced_bucket_crd;
use crate::support::{self, api, wait_for, Options, Release, WAIT};

fn buckets(namespace: &str) -> String {
    format!("/apis/s3.aws.m.upbound.io/v1beta1/namespaces/{namespace}/buckets")
}

/// A namespaced Bucket of this release in its workload namespace.
fn bucket(r: &Release, name: &str, metadata: Value, spec: Value) -> Value {
    let mut o = json!({
        "apiVersion": "s3.aws.m.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": format!("{}-{name}", r.name), "namespace": r.workload_ns},
        "spec": {"forProvider": {"region": "eu-west-1"}},
    });
    for (k, v) in metadata.as_object().into_iter().flatten() {
        o["metadata"][k] = v.clone();
    }
    for (k, v) in spec.as_object().into_iter().flatten() {
        o["spec"][k] = v.clone();
    }
    serde_json::to_value(r.object(o)).unwrap()
}

fn denied_by(r: &api::Response, rule: &str) -> bool {
    r.status >= 400 && r.message().contains(&format!("[{rule}]"))
}

async fn release_for_buckets(test: &str, values: Option<String>) -> Option<Release> {
    let cluster = support::require_cluster(test).await?;
    let admin = cluster.admin().await.unwrap();
    install_namespaced_bucket_crd(&admin).await;
    let r = support::install(
        cluster,
        test,
        Options {
            values,
            ..Options::default()
        },
    )
    .await;
    wait_for("admission of namespaced Buckets", WAIT, || async {
        r.webhooks_ready("s3.aws.m.upbound.io", "buckets")
            .await
            .then_some(())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    Some(r)
}

/// Done when: `poll-interval: 5 minutes` is denied naming Go's duration
/// format and saying the provider ignores it, `0s` is denied, `500ms` is
/// allowed with no warning under the chart's default minimum (0, as
/// providers have none unless they opt in), `90s` is allowed; an empty
/// `reconcile-requested-at` is denied.
/// Needs: any supported server (1.30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_annotations_are_read_as_crossplane_reads_them() {
    let test = "e2e-v2-annotations";
    let Some(r) = release_for_buckets(test, None).await else {
        return;
    };
    let path = buckets(&r.workload_ns);
    let annotated = |name: &str, a: Value| bucket(&r, name, json!({"annotations": a}), json!({}));

    let resp = api::create(
        &r.client,
        &path,
        &annotated("words", json!({"crossplane.io/poll-interval": "5 minutes"})),
        false,
    )
    .await
    .unwrap();
    assert!(denied_by(&resp, "reconcile-annotations"), "{}", resp.body);
    let m = resp.message();
    assert!(
        m.contains("crossplane.io/poll-interval \"5 minutes\" is not a Go duration"),
        "{m}"
    );
    assert!(m.contains("Go duration (time.ParseDuration)"), "{m}");
    assert!(m.contains("\"90s\""), "{m}");
    assert!(
        m.contains("the provider keeps its default poll interval"),
        "{m}"
    );

    let resp = api::create(
        &r.client,
        &path,
        &annotated("zero", json!({"crossplane.io/poll-interval": "0s"})),
        false,
    )
    .await
    .unwrap();
    assert!(denied_by(&resp, "reconcile-annotations"), "{}", resp.body);
    assert!(
        resp.message()
            .contains("crossplane.io/poll-interval \"0s\" (0s) is zero"),
        "{}",
        resp.message()
    );

    let resp = api::create(
        &r.client,
        &path,
        &annotated("fast", json!({"crossplane.io/poll-interval": "500ms"})),
        false,
    )
    .await
    .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(
        !resp
            .warnings
            .iter()
            .any(|w| w.starts_with("reconcile-annotations")),
        "{:?}",
        resp.warnings
    );

    let resp = api::create(
        &r.client,
        &path,
        &annotated("empty", json!({"crossplane.io/reconcile-requested-at": ""})),
        false,
    )
    .await
    .unwrap();
    assert!(denied_by(&resp, "reconcile-annotations"), "{}", resp.body);

    let resp = api::create(
        &r.client,
        &path,
        &annotated(
            "ok",
            json!({"crossplane.io/poll-interval": "90s",
                   "crossplane.io/reconcile-requested-at": "2026-11-28T07:00:00Z"}),
        ),
        false,
    )
    .await
    .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(
        !resp
            .warnings
            .iter()
            .any(|w| w.starts_with("reconcile-annotations")),
        "{:?}",
        resp.warnings
    );
}

/// A provider family of this test's own: ProviderConfig (namespaced) and
/// ClusterProviderConfig in `m.upbound.io`, which only this release may
/// list, so that no other release judges its Buckets by them (a release
/// judges only families whose configs it can list). The Buckets'
/// `s3.aws.m.upbound.io` ends with it, and no other listed family is
/// longer here. Written here, not copied: the smallest CRDs with
/// Crossplane's categories.
const FAMILY: &str = "m.upbound.io";

fn provider_config_crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{FAMILY}")},
        "spec": {
            "group": FAMILY,
            "scope": scope,
            "names": {"kind": kind, "listKind": format!("{kind}List"),
                      "plural": plural, "singular": kind.to_lowercase(),
                      "categories": ["crossplane", "providerconfig", "e2ev2"]},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
                "subresources": {"status": {}},
            }],
        },
    })
}

async fn ensure_crd(admin: &kube::Client, crd: Value) {
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(admin.clone());
    if crds
        .get_opt(crd.metadata.name.as_deref().unwrap())
        .await
        .unwrap()
        .is_none()
    {
        support::cluster::create_crd(admin, &crd).await.unwrap();
    }
}

/// Done when: a `.m.` Bucket whose `providerConfigRef.kind` is
/// `ProviderConfigs` is denied naming the two kinds that exist, and a
/// namespaced ProviderConfig that exists in the MR's namespace satisfies
/// `provider-config-exists`, while a ClusterProviderConfig of that name
/// does not exist. The configs are read under the chart's RBAC for the
/// family (`rbac.audit.providerFamilies`).
/// Needs: any supported server (1.30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_mr_names_a_served_provider_config_kind_looked_up_in_its_scope() {
    let test = "e2e-v2-provider-configs";
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_crd(
        &admin,
        provider_config_crd("ProviderConfig", "providerconfigs", "Namespaced"),
    )
    .await;
    ensure_crd(
        &admin,
        provider_config_crd("ClusterProviderConfig", "clusterproviderconfigs", "Cluster"),
    )
    .await;
    let values = format!(
        "rbac:\n  audit:\n    apiGroups: [s3.aws.m.upbound.io]\n    providerFamilies:\n      - group: {FAMILY}\n        services: []\n"
    );
    let Some(r) = release_for_buckets(test, Some(values)).await else {
        return;
    };
    let path = buckets(&r.workload_ns);
    let with_ref =
        |name: &str, pc: Value| bucket(&r, name, json!({}), json!({"providerConfigRef": pc}));

    // The typo: denied once the replica knows the family, naming its kinds.
    let typo = with_ref("typo", json!({"kind": "ProviderConfigs", "name": "team"}));
    wait_for("the unserved kind denied", WAIT, || async {
        let resp = api::create(&r.client, &path, &typo, true).await.ok()?;
        denied_by(&resp, "provider-config-kind").then_some(())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let resp = api::create(&r.client, &path, &typo, false).await.unwrap();
    assert!(denied_by(&resp, "provider-config-kind"), "{}", resp.body);
    let m = resp.message();
    assert!(
        m.contains(&format!(
            "spec.providerConfigRef.kind \"ProviderConfigs\" is not a kind {FAMILY} serves; it serves ClusterProviderConfig and ProviderConfig"
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "ProviderConfig (in namespace \"{}\")",
            r.workload_ns
        )),
        "{m}"
    );

    // A namespaced ProviderConfig in the MR's namespace.
    let pcs = r.namespaced_api(&support::resource(
        FAMILY,
        "v1beta1",
        "ProviderConfig",
        "providerconfigs",
    ));
    let team: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{FAMILY}/v1beta1"), "kind": "ProviderConfig",
        "metadata": {"name": "team", "namespace": r.workload_ns},
        "spec": {"credentials": {"source": "None"}},
    }))
    .unwrap();
    pcs.create(&PostParams::default(), &team).await.unwrap();
    let pc_exists = |resp: &api::Response| {
        resp.warnings
            .iter()
            .filter(|w| w.starts_with("provider-config-exists: "))
            .cloned()
            .collect::<Vec<_>>()
    };
    let ok = with_ref("team", json!({"kind": "ProviderConfig", "name": "team"}));
    wait_for("the namespaced ProviderConfig found", WAIT, || async {
        let resp = api::create(&r.client, &path, &ok, true).await.ok()?;
        (resp.status == 201 && pc_exists(&resp).is_empty()).then_some(())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let resp = api::create(&r.client, &path, &ok, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(pc_exists(&resp).is_empty(), "{:?}", resp.warnings);

    // The same name as a ClusterProviderConfig: another object, which does
    // not exist. Admitted (a warning), since GitOps may create it next.
    let cluster_ref = with_ref(
        "cluster",
        json!({"kind": "ClusterProviderConfig", "name": "team"}),
    );
    let resp = api::create(&r.client, &path, &cluster_ref, false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let w = pc_exists(&resp);
    assert!(
        w.iter().any(|w| w.contains(&format!(
            "ClusterProviderConfig \"team\" ({FAMILY}) does not exist"
        ))),
        "{:?}",
        resp.warnings
    );
    let _ = pcs.delete("team", &DeleteParams::default()).await;
}

/// A namespaced MR has no deletionPolicy: deletion protection holds while
/// its managementPolicies have Delete, its fix names managementPolicies
/// only, and a set without Delete makes it deletable.
/// Needs: any supported server (1.30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_namespaced_mr_is_orphaned_by_its_management_policies() {
    let test = "e2e-v2-deletion";
    let Some(r) = release_for_buckets(test, None).await else {
        return;
    };
    let path = buckets(&r.workload_ns);
    let protected = bucket(
        &r,
        "kept",
        json!({"annotations": {"mrguard.io/deletion-protection": "true"}}),
        json!({}),
    );
    let resp = api::create(&r.client, &path, &protected, false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let name = protected["metadata"]["name"].as_str().unwrap().to_string();
    let one = format!("{path}/{name}");

    let resp = api::request(&r.client, "DELETE", &one, "application/json", None)
        .await
        .unwrap();
    assert!(denied_by(&resp, "deletion-protection"), "{}", resp.body);
    let m = resp.message();
    assert!(m.contains("spec.managementPolicies without Delete"), "{m}");
    assert!(m.contains("namespaced MRs have no deletionPolicy"), "{m}");
    assert!(!m.contains("deletionPolicy: Orphan"), "{m}");

    let patch =
        json!({"spec": {"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]}});
    let resp = api::request(
        &r.client,
        "PATCH",
        &one,
        "application/merge-patch+json",
        Some(&patch),
    )
    .await
    .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body);
    let resp = api::request(&r.client, "DELETE", &one, "application/json", None)
        .await
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body);
}
