//! Replays the AdmissionReviews a real kube-apiserver sent
//! (fixtures/reviews/) and variants built from fixtures/examples/, over
//! HTTPS, applying the returned patches.

use mrguard_policy::admission::model::Operation;
use serde_json::{json, Value};

use crate::support::fixtures::{self, example_object};
use crate::support::{apply_patch, create, delete, request, warnings, IntoReview, TestServer};

/// Sends a fixture to its own webhook; returns the response and the object
/// after applying the patch.
async fn replay(h: &TestServer, name: &str) -> (Value, Value) {
    let review = fixtures::review(name);
    let path = if name.contains("_mutate_") {
        "/mutate"
    } else {
        "/validate"
    };
    let resp = h.review(path, &review).await;
    let obj = &review["request"]["object"];
    let patched = if obj.is_null() {
        Value::Null
    } else {
        apply_patch(obj, &resp)
    };
    (resp, patched)
}

#[tokio::test]
async fn every_recorded_review_gets_the_expected_answer() {
    let h = TestServer::start().await;
    // (fixture, allowed, external-name set by the patch, denial must mention)
    let cases: &[(&str, bool, Option<&str>, &[&str])] = &[
        // VPC ids are assigned by AWS: no external name; CRD defaults already in place.
        ("001_mutate_CREATE_VPC_sample-vpc.json", true, None, &[]),
        ("002_validate_CREATE_VPC_sample-vpc.json", true, None, &[]),
        (
            "005_mutate_CREATE_AlternateContact_operations.json",
            true,
            Some("operations"),
            &[],
        ),
        (
            "006_validate_CREATE_AlternateContact_operations.json",
            true,
            None,
            &[],
        ),
        ("007_mutate_CREATE_VPC_sample-vpc.json", true, None, &[]),
        ("008_validate_CREATE_VPC_sample-vpc.json", true, None, &[]),
        (
            "009_mutate_CREATE_AlternateContact_operations.json",
            true,
            Some("operations"),
            &[],
        ),
        (
            "010_validate_CREATE_AlternateContact_operations.json",
            true,
            None,
            &[],
        ),
        (
            "011_mutate_CREATE_Bucket_sample-bucket.json",
            true,
            Some("sample-bucket"),
            &[],
        ),
        (
            "012_validate_CREATE_Bucket_sample-bucket.json",
            true,
            None,
            &[],
        ),
        (
            "013_mutate_CREATE_Bucket_sample-bucket-2.json",
            true,
            Some("sample-bucket-2"),
            &[],
        ),
        (
            "014_validate_CREATE_Bucket_sample-bucket-2.json",
            true,
            None,
            &[],
        ),
        // The provider records the external name and creation times: allowed.
        ("015_mutate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("016_validate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("017_mutate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        // region us-west-1 -> us-east-2 after creation.
        (
            "018_validate_UPDATE_VPC_sample-vpc.json",
            false,
            None,
            &[
                "[immutable-field]",
                "spec.forProvider.region",
                "\"us-west-1\"",
                "\"us-east-2\"",
                "VPC \"sample-vpc\"",
                "Fix:",
            ],
        ),
        ("019_mutate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("020_validate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("021_mutate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("022_validate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        // status subresource: allowed silently.
        (
            "023_validate_UPDATE_VPC_sample-vpc_status.json",
            true,
            None,
            &[],
        ),
        // Paused with a finalizer: the delete would hang.
        (
            "024_validate_DELETE_VPC_sample-vpc.json",
            false,
            None,
            &["[paused-delete]", "DELETE", "unpause"],
        ),
        ("025_mutate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        ("026_validate_UPDATE_VPC_sample-vpc.json", true, None, &[]),
        // generateName: no name at mutation, so nothing to set.
        (
            "027_mutate_CREATE_Subnet_generated-name.json",
            true,
            None,
            &[],
        ),
        (
            "028_validate_CREATE_Subnet_subnet-tvfgs.json",
            true,
            None,
            &[],
        ),
        // Dry-run is judged like a real request.
        (
            "029_mutate_CREATE_Bucket_dry-bucket_dryrun.json",
            true,
            Some("dry-bucket"),
            &[],
        ),
        (
            "030_validate_CREATE_Bucket_dry-bucket_dryrun.json",
            true,
            None,
            &[],
        ),
        (
            "031_mutate_CREATE_AlternateContact_missing-email.json",
            true,
            Some("missing-email"),
            &[],
        ),
    ];
    for (name, allowed, external_name, denial) in cases {
        let (resp, patched) = replay(&h, name).await;
        assert_eq!(resp["allowed"], *allowed, "{name}: {resp}");
        assert!(
            warnings(&resp).is_empty(),
            "{name}: unexpected warnings {:?}",
            warnings(&resp)
        );
        if !*allowed {
            assert_eq!(resp["status"]["code"], 403, "{name}");
            let msg = resp["status"]["message"].as_str().unwrap();
            for needle in *denial {
                assert!(msg.contains(needle), "{name}: {msg} lacks {needle}");
            }
        }
        if name.contains("_mutate_") {
            let got = patched["metadata"]["annotations"]["crossplane.io/external-name"].as_str();
            let review = fixtures::review(name);
            let before = review["request"]["object"]["metadata"]["annotations"]
                ["crossplane.io/external-name"]
                .as_str();
            match external_name {
                Some(n) => assert_eq!(got, Some(*n), "{name}"),
                None => assert_eq!(got, before, "{name}: external name must not change"),
            }
            if external_name.is_none() {
                assert!(
                    resp.get("patch").is_none(),
                    "{name}: unexpected patch {resp}"
                );
            }
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn namespace_mapping_applies_to_namespaced_reviews() {
    let h = TestServer::with_config("providerConfig:\n  defaultName: main\n  namespaceProviderConfigs: {upbound-system: team-upbound}\n").await;
    let (_, cluster) = replay(&h, "001_mutate_CREATE_VPC_sample-vpc.json").await;
    assert_eq!(
        cluster["spec"]["providerConfigRef"],
        json!({"name": "main"})
    );
    let (_, namespaced) = replay(&h, "007_mutate_CREATE_VPC_sample-vpc.json").await;
    assert_eq!(
        namespaced["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "team-upbound"})
    );
    assert!(namespaced["spec"].get("deletionPolicy").is_none());
    h.stop().await;
}

/// The built-in configuration exempts no one by name (without
/// the controller nothing derives the providers' accounts), so a
/// crossplane-system account changing an immutable field is denied; a
/// configured glob still exempts the providers it names.
#[tokio::test]
async fn exempt_provider_service_account_may_change_immutable_fields() {
    let mut r = fixtures::review("018_validate_UPDATE_VPC_sample-vpc.json");
    r["request"]["userInfo"]["username"] =
        json!("system:serviceaccount:crossplane-system:provider-aws-ec2-abc");
    let h = TestServer::start().await;
    assert_eq!(h.review("/validate", &r).await["allowed"], false);
    r["request"]["userInfo"]["username"] =
        json!("system:serviceaccount:crossplane-system:crossplane");
    assert_eq!(h.review("/validate", &r).await["allowed"], false);
    h.stop().await;
    let builtin = mrguard_policy::admission::config::BUILTIN_YAML;
    let h = TestServer::with_config(&format!(
        "{builtin}exemptUsernames: ['system:serviceaccount:crossplane-system:provider-aws-*']\n"
    ))
    .await;
    r["request"]["userInfo"]["username"] =
        json!("system:serviceaccount:crossplane-system:provider-aws-ec2-abc");
    assert_eq!(h.review("/validate", &r).await["allowed"], true);
    r["request"]["userInfo"]["username"] =
        json!("system:serviceaccount:crossplane-system:crossplane");
    assert_eq!(h.review("/validate", &r).await["allowed"], false);
    h.stop().await;
}

#[tokio::test]
async fn examples_get_defaults_applied_end_to_end() {
    let h = TestServer::with_config(
        "providerConfig: {defaultName: aws}\nresources:\n  - apiGroups: ['*.aws.upbound.io', '*.aws.m.upbound.io']\n    kinds: ['*']\n    tagsField: spec.forProvider.tags\n",
    )
    .await;
    // Cluster-scoped bucket as written by the user, with no CRD defaults.
    let bucket = example_object("aws_s3_cluster_v1beta1_bucket.yaml");
    let resp = h.review("/mutate", &create(&bucket).review()).await;
    let out = apply_patch(&bucket, &resp);
    assert_eq!(out["spec"]["providerConfigRef"], json!({"name": "aws"}));
    assert_eq!(out["spec"]["deletionPolicy"], "Delete");
    assert_eq!(out["spec"]["managementPolicies"], json!(["*"]));
    let name = bucket["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        out["metadata"]["annotations"]["crossplane.io/external-name"],
        name
    );
    assert_eq!(
        out["spec"]["forProvider"]["tags"]["crossplane-kind"],
        "bucket.s3.aws.upbound.io"
    );
    assert_eq!(out["spec"]["forProvider"]["tags"]["crossplane-name"], name);
    assert_eq!(
        out["spec"]["forProvider"]["tags"]["crossplane-providerconfig"],
        "aws"
    );
    // The mutated object passes validation, and mutating it again is a no-op.
    assert_eq!(
        h.review("/validate", &create(&out).review()).await["allowed"],
        true
    );
    let again = h.review("/mutate", &create(&out).review()).await;
    assert!(again.get("patch").is_none(), "{again}");

    // Namespaced bucket: ClusterProviderConfig kind, no deletionPolicy.
    let mut nsb = example_object("aws_s3_namespaced_v1beta1_bucket.yaml");
    nsb["metadata"]["namespace"] = json!("team-a");
    nsb["spec"]
        .as_object_mut()
        .unwrap()
        .remove("providerConfigRef");
    let resp = h.review("/mutate", &create(&nsb).review()).await;
    let out = apply_patch(&nsb, &resp);
    assert_eq!(
        out["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "aws"})
    );
    assert!(out["spec"].get("deletionPolicy").is_none());
    assert_eq!(
        h.review("/validate", &create(&out).review()).await["allowed"],
        true
    );
    h.stop().await;
}

#[tokio::test]
async fn bare_string_provider_config_ref_is_normalised_with_a_warning() {
    let h = TestServer::start().await;
    let mut vpc = example_object("aws_ec2_namespaced_v1beta1_vpc.yaml");
    vpc["metadata"]["namespace"] = json!("team-a");
    vpc["spec"]["providerConfigRef"] = json!("aws-team");
    let resp = h.review("/mutate", &create(&vpc).review()).await;
    let out = apply_patch(&vpc, &resp);
    assert_eq!(
        out["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "aws-team"})
    );
    let w = warnings(&resp);
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("provider-config-ref: ") && w[0].len() <= 120,
        "{w:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn all_findings_are_reported_together() {
    let h = TestServer::start().await;
    let mut vpc = example_object("aws_ec2_cluster_v1beta1_vpc.yaml");
    vpc["spec"]["deletionPolicy"] = json!("orphan");
    vpc["spec"]["managementPolicies"] = json!(["Observe"]);
    vpc["spec"]["writeConnectionSecretToRef"] = json!({"name": "s"});
    vpc["spec"]["forProvider"]["ipv4IpamPoolIdRef"] = json!({});
    vpc["spec"]["initProvider"] = json!({"cidrBlock": "10.0.0.0/16"});
    vpc["metadata"]["annotations"] = json!({"crossplane.io/paused": "yes"});
    let resp = h.review("/validate", &create(&vpc).review()).await;
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 403);
    let msg = resp["status"]["message"].as_str().unwrap();
    for rule in [
        "[deletion-policy]",
        "[observe-only-external-name]",
        "[connection-secret-ref]",
        "[reference]",
    ] {
        assert!(msg.contains(rule), "{msg} lacks {rule}");
    }
    assert!(msg.contains("4 problems"), "{msg}");
    let w = warnings(&resp);
    assert!(w.iter().any(|w| w.starts_with("paused-value: ")), "{w:?}");
    // Observe only: no LateInitialize, so init-provider-late-init is silent.
    assert!(
        !w.iter().any(|w| w.starts_with("init-provider-late-init")),
        "{w:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn non_managed_objects_and_connect_are_allowed_silently() {
    let h = TestServer::start().await;
    let pc = json!({"apiVersion": "aws.upbound.io/v1beta1", "kind": "ProviderConfig", "metadata": {"name": "default"},
                    "spec": {"credentials": {"source": "IRSA"}, "deletionPolicy": "bogus"}});
    for path in ["/mutate", "/validate"] {
        let resp = h.review(path, &create(&pc).review()).await;
        assert_eq!(resp["allowed"], true);
        assert!(
            resp.get("patch").is_none() && resp.get("warnings").is_none(),
            "{resp}"
        );
    }
    let mut bad = example_object("aws_s3_cluster_v1beta1_bucket.yaml");
    bad["spec"]["deletionPolicy"] = json!("bogus");
    let r = request(Operation::Connect).object(bad).review();
    assert_eq!(r["request"]["operation"], "CONNECT");
    assert_eq!(h.review("/validate", &r).await["allowed"], true);
    h.stop().await;
}

#[tokio::test]
async fn deletion_protection_blocks_delete_until_orphaned() {
    let h = TestServer::start().await;
    let mut b = example_object("aws_s3_cluster_v1beta1_bucket.yaml");
    b["metadata"]["annotations"] = json!({"mrguard.io/deletion-protection": "true"});
    let resp = h.review("/validate", &delete(&b).review()).await;
    assert_eq!(resp["allowed"], false);
    let msg = resp["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[deletion-protection]") && msg.contains("deletionPolicy: Orphan"),
        "{msg}"
    );
    b["spec"]["deletionPolicy"] = json!("Orphan");
    assert_eq!(
        h.review("/validate", &delete(&b).review()).await["allowed"],
        true
    );
    h.stop().await;
}

#[tokio::test]
async fn rule_findings_are_counted_by_rule_and_action() {
    let h = TestServer::start().await;
    h.review(
        "/validate",
        &fixtures::review("018_validate_UPDATE_VPC_sample-vpc.json"),
    )
    .await;
    let m = h.metrics().await;
    assert!(
        m.contains(r#"mrguard_rule_findings_total{action="Deny",rule="immutable-field"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"operation="UPDATE",result="denied",webhook="validate"} 1"#),
        "{m}"
    );
    h.stop().await;
}
