use serde_json::{json, Value};

use super::*;
use crate::admission::judging::Judging;

fn yaml(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/compositions")
        .join(name);
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn summary(a: &Analysis) -> Vec<(String, String, String, Vec<String>)> {
    a.findings
        .iter()
        .map(|f| {
            (
                f.resource.clone(),
                f.patch.to_string(),
                f.target.clone(),
                f.sources.clone(),
            )
        })
        .collect()
}

/// The Composition `name` judged now by `platform-team`.
fn judging<'a>(config: &'a Config, name: &'a str) -> Judging<'a> {
    Judging {
        config,
        subject: crate::admission::config::Subject {
            group: GROUP,
            kind: KIND,
            name,
            namespace: "",
            user: "platform-team",
        },
        now: jiff::Timestamp::now(),
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn pipeline_patches_into_immutable_fields_are_found_and_tags_are_not() {
    let a = analyse(&yaml("network-pipeline.yaml"), &Config::builtin(), None);
    assert_eq!(
        summary(&a),
        vec![
            (
                "vpc".into(),
                "patches[0]".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.region"])
            ),
            (
                "subnet-a".into(),
                "patch set \"subnet-location\" patches[0] (via patches[0])".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.geo", "spec.parameters.area"])
            ),
            (
                "subnet-a".into(),
                "patches[3]".into(),
                "spec.forProvider.availabilityZone".into(),
                s(&["spec.parameters.region"])
            ),
            (
                "subnet-b".into(),
                "patch set \"subnet-location\" patches[0] (via patches[0])".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.geo", "spec.parameters.area"])
            ),
            (
                "gateway".into(),
                "patches[1]".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.region"])
            ),
        ]
    );
    let vpc = &a.findings[0];
    assert_eq!(vpc.step.as_deref(), Some("patch-and-transform"));
    assert_eq!(vpc.patch_type, "FromCompositeFieldPath");
    assert_eq!(
        (vpc.group.as_str(), vpc.kind.as_str()),
        ("ec2.aws.upbound.io", "VPC")
    );
    assert_eq!(
        vpc.location,
        s(&[
            "spec",
            "pipeline",
            "0",
            "input",
            "resources",
            "0",
            "patches",
            "0"
        ])
    );
    assert_eq!(a.findings[1].patch_type, "CombineFromComposite");
    assert_eq!(
        a.findings[1].location,
        s(&[
            "spec",
            "pipeline",
            "0",
            "input",
            "patchSets",
            "1",
            "patches",
            "0"
        ])
    );
    assert_eq!(
        vpc.message(),
        "step \"patch-and-transform\", resource \"vpc\", patches[0]: FromCompositeFieldPath \
         spec.parameters.region -> spec.forProvider.region: spec.forProvider.region is immutable \
         for VPC.ec2.aws.upbound.io (immutableFields); after creation a change of \
         spec.parameters.region is denied on every VPC"
    );
    assert_eq!(
        vpc.fix(),
        "make spec.parameters.region immutable in the XRD (x-kubernetes-validations: \
         [{rule: \"self == oldSelf\"}]), patch into spec.initProvider.region instead if the \
         kind has it (read only at creation), or keep spec.forProvider.region out of patches"
    );
    // The other function is skipped with a note; nothing else is.
    assert_eq!(a.notes.len(), 1, "{:?}", a.notes);
    assert!(a.notes[0].contains("\"automatically-detect-ready-composed-resources\""));
    assert!(a.notes[0].contains("function-auto-ready"));
}

#[test]
fn legacy_resources_mode_reads_spec_resources_and_patch_sets() {
    let a = analyse(&yaml("network-legacy.yaml"), &Config::builtin(), None);
    assert_eq!(
        summary(&a),
        vec![
            (
                "vpc".into(),
                "patch set \"location\" patches[0] (via patches[0])".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.region"])
            ),
            (
                "flow-logs".into(),
                "patches[0]".into(),
                "spec.forProvider.region".into(),
                s(&["spec.parameters.geo", "spec.parameters.area"])
            ),
        ]
    );
    assert_eq!(a.findings[0].step, None);
    assert!(a.findings[0]
        .message()
        .starts_with("resource \"vpc\", patch set"));
    assert_eq!(
        a.findings[1].location,
        s(&["spec", "resources", "1", "patches", "0"])
    );
    assert!(a.notes.is_empty(), "{:?}", a.notes);
}

#[test]
fn an_xrd_that_freezes_the_sources_makes_findings_informational() {
    let mut xrs = XrSchemas::default();
    assert!(xrs.add(&yaml("xrd-network-immutable-region.yaml")));
    let a = analyse(
        &yaml("network-pipeline.yaml"),
        &Config::builtin(),
        Some(&xrs),
    );
    assert_eq!(a.findings.len(), 5);
    assert!(a.findings.iter().all(|f| f.informational));
    assert!(a.findings[0]
        .message()
        .contains("the XRD makes the source immutable"));
    assert!(!a.findings[0].fix().contains("x-kubernetes-validations"));
    assert!(judge(&a, &judging(&Config::builtin(), "c")).is_empty());

    // The XRD without the rule leaves them warnings; one for another XR
    // kind says it does not apply.
    let mut plain = XrSchemas::default();
    plain.add(&yaml("xrd-network.yaml"));
    let a = analyse(
        &yaml("network-pipeline.yaml"),
        &Config::builtin(),
        Some(&plain),
    );
    assert!(a.findings.iter().all(|f| !f.informational));
    let mut other = yaml("xrd-network.yaml");
    other["spec"]["names"]["kind"] = json!("XOther");
    let mut x = XrSchemas::default();
    x.add(&other);
    let a = analyse(&yaml("network-pipeline.yaml"), &Config::builtin(), Some(&x));
    assert!(a
        .notes
        .iter()
        .any(|n| n.contains("no XRD or CRD given for XNetwork")));
}

#[test]
fn judged_findings_take_the_composed_kinds_action() {
    let comp = yaml("network-pipeline.yaml");
    let a = analyse(&comp, &Config::builtin(), None);
    let f = judge(&a, &judging(&Config::builtin(), "c"));
    assert_eq!(f.len(), 5);
    assert!(f.iter().all(|f| f.rule == RULE && f.action == Action::Warn));
    let cfg = Config::from_yaml(
        "rules: {composition-immutable-patch: Deny}\nresources:\n  - apiGroups: [ec2.aws.upbound.io]\n    kinds: [Subnet]\n    immutableFields: [spec.forProvider.region]\n    rules: {composition-immutable-patch: Off}\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n",
    )
    .unwrap();
    let f = judge(&analyse(&comp, &cfg, None), &judging(&cfg, "c"));
    // Subnets are Off; the VPC and the gateway are denied.
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|f| f.action == Action::Deny));
}

#[test]
fn unknown_inputs_and_types_are_notes_never_errors() {
    let comp = json!({
        "apiVersion": "apiextensions.crossplane.io/v1", "kind": "Composition",
        "metadata": {"name": "c"},
        "spec": {"compositeTypeRef": {"apiVersion": "x.org/v1", "kind": "X"}, "mode": "Pipeline",
            "pipeline": [
                {"step": "go", "functionRef": {"name": "function-go-templating"},
                 "input": {"apiVersion": "gotemplating.fn.crossplane.io/v1beta1", "kind": "GoTemplate"}},
                {"step": "pt", "functionRef": {"name": "function-patch-and-transform"},
                 "input": {"apiVersion": "pt.fn.crossplane.io/v1beta1", "kind": "Resources",
                    "resources": [
                        {"name": "b", "base": {"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket"},
                         "patches": [
                            {"type": "PatchSet", "patchSetName": "missing"},
                            {"type": "Teleport", "fromFieldPath": "a", "toFieldPath": "spec.forProvider.region"},
                            {"type": "FromCompositeFieldPath", "fromFieldPath": "a", "toFieldPath": "spec..x"},
                            {"type": "FromEnvironmentFieldPath", "fromFieldPath": "region", "toFieldPath": "spec.forProvider"},
                            {"type": "FromCompositeFieldPath", "fromFieldPath": "spec.forProvider.region"},
                            "not a patch",
                         ]},
                        {"name": "not-covered", "base": {"apiVersion": "example.org/v1", "kind": "Thing"},
                         "patches": [{"fromFieldPath": "a", "toFieldPath": "spec.forProvider.region"}]},
                        {"name": "no-base"},
                    ]}},
                {"step": "nothing"},
            ]},
    });
    let a = analyse(&comp, &Config::builtin(), None);
    assert_eq!(a.notes.len(), 5, "{:#?}", a.notes);
    assert!(a.notes[0].contains("GoTemplate"));
    assert!(a.notes[1].contains("patch set \"missing\" is not defined"));
    assert!(a.notes[2].contains("\"Teleport\""));
    assert!(a.notes[3].contains("\"spec..x\""));
    assert!(a.notes[4].contains("this step has none"));
    // An environment patch writing the whole forProvider, and a patch with
    // no toFieldPath (it writes where it reads).
    assert_eq!(a.findings.len(), 2, "{:#?}", a.findings);
    assert_eq!(a.findings[0].sources, s(&["environment.region"]));
    assert!(a.findings[0]
        .message()
        .contains("it writes immutable spec.forProvider.region"));
    assert!(!a.findings[0].fix().contains("XRD"));
    assert_eq!(a.findings[1].target, "spec.forProvider.region");
    // Garbage in, nothing out.
    for v in [
        json!(null),
        json!("x"),
        json!({"spec": {"pipeline": 3}}),
        json!({"spec": {"mode": "Resources", "resources": [1, {"patches": "x"}]}}),
    ] {
        assert_eq!(analyse(&v, &Config::builtin(), None).findings, vec![]);
    }
}

/// A staged Deny warns with the date it starts denying, as every rule does.
#[test]
fn a_staged_rule_notes_the_date_it_denies_from() {
    let comp = yaml("network-pipeline.yaml");
    let cfg = Config::from_yaml(&format!(
        "rules:\n  composition-immutable-patch: {{action: Deny, warnUntil: '2099-01-01T00:00:00Z'}}\n{}",
        crate::admission::config::BUILTIN_YAML
    ))
    .unwrap();
    let f = judge(&analyse(&comp, &cfg, None), &judging(&cfg, "c"));
    assert_eq!(f.len(), 5);
    assert!(f.iter().all(|f| f.action == Action::Warn));
    assert!(f[0]
        .warning()
        .ends_with("(staged: this will be denied from 2099-01-01T00:00:00Z)"));
    // Past the date it denies, with no note.
    let then = Judging {
        now: "2099-01-02T00:00:00Z".parse().unwrap(),
        ..judging(&cfg, "c")
    };
    let f = judge(&analyse(&comp, &cfg, None), &then);
    assert!(f
        .iter()
        .all(|f| f.action == Action::Deny && f.note.is_none()));
}

/// An exception matching the Composition by name waives its findings
/// into warnings naming it; another name, or an expired one, does not.
#[test]
fn an_exception_waives_a_compositions_findings_by_its_name() {
    let comp = yaml("network-pipeline.yaml");
    let cfg = Config::from_yaml(&format!(
        "rules: {{composition-immutable-patch: Deny}}\nexceptions:\n  - name: net-legacy\n    rules: [composition-immutable-patch]\n    match: {{names: [xnetworks.*]}}\n    reason: migrating (NET-7)\n    expires: '2099-01-01T00:00:00Z'\n{}",
        crate::admission::config::BUILTIN_YAML
    ))
    .unwrap();
    let a = analyse(&comp, &cfg, None);
    let f = judge(&a, &judging(&cfg, "xnetworks.aws.example.org"));
    assert_eq!(f.len(), 5);
    assert!(f.iter().all(|f| f.action == Action::Warn));
    assert_eq!(f[0].exception(), Some("net-legacy"));
    assert!(f[0].warning().starts_with(
        "composition-immutable-patch: waived by exception net-legacy (expires 2099-01-01T00:00:00Z): step"
    ));
    let other = judge(&a, &judging(&cfg, "other"));
    assert!(other.iter().all(|f| f.action == Action::Deny));
    let expired = Judging {
        now: "2099-01-01T00:00:00Z".parse().unwrap(),
        ..judging(&cfg, "xnetworks.aws.example.org")
    };
    let f = judge(&a, &expired);
    assert!(f
        .iter()
        .all(|f| f.action == Action::Deny && f.exception().is_none()));
}
