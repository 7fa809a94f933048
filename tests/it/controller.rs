//! `serve --controller` and `mrguard audit` at the edges: bad combinations
//! and unreachable clusters are clear errors, never panics.

use crate::support::{bin, TestServer};

#[tokio::test]
async fn controller_mode_refuses_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let err = TestServer::builder()
        .controller(None)
        .self_signed(&dir.path().join("ca.crt"))
        .try_start()
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
    let err = TestServer::builder()
        .controller(Some(&missing))
        .try_start()
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
    let out = bin::mrguard()
        .args(["audit", "--kubeconfig"])
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = bin::stderr(&out);
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
    let out = bin::mrguard()
        .args(["audit", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(bin::stderr(&out).contains("bad.yaml"));
}
