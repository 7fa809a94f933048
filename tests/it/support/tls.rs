//! The one TLS client of the tests: HTTP/1.1 or HTTP/2 chosen by ALPN,
//! optionally pinned to TLS versions, verified against given CAs, or a raw
//! TLS stream for requests no HTTP client would send. And fresh test
//! certificates.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;

/// A TLS stream with no HTTP on it.
pub(crate) type RawTls = tokio_rustls::client::TlsStream<TcpStream>;

/// A request body: a whole buffer ([`full`]) or any stream of frames.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A body sent in one piece.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// The HTTP version a client offers (its only ALPN protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Http1,
    Http2,
}

impl Proto {
    fn alpn(self) -> &'static [u8] {
        match self {
            Proto::Http1 => b"http/1.1",
            Proto::Http2 => b"h2",
        }
    }
}

/// Fresh certificates: a CA and a serving pair for the loopback names.
pub(crate) struct TestPki {
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
    /// The CA certificate, PEM.
    pub(crate) ca: Vec<u8>,
}

impl TestPki {
    pub(crate) fn generate() -> Self {
        let (pair, ca) = mrguard::pki::self_signed(&mrguard::pki::local_names())
            .expect("test certificates are generated");
        Self {
            cert: pair.cert,
            key: pair.key,
            ca: ca.cert.into_bytes(),
        }
    }

    /// DER of the serving certificate, as a client sees it.
    pub(crate) fn leaf(&self) -> Vec<u8> {
        mrguard::pki::parse_certs(&self.cert, "test certificate").expect("PEM certificate")[0]
            .to_vec()
    }

    /// Writes `tls.crt` and `tls.key` into `dir`; returns their paths.
    pub(crate) fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &self.cert).unwrap();
        std::fs::write(&key, &self.key).unwrap();
        (cert, key)
    }
}

/// A TLS client trusting only the given CAs.
pub(crate) struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    proto: Proto,
    server_name: ServerName<'static>,
}

impl TlsClient {
    pub(crate) fn new(ca_pems: &[&[u8]], proto: Proto) -> Self {
        Self::with_versions(ca_pems, proto, rustls::DEFAULT_VERSIONS)
    }

    /// A client that offers only the given TLS versions.
    pub(crate) fn with_versions(
        ca_pems: &[&[u8]],
        proto: Proto,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for pem in ca_pems {
            for c in mrguard::pki::parse_certs(pem, "CA").expect("CA is PEM") {
                roots.add(c).expect("CA certificate is usable");
            }
        }
        let mut config = rustls::ClientConfig::builder_with_provider(mrguard::pki::provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Each connection does a full handshake, so it sees the current certificate.
        config.resumption = rustls::client::Resumption::disabled();
        config.alpn_protocols = vec![proto.alpn().to_vec()];
        Self {
            config: Arc::new(config),
            proto,
            server_name: ServerName::try_from("localhost").unwrap(),
        }
    }

    /// The name sent as SNI and verified in the certificate (default localhost).
    pub(crate) fn server_name(mut self, name: &str) -> Self {
        self.server_name = ServerName::try_from(name.to_string()).expect("a DNS name or an IP");
        self
    }

    /// A TLS connection with no HTTP client on it, for slow or malformed
    /// requests; the client's protocol is offered by ALPN.
    pub(crate) async fn raw(&self, addr: SocketAddr) -> std::io::Result<RawTls> {
        let tcp = TcpStream::connect(addr).await?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(self.server_name.clone(), tcp)
            .await
    }

    /// A TLS connection with an HTTP/1.1 or HTTP/2 client on it.
    pub(crate) async fn connect(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        let tls = self.raw(addr).await?;
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
    H1(hyper::client::conn::http1::SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

/// An HTTP connection over verified TLS.
pub(crate) struct Conn {
    sender: Sender,
    /// DER of the certificate the server presented.
    pub(crate) peer_cert: Vec<u8>,
    pub(crate) alpn: Option<Vec<u8>>,
    pub(crate) version: Option<rustls::ProtocolVersion>,
}

impl Conn {
    /// Another handle on the same HTTP/2 connection: its requests are
    /// concurrent streams.
    pub(crate) fn stream(&self) -> Conn {
        let Sender::H2(s) = &self.sender else {
            panic!("HTTP/1.1 carries one request at a time; connect again instead");
        };
        Conn {
            sender: Sender::H2(s.clone()),
            peer_cert: self.peer_cert.clone(),
            alpn: self.alpn.clone(),
            version: self.version,
        }
    }

    /// Sends a request as built; the answer's body is still to be read.
    pub(crate) async fn send(
        &mut self,
        req: hyper::Request<Body>,
    ) -> Result<hyper::Response<Incoming>, hyper::Error> {
        match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await
            }
        }
    }

    /// A JSON request to `path`; returns the status and the whole body.
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
            .body(full(body))
            .unwrap();
        let resp = self.send(req).await?;
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

    /// POSTs an AdmissionReview and checks the answer's envelope and uid;
    /// returns its `response`.
    pub(crate) async fn review(&mut self, path: &str, review: &Value) -> Value {
        let (status, body) = self
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
}

/// Reads until the peer closes the stream or `limit` passes; returns what
/// arrived and whether the peer closed (EOF or an error) within the limit.
pub(crate) async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    limit: Duration,
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
