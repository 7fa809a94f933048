//! `mrguard check --live` without a cluster: flags, input errors, and
//! what happens when the API server cannot be reached. Against a real API
//! server: tests/e2e/check_live.rs.

use std::process::{Command, Output};

fn mrguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A kubeconfig for an API server that is not there.
fn nowhere(dir: &tempfile::TempDir) -> String {
    let p = dir.path().join("kubeconfig");
    std::fs::write(
        &p,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
    )
    .unwrap();
    p.display().to_string()
}

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

const BUCKET: &str = "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: b\nspec:\n  forProvider:\n    region: us-east-1\n";

#[test]
fn an_unreachable_cluster_is_exit_2_naming_what_was_asked() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "b.yaml", BUCKET);
    let out = mrguard(&["check", "--live", "-f", &f, "--kubeconfig", &nowhere(&dir)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("mrguard check: failed to find kind Bucket of s3.aws.upbound.io/v1beta1 on the cluster:"),
        "{err}"
    );
}

#[test]
fn manifests_that_are_not_mrs_need_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    );
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &f,
        "--kubeconfig",
        &nowhere(&dir),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r[0]["verdict"], "skipped");
    assert!(text(&out.stderr)
        .contains("1 manifest(s): 0 denied, 0 invalid, 0 allowed, 0 unchanged, 1 skipped"));
}

#[test]
fn bad_input_and_flags_are_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let b = write(&dir, "b.yaml", BUCKET);
    let kc = nowhere(&dir);
    // Several files offline are judged one after the other (pre-commit
    // passes them as arguments), and so are files given without -f.
    let out = mrguard(&["check", "-f", &b, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).matches("kind: Bucket").count(), 2);
    let out = mrguard(&["check"]);
    assert_eq!(out.status.code(), Some(2), "no file at all");
    // Offline-only flags do not mix with --live.
    for extra in [
        ["--old", b.as_str()],
        ["--operation", "DELETE"],
        ["--crd", b.as_str()],
    ] {
        let mut args = vec!["check", "--live", "-f", &b];
        args.extend_from_slice(&extra);
        let out = mrguard(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&out.stderr).contains("cannot be used with"),
            "{}",
            text(&out.stderr)
        );
    }
    // --live's own flags need --live (-o also serves offline checks).
    for extra in [
        ["--merge", "server"],
        ["--field-manager", "x"],
        ["--kubeconfig", "x"],
        ["--context", "x"],
    ] {
        let mut args = vec!["check", "-f", &b];
        args.extend_from_slice(&extra);
        let out = mrguard(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&out.stderr).contains("--live"),
            "{}",
            text(&out.stderr)
        );
    }
    // --config and --config-from-cluster exclude each other.
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &b,
        "--config",
        &b,
        "--config-from-cluster",
        "a/b",
    ]);
    assert_eq!(out.status.code(), Some(2));
    // A ConfigMap reference must be NAMESPACE/NAME.
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &b,
        "--kubeconfig",
        &kc,
        "--config-from-cluster",
        "mrguard",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "failed to load the configuration from ConfigMap mrguard: expected NAMESPACE/NAME"
        ),
        "{}",
        text(&out.stderr)
    );
    // A document without a kind, and a folder read recursively.
    std::fs::create_dir(dir.path().join("apps")).unwrap();
    write(
        &dir,
        "apps/bad.yaml",
        "apiVersion: v1\nmetadata:\n  name: x\n",
    );
    let out = mrguard(&[
        "check",
        "--live",
        "-f",
        &dir.path().join("apps").display().to_string(),
        "--kubeconfig",
        &kc,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("apps/bad.yaml, document 1: kind is missing"),
        "{}",
        text(&out.stderr)
    );
    // An MR without a name cannot be looked up.
    let f = write(&dir, "noname.yaml", "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  generateName: b-\nspec:\n  forProvider: {}\n");
    let out = mrguard(&["check", "--live", "-f", &f, "--kubeconfig", &kc]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("metadata.name is missing"),
        "{}",
        text(&out.stderr)
    );
}
