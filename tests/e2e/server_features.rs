//! What mrguard offers only with a newer API server: each test names the
//! feature it needs ([`needs`]) and is reported as skipped with that
//! version on an older server, never passed.
//!
//! - the ValidatingAdmissionPolicies `mrguard export vap` writes
//!   (admissionregistration.k8s.io/v1, 1.30) deny in the API server itself
//!   what mrguard's webhook denies, with mrguard not running;
//! - the chart's `webhooks.matchConditions` (1.28) keep exempt users'
//!   requests from reaching the webhooks at all;
//! - a CRD's own validation rules (1.25) judge the object mrguard mutated;
//! - the MutatingAdmissionPolicy `mrguard export map` writes
//!   (admissionregistration.k8s.io/v1, 1.36) defaults a created MR in the
//!   API server itself as `/mutate` would, with mrguard not running.

use serde_json::{json, Value};

use crate::check_live::{mrguard, text};
use crate::support::{self, api, needs, Options};

const PROVIDER: &str = "system:serviceaccount:crossplane-system:provider-aws-s3";
const PROVIDER_GROUPS: &[&str] = &[
    "system:masters",
    "system:serviceaccounts",
    "system:authenticated",
];

fn vpcs() -> &'static str {
    "/apis/ec2.aws.upbound.io/v1beta1/vpcs"
}

/// A merge patch of `path` (an object's own path).
async fn merge_patch(client: &kube::Client, path: &str, patch: Value) -> api::Response {
    api::request(
        client,
        "PATCH",
        path,
        "application/merge-patch+json",
        Some(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("PATCH {path}: {e}"))
}

/// `mrguard export vap` with the built-in configuration, its documents.
fn exported_policies() -> Vec<Value> {
    let out = mrguard(&["export", "vap"]);
    assert!(
        out.status.success(),
        "mrguard export vap failed: {}",
        text(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&text(&out.stdout))
        .expect("export vap writes YAML")
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// The exported policies, applied to an API server where mrguard does not
/// run, deny a region change of a created VPC with mrguard's message, and
/// let through what mrguard lets through: a change before creation, and a
/// change of a mutable field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_policies_deny_in_the_api_server_what_mrguard_denies() {
    let test = "exported_policies_deny_in_the_api_server_what_mrguard_denies";
    if !support::version_at_least(test, needs::VALIDATING_ADMISSION_POLICY) {
        return;
    }
    // Its own API server: the policies bind to every MR of every test.
    let Some(cluster) = support::require_own_cluster(test).await else {
        return;
    };
    let client = cluster.admin().await.unwrap();
    let docs = exported_policies();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains(&"ValidatingAdmissionPolicy"), "{kinds:?}");
    assert!(
        kinds.contains(&"ValidatingAdmissionPolicyBinding"),
        "{kinds:?}"
    );
    for d in &docs {
        let plural = match d["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => "validatingadmissionpolicies",
            Some("ValidatingAdmissionPolicyBinding") => "validatingadmissionpolicybindings",
            other => panic!("export vap wrote a {other:?}"),
        };
        let r = api::create(
            &client,
            &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
            d,
            false,
        )
        .await
        .unwrap();
        assert!(
            r.status < 300,
            "the API server refused {}: {}",
            d["metadata"]["name"],
            r.body
        );
    }

    let mut created = support::vpc("exported", json!({}));
    created["metadata"]["annotations"] =
        json!({"crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"});
    let r = api::create(&client, vpcs(), &created, false).await.unwrap();
    assert!(r.status < 300, "{}", r.body);
    let mut pending = support::vpc("not-yet-created", json!({}));
    pending["metadata"]["annotations"] = json!({});
    let r = api::create(&client, vpcs(), &pending, false).await.unwrap();
    assert!(r.status < 300, "{}", r.body);

    // The API server takes a moment to load new policies: until then a
    // change goes through, so each try moves the region on.
    let path = format!("{}/exported", vpcs());
    let mut tries = 0;
    let denied = support::wait_for("the exported policy to deny", support::WAIT, || {
        tries += 1;
        let (client, path) = (client.clone(), path.clone());
        let region = format!("eu-west-{tries}");
        async move {
            let r = merge_patch(
                &client,
                &path,
                json!({"spec": {"forProvider": {"region": region}}}),
            )
            .await;
            (r.status >= 400).then_some(r)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: {e}"));
    assert!(
        denied.status == 403 || denied.status == 422,
        "HTTP {}: {}",
        denied.status,
        denied.body
    );
    let m = denied.message();
    assert!(m.contains("ValidatingAdmissionPolicy"), "{m}");
    assert!(
        m.contains("spec.forProvider.region is immutable once the MR is created"),
        "{m}"
    );
    assert!(m.contains("immutable-field"), "{m}");

    // What mrguard allows, the policies allow.
    let r = merge_patch(
        &client,
        &format!("{}/not-yet-created", vpcs()),
        json!({"spec": {"forProvider": {"region": "eu-central-1"}}}),
    )
    .await;
    assert!(r.status < 300, "before creation: {}", r.body);
    let r = merge_patch(
        &client,
        &path,
        json!({"metadata": {"labels": {"team": "network"}}}),
    )
    .await;
    assert!(r.status < 300, "a label: {}", r.body);
}

/// With `webhooks.matchConditions.enabled`, an exempt user's writes are
/// never sent to mrguard (its request counter stays), while another user's
/// are; on an older server the field is dropped and every request reaches
/// the webhooks, which exempt the user themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_conditions_keep_exempt_users_off_the_webhooks() {
    let test = "match_conditions_keep_exempt_users_off_the_webhooks";
    let Some(cluster) = support::require_cluster_at(test, needs::MATCH_CONDITIONS).await else {
        return;
    };
    let r = support::install(
        cluster,
        "e2e-match-conditions",
        Options {
            config: Some(format!("exemptUsernames: [\"{PROVIDER}\"]\n")),
            values: Some("webhooks:\n  matchConditions:\n    enabled: true\n".into()),
            ..Options::default()
        },
    )
    .await;
    let admin = cluster.admin().await.unwrap();
    for kind in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ] {
        let got = api::request(
            &admin,
            "GET",
            &format!(
                "/apis/admissionregistration.k8s.io/v1/{kind}/{}",
                r.fullname
            ),
            "application/json",
            None,
        )
        .await
        .unwrap();
        let conditions = &got.body["webhooks"][0]["matchConditions"];
        assert!(
            conditions.as_array().is_some_and(|c| !c.is_empty()),
            "{kind} {}: the API server kept no matchConditions: {}",
            r.fullname,
            got.body
        );
    }

    let seen = |m: &support::Metrics| {
        m.get(
            "mrguard_admission_requests_total",
            &[("group", "s3.aws.upbound.io"), ("kind", "Bucket")],
        )
    };
    let provider = api::impersonating(cluster.admin_kubeconfig(), PROVIDER, PROVIDER_GROUPS)
        .await
        .unwrap();
    // A Bucket created by `client`, as the API server returned it.
    let create = |client: kube::Client, name: &'static str| {
        let bucket =
            serde_json::to_value(r.object(support::bucket(name, json!({"region": "us-east-1"}))))
                .unwrap();
        async move {
            let sent = api::create(
                &client,
                "/apis/s3.aws.upbound.io/v1beta1/buckets",
                &bucket,
                false,
            )
            .await
            .unwrap();
            assert!(sent.status < 300, "{}", sent.body);
            sent.body
        }
    };
    let before = seen(&r.replicas[0].metrics().await.unwrap());
    let created = create(provider, "from-the-provider").await;
    assert!(
        created["metadata"]["annotations"].is_null(),
        "the exempt create was mutated: {created}"
    );
    assert_eq!(
        seen(&r.replicas[0].metrics().await.unwrap()),
        before,
        "the exempt user's create reached mrguard"
    );
    create(admin, "from-a-user").await;
    assert!(
        seen(&r.replicas[0].metrics().await.unwrap()) >= before + 2.0,
        "a user's create reaches both webhooks"
    );
}

/// A CRD's validation rule judges the object after mrguard's mutation: an
/// AlternateContact without an email address gets mrguard's defaults and
/// is then refused by the CRD's own rule, with its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crds_validation_rule_judges_the_object_mrguard_mutated() {
    let test = "a_crds_validation_rule_judges_the_object_mrguard_mutated";
    let Some(cluster) = support::require_cluster_at(test, needs::CRD_VALIDATION_RULES).await else {
        return;
    };
    let r = support::install(cluster, "e2e-crd-rules", Options::default()).await;
    let path = "/apis/account.aws.upbound.io/v1beta1/alternatecontacts";
    let contact = |name: &str, email: Option<&str>| {
        let mut for_provider = json!({
            "alternateContactType": "OPERATIONS", "name": "Ops",
            "phoneNumber": "+1234567890", "title": "Ops",
        });
        if let Some(e) = email {
            for_provider["emailAddress"] = json!(e);
        }
        serde_json::to_value(r.object(json!({
            "apiVersion": "account.aws.upbound.io/v1beta1",
            "kind": "AlternateContact",
            "metadata": {"name": name},
            "spec": {"forProvider": for_provider},
        })))
        .unwrap()
    };
    let refused = api::create(&r.client, path, &contact("no-email", None), true)
        .await
        .unwrap();
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused
            .message()
            .contains("spec.forProvider.emailAddress is a required parameter"),
        "{}",
        refused.message()
    );
    let admitted = api::create(
        &r.client,
        path,
        &contact("with-email", Some("ops@example.com")),
        true,
    )
    .await
    .unwrap();
    assert!(admitted.status < 300, "{}", admitted.body);
    assert_eq!(
        admitted.body["metadata"]["annotations"]["crossplane.io/external-name"], "with-email",
        "mrguard's external-name initializer ran before the rule: {}",
        admitted.body
    );
}

/// A configuration whose defaults differ from what CRD defaulting writes,
/// so that the policy's work shows: another default name, one per
/// namespace, and a tags field.
const MAP_CONFIG: &str = "providerConfig:\n  defaultName: e2e-default\n  namespaceProviderConfigs: {team-map: team-map-config}\nresources:\n  - apiGroups: [s3.aws.upbound.io]\n    kinds: [Bucket]\n    tagsField: spec.forProvider.tags\n";

/// What `/mutate` changes, compared field by field.
const MUTATED_FIELDS: &[&str] = &[
    "/spec/providerConfigRef",
    "/spec/deletionPolicy",
    "/spec/managementPolicies",
    "/spec/forProvider/tags",
    "/metadata/annotations/crossplane.io~1external-name",
];

/// The policy `mrguard export map` writes, applied to an API server where
/// mrguard does not run, defaults a created cluster-scoped Bucket and a
/// namespaced VPC as `/mutate` defaults the same objects: each is first
/// created with a dry run before the policy exists (what CRD defaulting
/// alone gives, which is what `/mutate` receives), and mrguard's own
/// mutation of that is the expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_mutating_policy_defaults_in_the_api_server_as_mutate_does() {
    let test = "exported_mutating_policy_defaults_in_the_api_server_as_mutate_does";
    if !support::version_at_least(test, needs::MUTATING_ADMISSION_POLICY_V1) {
        return;
    }
    // Its own API server: the policy binds to every MR of every test.
    let Some(cluster) = support::require_own_cluster(test).await else {
        return;
    };
    let client = cluster.admin().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, MAP_CONFIG).unwrap();
    let out = mrguard(&["export", "map", "--config", config_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "mrguard export map failed: {}",
        text(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text(&out.stdout))
        .expect("export map writes YAML")
        .into_iter()
        .filter(|d| d.is_object())
        .collect();
    let config = mrguard_policy::admission::config::Config::from_yaml(MAP_CONFIG).unwrap();

    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-map"}});
    let r = api::create(&client, "/api/v1/namespaces", &ns, false)
        .await
        .unwrap();
    assert!(r.status < 300, "{}", r.body);
    let mut vpc = support::namespaced_vpc("map-vpc", json!({}));
    vpc["metadata"]["namespace"] = json!("team-map");
    let objects = [
        (
            "/apis/s3.aws.upbound.io/v1beta1/buckets".to_string(),
            support::bucket("map-bucket", json!({"region": "us-east-1"})),
        ),
        (
            "/apis/ec2.aws.m.upbound.io/v1beta1/namespaces/team-map/vpcs".to_string(),
            vpc,
        ),
    ];
    // What /mutate makes of each, from what CRD defaulting gives it.
    let mut expected = Vec::new();
    for (path, obj) in &objects {
        let dry = api::create(&client, path, obj, true).await.unwrap();
        assert!(dry.status < 300, "{}", dry.body);
        let req = mrguard_policy::admission::review::RequestBuilder::create(dry.body.clone())
            .username("kubernetes-admin")
            .build();
        let mutated =
            mrguard_policy::admission::decider::Decider::offline(&config, jiff::Timestamp::now())
                .mutate(&req)
                .mutated
                .expect("/mutate defaults the object");
        expected.push(mutated);
    }

    for d in &docs {
        let plural = match d["kind"].as_str() {
            Some("MutatingAdmissionPolicy") => "mutatingadmissionpolicies",
            Some("MutatingAdmissionPolicyBinding") => "mutatingadmissionpolicybindings",
            other => panic!("export map wrote a {other:?}"),
        };
        let r = api::create(
            &client,
            &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
            d,
            false,
        )
        .await
        .unwrap();
        assert!(
            r.status < 300,
            "the API server refused {}: {}",
            d["metadata"]["name"],
            r.body
        );
    }

    // The API server takes a moment to load a new policy: until then a
    // dry run comes back with CRD defaults only.
    let (path, bucket) = (&objects[0].0, &objects[0].1);
    support::wait_for("the exported policy to mutate", support::WAIT, || {
        let (client, path, bucket) = (client.clone(), path.clone(), bucket.clone());
        async move {
            let r = api::create(&client, &path, &bucket, true).await.ok()?;
            (r.body["spec"]["providerConfigRef"]["name"] == "e2e-default").then_some(())
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: {e}"));

    for ((path, obj), want) in objects.iter().zip(&expected) {
        let r = api::create(&client, path, obj, false).await.unwrap();
        assert!(r.status < 300, "{}", r.body);
        for field in MUTATED_FIELDS {
            assert_eq!(
                r.body.pointer(field),
                want.pointer(field),
                "{} {field}: the policy gave {}, /mutate {}",
                obj["metadata"]["name"],
                r.body,
                want
            );
        }
    }
    // The policy's work, spelled out.
    assert_eq!(
        expected[0]["spec"]["providerConfigRef"],
        json!({"name": "e2e-default"})
    );
    assert_eq!(
        expected[0]["spec"]["forProvider"]["tags"]["crossplane-kind"],
        "bucket.s3.aws.upbound.io"
    );
    assert_eq!(
        expected[1]["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "team-map-config"})
    );
}
