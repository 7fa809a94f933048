//! Compositions: `mrguard check` reports their patches into immutable
//! fields at the patch's line (text, JSON, SARIF), the XRD makes them
//! informational, and the real server warns on a Composition CREATE and
//! names the XR when it denies a composed MR (docs/compositions.md).

use serde_json::{json, Value};

use crate::support::bin::{run as mrguard, stderr};
use crate::support::{create, root, update, warnings, IntoReview, TestServer};

fn example(name: &str) -> String {
    root()
        .join("examples/compositions")
        .join(name)
        .display()
        .to_string()
}

fn object(name: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(example(name)).unwrap()).unwrap()
}

const RULE: &str = "composition-immutable-patch";

#[test]
fn check_reports_each_patch_into_an_immutable_field_at_its_line() {
    let file = example("network-pipeline.yaml");
    let out = mrguard(&["check", "-f", &file]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let label = "Composition/xnetworks.aws.example.org";
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(RULE)).collect();
    assert_eq!(lines.len(), 5, "{err}");
    assert!(lines[0].starts_with(&format!(
        "{label}: warning: {file}:58: {RULE}: step \"patch-and-transform\", resource \"vpc\", patches[0]: \
         FromCompositeFieldPath spec.parameters.region -> spec.forProvider.region: spec.forProvider.region is immutable"
    )), "{err}");
    assert!(
        lines[1].starts_with(&format!(
        "{label}: warning: {file}:45: {RULE}: step \"patch-and-transform\", resource \"subnet-a\", \
         patch set \"subnet-location\" patches[0] (via patches[0]): CombineFromComposite \
         spec.parameters.geo, spec.parameters.area -> spec.forProvider.region"
    )),
        "{err}"
    );
    assert!(
        lines[2].contains(":86: ") && lines[2].contains("-> spec.forProvider.availabilityZone")
    );
    assert!(lines[4].contains(":127: ") && lines[4].contains("resource \"gateway\", patches[1]"));
    // Tags are mutable, and an initProvider target is the fix, not a finding.
    assert!(!err.contains("-> spec.forProvider.tags"), "{err}");
    assert!(!err.contains("-> spec.initProvider"), "{err}");
    assert!(err.contains(&format!(
        "{label}: note: step \"automatically-detect-ready-composed-resources\" (function \"function-auto-ready\") skipped"
    )), "{err}");

    let legacy = mrguard(&["check", "-f", &example("network-legacy.yaml")]);
    let err = stderr(&legacy);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(RULE)).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains("network-legacy.yaml:18: ")
            && lines[0].contains("resource \"vpc\", patch set \"location\"")
    );
    assert!(
        lines[1].contains("network-legacy.yaml:54: ")
            && lines[1].contains("resource \"flow-logs\", patches[0]: CombineFromComposite")
    );
}

#[test]
fn check_json_and_sarif_carry_the_findings_and_lines() {
    let file = example("network-pipeline.yaml");
    let out = mrguard(&["check", "-f", &file, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &results[0];
    assert_eq!(r["object"], "Composition/xnetworks.aws.example.org");
    assert_eq!(r["verdict"], "allowed");
    let f = r["findings"].as_array().unwrap();
    assert_eq!(f.len(), 5);
    assert_eq!(f[0]["rule"], RULE);
    assert_eq!(f[0]["action"], "Warn");
    assert_eq!(f[0]["field"], "spec.forProvider.region");
    assert_eq!(f[0]["line"], 58);
    assert!(f[0]["message"]
        .as_str()
        .unwrap()
        .contains("Fix: make spec.parameters.region immutable in the XRD"));
    // The webhook's own copy of the warnings is replaced by the findings.
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");

    let out = mrguard(&["check", "-f", &file, "-o", "sarif"]);
    let log: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[1]["ruleId"], RULE);
    assert_eq!(results[1]["level"], "warning");
    let loc = &results[1]["locations"][0];
    assert_eq!(loc["physicalLocation"]["region"]["startLine"], 45);
    assert_eq!(
        loc["logicalLocations"][0]["fullyQualifiedName"],
        "Composition/xnetworks.aws.example.org spec.forProvider.region"
    );
}

#[test]
fn an_xrd_that_makes_the_sources_immutable_turns_findings_into_notes() {
    let file = example("network-pipeline.yaml");
    let xrd = example("xrd-network-immutable-region.yaml");
    let out = mrguard(&["check", "-f", &file, "--crd", &xrd]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(RULE)).collect();
    assert_eq!(lines.len(), 5, "{err}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(": note: ") && l.contains("the XRD makes the source immutable")),
        "{err}"
    );
    let sarif = mrguard(&["check", "-f", &file, "--crd", &xrd, "-o", "sarif"]);
    let log: Value = serde_json::from_slice(&sarif.stdout).unwrap();
    assert!(log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["level"] == "note"));

    // The same XRD without the rule changes nothing; in the same file it counts too.
    let out = mrguard(&["check", "-f", &file, "--crd", &example("xrd-network.yaml")]);
    assert_eq!(
        stderr(&out)
            .lines()
            .filter(|l| l.contains(": warning: ") && l.contains(RULE))
            .count(),
        5
    );
    let dir = tempfile::tempdir().unwrap();
    let both = crate::support::write(
        dir.path(),
        "both.yaml",
        &format!(
            "{}\n---\n{}",
            std::fs::read_to_string(&xrd).unwrap(),
            std::fs::read_to_string(&file).unwrap()
        ),
    );
    let err = stderr(&mrguard(&["check", "-f", &both]));
    assert_eq!(
        err.lines()
            .filter(|l| l.contains(": note: ") && l.contains(RULE))
            .count(),
        5,
        "{err}"
    );
}

#[test]
fn a_configured_deny_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::support::write(
        dir.path(),
        "mrguard.yaml",
        "rules: {composition-immutable-patch: Deny}\nresources:\n  - apiGroups: ['*.aws.upbound.io']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n",
    );
    let out = mrguard(&[
        "check",
        "-f",
        &example("network-pipeline.yaml"),
        "--config",
        &cfg,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.contains(": denied: ") && l.contains(RULE))
            .count(),
        4,
        "{err}"
    );
}

#[tokio::test]
async fn the_server_warns_on_a_composition_create_and_update() {
    let h = TestServer::start().await;
    let comp = object("network-pipeline.yaml");
    for review in [create(&comp).review(), update(&comp, &comp).review()] {
        let r = h.review("/validate", &review).await;
        assert_eq!(r["allowed"], true, "{r}");
        let w = warnings(&r);
        assert_eq!(w.len(), 5, "{w:#?}");
        assert!(w[0].starts_with(&format!("{RULE}: step \"patch-and-transform\", resource \"vpc\", patches[0]: FromCompositeFieldPath spec.parameters.region -> spec.forProvider.region")), "{w:#?}");
        assert!(w[1].contains("resource \"subnet-a\", patch set \"subnet-location\" patches[0] (via patches[0]): CombineFromComposite"), "{w:#?}");
        assert!(w.iter().all(|w| !w.contains("spec.forProvider.tags")));
    }
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(&format!("rule=\"{RULE}\"")),
        "the findings are counted: {metrics}"
    );
}

#[tokio::test]
async fn the_server_names_the_xr_of_a_denied_composed_mr() {
    let h = TestServer::with_config(
        "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n",
    )
    .await;
    let vpc = |region: &str| {
        json!({
            "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
            "metadata": {"name": "net-x7k2p-4mz8q",
                "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"},
                "labels": {"crossplane.io/composite": "net-x7k2p", "crossplane.io/claim-name": "net",
                           "crossplane.io/claim-namespace": "team-a"},
                "ownerReferences": [{"apiVersion": "aws.example.org/v1alpha1", "kind": "XNetwork",
                    "name": "net-x7k2p", "uid": "6b1d0c9e", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"forProvider": {"region": region, "cidrBlock": "10.0.0.0/16"}},
        })
    };
    let r = h
        .review(
            "/validate",
            &update(&vpc("us-east-1"), &vpc("eu-west-1")).review(),
        )
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[immutable-field] spec.forProvider.region is immutable"),
        "{msg}"
    );
    assert!(msg.contains("This MR is composed by XNetwork \"net-x7k2p\" (claim \"net\" in namespace \"team-a\"): undo the change on the claim"), "{msg}");
}

#[test]
fn explain_lists_the_patches_of_a_composed_mr_or_an_xr() {
    let dir = tempfile::tempdir().unwrap();
    let comp = example("network-pipeline.yaml");
    let subnet = crate::support::write(
        dir.path(),
        "subnet.yaml",
        "apiVersion: ec2.aws.upbound.io/v1beta1\nkind: Subnet\nmetadata:\n  name: net-x7k2p-a\n  annotations:\n    crossplane.io/composition-resource-name: subnet-a\nspec:\n  forProvider: {region: eu-west-1, availabilityZone: eu-west-1a}\n",
    );
    let out = mrguard(&[
        "explain",
        "-f",
        &subnet,
        "--composition",
        &comp,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["kind"], "Subnet", "the MR is still explained");
    assert_eq!(e["composition"]["resource"], "subnet-a");
    let targets: Vec<&str> = e["composition"]["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["target"].as_str().unwrap())
        .collect();
    // subnet-a's two patches, not subnet-b's.
    assert_eq!(
        targets,
        [
            "spec.forProvider.region",
            "spec.forProvider.availabilityZone"
        ]
    );

    let xr = crate::support::write(
        dir.path(),
        "xr.yaml",
        "apiVersion: aws.example.org/v1alpha1\nkind: XNetwork\nmetadata: {name: net-x7k2p}\nspec:\n  compositionRef: {name: xnetworks.aws.example.org}\n",
    );
    let out = mrguard(&["explain", "-f", &xr, "--composition", &comp]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(
        "Composition \"xnetworks.aws.example.org\": patches into immutable fields of XNetwork/net-x7k2p\n"
    ), "{text}");
    assert_eq!(text.matches("\n  - step").count(), 5, "{text}");
    // An XR without its Composition is not something explain reads.
    let out = mrguard(&["explain", "-f", &xr]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a managed resource"),
        "{}",
        stderr(&out)
    );
    let out = mrguard(&["explain", "-f", &xr, "--composition", &xr]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("holds no Composition"),
        "{}",
        stderr(&out)
    );
}

/// With Crossplane v2's own CRDs (MRGUARD_FIXTURES), `--crd` judges the Composition as
/// the API server would: the Pipeline one is valid, the legacy fields are
/// not served any more; the findings are reported either way.
#[test]
fn the_composition_crd_validates_as_crossplane_v2_serves_it() {
    let Some(dir) = crate::support::fixtures::third_party(
        "the_composition_crd_validates_as_crossplane_v2_serves_it",
    ) else {
        return;
    };
    let crds = dir.join("crds-crossplane").display().to_string();
    let out = mrguard(&[
        "check",
        "-f",
        &example("network-pipeline.yaml"),
        "--crd",
        &crds,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("invalid:"), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains(RULE)).count(), 5, "{err}");
    let out = mrguard(&[
        "check",
        "-f",
        &example("network-legacy.yaml"),
        "--crd",
        &crds,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Crossplane v2 dropped the legacy fields: strict decoding refuses
    // them first, as the API server does, before the mode's enum.
    assert!(
        err.contains("strict decoding error: unknown field \"spec.patchSets\", unknown field \"spec.resources\""),
        "{err}"
    );
    assert_eq!(err.lines().filter(|l| l.contains(RULE)).count(), 2, "{err}");
}
