use super::*;
use serde_json::json;

/// Real sentences from the three families' `package/crds`, with what the
/// derivation must make of them: `Some((pattern, condition))` or `None`.
#[allow(clippy::type_complexity)]
const TABLE: &[(&str, Option<(&str, Option<&str>)>)] = &[
    // provider-upjet-azure
    ("Defines the Tier to use for this storage account. Valid options are Standard and Premium. Changing this forces a new resource to be created.",
     Some(("forces-new", None))),
    ("Changing this forces a new Storage Account to be created.", Some(("forces-new", None))),
    ("Changing this forces a new Resource Deployment Script to be created.", Some(("forces-new", None))),
    ("Defines the type of replication to use for this storage account. Valid options are LRS, GRS, RAGRS, ZRS, GZRS and RAGZRS. Changing this forces a new resource to be created when types LRS, GRS and RAGRS are changed to ZRS, GZRS or RAGZRS and vice versa.",
     Some(("forces-new", Some("when types LRS, GRS and RAGRS are changed to ZRS, GZRS or RAGZRS and vice versa")))),
    ("Unsetting this after configuring it will force a new resource to be created.",
     Some(("forces-new", Some("Unsetting this after configuring it")))),
    ("Changing between AzureLinux and Ubuntu does not replace the resource; any other change forces a new resource to be created.",
     Some(("forces-new", Some("Changing between AzureLinux and Ubuntu does not replace the resource; any other change forces a new resource to be created")))),
    ("A mapping of tags to assign to the resource.", None),
    ("Protocol conversion between NFSv3 and NFSv4.1 and vice-versa is supported without recreating the volume.", None),
    ("This replaces the previous arguments: cifs_enabled, nfsv3_enabled and nfsv4_enabled.", None),
    ("Whether this policy is immutable.", None),
    ("Possible values are Complete (where resources in the Resource Group not specified in the ARM Template will be destroyed) and Incremental.", None),
    // provider-upjet-aws
    ("(Forces new resource) Name of the service.", Some(("forces-new", None))),
    ("(Forces new for Multi-AZ DB clusters) Specifies the storage type to be associated with the DB cluster.",
     Some(("forces-new", Some("for Multi-AZ DB clusters")))),
    ("If the VPC attachment is pending acceptance, changing this value will recreate the resource.",
     Some(("recreates", Some("If the VPC attachment is pending acceptance")))),
    ("Changing it recreates the resource.", Some(("recreates", None))),
    ("Disabling enable_primary_ipv6 after it has been enabled forces recreation of the instance.",
     Some(("recreation", Some("Disabling enable_primary_ipv6 after it has been enabled")))),
    ("Changing to a lower version forces resource replacement (destroy and recreate).",
     Some(("replacement", Some("Changing to a lower version")))),
    ("For the base table, decreasing this value will force a new resource.",
     Some(("forces-new", Some("For the base table")))),
    ("Whether the volume should be destroyed on instance termination.", None),
    ("When used in combination with user_data or user_data_base64 will trigger a destroy and recreate of the EC2 instance when set to true.", None),
    ("Enable to force a new task deployment of the service.", None),
    ("To force resource recreation after this configuration has been applied, see the taint command.", None),
    ("Changing this argument with an engine_version < 7.0.5 will force a replacement.",
     Some(("replacement", Some("Changing this argument with an engine_version < 7.0.5")))),
    ("Downgrading an Advanced tier parameter to Standard will recreate the resource.",
     Some(("recreates", Some("Downgrading an Advanced tier parameter to Standard")))),
    ("You can only specify a custom CIDR block when you create a cluster, changing this value will force a new cluster to be created.",
     Some(("forces-new", None))),
    ("When decreased, this will force a recreation of the resource.",
     Some(("recreation", Some("When decreased")))),
    ("Adding or removing this configuration forces a new resource (documentation).",
     Some(("forces-new", Some("Adding or removing this configuration")))),
    ("Whether to replace the security groups on the function's VPC configuration prior to destruction.", None),
    ("The triggers argument should be preferred over depends_on, since depends_on can only capture dependency ordering and will not cause the resource to recreate (redeploy the REST API) with upstream configuration changes.", None),
    ("Must be one of: MUTABLE, IMMUTABLE, IMMUTABLE_WITH_EXCLUSION, or MUTABLE_WITH_EXCLUSION.", None),
    ("Boolean that indicates all objects should be deleted from the bucket when the bucket is destroyed so that the bucket can be destroyed without error.", None),
    // provider-upjet-gcp
    ("Immutable.", Some(("immutable", None))),
    ("The field is immutable and causes resource replacement when mutated.", Some(("replacement", None))),
    ("This field cannot be changed after creation.", Some(("cannot-change", None))),
    ("Cannot be updated.", Some(("cannot-change", None))),
    ("Replication configuration, once set, this cannot be updated.", Some(("cannot-change", None))),
    ("Modifying this list will cause the instance to recreate.", Some(("recreates", None))),
    ("This field is only\nset at create time and modifying this field after creation will trigger recreation.",
     Some(("recreation", None))),
    ("Furthermore drift for this field cannot not be detected because BigQuery only uses this schema to compute the effective schema for the table, therefore any changes on the configured value will force the table to be recreated.",
     Some(("recreates", None))),
    ("An alternative to using the startup-script metadata key, except this one forces the instance to be recreated (thus re-running the script) if it is changed.",
     Some(("recreates", None))),
    ("Pools with an unspecified mode will operate as if they are in FEDERATION_ONLY mode. ~> Note This field cannot be changed after the Workload Identity Pool is created.).",
     Some(("cannot-change", None))),
    ("If REPAIR (default), then MIG automatically repairs a failed VM by recreating it.", None),
    ("The number of seconds that the managed instance group waits before\nit applies autohealing policies to new instances or recently recreated instances.", None),
    ("Immutable ranges cannot have their fields modified, except for labels and description.", None),
    // The apiVersion/kind boilerplate is never a field rule.
    ("Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.", None),
];

#[test]
fn the_table_of_real_sentences() {
    for (text, want) in TABLE {
        let got = match_description(text);
        let got = got.as_ref().map(|s| (s.pattern, s.condition.as_deref()));
        assert_eq!(got, *want, "{text}");
    }
}

#[test]
fn every_pattern_matches_its_example_and_compiles() {
    for p in PATTERNS {
        let s = match_description(p.example).unwrap_or_else(|| panic!("{}", p.name));
        assert_eq!(s.pattern, p.name, "{}", p.example);
    }
}

#[test]
fn sentences_split_on_stops_and_leading_parentheticals() {
    assert_eq!(
        sentences("(Forces new resource) Name of\n the service. Valid values: A. B"),
        [
            "(Forces new resource)",
            "Name of the service.",
            "Valid values: A.",
            "B"
        ]
    );
    assert_eq!(sentences("e.g. foo.bar is fine"), ["e.g. foo.bar is fine"]);
}

fn crd() -> Value {
    let field = |d: &str| json!({"type": "string", "description": d});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "accounts.storage.azure.upbound.io"},
        "spec": {
            "group": "storage.azure.upbound.io",
            "names": {"kind": "Account"},
            "versions": [
                {"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {
                    "properties": {
                        "apiVersion": field("APIVersion defines the versioned schema of this representation of an object. Cannot be updated."),
                        "kind": field("Kind is a string value representing the REST resource this object represents. Cannot be updated. In CamelCase."),
                        "spec": {"properties": {
                            "forProvider": {"properties": {
                                "accountTier": field("Changing this forces a new resource to be created."),
                                "tags": {"type": "object", "additionalProperties": {"type": "string"},
                                         "description": "A mapping of tags to assign to the resource."},
                                "network": {"type": "array", "description": "Network blocks.",
                                    "items": {"type": "object", "properties": {
                                        "subnetId": field("Changing this forces a new resource to be created.")}}},
                            }},
                            "initProvider": {"properties": {
                                "accountTier": field("Changing this forces a new resource to be created.")}},
                        }},
                        "status": {"properties": {"atProvider": {"properties": {
                            "id": field("Cannot be updated.")}}}},
                    }}}},
                {"name": "v1beta2", "served": true, "schema": {"openAPIV3Schema": {
                    "properties": {"spec": {"properties": {"forProvider": {"properties": {
                        "accountTier": field("Changing this forces a new resource to be created.")}}}}}}}},
                {"name": "v1alpha1", "served": false, "schema": {"openAPIV3Schema": {
                    "properties": {"spec": {"properties": {"forProvider": {"properties": {
                        "old": field("Changing this forces a new resource to be created.")}}}}}}}},
            ],
        },
    })
}

#[test]
fn derive_walks_for_provider_of_served_versions_only() {
    let k = derive(&crd()).unwrap();
    assert_eq!(
        (k.group.as_str(), k.kind.as_str()),
        ("storage.azure.upbound.io", "Account")
    );
    let paths: Vec<_> = k
        .fields
        .iter()
        .map(|f| (f.path.as_str(), f.versions.clone()))
        .collect();
    assert_eq!(
        paths,
        [
            (
                "spec.forProvider.accountTier",
                vec!["v1beta1".to_string(), "v1beta2".to_string()]
            ),
            (
                "spec.forProvider.network[*].subnetId",
                vec!["v1beta1".to_string()]
            ),
        ]
    );
    assert_eq!(k.in_version("v1beta2").count(), 1);
    assert!(derive(&json!({"kind": "ConfigMap"})).is_none());
}

#[test]
fn the_store_follows_applies_and_removals() {
    let d = Documented::default();
    assert!(d.get("storage.azure.upbound.io", "Account").is_none());
    assert_eq!(d.apply(&crd()), 2);
    assert_eq!(d.counts(), (1, 2));
    let mut bare = crd();
    bare["spec"]["versions"] = json!([]);
    // A CRD that no longer documents anything forgets the kind.
    assert_eq!(d.apply(&bare), 0);
    assert!(d.get("storage.azure.upbound.io", "Account").is_none());
    d.replace_all([&crd()]);
    assert_eq!(d.counts(), (1, 2));
    d.remove(&crd());
    assert_eq!(d.counts(), (0, 0));
}

#[test]
fn hostile_nesting_stops() {
    let mut s = json!({"type": "string", "description": "Immutable."});
    for _ in 0..200 {
        s = json!({"type": "object", "properties": {"a": s}});
    }
    let mut c = crd();
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["forProvider"] = s;
    let k = derive(&c).unwrap();
    assert!(k
        .fields
        .iter()
        .all(|f| f.path.segments().len() <= MAX_DEPTH + 3));
}
