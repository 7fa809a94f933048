//! SIGTERM on the real binary: readiness goes false first while the
//! listener still answers (so the Service stops routing here), then the
//! listener closes, the in-flight request completes, and the process exits 0.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::support::{bin, fixtures, read_until_closed, Proto, TestPki, TlsClient};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Ready,
    NotReady,
    Refused,
}

async fn probe(client: &TlsClient, addr: std::net::SocketAddr) -> Probe {
    match client.connect(addr).await {
        Err(_) => Probe::Refused,
        Ok(mut c) => match c.get("/readyz").await {
            Ok((200, _)) => Probe::Ready,
            Ok((503, _)) => Probe::NotReady,
            // A connection accepted just as the listener closed.
            _ => Probe::Refused,
        },
    }
}

#[tokio::test]
async fn sigterm_turns_readiness_off_then_closes_the_listener_and_drains() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::generate();
    let (cert, key) = pki.write(dir.path());
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = bin::mrguard()
        .args([
            "serve",
            "--listen",
            &addr.to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .args([
            "--drain-delay",
            "1500ms",
            "--request-timeout",
            "20s",
            "--drain-timeout",
            "20s",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = TlsClient::new(&[&pki.ca], Proto::Http1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while probe(&client, addr).await != Probe::Ready {
        assert!(Instant::now() < deadline, "the server never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // An in-flight request: headers and part of the body now, the rest later.
    let review =
        serde_json::to_vec(&fixtures::review("002_validate_CREATE_VPC_sample-vpc.json")).unwrap();
    let mut tls = client.raw(addr).await.unwrap();
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        review.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&review[..100]).await.unwrap();
    tls.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = probe(&client, addr).await;
        if seen.last() != Some(&p) {
            seen.push(p);
        }
        if p == Probe::Refused {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the listener never closed: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Ready (maybe, if the first probe beat the signal), then not ready
    // while still accepting, then refused.
    let from = usize::from(seen[0] == Probe::Ready);
    assert_eq!(
        &seen[from..],
        &[Probe::NotReady, Probe::Refused],
        "{seen:?}"
    );

    // The in-flight request still completes after the listener closed.
    tls.write_all(&review[100..]).await.unwrap();
    tls.flush().await.unwrap();
    let (out, _) = read_until_closed(&mut tls, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");

    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the process did not exit after draining"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "{code:?}");
}
