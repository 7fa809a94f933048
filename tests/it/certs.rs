//! `mrguard certs generate`: the files it writes serve real TLS. The
//! binary generates them, `serve` loads them, and a client that trusts only
//! ca.crt completes handshakes for every name a developer or an API server
//! would use, and fails for a name the certificate lacks.

use std::net::SocketAddr;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{bin, Proto, TestServer, TlsClient};

fn generate(out: &Path, extra: &[&str]) -> std::process::Output {
    bin::mrguard()
        .args(["certs", "generate", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// GET /healthz over TLS, presenting `sni`; the client trusts only `ca`.
async fn healthz(addr: SocketAddr, ca: &[u8], sni: &str) -> std::io::Result<String> {
    let mut tls = TlsClient::new(&[ca], Proto::Http1)
        .server_name(sni)
        .raw(addr)
        .await?;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    tls.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn generated_certs_serve_tls_for_localhost_and_the_service_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let run = generate(&out, &["--service-name", "guard", "--namespace", "ops"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert!(stdout.contains("CA (new)"), "{stdout}");
    assert!(stdout.contains("--tls-cert-file"), "{stdout}");
    for f in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(out.join(f).is_file(), "{f}");
    }

    let cert = out.join("tls.crt");
    let key = out.join("tls.key");
    let running = TestServer::builder()
        .tls_files(&cert, &key, &out.join("ca.crt"))
        .try_start()
        .await
        .expect("serve loads the generated pair");
    let ca = std::fs::read(out.join("ca.crt")).unwrap();
    for sni in [
        "localhost",
        "127.0.0.1",
        "guard.ops.svc",
        "guard.ops.svc.cluster.local",
    ] {
        let resp = healthz(running.addr, &ca, sni)
            .await
            .unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert!(resp.starts_with("HTTP/1.1 200"), "{sni}: {resp}");
    }
    let err = healthz(running.addr, &ca, "mrguard.crossplane-system.svc")
        .await
        .expect_err("a name outside the certificate is refused");
    assert!(err.to_string().contains("certificate"), "{err}");

    // Another CA is not trusted.
    let other = dir.path().join("other");
    assert!(generate(&other, &[]).status.success());
    let other_ca = std::fs::read(other.join("ca.crt")).unwrap();
    assert!(healthz(running.addr, &other_ca, "localhost").await.is_err());
    running.stop().await;

    // A second run keeps the CA, so a pasted caBundle stays valid.
    let again = generate(&out, &["--service-name", "guard", "--namespace", "ops"]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("CA (reused)"));
    assert_eq!(std::fs::read(out.join("ca.crt")).unwrap(), ca);
}

#[test]
fn bad_flags_and_a_broken_ca_fail_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = generate(dir.path(), &["--days", "0"]);
    assert_eq!(bad.status.code(), Some(2), "clap rejects --days 0");

    std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
    std::fs::write(dir.path().join("ca.key"), "not a key").unwrap();
    let broken = generate(dir.path(), &[]);
    assert_eq!(broken.status.code(), Some(1));
    let err = String::from_utf8_lossy(&broken.stderr);
    assert!(err.contains("ca.crt"), "{err}");
    assert!(
        !dir.path().join("tls.crt").exists(),
        "nothing written on failure"
    );

    let forced = generate(dir.path(), &["--force"]);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
}

/// An unverifiable `--cert-extra-names` value stops `serve` before it does
/// anything, naming the flag (or its variable) and the value, as clap's
/// exit code 2; the controller never issues a certificate it cannot check.
#[test]
fn an_unverifiable_extra_name_stops_serve_with_the_flag_and_value() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut c = bin::mrguard();
        c.args(["serve", "--controller", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("MRGUARD_CERT_EXTRA_NAMES")
            .env("KUBECONFIG", "/nonexistent/kubeconfig");
        if let Some(v) = env {
            c.env("MRGUARD_CERT_EXTRA_NAMES", v);
        }
        c.output().unwrap()
    };
    for (args, env) in [
        (&["--cert-extra-names", "10.0.0.7,two words"][..], None),
        (&[][..], Some("10.0.0.7,two words")),
    ] {
        let out = run(args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--cert-extra-names"), "{err}");
        assert!(err.contains("\"two words\" is neither"), "{err}");
    }
    // A wildcard that covers a whole top-level domain is refused too.
    let out = run(&["--cert-extra-names=*.test"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"*.test\""));
}
