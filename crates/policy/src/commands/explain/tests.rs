use super::*;
use crate::admission::config::Config;
use analysis::perturb;
use serde_json::Value;

fn explain(
    object: &Value,
    config: &Config,
    options: &Options,
) -> Result<Explanation, ExplainError> {
    Decider::offline(config, jiff::Timestamp::now()).explain(object, options)
}
use serde_json::json;

const CFG: &str = "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['VPC', 'Subnet']\n    externalName: IdentifierFromProvider\n    immutableFields: [spec.forProvider.region, 'spec.forProvider.subnets[*].zone']\n    deletionProtection: true\n";

fn vpc() -> Value {
    json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
        "metadata": {
            "name": "sample-vpc",
            "annotations": {
                "crossplane.io/external-name": "vpc-0abc",
                "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z",
                "crossplane.io/external-create-succeeded": "2024-05-01T10:00:02Z"
            },
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "ec2.aws.upbound.io/v1beta1",
                 "time": "2024-05-01T09:59:58Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {".": {}, "f:forProvider": {".": {}, "f:cidrBlock": {}, "f:region": {},
                               "f:tags": {".": {}, "f:Name": {}}}}}},
                {"manager": "provider", "operation": "Update", "apiVersion": "ec2.aws.upbound.io/v1beta1",
                 "time": "2024-05-01T10:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:crossplane.io/external-name": {}}},
                              "f:spec": {"f:forProvider": {"f:instanceTenancy": {}, "f:ipv6Pools": {},
                                         "f:tags": {"f:crossplane-kind": {}}}}}},
                {"manager": "provider", "operation": "Update", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:atProvider": {".": {}}}}}
            ]
        },
        "spec": {
            "deletionPolicy": "Delete",
            "forProvider": {
                "cidrBlock": "172.16.0.0/16", "region": "us-west-1",
                "instanceTenancy": "default", "ipv6Pools": ["pool-1"],
                "tags": {"Name": "DemoVpc", "crossplane-kind": "vpc.ec2.aws.upbound.io"}
            },
            "managementPolicies": ["*"]
        }
    })
}

fn row<'a>(e: &'a Explanation, path: &str) -> &'a FieldExplanation {
    e.fields
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("no row {path}: {:?}", e.fields))
}

#[test]
fn a_created_vpc() {
    let cfg = Config::from_yaml(CFG).unwrap();
    let e = explain(&vpc(), &cfg, &Options::default()).unwrap();
    assert!(e.created.value);
    assert_eq!(e.creation.state, CreationState::Succeeded);
    assert_eq!(e.creation.since.as_deref(), Some("2024-05-01T10:00:02Z"));
    assert!(!e.paused.value);
    assert_eq!(e.policies.set, "[*]");
    assert_eq!(e.deletion.outcome, "Delete");
    assert!(e.deletion.protection_applies);
    assert_eq!(e.deletion.denied_by, ["deletion-protection"]);
    assert!(e.every_update_denied_by.is_empty());
    assert!(e.has_managed_fields);

    let region = row(&e, "spec.forProvider.region");
    assert_eq!(region.value, "\"us-west-1\"");
    assert_eq!(region.managers, ["kubectl-client-side-apply"]);
    assert_eq!(region.set_by, SetBy::User);
    assert!(region.immutable);
    assert_eq!(region.change_denied_by, ["immutable-field"]);

    let cidr = row(&e, "spec.forProvider.cidrBlock");
    assert!(!cidr.immutable && cidr.change_denied_by.is_empty());

    let tenancy = row(&e, "spec.forProvider.instanceTenancy");
    assert_eq!(tenancy.set_by, SetBy::Provider);
    assert!(tenancy.hint.is_none(), "scalars are not flagged");

    let pools = row(&e, "spec.forProvider.ipv6Pools");
    assert!(pools.list);
    assert_eq!(pools.set_by, SetBy::Provider);
    let hint = pools.hint.as_deref().unwrap();
    assert!(hint.contains("LateInitialize") && hint.contains("set the field yourself"));
    assert!(e.hints.iter().any(|h| h == hint));

    assert_eq!(row(&e, "spec.forProvider.tags.Name").set_by, SetBy::User);
    assert_eq!(
        row(&e, "spec.forProvider.tags.crossplane-kind").set_by,
        SetBy::Provider
    );

    let text = render_text(&e);
    assert!(text.starts_with("VPC/sample-vpc (ec2.aws.upbound.io/v1beta1, cluster-scoped)\n"));
    assert!(text.contains("denied by immutable-field"), "{text}");
    assert!(text.contains("provider (late-init)"), "{text}");
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["fields"][0]["setBy"], "user");
    assert_eq!(json["creation"]["state"], "succeeded");
}

#[test]
fn before_creation_nothing_is_immutable_yet() {
    let cfg = Config::from_yaml(CFG).unwrap();
    let mut o = vpc();
    let a = o["metadata"]["annotations"].as_object_mut().unwrap();
    a.remove("crossplane.io/external-create-succeeded");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert!(!e.created.value);
    assert_eq!(e.creation.state, CreationState::Incomplete);
    assert_eq!(e.creation.since.as_deref(), Some("2024-05-01T10:00:00Z"));
    let region = row(&e, "spec.forProvider.region");
    assert!(region.immutable);
    assert!(region.change_denied_by.is_empty());
    assert!(
        e.hints.iter().any(|h| h.contains("leaked")),
        "{:?}",
        e.hints
    );
}

/// The same spec read cluster-scoped and namespaced: a namespaced MR's
/// deletionPolicy counts for nothing and its reasons never name one.
#[test]
fn deletion_reasons_of_both_scopes_side_by_side() {
    let cfg = Config::builtin();
    let mut o = vpc();
    o["spec"]["deletionPolicy"] = json!("Orphan");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert_eq!(e.deletion.outcome, "Orphan");
    assert!(e.deletion.because.contains("deletionPolicy Orphan"));
    o["apiVersion"] = json!("ec2.aws.m.upbound.io/v1beta1");
    o["metadata"]["namespace"] = json!("team-a");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert_eq!(e.deletion.outcome, "Delete");
    assert_eq!(
        e.deletion.because,
        "a namespaced MR has no deletionPolicy; managementPolicies [*] includes Delete"
    );
    o["spec"].as_object_mut().unwrap().remove("deletionPolicy");
    o["spec"]["managementPolicies"] = json!(["Observe", "Create", "Update"]);
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert_eq!(e.deletion.outcome, "Orphan");
    assert_eq!(
        e.deletion.because,
        "managementPolicies [Observe, Create, Update] lacks Delete (a namespaced MR has no deletionPolicy)"
    );
}

#[test]
fn deletion_reasons_follow_the_table() {
    let cfg = Config::builtin();
    let mut o = vpc();
    o["spec"]["deletionPolicy"] = json!("Orphan");
    o["spec"]["managementPolicies"] = json!(["Observe", "Delete"]);
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert_eq!(e.deletion.outcome, "Delete");
    assert!(e
        .deletion
        .because
        .contains("overrides deletionPolicy Orphan"));
    assert!(e.deletion.protected_by.is_empty());
    o["spec"]["managementPolicies"] = json!(["Observe", "Create", "Update"]);
    o["spec"]["deletionPolicy"] = json!("Delete");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert_eq!(e.deletion.outcome, "Orphan");
    assert!(e.deletion.because.contains("lacks Delete"));
    o["spec"]["managementPolicies"] = json!([]);
    o["metadata"]["finalizers"] = json!(["finalizer.managedresource.crossplane.io"]);
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert!(e.paused.value && e.paused.because.contains("[]"));
    assert_eq!(e.deletion.denied_by, ["paused-delete"]);
    o["spec"]["managementPolicies"] = json!(["Observe", "Observe"]);
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert!(!e.policies.valid);
    assert_eq!(e.every_update_denied_by, ["management-policies"]);
    // A rule that denies every update is not blamed on each field; the
    // built-in configuration still makes the region immutable.
    for f in &e.fields {
        let want: &[&str] = if f.path == "spec.forProvider.region" {
            &["immutable-field"]
        } else {
            &[]
        };
        assert_eq!(f.change_denied_by, want, "{}", f.path);
    }
}

#[test]
fn paused_annotation_values() {
    let cfg = Config::builtin();
    let mut o = vpc();
    o["metadata"]["annotations"]["crossplane.io/paused"] = json!("True");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert!(!e.paused.value);
    assert!(e.paused.because.contains("only \"true\""));
    assert!(e.findings.iter().any(|f| f.rule == "paused-value"));
    o["metadata"]["annotations"]["crossplane.io/paused"] = json!("true");
    let e = explain(&o, &cfg, &Options::default()).unwrap();
    assert!(e.paused.value);
}

#[test]
fn without_managed_fields_owners_are_unknown() {
    let mut o = vpc();
    o["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let e = explain(&o, &Config::builtin(), &Options::default()).unwrap();
    assert!(!e.has_managed_fields);
    assert!(e.fields.iter().all(|f| f.set_by == SetBy::Unknown));
    assert!(e.hints.iter().any(|h| h.contains("--show-managed-fields")));
    let e = explain(
        &json!({"kind": "ProviderConfig", "metadata": {"name": "x"}, "spec": {}}),
        &Config::builtin(),
        &Options::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("ProviderConfig/x"), "{e}");
}

#[test]
fn paths_bracket_keys_with_dots() {
    let k = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        display_path(&k(&["spec", "forProvider", "tags", "example.com/team"])),
        "spec.forProvider.tags[example.com/team]"
    );
    assert_eq!(display_path(&k(&["spec", "a-b"])), "spec.a-b");
}

#[test]
fn perturbations_differ() {
    for v in [
        json!("a"),
        json!(1),
        json!(1.5),
        json!(true),
        json!([]),
        json!([1]),
        json!({}),
        json!(null),
    ] {
        assert_ne!(perturb(&v), v);
    }
}
