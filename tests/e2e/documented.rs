//! Immutable fields derived from the providers' CRD documentation
//! (docs/documented-immutables.md), through a real API server: every
//! replica derives them from a CRD installed while mrguard runs, and a
//! change to one is warned at `kubectl apply` (a JSON merge patch).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use crate::support::{self, api, wait_for, Options, WAIT};

const GROUP: &str = "storage.azure.upbound.io";
const PATH: &str = "/apis/storage.azure.upbound.io/v1beta1/accounts";

/// The provider's own Account CRD, from the folder MRGUARD_FIXTURES names.
fn account_crd(fixtures: &std::path::Path) -> CustomResourceDefinition {
    let p = fixtures.join("crds-documented/storage.azure.upbound.io_accounts.yaml");
    let text = std::fs::read_to_string(&p).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// `kubectl apply` of a changed manifest: a JSON merge patch.
async fn apply(client: &kube::Client, name: &str, patch: Value, dry_run: bool) -> api::Response {
    let q = if dry_run { "?dryRun=All" } else { "" };
    api::request(
        client,
        "PATCH",
        &format!("{PATH}/{name}{q}"),
        "application/merge-patch+json",
        Some(&patch),
    )
    .await
    .unwrap()
}

fn tier_warning(r: &api::Response) -> Option<&String> {
    r.warnings
        .iter()
        .find(|w| w.starts_with("documented-immutable-field: spec.forProvider.accountTier"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newly_installed_crds_documented_fields_are_warned_at_apply() {
    let Some(cluster) =
        support::require_cluster("a_newly_installed_crds_documented_fields_are_warned_at_apply")
            .await
    else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(
        "a_newly_installed_crds_documented_fields_are_warned_at_apply",
    ) else {
        return;
    };
    let r = support::install(
        cluster,
        "e2e-documented",
        Options {
            replicas: 2,
            ..Options::default()
        },
    )
    .await;
    // Installed only now, while both replicas run.
    if let Err(e) = support::cluster::create_crd(&r.client, &account_crd(&fixtures)).await {
        assert!(e.contains("already exists"), "{e}");
    }
    wait_for("the Account kind in both configurations", WAIT, || async {
        r.webhooks_ready(GROUP, "accounts").await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    let obj = r.object(json!({
        "apiVersion": format!("{GROUP}/v1beta1"), "kind": "Account",
        "metadata": {"name": "documented", "annotations": {
            "crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}},
        "spec": {"forProvider": {
            "accountReplicationType": "LRS", "accountTier": "Standard",
            "location": "West Europe", "resourceGroupName": "example",
            "tags": {"environment": "staging"}}},
    }));
    let created = api::create(&r.client, PATH, &serde_json::to_value(&obj).unwrap(), false)
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body);

    let tier = json!({"spec": {"forProvider": {"accountTier": "Premium"}}});
    let first = wait_for("a documented-immutable-field warning", WAIT, || async {
        let resp = apply(&r.client, "documented", tier.clone(), true).await;
        tier_warning(&resp).cloned()
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert!(
        first.contains("changed from \"Standard\" to \"Premium\"")
            && first.contains("\"Changing this forces a new resource to be created.\""),
        "{first}"
    );
    // Every replica knows it: requests go round robin over both.
    wait_for("both replicas to warn", WAIT, || async {
        for _ in 0..4 {
            let resp = apply(&r.client, "documented", tier.clone(), true).await;
            tier_warning(&resp)?;
        }
        Some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    // Tags are not documented as immutable: nothing about immutability.
    let tags = json!({"spec": {"forProvider": {"tags": {"environment": "prod"}}}});
    let resp = apply(&r.client, "documented", tags, false).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(
        !resp.warnings.iter().any(|w| w.contains("immutable")),
        "{:?}",
        resp.warnings
    );
    // The real apply goes through, warned (the rule's default is Warn).
    let resp = apply(&r.client, "documented", tier, false).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(tier_warning(&resp).is_some(), "{:?}", resp.warnings);
    assert_eq!(resp.body["spec"]["forProvider"]["accountTier"], "Premium");
}
