//! Shared harness for the integration tests: starts the real server on an
//! ephemeral loopback port with freshly generated certificates and talks
//! to it over TLS verified against the test CA, with HTTP/1.1 or HTTP/2.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mrguard::cli::serve::{start, Running, ServeArgs};
use mrguard::cli::{Cli, Command};
use rustls::pki_types::ServerName;
use serde_json::Value;

pub(crate) fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// An AdmissionReview a real kube-apiserver sent (fixtures/reviews/).
pub(crate) fn fixture_review(name: &str) -> Value {
    let p = shared().join("reviews").join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// The documents of an example manifest (fixtures/examples/).
pub(crate) fn example(name: &str) -> Vec<Value> {
    let p = shared().join("examples").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Builds the AdmissionReview the API server would send for `object`.
pub(crate) fn review(op: &str, object: Option<&Value>, old: Option<&Value>) -> Value {
    let subject = object.or(old).cloned().unwrap_or(Value::Null);
    let api_version = subject["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = subject["kind"].as_str().unwrap_or("");
    let mut req = serde_json::json!({
        "uid": format!("test-{}", rand_id()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
        "name": subject["metadata"]["name"].as_str().unwrap_or(""),
        "operation": op,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
    });
    if let Some(ns) = subject["metadata"]["namespace"].as_str() {
        req["namespace"] = Value::from(ns);
    }
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Applies the base64 JSON Patch of an AdmissionReview response to `obj`.
pub(crate) fn apply_patch(obj: &Value, response: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(p) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("patch is base64");
        let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("patch is a JSON Patch");
        json_patch::patch(&mut out, &patch).expect("patch applies");
    } else {
        assert!(
            response.get("patchType").is_none(),
            "patchType without patch: {response}"
        );
    }
    out
}

pub(crate) struct Harness {
    pub running: Option<Running>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub ca_pem: Vec<u8>,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub config_file: PathBuf,
}

impl Harness {
    /// Starts the server with certificate files and, when given, a config file.
    pub(crate) async fn start(config: Option<&str>) -> Self {
        Self::start_with(config, &[]).await
    }

    pub(crate) async fn start_with(config: Option<&str>, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (pair, ca) = mrguard::tls::self_signed(&mrguard::tls::local_names()).unwrap();
        let cert_file = dir.path().join("tls.crt");
        let key_file = dir.path().join("tls.key");
        std::fs::write(&cert_file, &pair.cert).unwrap();
        std::fs::write(&key_file, &pair.key).unwrap();
        let config_file = dir.path().join("config.yaml");
        let mut args: Vec<String> = [
            "mrguard",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--reload-interval",
            "50ms",
            "--drain-delay",
            "0s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "--tls-cert-file".to_string(),
            cert_file.display().to_string(),
            "--tls-key-file".to_string(),
            key_file.display().to_string(),
        ]);
        if let Some(c) = config {
            std::fs::write(&config_file, c).unwrap();
            args.extend(["--config".to_string(), config_file.display().to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let running = start(serve_args(&args)).await.expect("server starts");
        Self {
            addr: running.addr,
            metrics_addr: running.metrics_addr,
            running: Some(running),
            dir,
            ca_pem: ca.cert.into_bytes(),
            cert_file,
            key_file,
            config_file,
        }
    }

    pub(crate) fn client(&self, proto: Proto) -> TlsClient {
        TlsClient::new(&[&self.ca_pem], proto)
    }

    /// POSTs a review over a fresh HTTP/1.1 connection; returns the
    /// AdmissionReview `response` after checking the envelope and uid.
    pub(crate) async fn review(&self, path: &str, review: &Value) -> Value {
        let mut conn = self.client(Proto::Http1).connect(self.addr).await.unwrap();
        post_review(&mut conn, path, review).await
    }

    pub(crate) async fn metrics(&self) -> String {
        let mut s = tokio::net::TcpStream::connect(self.metrics_addr)
            .await
            .unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    pub(crate) async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

pub(crate) fn serve_args(args: &[String]) -> ServeArgs {
    match Cli::try_parse_from(args)
        .expect("valid serve flags")
        .command
    {
        Command::Serve(a) => *a,
        _ => unreachable!(),
    }
}

/// Sends a review and checks the response envelope; returns `response`.
pub(crate) async fn post_review(conn: &mut Conn, path: &str, review: &Value) -> Value {
    let (status, body) = conn
        .post(path, serde_json::to_vec(review).unwrap())
        .await
        .expect("request succeeds");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], review["request"]["uid"], "uid echoed");
    v["response"].clone()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Http1,
    Http2,
}

pub(crate) struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    proto: Proto,
}

impl TlsClient {
    pub(crate) fn new(ca_pems: &[&[u8]], proto: Proto) -> Self {
        Self::with_versions(ca_pems, proto, rustls::DEFAULT_VERSIONS)
    }

    pub(crate) fn with_versions(
        ca_pems: &[&[u8]],
        proto: Proto,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for pem in ca_pems {
            for c in mrguard::tls::parse_certs(pem, "CA").unwrap() {
                roots.add(c).unwrap();
            }
        }
        let mut config = rustls::ClientConfig::builder_with_provider(mrguard::tls::provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Each connection does a full handshake, so it sees the current certificate.
        config.resumption = rustls::client::Resumption::disabled();
        config.alpn_protocols = vec![match proto {
            Proto::Http1 => b"http/1.1".to_vec(),
            Proto::Http2 => b"h2".to_vec(),
        }];
        Self {
            config: Arc::new(config),
            proto,
        }
    }

    pub(crate) async fn connect(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        let (_, session) = tls.get_ref();
        let peer_cert = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let alpn = session.alpn_protocol().map(|a| a.to_vec());
        let version = session.protocol_version();
        let io = TokioIo::new(tls);
        let sender = match self.proto {
            Proto::Http1 => {
                let (s, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                Sender::H1(s)
            }
            Proto::Http2 => {
                let (s, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                Sender::H2(s)
            }
        };
        Ok(Conn {
            sender,
            peer_cert,
            alpn,
            version,
        })
    }
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

pub(crate) struct Conn {
    sender: Sender,
    /// DER of the certificate the server presented.
    pub peer_cert: Vec<u8>,
    pub alpn: Option<Vec<u8>>,
    pub version: Option<rustls::ProtocolVersion>,
}

impl Conn {
    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), hyper::Error> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes().to_vec();
        Ok((status, body))
    }

    pub(crate) async fn post(
        &mut self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), hyper::Error> {
        self.request("POST", path, body).await
    }

    pub(crate) async fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>), hyper::Error> {
        self.request("GET", path, vec![]).await
    }
}

/// A raw TLS stream to the server (no HTTP client), for tests that need to
/// send bytes slowly or malformed; `alpn` is offered as the only protocol.
pub(crate) async fn raw_tls(
    addr: SocketAddr,
    ca_pems: &[&[u8]],
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for c in mrguard::tls::parse_certs(pem, "CA").unwrap() {
            roots.add(c).unwrap();
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(mrguard::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Reads until the peer closes the stream or `limit` passes; returns what
/// arrived and whether the peer closed (EOF or an error) within the limit.
pub(crate) async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    limit: std::time::Duration,
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (out, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}
