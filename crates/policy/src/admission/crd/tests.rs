use super::*;
use serde_json::json;

use crate::admission::kube_version::KubeVersion;

use std::path::{Path, PathBuf};

/// The project's own fixtures; the provider's are in
/// [`crate::third_party`]'s folder, with the same layout.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn crds() -> Crds {
    crds_in(&fixtures())
}

fn crds_in(fixtures: &Path) -> Crds {
    let mut crds = Crds::default();
    let mut files: Vec<_> = std::fs::read_dir(fixtures.join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        crds.add_yaml(&f.display().to_string(), &text).unwrap();
    }
    crds
}

fn example(name: &str) -> Value {
    example_in(&fixtures(), name)
}

fn example_in(fixtures: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures.join("examples").join(name)).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|v| !v.is_null())
        .unwrap()
}

fn version<'a>(crds: &'a Crds, obj: &Value) -> &'a CrdVersion {
    match crds.lookup(
        obj["apiVersion"].as_str().unwrap(),
        obj["kind"].as_str().unwrap(),
    ) {
        Lookup::Found(v) => v,
        _ => panic!("no CRD for {obj}"),
    }
}

/// Defaults then validates, as `check --crd` does; returns the messages.
fn judge(obj: &Value, old: Option<&Value>) -> Vec<String> {
    judge_with(&crds(), obj, old)
}

fn judge_with(crds: &Crds, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let v = version(crds, obj);
    let mut obj = obj.clone();
    v.apply_defaults(&mut obj);
    let old = old.map(|o| {
        let mut o = o.clone();
        v.apply_defaults(&mut o);
        o
    });
    let e = v.admit(&obj, &obj, old.as_ref()).unwrap();
    e.iter().map(ToString::to_string).collect()
}

const CONTACTS: [&str; 2] = [
    "aws_account_cluster_v1beta1_alternatecontact.yaml",
    "aws_account_namespaced_v1beta1_alternatecontact.yaml",
];

#[test]
fn all_fixture_crds_load_and_compile() {
    all_load_and_compile(&crds());
}

#[test]
fn the_providers_own_crds_load_and_compile() {
    if let Some(dir) =
        crate::third_party::third_party_fixtures("the_providers_own_crds_load_and_compile")
    {
        all_load_and_compile(&crds_in(&dir));
    }
}

fn all_load_and_compile(crds: &Crds) {
    assert_eq!(crds.crds.len(), 7);
    for c in &crds.crds {
        for v in &c.versions {
            v.ensure_supported().unwrap();
        }
    }
    let n: usize = crds
        .crds
        .iter()
        .flat_map(|c| &c.versions)
        .map(|v| v.schema.properties["spec"].rules.len())
        .sum();
    assert!(n >= 8, "{n} rules on spec");
}

#[test]
fn full_examples_pass() {
    for name in CONTACTS {
        assert_eq!(judge(&example(name), None), Vec::<String>::new(), "{name}");
    }
    for name in [
        "aws_ec2_cluster_v1beta1_vpc.yaml",
        "aws_ec2_namespaced_v1beta1_vpc.yaml",
    ] {
        assert_eq!(judge(&example(name), None), Vec::<String>::new(), "{name}");
    }
    let mut bucket = example("aws_s3_cluster_v1beta1_bucket.yaml");
    assert_eq!(judge(&bucket, None), Vec::<String>::new());
    // Upstream names some examples with a placeholder the API server refuses.
    bucket["metadata"]["name"] = json!("${Rand.RFC1123Subdomain}");
    let e = judge(&bucket, None);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("metadata.name: Invalid value: \"${Rand.RFC1123Subdomain}\": a lowercase RFC 1123 subdomain"),
        "{e:?}"
    );
}

#[test]
fn each_missing_parameter_gets_upjets_message() {
    each_missing_parameter_in(&fixtures());
}

/// The rules upjet generated, in the provider's own CRDs and examples.
#[test]
fn the_providers_rules_judge_each_missing_parameter() {
    if let Some(dir) =
        crate::third_party::third_party_fixtures("the_providers_rules_judge_each_missing_parameter")
    {
        each_missing_parameter_in(&dir);
    }
}

fn each_missing_parameter_in(fixtures: &Path) {
    let crds = crds_in(fixtures);
    for name in CONTACTS {
        let full = example_in(fixtures, name);
        assert_eq!(
            judge_with(&crds, &full, None),
            Vec::<String>::new(),
            "{name}"
        );
        for field in ["emailAddress", "name", "phoneNumber", "title"] {
            let mut obj = full.clone();
            obj["spec"]["forProvider"]
                .as_object_mut()
                .unwrap()
                .remove(field);
            assert_eq!(
                judge_with(&crds, &obj, None),
                vec![format!(
                    "spec: Invalid value: spec.forProvider.{field} is a required parameter"
                )],
                "{name}"
            );
        }
    }
}

#[test]
fn all_missing_parameters_are_reported_together() {
    let mut obj = example(CONTACTS[0]);
    obj["spec"]["forProvider"] = json!({"alternateContactType": "BILLING"});
    let errors = judge(&obj, None);
    assert_eq!(errors.len(), 4, "{errors:?}");
    let crds = crds();
    let v = version(&crds, &obj);
    let mut o = obj.clone();
    v.apply_defaults(&mut o);
    let e = v.validate(&o, None).unwrap();
    let text = render("AlternateContact", "operations", &e);
    assert!(
        text.starts_with("The AlternateContact \"operations\" is invalid: \n* spec: Invalid value"),
        "{text}"
    );
}

#[test]
fn init_provider_satisfies_the_rule() {
    let mut obj = example(CONTACTS[0]);
    let email = obj["spec"]["forProvider"]
        .as_object_mut()
        .unwrap()
        .remove("emailAddress")
        .unwrap();
    obj["spec"]["initProvider"] = json!({"emailAddress": email});
    assert_eq!(judge(&obj, None), Vec::<String>::new());
    // An initProvider without the field does not.
    obj["spec"]["initProvider"] = json!({"title": "x"});
    assert_eq!(judge(&obj, None).len(), 1);
}

#[test]
fn observe_only_needs_no_parameters() {
    let mut obj = example(CONTACTS[1]);
    obj["spec"]["forProvider"] = json!({"alternateContactType": "SECURITY"});
    obj["spec"]["managementPolicies"] = json!(["Observe"]);
    assert_eq!(judge(&obj, None), Vec::<String>::new());
    obj["spec"]["managementPolicies"] = json!(["Observe", "Update"]);
    assert_eq!(judge(&obj, None).len(), 4);
}

#[test]
fn defaults_are_applied_at_every_level() {
    let crds = crds();
    let mut obj = example(CONTACTS[0]);
    assert!(obj["spec"].get("managementPolicies").is_none());
    obj["spec"]["providerConfigRef"] = json!({"name": "p", "policy": {}});
    let v = version(&crds, &obj);
    v.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["managementPolicies"], json!(["*"]));
    assert_eq!(obj["spec"]["deletionPolicy"], "Delete");
    // A nested default inside a present object.
    assert_eq!(
        obj["spec"]["providerConfigRef"]["policy"]["resolution"],
        "Required"
    );
    // Without defaults the upjet rules could not even read managementPolicies.
    let mut raw = example(CONTACTS[0]);
    raw["spec"]["forProvider"]
        .as_object_mut()
        .unwrap()
        .remove("title");
    let e: Vec<String> = v
        .validate(&raw, None)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        e.iter()
            .all(|e| e.contains("no such key") || e.contains("managementPolicies")),
        "{e:?}"
    );
    // A default fills in an absent object, and that object's own defaults follow.
    let mut bare = example(CONTACTS[0]);
    bare["spec"]
        .as_object_mut()
        .unwrap()
        .remove("providerConfigRef");
    v.apply_defaults(&mut bare);
    assert_eq!(
        bare["spec"]["providerConfigRef"],
        json!({"name": "default"})
    );
}

#[test]
fn type_enum_required_and_unknown_errors_carry_paths() {
    let mut obj = example(CONTACTS[0]);
    obj["spec"]["deletionPolicy"] = json!("delete");
    obj["spec"]["forProvider"]
        .as_object_mut()
        .unwrap()
        .remove("alternateContactType");
    obj["spec"]["forProvider"]["colour"] = json!("blue");
    obj["spec"]["managementPolicies"] = json!(["Observe", "Destroy"]);
    // Strict decoding fails first, and alone: validation never runs.
    assert_eq!(
        judge(&obj, None),
        vec!["unknown field \"spec.forProvider.colour\""]
    );
    obj["spec"]["forProvider"]
        .as_object_mut()
        .unwrap()
        .remove("colour");
    let e = judge(&obj, None);
    assert_eq!(
        e,
        vec![
            "spec.deletionPolicy: Unsupported value: \"delete\": supported values: \"Orphan\", \"Delete\"",
            "spec.forProvider.alternateContactType: Required value",
            "spec.managementPolicies[1]: Unsupported value: \"Destroy\": supported values: \"Observe\", \
             \"Create\", \"Update\", \"Delete\", \"LateInitialize\", \"*\"",
            // Enum and required errors are blocking: the CEL rules do not run.
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; \
             correct the existing errors to complete validation",
        ],
    );
    let mut obj = example(CONTACTS[0]);
    obj["spec"]["forProvider"]["emailAddress"] = json!(42);
    let e = judge(&obj, None);
    assert_eq!(
        e[0],
        "spec.forProvider.emailAddress: Invalid value: \"integer\": spec.forProvider.emailAddress in body must be of type string: \"integer\""
    );
    // A type error stops the CEL rules, as in the API server.
    assert!(
        e[1].contains("some validation rules were not checked"),
        "{e:?}"
    );
    assert_eq!(e.len(), 2);
}

#[test]
fn metadata_and_preserved_fields_are_not_unknown() {
    let mut obj = example(CONTACTS[0]);
    obj["metadata"]["finalizers"] = json!(["x"]);
    assert_eq!(judge(&obj, None), Vec::<String>::new());
    // ObjectMeta has no such field: strict decoding names it.
    obj["metadata"]["anything"] = json!({"goes": 1});
    assert_eq!(
        judge(&obj, None),
        vec!["unknown field \"metadata.anything\""]
    );
}

// ---------------------------------------------------------------------------
// Synthetic CRDs for what the fixtures do not exercise.

fn synthetic(schema: Value) -> CrdVersion {
    synthetic_as(schema, KubeVersion::NEWEST)
}

/// The CRD of `schema` as an API server of `kube` stores and judges it.
fn synthetic_as(schema: Value, kube: KubeVersion) -> CrdVersion {
    let doc = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "Widget"}, "versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": schema}}
        ]}
    });
    let crd = Crds::parse_crd(&doc, "test.yaml", kube).unwrap();
    crd.versions.into_iter().next().unwrap()
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

fn errors_of(v: &CrdVersion, obj: &Value, old: Option<&Value>) -> Vec<String> {
    v.validate(obj, old)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn widget_schema() -> Value {
    json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.size * 2 <= 20", "messageExpression": "'size ' + string(self.size) + ' is over 10'"},
            {"rule": "self.size == oldSelf.size", "message": "size is immutable", "reason": "FieldValueForbidden"},
            {"rule": "!has(self.mode) || self.mode != 'x'", "fieldPath": ".mode", "reason": "FieldValueRequired", "message": "mode x"},
        ],
        "properties": {
            "size": {"type": "integer", "default": 3},
            "mode": {"type": "string"},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "x-kubernetes-validations": [
                {"rule": "self.size() <= 5"}
            ]}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.port >= oldSelf.port", "message": "ports only grow"}]}},
        }
    }}})
}

#[test]
fn message_expression_reason_and_field_path() {
    let v = synthetic(widget_schema());
    let mut obj = widget(json!({"size": 11, "mode": "x"}));
    v.apply_defaults(&mut obj);
    assert_eq!(
        errors_of(&v, &obj, None),
        vec![
            "spec: Invalid value: size 11 is over 10",
            "spec.mode: Required value: mode x",
        ]
    );
}

#[test]
fn transition_rules_need_an_old_object() {
    let v = synthetic(widget_schema());
    let old =
        widget(json!({"size": 3, "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 90}]}));
    let new =
        widget(json!({"size": 4, "ports": [{"name": "b", "port": 89}, {"name": "c", "port": 1}]}));
    // Create: transition rules are skipped.
    assert_eq!(errors_of(&v, &new, None), Vec::<String>::new());
    // Update: oldSelf at the spec, and map-list items correlated by key.
    assert_eq!(
        errors_of(&v, &new, Some(&old)),
        vec![
            "spec: Forbidden: size is immutable",
            "spec.ports[0]: Invalid value: ports only grow",
        ]
    );
}

#[test]
fn rules_under_additional_properties_and_preserved_fields() {
    let v = synthetic(widget_schema());
    let mut obj =
        widget(json!({"labels": {"a": "short", "b": "toolong"}, "free": {"any": {"thing": [1]}}}));
    v.apply_defaults(&mut obj);
    assert_eq!(
        errors_of(&v, &obj, None),
        vec!["spec.labels[b]: Invalid value: \"toolong\": failed rule: self.size() <= 5"]
    );
}

#[test]
fn runtime_errors_are_reported_with_the_rule() {
    let v = synthetic(json!({"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": [{"rule": "self.missing == 1"}]
    }}}));
    let e = errors_of(&v, &widget(json!({})), None);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("spec: Invalid value: \"object\": "),
        "{e:?}"
    );
    assert!(
        e[0].ends_with("evaluating rule: self.missing == 1"),
        "{e:?}"
    );
}

#[test]
fn unsupported_rules_fail_loudly() {
    let v = synthetic(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"endpoint": {"type": "string", "x-kubernetes-validations": [{"rule": "isURL(self)"}]}}
    }}}));
    let e = v
        .validate(&widget(json!({"endpoint": "x"})), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spec.endpoint") && e.contains("'isURL'") && e.contains("docs/cel.md"),
        "{e}"
    );
}

#[test]
fn root_rules_see_only_name_and_generate_name() {
    let v = synthetic(json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "!has(self.metadata.labels) && self.metadata.name == 'w'"}],
        "properties": {"spec": {"type": "object"}}}));
    let mut obj = widget(json!({}));
    obj["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(errors_of(&v, &obj, None), Vec::<String>::new());
    obj["metadata"]["name"] = json!("other");
    assert_eq!(
        errors_of(&v, &obj, None),
        vec!["<nil>: Invalid value: failed rule: !has(self.metadata.labels) && self.metadata.name == 'w'"]
    );
}

#[test]
fn nullable_and_int_or_string() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"type": "string"},
            "port": {"x-kubernetes-int-or-string": true},
            "n": {"type": "integer"},
        }}}}),
    );
    assert_eq!(
        errors_of(
            &v,
            &widget(json!({"a": null, "port": "http", "n": 2.0})),
            None
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        errors_of(&v, &widget(json!({"port": 8080})), None),
        Vec::<String>::new()
    );
    let e = errors_of(
        &v,
        &widget(json!({"b": null, "port": true, "n": 2.5})),
        None,
    );
    // Three type errors, and no notice of unchecked rules: the schema has
    // none, so the API server has no CEL validator to skip.
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].starts_with("spec.b: Invalid value: \"null\""), "{e:?}");
    assert!(
        e[1].starts_with("spec.n: Invalid value: \"number\""),
        "{e:?}"
    );
    assert!(
        e[2].starts_with("spec.port: Invalid value: \"boolean\""),
        "{e:?}"
    );
}

#[test]
fn lookup_by_api_version_and_kind() {
    let crds = crds();
    assert!(matches!(
        crds.lookup("account.aws.upbound.io/v1beta1", "AlternateContact"),
        Lookup::Found(_)
    ));
    assert!(matches!(
        crds.lookup("account.aws.upbound.io/v9", "AlternateContact"),
        Lookup::NoVersion(_)
    ));
    assert!(matches!(
        crds.lookup("example.org/v1", "Thing"),
        Lookup::NoCrd
    ));
    assert!(matches!(crds.lookup("v1", "ConfigMap"), Lookup::NoCrd));
    // A kind its group's CRDs do not define: "no matches for kind".
    match crds.lookup("account.aws.upbound.io/v1beta1", "AlternateContactt") {
        Lookup::NoKind(group) => assert_eq!(group[0].kind, "AlternateContact"),
        _ => panic!("expected NoKind"),
    }
}

#[test]
fn loading_errors() {
    let mut crds = Crds::default();
    assert!(matches!(
        crds.add_yaml("bad.yaml", "a: ["),
        Err(CrdError::Parse { .. })
    ));
    assert!(crds.is_empty());
    let text = std::fs::read_to_string(
        fixtures().join("crds/account.aws.upbound.io_alternatecontacts.yaml"),
    )
    .unwrap();
    crds.add_yaml("a.yaml", &text).unwrap();
    let e = crds.add_yaml("b.yaml", &text).unwrap_err().to_string();
    assert!(e.contains("also defined in a.yaml"), "{e}");
}

#[test]
fn a_list_of_crds_is_read_as_its_items() {
    let text =
        std::fs::read_to_string(fixtures().join("crds/s3.aws.upbound.io_buckets.yaml")).unwrap();
    let crd: Value = serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|v| !v.is_null())
        .unwrap();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [crd]});
    let mut crds = Crds::default();
    crds.add("list.yaml", &list).unwrap();
    assert!(matches!(
        crds.lookup("s3.aws.upbound.io/v1beta1", "Bucket"),
        Lookup::Found(_)
    ));
}

#[test]
fn optional_old_self_runs_on_create_and_nulls_are_defaulted() {
    let v = synthetic(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [{
            "rule": "!oldSelf.hasValue() || self.size >= oldSelf.value().size",
            "optionalOldSelf": true,
            "message": "size only grows"
        }, {
            "rule": "oldSelf.hasValue() || self.size < 100",
            "optionalOldSelf": true,
            "message": "start small"
        }],
        "properties": {"size": {"type": "integer", "default": 1}, "note": {"type": "string"}}
    }}}));
    let mut new = widget(json!({"size": null, "note": null}));
    v.apply_defaults(&mut new);
    assert_eq!(new["spec"], json!({"size": 1}));
    assert_eq!(errors_of(&v, &new, None), Vec::<String>::new());
    let big = widget(json!({"size": 200}));
    assert_eq!(
        errors_of(&v, &big, None),
        vec!["spec: Invalid value: start small"]
    );
    let old = widget(json!({"size": 300}));
    assert_eq!(
        errors_of(&v, &big, Some(&old)),
        vec!["spec: Invalid value: size only grows"]
    );
}

#[test]
fn message_expressions_read_fields_their_rule_does_not() {
    // The rule reads `size`; its message also reads `mode` and the labels,
    // which a scope built for the rule alone would not hold.
    let v = synthetic(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.size <= 10", "messageExpression": "'size ' + string(self.size) + ' of a ' + self.mode + ' widget with ' + string(size(self.labels)) + ' labels'"},
            {"rule": "!has(self.labels) || self.labels.all(k, k != 'bad')", "message": "no bad label"},
        ],
        "properties": {
            "size": {"type": "integer"},
            "mode": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }
    }}}));
    let obj = widget(json!({"size": 11, "mode": "large", "labels": {"a": "1", "bad": "2"}}));
    assert_eq!(
        errors_of(&v, &obj, None),
        vec![
            "spec: Invalid value: size 11 of a large widget with 2 labels",
            "spec: Invalid value: no bad label",
        ]
    );
}

// ---------------------------------------------------------------------------
// Where `check` and the API server could disagree: what the API server
// rejects must fail `check`, and what it accepts must pass.

#[test]
fn reserved_and_special_property_names_are_escaped_for_cel() {
    // The EKS PodIdentityAssociation CRD's rule, on a field named `namespace`.
    let v = synthetic(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "has(self.forProvider.__namespace__)", "message": "namespace is required"},
            {"rule": "!has(self.forProvider.a__dash__b) || self.forProvider.a__dash__b != 'x'"},
            {"rule": "!has(self.forProvider.x__underscores__y) || self.forProvider.x__underscores__y == 1"},
            {"rule": "!has(self.labels) || !('k-1' in self.labels) || self.labels['k-1'] == 'v'"},
        ],
        "properties": {
            "forProvider": {"type": "object", "properties": {
                "namespace": {"type": "string"},
                "a-b": {"type": "string"},
                "x__y": {"type": "integer"},
            }},
            // Map keys are data: never escaped.
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }
    }}}));
    let ok = widget(
        json!({"forProvider": {"namespace": "default", "a-b": "y", "x__y": 1}, "labels": {"k-1": "v"}}),
    );
    assert_eq!(errors_of(&v, &ok, None), Vec::<String>::new());
    let bad = widget(json!({"forProvider": {"a-b": "x", "x__y": 2}, "labels": {"k-1": "w"}}));
    let e = errors_of(&v, &bad, None);
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(e[0].ends_with("namespace is required"), "{e:?}");
}

#[test]
fn unknown_fields_inside_a_value_of_the_wrong_type_are_reported() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "target": {"type": "object", "properties": {"arn": {"type": "string"}}},
            "names": {"type": "array", "items": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"typed": {"type": "object", "properties": {"a": {"type": "string"}}}}},
        }}}}),
    );
    // A one-item list given for an object: each key of the item is unknown.
    let obj = widget(json!({
        "target": [{"arn": "a", "role": "r"}],
        "names": [{"n": 1}],
        "free": {"anything": {"goes": 1}, "typed": {"a": "x", "b": "y"}},
    }));
    let e: Vec<String> = v
        .unknown_fields(&obj)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        e,
        vec![
            "unknown field \"spec.free.typed.b\"",
            "unknown field \"spec.names[0].n\"",
            "unknown field \"spec.target[0].arn\"",
            "unknown field \"spec.target[0].role\"",
        ]
    );
    let all = v.admit(&obj, &obj, None).unwrap();
    assert_eq!(
        crate::admission::crd::render("Widget", "w", &all),
        "strict decoding error: unknown field \"spec.free.typed.b\", unknown field \"spec.names[0].n\", \
         unknown field \"spec.target[0].arn\", unknown field \"spec.target[0].role\""
    );
}

#[test]
fn metadata_is_validated_as_the_api_server_does() {
    let v = synthetic(json!({"type": "object", "properties": {"spec": {"type": "object"}}}));
    let mut obj = widget(json!({}));
    obj["metadata"] = json!({"name": "Bad_Name", "labels": {"team": "x".repeat(64)},
        "annotations": {"a//b": "c"}, "finalizers": ["no spaces allowed"]});
    let e = errors_of(&v, &obj, None);
    let paths: Vec<&str> = e.iter().map(|m| m.split(':').next().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "metadata.name",
            "metadata.labels",
            "metadata.annotations",
            "metadata.finalizers"
        ],
        "{e:?}"
    );
}

#[test]
fn limits_lists_and_formats() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [{"rule": "false", "message": "cel ran"}],
    "properties": {
        "code": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "p": {"type": "integer"}}}},
        "short": {"type": "string", "maxLength": 3},
        "few": {"type": "array", "maxItems": 1, "items": {"type": "string"}},
    }}}});
    let v = synthetic(schema.clone());
    let obj = widget(
        json!({"code": "A", "n": 11, "at": "yesterday", "tags": ["a", "b", "a"],
        "ports": [{"name": "x", "p": 1}, {"name": "x", "p": 2}]}),
    );
    let e = errors_of(&v, &obj, None);
    assert_eq!(
        e,
        vec![
            "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
            "spec.code: Invalid value: \"A\": spec.code in body should be at least 2 chars long",
            "spec.code: Invalid value: \"A\": spec.code in body should match '^[a-z]+$'",
            "spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10",
            "spec.ports[1]: Duplicate value: {\"name\":\"x\"}",
            "spec.tags[2]: Duplicate value: \"a\"",
            // Not blocking: the CEL rules still run.
            "spec: Invalid value: cel ran",
        ]
    );
    // Before 1.34 a map printed as Go's %#v, and before 1.35 a rule's
    // error named the type.
    let e = errors_of(&synthetic_as(schema.clone(), as_of(33)), &obj, None);
    assert!(
        e.contains(
            &"spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"x\"}".to_string()
        ),
        "{e:?}"
    );
    assert!(
        e.contains(&"spec: Invalid value: \"object\": cel ran".to_string()),
        "{e:?}"
    );
    // Too long and too many are blocking.
    let obj = widget(json!({"short": "abcd", "few": ["a", "b"]}));
    let e = errors_of(&v, &obj, None);
    assert_eq!(
        e,
        vec![
            "spec.few: Too many: 2: must have at most 1 items",
            "spec.short: Too long: may not be more than 3 bytes",
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; \
             correct the existing errors to complete validation",
        ]
    );
    // Before 1.34 the nil value printed as the string "null".
    let e = errors_of(&synthetic_as(schema, as_of(33)), &obj, None);
    assert!(
        e[2].starts_with("<nil>: Invalid value: \"null\": some validation rules"),
        "{e:?}"
    );
}

#[test]
fn formats_the_api_server_checks_and_mrguard_does_not_refuse_the_crd() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "mail": {"type": "string", "format": "email"},
            "big": {"type": "integer", "format": "int64"},
        }}}}),
    );
    let e = v.ensure_supported().unwrap_err().to_string();
    assert!(
        e.contains("format: email") && e.contains("spec.mail"),
        "{e}"
    );
    // Patterns Rust's regex cannot read: rejected too.
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "word": {"type": "string", "pattern": "^(?=a)"},
        }}}}),
    );
    let e = v.ensure_supported().unwrap_err().to_string();
    assert!(e.contains("spec.word") && e.contains("pattern"), "{e}");
}

/// An embedded object (`x-kubernetes-embedded-resource`, e.g. a Composition
/// step's input or provider-kubernetes' manifest) needs an apiVersion and a
/// kind, as the API server checks them, and its metadata's labels and
/// annotations are held to the root's rules; a name is not required.
#[test]
fn embedded_objects_need_their_type_and_valid_labels() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "input": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
        }}}}),
    );
    v.ensure_supported().unwrap();
    let errs = |input: Value| errors_of(&v, &widget(json!({"input": input})), None);
    assert!(errs(
        json!({"apiVersion": "pt.fn.crossplane.io/v1beta1", "kind": "Resources", "resources": []})
    )
    .is_empty());
    assert!(errs(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"app": "x"}}})
    )
    .is_empty());
    let e = errs(json!({"resources": []}));
    assert_eq!(
        e[..2],
        [
            "spec.input.apiVersion: Required value: must not be empty",
            "spec.input.kind: Required value: must not be empty"
        ],
        "{e:?}"
    );
    let e = errs(json!({"apiVersion": "a/b/c", "kind": "Not_A_Kind"})).join("\n");
    assert!(
        e.contains(
            "spec.input.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string"
        ),
        "{e}"
    );
    assert!(
        e.contains("spec.input.kind: Invalid value: \"Not_A_Kind\": may have mixed case"),
        "{e}"
    );
    let e = errs(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"bad key!": "x"}}}),
    )
    .join("\n");
    assert!(e.contains("spec.input.metadata.labels"), "{e}");
}

#[test]
fn date_times_in_the_layouts_the_api_server_accepts() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "at": {"type": "string", "format": "date-time"},
        }}}}),
    );
    for ok in [
        "2024-01-02T03:04:05Z",
        "2024-01-02T03:04:05.123+02:00",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04Z",
        "2024-01-02 03:04:05+0200",
    ] {
        assert_eq!(
            errors_of(&v, &widget(json!({"at": ok})), None),
            Vec::<String>::new(),
            "{ok}"
        );
    }
    for bad in ["2024-01-02", "yesterday", "2024-01-02T3:04:05Z"] {
        assert_eq!(
            errors_of(&v, &widget(json!({"at": bad})), None).len(),
            1,
            "{bad}"
        );
    }
}

#[test]
fn patterns_use_go_s_ascii_classes() {
    let v = synthetic(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "n": {"type": "string", "pattern": "^\\d+$"},
            "w": {"type": "string", "pattern": "^[\\w-]+\\b.*$"},
            "lit": {"type": "string", "pattern": "^[]a]\\\\d$"},
        }}}}),
    );
    let ok = widget(json!({"n": "123", "w": "a-b x", "lit": "]\\d"}));
    assert_eq!(errors_of(&v, &ok, None), Vec::<String>::new());
    // Arabic-Indic digits are digits to Rust's \d, not to Go's.
    let bad = widget(json!({"n": "١٢", "w": "é x", "lit": "a1"}));
    let e = errors_of(&v, &bad, None);
    assert_eq!(e.len(), 3, "{e:?}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z0-9 ./_${}-]{0,70}".prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "name",
            "generateName",
            "namespace",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "uid",
            "kind",
            "apiVersion",
            "controller",
            "a/b",
            "x.y",
            "forProvider",
            "namespace",
            "code",
            "tags",
            "ports",
            "p",
            "free",
            "lables",
        ]);
        leaf().prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keys.clone(), inner, 0..5).prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    fn schema() -> CrdVersion {
        synthetic(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "!has(self.forProvider) || !has(self.forProvider.__namespace__) || self.forProvider.__namespace__ != 'x'"},
            ],
            "properties": {
                "forProvider": {"type": "object", "properties": {"namespace": {"type": "string"}, "x.y": {"type": "integer", "minimum": 0}}},
                "code": {"type": "string", "maxLength": 5, "pattern": "^\\w*$", "format": "date-time"},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 3, "items": {"type": "string"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["p"],
                    "items": {"type": "object", "properties": {"p": {"type": "integer"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }}}}),
        )
    }

    proptest! {
        /// No metadata and no spec makes the API server's checks panic; an
        /// unknown field, wherever it is, fails the object alone.
        #[test]
        fn admit_never_panics_and_strict_decoding_stands_alone(meta in value(), spec in value()) {
            let v = schema();
            let obj = json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": meta, "spec": spec});
            let mut current = obj.clone();
            v.apply_defaults(&mut current);
            let errors = v.admit(&current, &current, None).unwrap();
            let unknown = errors.iter().filter(|e| e.kind == FieldErrorKind::Unknown).count();
            prop_assert!(unknown == 0 || unknown == errors.len(), "{errors:?}");
            let _ = crate::admission::crd::render("Widget", "w", &errors);
        }
    }
}

// ---------------------------------------------------------------------------
// As the API server of an older release judges.

fn as_of(minor: u32) -> KubeVersion {
    KubeVersion::new(1, minor)
}

fn admitted(v: &CrdVersion, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let mut obj = obj.clone();
    v.apply_defaults(&mut obj);
    v.admit(&obj, &obj, old)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn validation_rules_are_enforced_from_1_25_and_noted_before() {
    let big = widget(json!({"size": 11}));
    for minor in [20, 23, 24] {
        let v = synthetic_as(widget_schema(), as_of(minor));
        assert!(admitted(&v, &big, None).is_empty(), "1.{minor}");
        // Transition rules neither.
        let old = widget(json!({"size": 12}));
        assert!(admitted(&v, &big, Some(&old)).is_empty(), "1.{minor}");
        assert_eq!(
            v.notes(&big),
            [format!(
                "5 x-kubernetes-validations rules of CRD widgets.example.org not evaluated: \
                 Kubernetes 1.{minor} does not enforce CRD validation rules (from 1.25)"
            )]
        );
    }
    let v = synthetic_as(widget_schema(), as_of(25));
    assert!(v.notes(&big).is_empty());
    assert_eq!(
        admitted(&v, &big, None),
        ["spec: Invalid value: \"object\": failed rule: self.size * 2 <= 20"]
    );
    assert_eq!(
        admitted(&v, &big, Some(&widget(json!({"size": 12})))),
        [
            "spec: Invalid value: \"object\": failed rule: self.size * 2 <= 20",
            "spec: Invalid value: \"object\": size is immutable"
        ]
    );
}

#[test]
fn message_expression_from_1_27_reason_and_field_path_from_1_28() {
    let obj = widget(json!({"size": 11, "mode": "x"}));
    let messages = |minor| admitted(&synthetic_as(widget_schema(), as_of(minor)), &obj, None);
    assert_eq!(
        messages(26),
        [
            "spec: Invalid value: \"object\": failed rule: self.size * 2 <= 20",
            "spec: Invalid value: \"object\": mode x"
        ]
    );
    assert_eq!(
        messages(27),
        [
            "spec: Invalid value: \"object\": size 11 is over 10",
            "spec: Invalid value: \"object\": mode x"
        ]
    );
    assert_eq!(
        messages(28),
        [
            "spec: Invalid value: \"object\": size 11 is over 10",
            "spec.mode: Required value: mode x"
        ]
    );
    // From 1.35 the error shows the value judged, an object's left out.
    assert_eq!(
        messages(36),
        [
            "spec: Invalid value: size 11 is over 10",
            "spec.mode: Required value: mode x"
        ]
    );
}

#[test]
fn a_failed_rule_shows_the_value_from_1_35() {
    let schema = json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.size <= 10", "message": "too big"}],
        "properties": {
            "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self != 7"}]},
            "ratio": {"type": "number", "x-kubernetes-validations": [{"rule": "self < 1.0", "reason": "FieldValueDuplicate"}]},
            "mode": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'x'"}]}
        }
    }}});
    let obj = widget(json!({"size": 7, "ratio": 2.0, "mode": "x"}));
    let judged = |minor| admitted(&synthetic_as(schema.clone(), as_of(minor)), &obj, None);
    assert_eq!(
        judged(34),
        [
            "spec.mode: Invalid value: \"string\": failed rule: self != 'x'",
            "spec.ratio: Duplicate value: \"number\"",
            "spec.size: Invalid value: \"integer\": failed rule: self != 7",
        ]
    );
    let spec = widget(json!({"size": 11}));
    assert_eq!(
        admitted(&synthetic_as(schema.clone(), as_of(34)), &spec, None),
        ["spec: Invalid value: \"object\": too big"]
    );
    assert_eq!(
        judged(35),
        [
            "spec.mode: Invalid value: \"x\": failed rule: self != 'x'",
            "spec.ratio: Duplicate value: 2",
            "spec.size: Invalid value: 7: failed rule: self != 7",
        ]
    );
    assert_eq!(
        admitted(&synthetic_as(schema, as_of(35)), &spec, None),
        ["spec: Invalid value: too big"]
    );
}

#[test]
fn optional_old_self_from_1_30() {
    let schema = json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [{
            "rule": "oldSelf.hasValue() || self.size <= 100",
            "optionalOldSelf": true,
            "message": "start small"
        }],
        "properties": {"size": {"type": "integer"}}
    }}});
    let big = widget(json!({"size": 200}));
    // A release before 1.30 drops the field: a transition rule, not run on
    // create.
    assert!(admitted(&synthetic_as(schema.clone(), as_of(29)), &big, None).is_empty());
    assert_eq!(
        admitted(&synthetic_as(schema, as_of(30)), &big, None),
        ["spec: Invalid value: \"object\": start small"]
    );
}

#[test]
fn unknown_fields_are_pruned_with_a_note_before_1_25() {
    let obj = widget(json!({"size": 1, "colour": "blue"}));
    let mut with_meta = obj.clone();
    with_meta["metadata"]["lables"] = json!({"a": "b"});
    let v = synthetic_as(widget_schema(), as_of(24));
    assert!(admitted(&v, &with_meta, None).is_empty());
    assert_eq!(
        v.notes(&with_meta)[1],
        "unknown fields \"metadata.lables\", \"spec.colour\" pruned: Kubernetes 1.24 drops \
         fields the schema does not know and accepts the object (server-side field \
         validation refuses them from 1.25)"
    );
    // Other errors still count: the unknown field does not hide them.
    let bad = widget(json!({"size": "big", "colour": "blue"}));
    assert_eq!(
        admitted(&v, &bad, None),
        ["spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""]
    );
    let v = synthetic_as(widget_schema(), as_of(25));
    assert_eq!(admitted(&v, &obj, None), ["unknown field \"spec.colour\""]);
    assert!(v.notes(&obj).is_empty());
}

#[test]
fn a_rule_the_release_drops_cannot_make_the_crd_unusable() {
    let schema = json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "isURL(self.endpoint)"}],
        "properties": {"endpoint": {"type": "string"}}
    }}});
    assert!(synthetic(schema.clone()).ensure_supported().is_err());
    let v = synthetic_as(schema, as_of(24));
    assert!(v.ensure_supported().is_ok());
    assert!(admitted(&v, &widget(json!({"endpoint": "x"})), None).is_empty());
}

#[test]
fn crds_are_judged_as_the_release_they_were_read_for() {
    let doc = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "Widget"}, "scope": "Cluster",
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": widget_schema()}}]}
    });
    let big = widget(json!({"size": 11}));
    for (crds, rejected) in [(Crds::default(), true), (Crds::judged_as(as_of(20)), false)] {
        let mut crds = crds;
        crds.add("w.yaml", &doc).unwrap();
        let Lookup::Found(v) = crds.lookup("example.org/v1", "Widget") else {
            panic!("no Widget");
        };
        assert_eq!(
            !admitted(v, &big, None).is_empty(),
            rejected,
            "{}",
            crds.kube()
        );
    }
}

#[test]
fn an_enum_error_of_a_list_item_is_named_at_the_list_before_1_25() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "policies": {"type": "array", "items": {"type": "string", "enum": ["Observe", "*"]}},
        "tags": {"type": "object", "additionalProperties": {"type": "string", "enum": ["a"]}},
    }}}});
    let obj = widget(json!({"policies": ["Observe", "Destroy"], "tags": {"k": "b"}}));
    let paths = |minor| -> Vec<String> {
        let v = synthetic_as(schema.clone(), as_of(minor));
        let mut obj = obj.clone();
        v.apply_defaults(&mut obj);
        v.validate(&obj, None)
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .filter(|p| p != "<nil>")
            .collect()
    };
    // A map value's error keeps its path: only list items were measured.
    assert_eq!(paths(20), ["spec.policies", "spec.tags.k"]);
    assert_eq!(paths(24), ["spec.policies", "spec.tags.k"]);
    assert_eq!(paths(25), ["spec.policies[1]", "spec.tags.k"]);
}

/// An MRD file reads like the CRD it becomes; with the CRD next to it
/// (an active kind listed twice), the CRD is the one kept.
#[test]
fn an_mrd_is_read_like_its_crd() {
    let spec = json!({"group": "s3.aws.upbound.io", "scope": "Cluster",
        "names": {"kind": "Bucket", "plural": "buckets"},
        "versions": [{"name": "v1beta1", "served": true, "storage": true,
          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"forProvider": {"type": "object", "properties": {
              "region": {"type": "string", "description": "Changing this forces a new resource to be created."}}}}}}}}}]});
    let mrd = json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
        "metadata": {"name": "buckets.s3.aws.upbound.io"}, "spec": spec});
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "buckets.s3.aws.upbound.io"}, "spec": spec});
    let mut crds = Crds::default();
    crds.add("mrd.yaml", &mrd).unwrap();
    let Lookup::Found(v) = crds.lookup("s3.aws.upbound.io/v1beta1", "Bucket") else {
        panic!("the MRD's kind is not found");
    };
    let errors = v
        .validate(
            &json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
            "metadata": {"name": "b"}, "spec": {"forProvider": {"region": 3}}}),
            None,
        )
        .unwrap();
    assert_eq!(errors[0].path, "spec.forProvider.region", "{errors:?}");
    assert_eq!(
        crds.documented()[0].fields[0].path.as_str(),
        "spec.forProvider.region"
    );
    assert!(!crds.activations().is_empty());
    let cluster = crds.cluster();
    assert!(cluster
        .activations()
        .snapshot()
        .mrd_for("s3.aws.upbound.io", "Bucket")
        .is_some());
    // The CRD after the MRD replaces it; an MRD after the CRD is not a
    // second definition.
    crds.add("crd.yaml", &crd).unwrap();
    crds.add("mrd-again.yaml", &mrd).unwrap();
    assert_eq!(crds.crds.len(), 1);
    assert_eq!(crds.crds[0].source, "crd.yaml");
    // Two CRDs of one kind are still refused.
    let e = crds.add("crd2.yaml", &crd).unwrap_err().to_string();
    assert!(e.contains("also defined in crd.yaml"), "{e}");
}

/// The provider config CRDs read tell the index which kinds each family
/// serves (not their objects): `provider-config-kind` judges offline.
#[test]
fn provider_config_crds_name_the_kinds_their_family_serves() {
    let crd = |kind: &str, scope: &str, cats: Value| {
        let plural = format!("{}s", kind.to_lowercase());
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.aws.m.upbound.io")},
            "spec": {"group": "aws.m.upbound.io", "scope": scope,
                "names": {"kind": kind, "plural": plural, "categories": cats},
                "versions": [{"name": "v1beta1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    };
    let mut crds = Crds::default();
    let cats = json!(["crossplane", "providerconfig", "aws"]);
    crds.add(
        "pc.yaml",
        &crd("ProviderConfig", "Namespaced", cats.clone()),
    )
    .unwrap();
    crds.add(
        "usage.yaml",
        &crd("ProviderConfigUsage", "Namespaced", cats),
    )
    .unwrap();
    crds.add(
        "other.yaml",
        &crd("Other", "Namespaced", json!(["managed"])),
    )
    .unwrap();
    for cluster in [
        crds.cluster(),
        crds.cluster_for("ec2.aws.m.upbound.io", "VPC"),
    ] {
        let got = cluster
            .identities()
            .provider_config_kinds_for("ec2.aws.m.upbound.io");
        assert_eq!(
            got,
            Some((
                "aws.m.upbound.io".to_string(),
                vec!["ProviderConfig".to_string()]
            ))
        );
        assert!(!cluster.identities().knows_provider_configs());
    }
}
