//! `mrguard explain -f` on objects a real API server returned (recorded by
//! tests/e2e/explain.rs into tests/fixtures/explain/, with managedFields
//! from kubectl's create and the provider's late initialization).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn mrguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/explain")
        .join(name)
        .display()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CONFIG: &str = "\
resources:
  - apiGroups: [\"nop.crossplane.io\"]
    kinds: [\"NopResource\"]
    immutableFields: [spec.forProvider.fields.region]
    deletionProtection: true
";

fn config(dir: &tempfile::TempDir) -> String {
    let p = dir.path().join("mrguard.yaml");
    std::fs::write(&p, CONFIG).unwrap();
    p.display().to_string()
}

fn field<'a>(e: &'a Value, path: &str) -> &'a Value {
    e["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("no {path}: {e}"))
}

#[test]
fn a_late_initialized_list_is_flagged_with_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = mrguard(&[
        "explain",
        "-f",
        &fixture("nopresource-late-initialized.yaml"),
        "--config",
        &config(&dir),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["kind"], "NopResource");
    assert_eq!(e["created"]["value"], true);
    assert_eq!(e["deletion"]["outcome"], "Delete");
    assert_eq!(e["deletion"]["deniedBy"][0], "deletion-protection");
    let details = field(&e, "spec.forProvider.connectionDetails");
    assert_eq!(details["setBy"], "provider");
    assert_eq!(details["managers"][0], "provider");
    assert!(details["hint"]
        .as_str()
        .unwrap()
        .contains("leave LateInitialize out of spec.managementPolicies"));
    let region = field(&e, "spec.forProvider.fields.region");
    assert_eq!(region["setBy"], "user");
    assert_eq!(region["managers"][0], "kubectl-client-side-apply");
    assert_eq!(region["changeDeniedBy"][0], "immutable-field");
    assert_eq!(
        field(&e, "spec.forProvider.fields.size")["changeDeniedBy"],
        serde_json::json!([])
    );

    // Text, as a terminal shows it.
    let out = mrguard(&[
        "explain",
        "-f",
        &fixture("nopresource-late-initialized.yaml"),
        "--config",
        &config(&dir),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let t = text(&out.stdout);
    assert!(
        t.contains("delete now  denied by deletion-protection"),
        "{t}"
    );
    assert!(t.contains("hints:\n  - spec.forProvider.connectionDetails is a list the provider late-initialized"), "{t}");
}

#[test]
fn provider_managers_are_configurable() {
    // Nobody is the provider: every value counts as the user's.
    let out = mrguard(&[
        "explain",
        "-f",
        &fixture("nopresource-late-initialized.yaml"),
        "--provider-manager",
        "crossplane-provider-*",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let details = field(&e, "spec.forProvider.connectionDetails");
    assert_eq!(details["setBy"], "user");
    assert!(details["hint"].is_null());
}

#[test]
fn an_incomplete_creation_says_since_when_and_what_to_do() {
    let out = mrguard(&["explain", "-f", &fixture("vpc-creation-incomplete.yaml")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.starts_with("VPC/explain-vpc (ec2.aws.m.upbound.io/v1beta1, namespace explain-ns)"),
        "{t}"
    );
    assert!(
        t.contains("creation    INCOMPLETE since 2024-05-01T10:00:00Z"),
        "{t}"
    );
    assert!(
        t.contains("remove the crossplane.io/external-create-pending annotation"),
        "{t}"
    );
    // The built-in configuration makes the region immutable; not created
    // yet, so changing it is allowed.
    let row = t
        .lines()
        .find(|l| l.contains("spec.forProvider.region"))
        .unwrap();
    assert!(row.contains("yes") && row.ends_with("allowed"), "{row}");
}

#[test]
fn what_cannot_be_explained_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n",
    )
    .unwrap();
    let out = mrguard(&["explain", "-f", &cm.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("failed to explain ConfigMap/settings: it is not a managed resource"),
        "{}",
        text(&out.stderr)
    );
    let out = mrguard(&["explain", "-f", "/nonexistent/mr.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("failed to read /nonexistent/mr.yaml"));
    // Neither a target nor a file: a usage error.
    let out = mrguard(&["explain"]);
    assert_eq!(out.status.code(), Some(2));
    // A target and a file: one or the other.
    let out = mrguard(&["explain", "bucket/b", "-f", &cm.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
}
