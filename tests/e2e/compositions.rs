//! Compositions through a real API server (docs/compositions.md): a
//! Composition that patches an XR field into an immutable field is
//! admitted with mrguard's warnings, and when Crossplane core's account
//! then updates a created composed VPC with a new region, the denial names
//! the VPC's XR and claim. A staged action and an exception read on a
//! Composition's warnings as on an MR's.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::support::{self, api, wait_for, Options, WAIT};

/// No exemption for Crossplane core (only the providers are exempt), so the
/// test holds whatever the built-in configuration exempts.
const CONFIG: &str = r#"
exemptUsernames: ["system:serviceaccount:crossplane-system:provider-*"]
resources:
  - apiGroups: ["ec2.aws.upbound.io"]
    kinds: ["VPC", "Subnet", "InternetGateway"]
    externalName: IdentifierFromProvider
    immutableFields: ["spec.forProvider.region", "spec.forProvider.availabilityZone"]
"#;

const CROSSPLANE: &str = "system:serviceaccount:crossplane-system:crossplane";

/// One of Crossplane's own CRDs (`crds-crossplane/` of `fixtures`, the
/// folder MRGUARD_FIXTURES names), created once per API server, as it is.
pub(crate) async fn crossplane_crd(client: &kube::Client, fixtures: &std::path::Path, name: &str) {
    // The tests of this file run at once and share the CRD: whichever
    // comes second waits for the first one's to be served.
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let served = || support::cluster::wait_for_crd_condition(client, name, "Established", "True");
    if crds.get_opt(name).await.unwrap().is_some() {
        return served().await.unwrap();
    }
    let plural = name.split('.').next().unwrap();
    let text = std::fs::read_to_string(fixtures.join(format!(
        "crds-crossplane/apiextensions.crossplane.io_{plural}.yaml"
    )))
    .unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
    if let Err(e) = support::cluster::create_crd(client, &crd).await {
        assert!(e.contains("AlreadyExists"), "{e}");
        served().await.unwrap();
    }
}

/// Waits until the controller has written the Compositions webhook's
/// caBundle (with the others'): before, the API server cannot call it.
async fn composition_webhook_ready(r: &support::Release) {
    let ca = r.secret_ca().await.unwrap();
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    wait_for("the Compositions webhook's caBundle", WAIT, || async {
        let (_, v) = r.configurations().await?;
        (v["webhooks"][1]["name"] == "compositions.validate.mrguard.io"
            && v["webhooks"][1]["clientConfig"]["caBundle"] == json!(ca))
        .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
}

fn composition(name: &str) -> Value {
    let text = std::fs::read_to_string(
        support::repo_root().join("examples/compositions/network-pipeline.yaml"),
    )
    .unwrap();
    let mut c: Value = serde_saphyr::from_str(&text).unwrap();
    c["metadata"]["name"] = json!(name);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composition_is_warned_about_and_a_composed_mr_denial_names_its_xr() {
    let Some(cluster) = support::require_cluster(
        "a_composition_is_warned_about_and_a_composed_mr_denial_names_its_xr",
    )
    .await
    else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(
        "a_composition_is_warned_about_and_a_composed_mr_denial_names_its_xr",
    ) else {
        return;
    };
    let r = support::install(
        cluster,
        "e2e-compositions",
        Options {
            config: Some(CONFIG.into()),
            ..Options::default()
        },
    )
    .await;
    let config = r.rendered.config_yaml().unwrap();
    assert!(!config.contains("crossplane-system:*"), "{config}");
    crossplane_crd(
        &r.client,
        &fixtures,
        "compositions.apiextensions.crossplane.io",
    )
    .await;
    // The controller writes the caBundle of the Compositions webhook with
    // the others'.
    composition_webhook_ready(&r).await;

    // kubectl create: admitted, with a warning per patch into an immutable
    // field; none for the tags.
    let name = "xnetworks.e2e-compositions.example.org";
    let obj = serde_json::to_value(r.object(composition(name))).unwrap();
    let path = "/apis/apiextensions.crossplane.io/v1/compositions";
    let resp = api::create(&r.client, path, &obj, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let w: Vec<&String> = resp
        .warnings
        .iter()
        .filter(|w| w.starts_with("composition-immutable-patch: "))
        .collect();
    assert_eq!(w.len(), 5, "{:#?}", resp.warnings);
    assert!(w[0].starts_with(
        "composition-immutable-patch: step \"patch-and-transform\", resource \"vpc\", patches[0]: \
         FromCompositeFieldPath spec.parameters.region -> spec.forProvider.region"
    ), "{w:#?}");
    assert!(
        w[1].starts_with(
            "composition-immutable-patch: step \"patch-and-transform\", resource \"subnet-a\", \
         patch set \"subnet-location\" patches[0] (via patches[0]): CombineFromComposite"
        ),
        "{w:#?}"
    );
    assert!(!resp
        .warnings
        .iter()
        .any(|w| w.contains("-> spec.forProvider.tags")));
    // An UPDATE is judged too.
    let compositions = r.cluster_api(&support::resource(
        "apiextensions.crossplane.io",
        "v1",
        "Composition",
        "compositions",
    ));
    compositions
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();

    // Crossplane core creates the composed VPC of claim team-a/net, the
    // provider records creation, then core applies a region change of the claim.
    let core = api::impersonating(
        cluster.admin_kubeconfig(),
        CROSSPLANE,
        &[
            "system:masters",
            "system:serviceaccounts",
            "system:authenticated",
        ],
    )
    .await
    .unwrap();
    let vpcs = kube::Api::<kube::api::DynamicObject>::all_with(core, &support::vpc_resource());
    let mut vpc = support::vpc("net-x7k2p-4mz8q", json!({}));
    vpc["metadata"]["annotations"] = json!({"crossplane.io/composition-resource-name": "vpc"});
    vpc["metadata"]["labels"] = json!({
        "crossplane.io/composite": "net-x7k2p",
        "crossplane.io/claim-name": "net",
        "crossplane.io/claim-namespace": "team-a",
    });
    vpc["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "aws.example.org/v1alpha1", "kind": "XNetwork", "name": "net-x7k2p",
        "uid": "0b6f9a52-2f4e-4c1e-9c59-4d1f3a0e7d21", "controller": true, "blockOwnerDeletion": true,
    }]);
    vpcs.create(&PostParams::default(), &r.object(vpc))
        .await
        .unwrap();
    vpcs.patch(
        "net-x7k2p-4mz8q",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}}})),
    )
    .await
    .unwrap();
    let e = vpcs
        .patch(
            "net-x7k2p-4mz8q",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"forProvider": {"region": "eu-west-1"}}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("expected a denial, got {e}");
    };
    assert_eq!(s.code, 403, "{}", s.message);
    assert!(s.message.contains("validate.mrguard.io"), "{}", s.message);
    assert!(
        s.message.contains("[immutable-field] spec.forProvider.region is immutable and changed from \"us-east-1\" to \"eu-west-1\""),
        "{}",
        s.message
    );
    assert!(
        s.message.contains("This MR is composed by XNetwork \"net-x7k2p\" (claim \"net\" in namespace \"team-a\"): undo the change on the claim"),
        "{}",
        s.message
    );

    // `mrguard explain` finds the Composition through the XR: the VPC's
    // template's patches, and all of them for the XR.
    xr_crd(&r.client).await;
    let xrs = r.cluster_api(&support::resource(
        "aws.example.org",
        "v1alpha1",
        "XNetwork",
        "xnetworks",
    ));
    xrs.create(
        &PostParams::default(),
        &r.object(
            json!({"apiVersion": "aws.example.org/v1alpha1", "kind": "XNetwork",
            "metadata": {"name": "net-x7k2p"},
            "spec": {"compositionRef": {"name": name}, "parameters": {"region": "us-east-1"}}}),
        ),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mrguard.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let (config, kubeconfig) = (
        config.display().to_string(),
        cluster.admin_kubeconfig().display().to_string(),
    );
    let explain = |target: &str| {
        let out = crate::check_live::mrguard(&[
            "explain",
            target,
            "--kubeconfig",
            &kubeconfig,
            "--config",
            &config,
            "-o",
            "json",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            crate::check_live::text(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let e = explain("vpcs.ec2.aws.upbound.io/net-x7k2p-4mz8q");
    assert_eq!(e["composition"]["name"], name, "{e:#}");
    assert_eq!(e["composition"]["resource"], "vpc");
    let patches = e["composition"]["patches"].as_array().unwrap();
    assert_eq!(patches.len(), 1, "{e:#}");
    assert_eq!(patches[0]["target"], "spec.forProvider.region");
    assert_eq!(patches[0]["sources"], json!(["spec.parameters.region"]));
    let e = explain("xnetworks.aws.example.org/net-x7k2p");
    assert_eq!(
        e["composition"]["patches"].as_array().unwrap().len(),
        5,
        "{e:#}"
    );

    // Once the XRD makes region, geo and area immutable (every replica
    // watches XRDs), the claim refuses the change first: no warnings.
    crossplane_crd(
        &r.client,
        &fixtures,
        "compositeresourcedefinitions.apiextensions.crossplane.io",
    )
    .await;
    let xrd: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(
            support::repo_root().join("examples/compositions/xrd-network-immutable-region.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let xrds = r.cluster_api(&support::resource(
        "apiextensions.crossplane.io",
        "v1",
        "CompositeResourceDefinition",
        "compositeresourcedefinitions",
    ));
    xrds.create(&PostParams::default(), &r.object(xrd))
        .await
        .unwrap();
    let other =
        serde_json::to_value(r.object(composition("xnetworks-2.e2e-compositions.example.org")))
            .unwrap();
    wait_for(
        "no warnings once the XRD freezes the sources",
        WAIT,
        || async {
            let resp = api::create(&r.client, path, &other, true).await.ok()?;
            (resp.status == 201
                && !resp
                    .warnings
                    .iter()
                    .any(|w| w.starts_with("composition-immutable-patch: ")))
            .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
}

/// Staged enforcement and exceptions reach Compositions as every rule:
/// with `composition-immutable-patch` a staged Deny, `kubectl create` of a
/// Composition prints each warning with the date it will be denied from;
/// an exception whose `match.names` names another Composition waives its
/// findings, and each warning names the exception and its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_composition_rule_warns_with_its_date_and_an_exception_names_itself() {
    const TEST: &str =
        "a_staged_composition_rule_warns_with_its_date_and_an_exception_names_itself";
    let Some(cluster) = support::require_cluster(TEST).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(TEST) else {
        return;
    };
    let waived = "xnetworks-legacy.e2e-compositions-staged.example.org";
    let r = support::install(
        cluster,
        "e2e-compositions-staged",
        Options {
            config: Some(format!(
                "{CONFIG}rules:\n  composition-immutable-patch: {{action: Deny, warnUntil: \"2099-06-01T00:00:00Z\"}}\n\
                 exceptions:\n  - name: net-legacy\n    rules: [composition-immutable-patch]\n    match: {{names: [\"{waived}\"]}}\n    \
                 reason: the legacy network is retired in 2099 (ticket NET-7)\n    expires: \"2099-01-31T00:00:00Z\"\n"
            )),
            ..Options::default()
        },
    )
    .await;
    crossplane_crd(
        &r.client,
        &fixtures,
        "compositions.apiextensions.crossplane.io",
    )
    .await;
    let path = "/apis/apiextensions.crossplane.io/v1/compositions";
    let ours = |w: &&String| w.starts_with("composition-immutable-patch: ");

    // The webhook answers once the controller has written its caBundle.
    composition_webhook_ready(&r).await;
    // Its own XR kind, one no XRD describes: the other test leaves an XRD
    // that freezes XNetwork's patch sources on the shared API server, and
    // every replica reads XRDs cluster-wide, so XNetwork Compositions get
    // no warnings here once it has run.
    let own_xr = |name: &str| {
        let mut c = composition(name);
        c["spec"]["compositeTypeRef"] =
            json!({"apiVersion": "staged.example.org/v1alpha1", "kind": "XStagedNetwork"});
        serde_json::to_value(r.object(c)).unwrap()
    };
    let staged = own_xr("xnetworks.e2e-compositions-staged.example.org");
    // The last dry run's answer, for the failure message.
    let last = std::sync::Mutex::new(String::new());
    wait_for("the staged warnings", WAIT, || async {
        let resp = match api::create(&r.client, path, &staged, true).await {
            Ok(resp) => resp,
            Err(e) => {
                *last.lock().unwrap() = format!("error: {e}");
                return None;
            }
        };
        *last.lock().unwrap() = format!("{} {:?} {}", resp.status, resp.warnings, resp.body);
        resp.warnings.iter().any(|w| ours(&w)).then_some(())
    })
    .await
    .unwrap_or_else(|e| {
        let last = last.lock().unwrap().clone();
        panic!("{}", r.with_logs(format!("{e}\nthe last dry run: {last}")))
    });
    let resp = api::create(&r.client, path, &staged, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let w: Vec<&String> = resp.warnings.iter().filter(ours).collect();
    assert_eq!(w.len(), 5, "{:#?}", resp.warnings);
    for w in &w {
        assert!(
            w.contains("(staged: this will be denied from 2099-06-01T00:00:00Z). Fix: "),
            "{w}"
        );
    }

    let legacy = own_xr(waived);
    let resp = api::create(&r.client, path, &legacy, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let w: Vec<&String> = resp.warnings.iter().filter(ours).collect();
    assert_eq!(w.len(), 5, "{:#?}", resp.warnings);
    for w in &w {
        assert!(
            w.starts_with(
                "composition-immutable-patch: waived by exception net-legacy (expires 2099-01-31T00:00:00Z): step "
            ),
            "{w}"
        );
    }
}

/// A cluster-scoped XR kind for XNetwork, as Crossplane generates from
/// examples/compositions/xrd-network.yaml (its schema kept open here).
async fn xr_crd(client: &kube::Client) {
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    if crds
        .get_opt("xnetworks.aws.example.org")
        .await
        .unwrap()
        .is_some()
    {
        return;
    }
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "xnetworks.aws.example.org"},
        "spec": {"group": "aws.example.org", "scope": "Cluster",
            "names": {"kind": "XNetwork", "plural": "xnetworks", "singular": "xnetwork", "listKind": "XNetworkList",
                      "categories": ["composite"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    if let Err(e) = support::cluster::create_crd(client, &crd).await {
        assert!(e.contains("AlreadyExists"), "{e}");
        support::cluster::wait_for_crd_condition(
            client,
            "xnetworks.aws.example.org",
            "Established",
            "True",
        )
        .await
        .unwrap();
    }
}
