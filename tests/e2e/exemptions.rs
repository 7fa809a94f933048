//! Exact exemptions against the real API server with the chart's
//! default configuration and RBAC: only the service account of the
//! provider that serves a kind is exempt, derived from the
//! ProviderRevision that controls the kind's CRD and the
//! DeploymentRuntimeConfig it names. Crossplane core is judged.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::support::{self, api, wait_for, Options, WAIT};

/// A group the chart's audit RBAC covers, so that other tests' releases
/// sharing the API server count no extra forbidden kind.
const GROUP: &str = "ec2.aws.upbound.io";

/// Crossplane's ProviderRevision and DeploymentRuntimeConfig CRDs (the
/// upstream ones where the server takes them, else stand-ins), once per API
/// server: tests share it.
pub(crate) async fn install_package_crds(client: &kube::Client) {
    use support::crossplane::{install, PackageKind};
    for kind in [
        PackageKind::ProviderRevision,
        PackageKind::DeploymentRuntimeConfig,
    ] {
        install(client, kind)
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    }
}

fn pkg(kind: &str, version: &str, plural: &str) -> ApiResource {
    support::resource("pkg.crossplane.io", version, kind, plural)
}

/// Creates a cluster-scoped object and returns its uid.
async fn create(client: &kube::Client, ar: &ApiResource, obj: Value) -> String {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", ar.kind));
    created.metadata.uid.unwrap()
}

/// An MR CRD of GROUP controlled by `revision` (uid `uid`), as Crossplane's
/// package manager sets it, with the Provider as a second owner.
fn owned_crd(kind: &str, plural: &str, revision: &str, uid: &str) -> CustomResourceDefinition {
    let mut crd = support::managed_crd(GROUP, "v1beta1", kind, plural, "Cluster");
    crd["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": revision,
         "uid": uid, "controller": true, "blockOwnerDeletion": true},
        {"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "name": "provider-e2e",
         "uid": "00000000-0000-0000-0000-000000000001", "controller": false}
    ]);
    serde_json::from_value(crd).unwrap()
}

fn mr(name: &str, region: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1beta1"),
        "metadata": {"name": name, "annotations": {
            "crossplane.io/external-name": name,
            "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}},
        "spec": {"forProvider": {"region": region}},
    })
}

fn region_patch(region: &str) -> Patch<Value> {
    Patch::Merge(json!({"spec": {"forProvider": {"region": region}}}))
}

/// The API server's denial, naming mrguard's rule.
fn denied_by(e: kube::Error, rule: &str) {
    let kube::Error::Api(s) = e else {
        panic!("expected a denial naming {rule}, got {e}");
    };
    assert!(s.message.contains("validate.mrguard.io"), "{}", s.message);
    assert!(s.message.contains(&format!("[{rule}]")), "{}", s.message);
}

/// With the chart's defaults (no exemptUsernames): Crossplane core's
/// ServiceAccount changing an immutable field of a created MR is denied;
/// the provider's own account (named after the ProviderRevision that
/// controls the CRD) may, but only for the kinds that revision serves; a
/// DeploymentRuntimeConfig's `serviceAccountTemplate` moves the exemption
/// to the account it names. A glob such as
/// `system:serviceaccount:crossplane-system:*` would exempt core too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_provider_serving_a_kind_is_exempt_and_crossplane_core_is_judged() {
    let Some(cluster) = support::require_cluster(
        "only_the_provider_serving_a_kind_is_exempt_and_crossplane_core_is_judged",
    )
    .await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    install_package_crds(&admin).await;

    // Revision A runs as the ServiceAccount of its name; revision B's
    // runtime config names another one.
    let revisions = pkg("ProviderRevision", "v1", "providerrevisions");
    let rev_spec = |config: &str| {
        json!({"desiredState": "Active", "revision": 1,
               "image": "xpkg.upbound.io/e2e/provider-e2e:v1.0.0",
               "runtimeConfigRef": {"name": config}})
    };
    let uid_a = create(
        &admin,
        &revisions,
        json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
               "metadata": {"name": "provider-e2e-a-1a2b3c"}, "spec": rev_spec("default")}),
    )
    .await;
    create(
        &admin,
        &pkg(
            "DeploymentRuntimeConfig",
            "v1beta1",
            "deploymentruntimeconfigs",
        ),
        json!({"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig",
               "metadata": {"name": "e2e-exempt-irsa"},
               "spec": {"serviceAccountTemplate": {"metadata": {"name": "provider-e2e-irsa"}}}}),
    )
    .await;
    let uid_b = create(
        &admin,
        &revisions,
        json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
               "metadata": {"name": "provider-e2e-b-4d5e6f"}, "spec": rev_spec("e2e-exempt-irsa")}),
    )
    .await;
    for crd in [
        owned_crd("E2eWidget", "e2ewidgets", "provider-e2e-a-1a2b3c", &uid_a),
        owned_crd("E2eGadget", "e2egadgets", "provider-e2e-b-4d5e6f", &uid_b),
    ] {
        support::cluster::create_crd(&admin, &crd).await.unwrap();
    }

    // The chart's default configuration (no exemptUsernames); Crossplane
    // runs in crossplane-system, where the old default glob
    // `system:serviceaccount:crossplane-system:*` matched core too.
    let r = support::install(
        cluster,
        "e2e-exempt",
        Options {
            values: Some("crossplane:\n  namespace: crossplane-system\n".into()),
            ..Options::default()
        },
    )
    .await;
    wait_for(
        "both webhooks to cover widgets and gadgets",
        WAIT,
        || async {
            (r.webhooks_ready(GROUP, "e2ewidgets").await
                && r.webhooks_ready(GROUP, "e2egadgets").await)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    let sa = |name: &str| format!("system:serviceaccount:crossplane-system:{name}");
    // Impersonated accounts with an administrator's rights, so that only
    // the webhook can refuse them.
    let as_user = |user: String| async move {
        api::impersonating(
            cluster.admin_kubeconfig(),
            &user,
            &[
                "system:masters",
                "system:serviceaccounts",
                "system:authenticated",
            ],
        )
        .await
        .unwrap()
    };
    let core = as_user(sa("crossplane")).await;
    let rbac_manager = as_user(sa("rbac-manager")).await;
    let provider_a = as_user(sa("provider-e2e-a-1a2b3c")).await;
    let provider_b = as_user(sa("provider-e2e-irsa")).await;
    let b_by_revision_name = as_user(sa("provider-e2e-b-4d5e6f")).await;

    let widgets = support::resource(GROUP, "v1beta1", "E2eWidget", "e2ewidgets");
    let gadgets = support::resource(GROUP, "v1beta1", "E2eGadget", "e2egadgets");
    let admin_api = |ar: &ApiResource| r.cluster_api(ar);
    let mut w = mr("w1", "us-east-1");
    w["kind"] = json!("E2eWidget");
    admin_api(&widgets)
        .create(&PostParams::default(), &r.object(w))
        .await
        .unwrap();
    let mut g = mr("g1", "us-east-1");
    g["kind"] = json!("E2eGadget");
    admin_api(&gadgets)
        .create(&PostParams::default(), &r.object(g))
        .await
        .unwrap();
    let api_as = |client: &kube::Client, ar: &ApiResource| -> Api<DynamicObject> {
        Api::all_with(client.clone(), ar)
    };
    let pp = PatchParams::default();

    // The provider's own account may change the immutable region of the
    // kind it serves (it late-initializes and records); retried until this
    // replica's watches have derived it.
    wait_for("provider A exempt for Widget", WAIT, || async {
        api_as(&provider_a, &widgets)
            .patch("w1", &pp, &region_patch("eu-west-1"))
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // B's runtime config names its account: that account is exempt for Gadget.
    wait_for(
        "provider B (runtime config account) exempt for Gadget",
        WAIT,
        || async {
            api_as(&provider_b, &gadgets)
                .patch("g1", &pp, &region_patch("eu-west-1"))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    // Crossplane core and the RBAC manager are judged like anyone.
    for (who, client) in [("core", &core), ("rbac-manager", &rbac_manager)] {
        for (ar, name) in [(&widgets, "w1"), (&gadgets, "g1")] {
            let e = api_as(client, ar)
                .patch(name, &pp, &region_patch("ap-south-1"))
                .await
                .expect_err(&format!("{who} changed the region of {name}"));
            denied_by(e, "immutable-field");
        }
    }
    // A provider is not exempt for a kind it does not serve.
    let e = api_as(&provider_a, &gadgets)
        .patch("g1", &pp, &region_patch("ap-south-1"))
        .await
        .expect_err("provider A changed a Gadget's region");
    denied_by(e, "immutable-field");
    let e = api_as(&provider_b, &widgets)
        .patch("w1", &pp, &region_patch("ap-south-1"))
        .await
        .expect_err("provider B changed a Widget's region");
    denied_by(e, "immutable-field");
    // With a runtime config naming another account, the revision's name
    // is not the provider's account.
    let e = api_as(&b_by_revision_name, &gadgets)
        .patch("g1", &pp, &region_patch("ap-south-1"))
        .await
        .expect_err("the revision-named account changed a Gadget's region");
    denied_by(e, "immutable-field");
    // External names too: core may not rewrite one.
    let e = api_as(&core, &widgets)
        .patch(
            "w1",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"annotations": {"crossplane.io/external-name": "other"}}}),
            ),
        )
        .await
        .expect_err("core changed the external name");
    denied_by(e, "external-name-change");

    // What the allowed writes stored.
    let stored = serde_json::to_value(admin_api(&widgets).get("w1").await.unwrap()).unwrap();
    assert_eq!(stored["spec"]["forProvider"]["region"], "eu-west-1");
    r.check_alive().unwrap();
}
