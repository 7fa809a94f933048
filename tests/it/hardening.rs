//! Cluster-critical bounds, driven over real HTTPS against the
//! release binary with `serve`'s defaults, which are the chart's: peak
//! memory under large reviews, `/metrics` under invented kinds, and
//! half-sent requests on both ports (docs/security.md).

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::support::{bin, fixtures, read_until_closed, Proto, TlsClient};

/// A child process killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mrguard serve --self-signed` from the release build, on loopback ports.
struct Served {
    child: Killed,
    addr: SocketAddr,
    metrics: SocketAddr,
    client: TlsClient,
    _dir: tempfile::TempDir,
}

/// A free port outside the kernel's ephemeral range (the harness's own,
/// which explains why).
fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], mrguard_envtest::cluster::free_port()))
}

impl Served {
    async fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        let (addr, metrics) = (free_port(), free_port());
        let cmd = std::process::Command::new(bin::release())
            .args(["serve", "--self-signed", "--listen", &addr.to_string()])
            .args(["--metrics-listen", &metrics.to_string()])
            .arg("--self-signed-ca-file")
            .arg(&ca)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = Killed(cmd.unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(pem) = std::fs::read(&ca) {
                let client = TlsClient::new(&[&pem], Proto::Http1);
                if let Ok(mut c) = client.connect(addr).await {
                    if let Ok((200, _)) = c.get("/readyz").await {
                        return Self {
                            child,
                            addr,
                            metrics,
                            client,
                            _dir: dir,
                        };
                    }
                }
            }
            assert!(Instant::now() < deadline, "the server never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `VmHWM` of the process: its peak resident memory, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    async fn metrics_text(&self) -> String {
        let mut tcp = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (bytes, closed) = read_until_closed(&mut tcp, Duration::from_secs(10)).await;
        assert!(closed);
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }

    /// POSTs a body on a fresh connection; the status and the JSON answer.
    async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let mut c = self.client.connect(self.addr).await.unwrap();
        let (status, body) = c.post(path, body).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

/// The recorded VPC review with `uid`, group and kind set.
fn review(uid: &str, group: &str, kind: &str) -> Value {
    let mut r = fixtures::review("002_validate_CREATE_VPC_sample-vpc.json");
    r["request"]["uid"] = json!(uid);
    for k in ["kind", "requestKind"] {
        r["request"][k]["group"] = json!(group);
        r["request"][k]["kind"] = json!(kind);
    }
    r
}

/// A review of about `mib` MiB whose object is mostly arrays of small
/// numbers: the worst shape for a JSON tree that decoding accepts.
fn big_review(uid: &str, mib: usize) -> Vec<u8> {
    let mut r = review(uid, "ec2.aws.upbound.io", "VPC");
    let row: Vec<u8> = (0..100).map(|i| i % 10).collect();
    let row_len = serde_json::to_vec(&row).unwrap().len() + 1;
    r["request"]["object"]["spec"]["forProvider"]["data"] =
        json!(vec![row; mib * 1024 * 1024 / row_len]);
    serde_json::to_vec(&r).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_7_mib_reviews_are_all_answered_within_200_mib() {
    let s = Served::start(&[]).await;
    let idle = s.peak_rss_kib();
    let s = std::sync::Arc::new(s);
    // Built first, so that all 32 arrive at once: one body, its uid
    // changed in place (same length).
    let template = big_review("big-00", 7);
    let at = template
        .windows(6)
        .position(|w| w == b"big-00")
        .expect("the uid is in the body");
    let bodies: Vec<Vec<u8>> = (0..32)
        .map(|i| {
            let mut b = template.clone();
            b[at..at + 6].copy_from_slice(format!("big-{i:02}").as_bytes());
            b
        })
        .collect();
    let answers = futures::future::join_all(bodies.into_iter().enumerate().map(|(i, body)| {
        let s = s.clone();
        let path = if i % 2 == 0 { "/validate" } else { "/mutate" };
        tokio::spawn(async move { s.post(path, body).await })
    }))
    .await;
    for (i, a) in answers.into_iter().enumerate() {
        let (status, v) = a.unwrap();
        assert_eq!(status, 200, "review {i} was refused: {v}");
        assert!(v["response"]["allowed"].is_boolean(), "review {i}: {v}");
    }
    let peak = s.peak_rss_kib();
    eprintln!("peak RSS: {} MiB (idle {} MiB)", peak / 1024, idle / 1024);
    assert!(
        peak <= 200 * 1024,
        "peak RSS {} MiB above 200 MiB (idle {} MiB)",
        peak / 1024,
        idle / 1024
    );
}

/// `mrguard_admission_requests_total` lines with this kind label.
fn kind_lines<'a>(text: &'a str, kind: &str) -> Vec<&'a str> {
    let label = format!("kind=\"{kind}\"");
    text.lines()
        .filter(|l| l.starts_with("mrguard_admission_requests_total{") && l.contains(&label))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invented_kinds_do_not_grow_metrics_and_a_configured_kind_keeps_its_label() {
    let s = Served::start(&[]).await;
    let before = s.metrics_text().await.len();
    let c = std::sync::Arc::new(s);
    // 20 kinds of 100 KB each, then 2,000 short invented ones.
    let long: Vec<Value> = (0..20)
        .map(|i| {
            let kind = format!("K{i}{}", "x".repeat(100_000));
            review(&format!("long-{i}"), &format!("g{i}.example.com"), &kind)
        })
        .collect();
    let short: Vec<Value> = (0..2000)
        .map(|i| {
            review(
                &format!("short-{i}"),
                "invented.example.com",
                &format!("Kind{i}"),
            )
        })
        .collect();
    for batch in long.chunks(10).chain(short.chunks(50)) {
        let sent = batch.iter().map(|r| {
            let c = c.clone();
            let body = serde_json::to_vec(r).unwrap();
            async move { c.post("/validate", body).await }
        });
        for (status, v) in futures::future::join_all(sent).await {
            assert_eq!(status, 200, "{v}");
        }
    }
    let (status, v) = c
        .post(
            "/validate",
            serde_json::to_vec(&review("configured", "ec2.aws.upbound.io", "VPC")).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let text = c.metrics_text().await;
    let grown = text.len().saturating_sub(before);
    assert!(grown <= 256 * 1024, "/metrics grew by {grown} bytes");
    assert!(
        !kind_lines(&text, "VPC").is_empty(),
        "no VPC series:\n{text}"
    );
    assert!(kind_lines(&text, "Kind7").is_empty());
    assert!(kind_lines(&text, "other")
        .iter()
        .any(|l| l.contains("group=\"other\"") && l.ends_with(" 2020")));
}

/// Sends part of a request, then nothing; true if the server closed the
/// connection within 15 s.
async fn half_sent_is_closed<S>(mut stream: S, head: &str, body: &[u8]) -> bool
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    stream.flush().await.unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(15)).await;
    closed && started.elapsed() < Duration::from_secs(15)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_within_15_s_on_both_ports() {
    let s = Served::start(&[]).await;
    let partial_head = "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl";
    let partial_body =
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    let metrics_head = "GET /metrics HTTP/1.1\r\nHost: lo";
    let metrics_body = "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n";
    let webhook = |head: &'static str, body: &'static [u8]| {
        let client = &s.client;
        let addr = s.addr;
        async move { half_sent_is_closed(client.raw(addr).await.unwrap(), head, body).await }
    };
    let metrics = |head: &'static str, body: &'static [u8]| {
        let addr = s.metrics;
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            half_sent_is_closed(tcp, head, body).await
        }
    };
    let (a, b, c, d) = tokio::join!(
        webhook(partial_head, b""),
        webhook(partial_body, b"{\"apiVersion\""),
        metrics(metrics_head, b""),
        metrics(metrics_body, b"abc"),
    );
    assert!(a, "webhook port: a half-sent head stayed open");
    assert!(b, "webhook port: a half-sent body stayed open");
    assert!(c, "metrics port: a half-sent head stayed open");
    assert!(d, "metrics port: a half-sent body stayed open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_keeps_at_most_its_connection_limit_open() {
    let s = Served::start(&["--metrics-max-connections", "2"]).await;
    // Two idle connections take both slots; a third is not served until
    // one of them goes.
    let held: Vec<_> =
        futures::future::join_all((0..2).map(|_| tokio::net::TcpStream::connect(s.metrics)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waited = tokio::time::timeout(Duration::from_millis(500), s.metrics_text()).await;
    assert!(
        waited.is_err(),
        "a third connection was served at the limit"
    );
    drop(held);
    let text = tokio::time::timeout(Duration::from_secs(5), s.metrics_text())
        .await
        .expect("served once a slot is free");
    assert!(text.contains("mrguard_admission_rejected_total"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_metrics_tls_the_metrics_port_speaks_only_https_with_the_webhook_certificate() {
    let s = Served::start(&["--metrics-tls"]).await;
    let mut c = s
        .client
        .connect(s.metrics)
        .await
        .expect("a verified TLS connection");
    let (status, body) = c.get("/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("mrguard_admission_rejected_total"));
    // Plain HTTP gets no answer, only a closed connection.
    let mut tcp = tokio::net::TcpStream::connect(s.metrics).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut tcp, Duration::from_secs(10)).await;
    assert!(closed);
    assert!(!String::from_utf8_lossy(&bytes).contains("HTTP/1.1 200"));
}
