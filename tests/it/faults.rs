//! Faults under load: steady, well-formed admission traffic over HTTP/1.1
//! keep-alive, HTTP/2 streams and fresh connections, while the certificate
//! files are rotated to a new CA, the config is reloaded (good, then
//! broken), and other connections send malformed, oversized and slow
//! requests. Every well-formed request must get exactly the answer one of
//! the two good configs gives, and no well-formed connection may fail.
//! Bounded: at most a few thousand requests and well under a minute.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use mrguard_policy::admission::config::Config;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::support::{fixtures, read_until_closed, Proto, TestPki, TestServer, TlsClient};

const CONFIG_A: &str = "providerConfig:\n  defaultName: team-default\n";
const CONFIG_B: &str =
    "providerConfig:\n  defaultName: reloaded-default\nrules:\n  immutable-field: Warn\n";
const BROKEN: &str = "providerConfig:\n  defaultName: x\n  typo: 1\n";

const REVIEWS: &[(&str, &str)] = &[
    ("/mutate", "001_mutate_CREATE_VPC_sample-vpc.json"),
    ("/validate", "002_validate_CREATE_VPC_sample-vpc.json"),
    ("/mutate", "011_mutate_CREATE_Bucket_sample-bucket.json"),
    ("/mutate", "017_mutate_UPDATE_VPC_sample-vpc.json"),
    ("/validate", "018_validate_UPDATE_VPC_sample-vpc.json"),
    (
        "/validate",
        "023_validate_UPDATE_VPC_sample-vpc_status.json",
    ),
    ("/validate", "024_validate_DELETE_VPC_sample-vpc.json"),
    ("/mutate", "027_mutate_CREATE_Subnet_generated-name.json"),
    (
        "/validate",
        "030_validate_CREATE_Bucket_dry-bucket_dryrun.json",
    ),
];

/// A request of the steady load and the answers the two good configs give.
struct Case {
    path: &'static str,
    body: Bytes,
    under_a: Value,
    under_b: Value,
}

fn expected(path: &str, body: &[u8], config: &Config) -> Value {
    let req = mrguard_policy::admission::review::decode(body).unwrap();
    let decision = if path == "/mutate" {
        mrguard_policy::admission::decider::Decider::offline(config, jiff::Timestamp::now())
            .mutate(&req)
    } else {
        mrguard_policy::admission::decider::Decider::offline(config, jiff::Timestamp::now())
            .validate(&req)
    };
    let v: Value = serde_json::from_slice(&mrguard_policy::admission::review::encode(
        decision.response,
    ))
    .unwrap();
    v["response"].clone()
}

fn cases() -> Vec<Case> {
    let (a, b) = (
        Config::from_yaml(CONFIG_A).unwrap(),
        Config::from_yaml(CONFIG_B).unwrap(),
    );
    let cases: Vec<Case> = REVIEWS
        .iter()
        .map(|(path, name)| {
            let body = serde_json::to_vec(&fixtures::review(name)).unwrap();
            Case {
                path,
                under_a: expected(path, &body, &a),
                under_b: expected(path, &body, &b),
                body: Bytes::from(body),
            }
        })
        .collect();
    // The reload must be visible in the answers, or the test proves little.
    assert!(cases.iter().filter(|c| c.under_a != c.under_b).count() >= 3);
    cases
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    under_b: AtomicU64,
    failures: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        self.failures.lock().unwrap().push(what);
    }
}

/// Checks one answer; returns whether it was config B's. Config B, once
/// seen by a worker, must stay (the store swaps atomically).
fn check(tally: &Tally, who: &str, case: &Case, status: u16, body: &[u8], seen_b: &mut bool) {
    if status != 200 {
        return tally.fail(format!(
            "{who}: HTTP {status}: {}",
            String::from_utf8_lossy(body)
        ));
    }
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return tally.fail(format!("{who}: not JSON ({e})")),
    };
    let resp = &v["response"];
    let (is_a, is_b) = (*resp == case.under_a, *resp == case.under_b);
    if !is_a && !is_b {
        return tally.fail(format!(
            "{who}: {} got {resp}, expected {} or {}",
            case.path, case.under_a, case.under_b
        ));
    }
    if is_b && !is_a {
        *seen_b = true;
        tally.under_b.fetch_add(1, Ordering::Relaxed);
    }
    if is_a && !is_b && *seen_b {
        return tally.fail(format!("{who}: answered under config A after config B"));
    }
    tally.ok.fetch_add(1, Ordering::Relaxed);
}

/// Requests per well-formed worker at most, so the test is bounded.
const MAX_PER_WORKER: usize = 1500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_load_survives_rotation_reloads_and_bad_clients() {
    tokio::time::timeout(Duration::from_secs(90), run())
        .await
        .expect("the fault test finishes within its bound");
}

async fn run() {
    let h = TestServer::builder()
        .config(CONFIG_A)
        .max_body_bytes(65536)
        .header_read_timeout(Duration::from_millis(500))
        .request_timeout(Duration::from_secs(1))
        .start()
        .await;
    let cases = Arc::new(cases());
    let (new, third) = (TestPki::generate(), TestPki::generate());
    // Clients trust every CA of the rotation, as a caBundle does during one.
    let cas: Arc<Vec<Vec<u8>>> = Arc::new(vec![h.ca_pem.clone(), new.ca.clone(), third.ca.clone()]);
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let addr = h.addr;
    let mut workers = tokio::task::JoinSet::new();

    // HTTP/1.1 keep-alive workers: one connection each for the whole test.
    for w in 0..3 {
        let (cases, tally, stop, cas) = (cases.clone(), tally.clone(), stop.clone(), cas.clone());
        workers.spawn(async move {
            let ca: Vec<&[u8]> = cas.iter().map(Vec::as_slice).collect();
            let mut conn = TlsClient::new(&ca, Proto::Http1)
                .connect(addr)
                .await
                .unwrap();
            let mut seen_b = false;
            for i in 0..MAX_PER_WORKER {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let case = &cases[(i + w) % cases.len()];
                match conn.post(case.path, case.body.to_vec()).await {
                    Ok((status, body)) => check(
                        &tally,
                        &format!("h1 worker {w}"),
                        case,
                        status,
                        &body,
                        &mut seen_b,
                    ),
                    Err(e) => {
                        tally.fail(format!("h1 worker {w}: connection failed: {e}"));
                        break;
                    }
                }
            }
        });
    }
    // HTTP/2: one connection, three concurrent streams at a time.
    {
        let ca: Vec<&[u8]> = cas.iter().map(Vec::as_slice).collect();
        let conn = TlsClient::new(&ca, Proto::Http2)
            .connect(addr)
            .await
            .unwrap();
        for w in 0..3 {
            let (cases, tally, stop) = (cases.clone(), tally.clone(), stop.clone());
            let mut stream = conn.stream();
            workers.spawn(async move {
                let mut seen_b = false;
                for i in 0..MAX_PER_WORKER {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let case = &cases[(i * 3 + w) % cases.len()];
                    match stream.post(case.path, case.body.to_vec()).await {
                        Ok((status, body)) => check(
                            &tally,
                            &format!("h2 stream {w}"),
                            case,
                            status,
                            &body,
                            &mut seen_b,
                        ),
                        Err(e) => {
                            tally.fail(format!("h2 stream {w}: connection failed: {e}"));
                            break;
                        }
                    }
                }
            });
        }
    }
    // A client that opens a fresh connection for each request, so
    // handshakes happen throughout the rotation.
    {
        let (cases, tally, stop, cas) = (cases.clone(), tally.clone(), stop.clone(), cas.clone());
        workers.spawn(async move {
            let ca: Vec<&[u8]> = cas.iter().map(Vec::as_slice).collect();
            let clients = [
                TlsClient::new(&ca, Proto::Http1),
                TlsClient::new(&ca, Proto::Http2),
            ];
            let mut seen_b = false;
            for i in 0..MAX_PER_WORKER / 5 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let case = &cases[i % cases.len()];
                let result = match clients[i % 2].connect(addr).await {
                    Ok(mut c) => c
                        .post(case.path, case.body.to_vec())
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(format!("connect: {e}")),
                };
                match result {
                    Ok((status, body)) => check(
                        &tally,
                        "fresh connections",
                        case,
                        status,
                        &body,
                        &mut seen_b,
                    ),
                    Err(e) => tally.fail(format!("fresh connection {i}: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }

    // Bad clients on their own connections, all through the faults.
    let bad = {
        let (stop, cas) = (stop.clone(), cas.clone());
        tokio::spawn(async move { bad_clients(addr, cas, stop).await })
    };

    // The faults.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    // 1. A Secret-volume style rotation to a new CA: both files replaced
    //    by rename, the key first, so for a moment they do not match.
    replace(&h.key_file, &new.key);
    tokio::time::sleep(Duration::from_millis(120)).await;
    replace(&h.cert_file, &new.cert);
    let new_leaf = new.leaf();
    let only_new = TlsClient::new(&[&new.ca], Proto::Http1);
    wait_for("the new certificate", || async {
        only_new
            .connect(addr)
            .await
            .is_ok_and(|c| c.peer_cert == new_leaf)
    })
    .await;
    // 2. A good config reload, visible in the answers.
    replace(&h.config_file, CONFIG_B.as_bytes());
    let tally2 = tally.clone();
    wait_for("answers under the reloaded config", || {
        let t = tally2.clone();
        async move { t.under_b.load(Ordering::Relaxed) > 20 }
    })
    .await;
    // 3. A broken config: rejected, counted, and the last good one stays.
    replace(&h.config_file, BROKEN.as_bytes());
    wait_for("the failed reload to be counted", || async {
        h.metrics()
            .await
            .contains("mrguard_config_reloads_total{result=\"failure\"} 1")
    })
    .await;
    // 4. Another rotation, to a third CA, written in place (cert first,
    //    then key) while the broken config is still on disk.
    std::fs::write(&h.cert_file, &third.cert).unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    std::fs::write(&h.key_file, &third.key).unwrap();
    let third_leaf = third.leaf();
    let only_third = TlsClient::new(&[&third.ca], Proto::Http2);
    wait_for("the third certificate", || async {
        only_third
            .connect(addr)
            .await
            .is_ok_and(|c| c.peer_cert == third_leaf)
    })
    .await;
    // Keep the load and the bad clients going a while longer, so every
    // kind of bad request overlaps the steady load several times.
    while started.elapsed() < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let faults_took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = workers.join_next().await {
        r.expect("a load worker panicked");
    }
    let bad = bad.await.unwrap();

    let failures = tally.failures.lock().unwrap().clone();
    let ok = tally.ok.load(Ordering::Relaxed);
    let under_b = tally.under_b.load(Ordering::Relaxed);
    eprintln!(
        "faults took {faults_took:?}; {ok} well-formed answers ({under_b} under the reloaded config); bad clients: {bad:?}"
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok >= 200, "too little load to mean anything: {ok}");
    assert!(
        bad.malformed >= 3
            && bad.oversized >= 3
            && bad.slow_headers >= 1
            && bad.slow_body >= 1
            && bad.not_tls >= 1,
        "{bad:?}"
    );
    // After it all, the server still serves and uses the last good config.
    let resp = only_third
        .connect(addr)
        .await
        .unwrap()
        .review(
            "/validate",
            &fixtures::review("018_validate_UPDATE_VPC_sample-vpc.json"),
        )
        .await;
    assert_eq!(
        resp["allowed"], true,
        "config B (immutable-field: Warn) stays in force: {resp}"
    );
    h.stop().await;
}

/// Writes `contents` to a sibling temp file and renames it over `path`.
fn replace(path: &std::path::Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn wait_for<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Debug, Default)]
struct BadCounts {
    malformed: u32,
    oversized: u32,
    slow_headers: u32,
    slow_body: u32,
    not_tls: u32,
}

/// Sends every kind of bad request in a loop until `stop`; each must get
/// its proper answer (400, 413, a cut, 408) and nothing else.
async fn bad_clients(
    addr: std::net::SocketAddr,
    cas: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
) -> BadCounts {
    let ca: Vec<&[u8]> = cas.iter().map(Vec::as_slice).collect();
    let mut n = BadCounts::default();
    let h1 = TlsClient::new(&ca, Proto::Http1);
    let h2 = TlsClient::new(&ca, Proto::Http2);
    // Slow clients run alongside, one of each at a time.
    let slow = {
        let cas = cas.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let ca: Vec<&[u8]> = cas.iter().map(Vec::as_slice).collect();
            let h1 = TlsClient::new(&ca, Proto::Http1);
            let (mut headers, mut body) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                // Slow-loris on the headers: cut by the header-read timeout.
                let mut tls = h1.raw(addr).await.unwrap();
                tls.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
                    .await
                    .unwrap();
                let mut cut = false;
                for _ in 0..40 {
                    if tls.write_all(b"X").await.is_err() || tls.flush().await.is_err() {
                        cut = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                assert!(cut, "slow headers were not cut");
                headers += 1;
                // A slow body: answered 408 by the request timeout.
                let review = serde_json::to_vec(&fixtures::review(
                    "002_validate_CREATE_VPC_sample-vpc.json",
                ))
                .unwrap();
                let mut tls = h1.raw(addr).await.unwrap();
                let head = format!(
                    "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
                    review.len()
                );
                tls.write_all(head.as_bytes()).await.unwrap();
                tls.write_all(&review[..64]).await.unwrap();
                tls.flush().await.unwrap();
                let (out, _) = read_until_closed(&mut tls, Duration::from_secs(5)).await;
                let text = String::from_utf8_lossy(&out);
                assert!(text.starts_with("HTTP/1.1 408"), "slow body: {text}");
                body += 1;
            }
            (headers, body)
        })
    };
    let mut i = 0u32;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let client_is_h1 = i.is_multiple_of(2);
        let client = if client_is_h1 { &h1 } else { &h2 };
        let mut conn = client.connect(addr).await.unwrap();
        // Malformed: not JSON, JSON that is not a review, a review without uid.
        for body in [&b"{not json"[..], b"[1,2,3]", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#] {
            let (status, out) = conn.post("/validate", body.to_vec()).await.unwrap();
            assert_eq!(status, 400, "{}", String::from_utf8_lossy(&out));
            n.malformed += 1;
        }
        // Oversized, with a length the server can see up front.
        match conn.post("/mutate", vec![b' '; 70_000]).await {
            Ok((status, _)) => assert_eq!(status, 413),
            // HTTP/1.1: the server answers 413 and closes without reading
            // the body, so the client may see the close while still writing
            // it. A bad request's connection may be cut; HTTP/2 never is.
            Err(e) if client_is_h1 => assert!(
                e.is_body_write_aborted()
                    || e.is_incomplete_message()
                    || format!("{e:?}").contains("BodyWrite"),
                "{e:?}"
            ),
            Err(e) => panic!("oversized request over HTTP/2: {e}"),
        }
        n.oversized += 1;
        // Not TLS at all: the connection is dropped.
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (_, closed) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
        assert!(closed);
        n.not_tls += 1;
        // Garbage after a good handshake: 400 from the HTTP layer, then closed.
        let mut tls = h1.raw(addr).await.unwrap();
        tls.write_all(b"\x00\x01GARBAGE\r\n\r\n").await.unwrap();
        let (out, closed) = read_until_closed(&mut tls, Duration::from_secs(5)).await;
        assert!(
            closed && (out.is_empty() || out.starts_with(b"HTTP/1.1 400")),
            "{}",
            String::from_utf8_lossy(&out)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (headers, body) = slow.await.unwrap();
    n.slow_headers = headers;
    n.slow_body = body;
    n
}
