//! The load client: verified TLS (rustls, ring) with ALPN, hyper's
//! connection-level HTTP/1.1 and HTTP/2 clients, closed-loop runs at a fixed
//! concurrency and open-loop runs at a fixed rate.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;

use crate::mix::Item;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    H1,
    H2,
}

impl Proto {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Proto::H1 => "HTTP/1.1",
            Proto::H2 => "HTTP/2",
        }
    }
}

pub(crate) fn tls_config(ca_pem: &[u8], proto: Proto) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in mrguard::pki::parse_certs(ca_pem, "CA")? {
        roots.add(c)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(mrguard::pki::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![match proto {
        Proto::H1 => b"http/1.1".to_vec(),
        Proto::H2 => b"h2".to_vec(),
    }];
    Ok(Arc::new(config))
}

#[derive(Clone)]
pub(crate) enum Sender {
    H1(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

pub(crate) async fn connect(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    proto: Proto,
) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let negotiated = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let io = TokioIo::new(stream);
    Ok(match proto {
        Proto::H1 => {
            anyhow::ensure!(
                negotiated.as_deref() == Some(b"http/1.1"),
                "ALPN did not pick http/1.1"
            );
            let (s, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            Sender::H1(Arc::new(tokio::sync::Mutex::new(s)))
        }
        Proto::H2 => {
            anyhow::ensure!(negotiated.as_deref() == Some(b"h2"), "ALPN did not pick h2");
            let (s, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .handshake(io)
                .await?;
            tokio::spawn(conn);
            Sender::H2(s)
        }
    })
}

/// How one answer looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Allowed,
    Patched,
    Denied,
}

/// Sends one review; checks the status and that the envelope came back.
pub(crate) async fn send(sender: &Sender, item: &Item) -> anyhow::Result<Answer> {
    let req = hyper::Request::builder()
        .method("POST")
        .header("content-type", "application/json")
        .header("accept", "application/json");
    let resp = match sender {
        Sender::H1(s) => {
            let req = req
                .uri(item.path)
                .header("host", "localhost")
                .body(Full::new(item.body.clone()))?;
            let mut s = s.lock().await;
            s.ready().await?;
            s.send_request(req).await?
        }
        Sender::H2(s) => {
            let req = req
                .uri(format!("https://localhost{}", item.path))
                .body(Full::new(item.body.clone()))?;
            let mut s = s.clone();
            s.ready().await?;
            s.send_request(req).await?
        }
    };
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    anyhow::ensure!(
        status == 200,
        "HTTP {status}: {}",
        String::from_utf8_lossy(&body)
    );
    anyhow::ensure!(
        find(&body, b"\"kind\":\"AdmissionReview\""),
        "not an AdmissionReview: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(if find(&body, b"\"allowed\":false") {
        Answer::Denied
    } else if find(&body, b"\"patch\":") {
        Answer::Patched
    } else {
        Answer::Allowed
    })
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub allowed: u64,
    pub patched: u64,
    pub denied: u64,
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, a: &anyhow::Result<Answer>) {
        match a {
            Ok(Answer::Allowed) => self.allowed += 1,
            Ok(Answer::Patched) => self.patched += 1,
            Ok(Answer::Denied) => self.denied += 1,
            Err(_) => self.errors += 1,
        }
    }
    fn merge(&mut self, o: &Counts) {
        self.allowed += o.allowed;
        self.patched += o.patched;
        self.denied += o.denied;
        self.errors += o.errors;
    }
    pub(crate) fn ok(&self) -> u64 {
        self.allowed + self.patched + self.denied
    }
}

pub(crate) struct RunResult {
    pub requests: u64,
    pub seconds: f64,
    /// Latency in nanoseconds: from the request's start (closed loop) or
    /// from its scheduled time (open loop, so queueing is counted).
    pub hist: Histogram<u64>,
    pub counts: Counts,
    pub first_error: Option<String>,
}

impl RunResult {
    pub(crate) fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
    pub(crate) fn p(&self, q: f64) -> Duration {
        Duration::from_nanos(self.hist.value_at_quantile(q))
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("valid histogram bounds")
}

pub(crate) struct Plan {
    pub addr: SocketAddr,
    pub proto: Proto,
    pub concurrency: usize,
    /// HTTP/2 connections the streams are spread over.
    pub h2_conns: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Requests per second for an open-loop run; None for closed loop.
    pub rate: Option<f64>,
}

async fn senders(plan: &Plan, tls: &Arc<rustls::ClientConfig>) -> anyhow::Result<Vec<Sender>> {
    let n = match plan.proto {
        Proto::H1 => plan.concurrency,
        Proto::H2 => plan.h2_conns.max(1),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(connect(plan.addr, tls, plan.proto).await?);
    }
    Ok(out)
}

/// Runs the plan: `concurrency` workers, each sending reviews back to back
/// (closed loop) or taking the next scheduled slot (open loop).
pub(crate) async fn run(
    plan: &Plan,
    tls: &Arc<rustls::ClientConfig>,
    items: Arc<Vec<Item>>,
) -> anyhow::Result<RunResult> {
    let senders = senders(plan, tls).await?;
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    let next = Arc::new(AtomicUsize::new(0));
    // Open loop: a pacing thread (sub-millisecond sleeps, unlike tokio's
    // 1 ms timer) hands out scheduled start times.
    let slots = plan.rate.map(|rate| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        let interval = Duration::from_secs_f64(1.0 / rate);
        std::thread::spawn(move || {
            let mut due = Instant::now();
            while due < end {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if tx.send(due).is_err() {
                    return;
                }
                due += interval;
            }
        });
        Arc::new(tokio::sync::Mutex::new(rx))
    });
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..plan.concurrency {
        let sender = senders[w % senders.len()].clone();
        let items = items.clone();
        let next = next.clone();
        let slots = slots.clone();
        tasks.spawn(async move {
            let mut hist = histogram();
            let mut counts = Counts::default();
            let mut first_error = None;
            loop {
                let began = match &slots {
                    None => Instant::now(),
                    Some(rx) => match rx.lock().await.recv().await {
                        Some(due) => due,
                        None => break,
                    },
                };
                if began >= end {
                    break;
                }
                let item = &items[next.fetch_add(1, Ordering::Relaxed) % items.len()];
                let answer = send(&sender, item).await;
                let done = Instant::now();
                if began >= measure_from && done <= end {
                    if let Err(e) = &answer {
                        first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                    counts.add(&answer);
                    let _ = hist.record((done - began).as_nanos() as u64);
                }
            }
            (hist, counts, first_error)
        });
    }
    let mut hist = histogram();
    let mut counts = Counts::default();
    let mut first_error = None;
    while let Some(r) = tasks.join_next().await {
        let (h, c, e) = r?;
        hist.add(&h)?;
        counts.merge(&c);
        first_error = first_error.or(e);
    }
    Ok(RunResult {
        requests: counts.ok(),
        seconds: plan.duration.as_secs_f64(),
        hist,
        counts,
        first_error,
    })
}
