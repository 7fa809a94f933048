//! `serve --controller` and `mrguard audit` at the edges: bad combinations
//! and unreachable clusters are clear errors, never panics.
mod common;

use std::process::Command;

fn args(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "mrguard",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[tokio::test]
async fn controller_mode_refuses_certificate_files() {
    let err = mrguard::cli::serve::start(common::serve_args(&args(&[
        "--controller",
        "--self-signed",
    ])))
    .await
    .err()
    .expect("refused");
    assert!(
        err.to_string()
            .contains("--controller manages the certificate in a Secret"),
        "{err}"
    );
}

#[tokio::test]
async fn controller_mode_without_a_cluster_fails_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-kubeconfig");
    let err = mrguard::cli::serve::start(common::serve_args(&args(&[
        "--controller",
        "--kubeconfig",
        missing.to_str().unwrap(),
    ])))
    .await
    .err()
    .expect("refused");
    assert!(
        err.to_string()
            .contains("failed to connect to the Kubernetes API"),
        "{err}"
    );
}

#[test]
fn audit_without_a_cluster_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(["audit", "--kubeconfig"])
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mrguard audit: failed to connect to the Kubernetes API"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn audit_with_a_bad_config_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "rulez: {}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(["audit", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml"));
}
