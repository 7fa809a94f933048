//! [`TestServer`]: `mrguard serve` started in this process on ephemeral
//! loopback ports, from typed [`ServeArgs`] (never an argv list), with
//! fresh certificates in a temporary folder.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mrguard::app::serve::{Running, ServeArgs};
use mrguard::cli::ControllerArgs;
use serde_json::Value;

use super::tls::{Conn, Proto, RawTls, TestPki, TlsClient};

/// Where the server's certificate comes from.
enum Certificate {
    /// A fresh CA and pair written to `tls.crt`/`tls.key` (the default).
    Generated,
    /// Existing files; `ca` is the CA clients trust.
    Files {
        cert: PathBuf,
        key: PathBuf,
        ca: PathBuf,
    },
    /// `--self-signed`, writing its CA to `ca_file`.
    SelfSigned { ca_file: PathBuf },
    /// No certificate source (controller mode).
    None,
}

/// Options of a [`TestServer`]; every option is a typed [`ServeArgs`] field.
pub(crate) struct Builder {
    args: ServeArgs,
    config: Option<String>,
    certificate: Certificate,
}

/// The options a test server starts with: those of `mrguard serve`
/// (checked by `server::test_server_defaults_are_the_binarys`) except
/// ephemeral loopback ports, fast reloads and no drain delay.
pub(crate) fn default_args() -> ServeArgs {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    ServeArgs {
        listen: loopback,
        metrics_listen: loopback,
        metrics_tls: false,
        metrics_max_connections: 16,
        tls_cert_file: None,
        tls_key_file: None,
        self_signed: false,
        self_signed_ca_file: None,
        config: None,
        reload_interval: Duration::from_millis(50),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(120),
        request_timeout: Duration::from_millis(1500),
        max_concurrent_requests: 512,
        max_body_bytes: 8 * 1024 * 1024,
        max_inflight_body_bytes: 8 * 1024 * 1024,
        max_inflight_wait: Duration::from_secs(30),
        drain_delay: Duration::ZERO,
        drain_timeout: Duration::from_secs(10),
        controller: ControllerArgs::defaults(),
    }
}

impl Builder {
    /// Serves with this configuration file (YAML) instead of the built-in one.
    pub(crate) fn config(mut self, yaml: &str) -> Self {
        self.config = Some(yaml.to_string());
        self
    }

    pub(crate) fn header_read_timeout(mut self, d: Duration) -> Self {
        self.args.header_read_timeout = d;
        self
    }

    pub(crate) fn request_timeout(mut self, d: Duration) -> Self {
        self.args.request_timeout = d;
        self
    }

    pub(crate) fn max_concurrent_requests(mut self, n: usize) -> Self {
        self.args.max_concurrent_requests = n;
        self
    }

    pub(crate) fn max_body_bytes(mut self, n: usize) -> Self {
        self.args.max_body_bytes = n;
        self
    }

    /// Serves existing certificate files; clients trust `ca`.
    pub(crate) fn tls_files(mut self, cert: &Path, key: &Path, ca: &Path) -> Self {
        self.certificate = Certificate::Files {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            ca: ca.to_path_buf(),
        };
        self
    }

    /// `--self-signed`, its CA written to `ca_file`.
    pub(crate) fn self_signed(mut self, ca_file: &Path) -> Self {
        self.certificate = Certificate::SelfSigned {
            ca_file: ca_file.to_path_buf(),
        };
        self
    }

    /// `--controller`, with this kubeconfig when given.
    pub(crate) fn controller(mut self, kubeconfig: Option<&Path>) -> Self {
        self.args.controller.controller = true;
        self.args.controller.kubeconfig = kubeconfig.map(Path::to_path_buf);
        if matches!(self.certificate, Certificate::Generated) {
            self.certificate = Certificate::None;
        }
        self
    }

    /// Starts the server; panics naming the error if it does not start.
    pub(crate) async fn start(self) -> TestServer {
        self.try_start().await.expect("the test server starts")
    }

    /// Starts the server, or returns why `mrguard serve` refused to.
    pub(crate) async fn try_start(mut self) -> anyhow::Result<TestServer> {
        let dir = tempfile::tempdir()?;
        let config_file = dir.path().join("config.yaml");
        if let Some(yaml) = &self.config {
            std::fs::write(&config_file, yaml)?;
            self.args.config = Some(config_file.clone());
        }
        let mut cert_file = dir.path().join("tls.crt");
        let mut key_file = dir.path().join("tls.key");
        let mut ca_source = None;
        let mut ca_pem = Vec::new();
        match self.certificate {
            Certificate::Generated => {
                let pki = TestPki::generate();
                pki.write(dir.path());
                ca_pem = pki.ca;
                self.args.tls_cert_file = Some(cert_file.clone());
                self.args.tls_key_file = Some(key_file.clone());
            }
            Certificate::Files { cert, key, ca } => {
                self.args.tls_cert_file = Some(cert.clone());
                self.args.tls_key_file = Some(key.clone());
                (cert_file, key_file) = (cert, key);
                ca_source = Some(ca);
            }
            Certificate::SelfSigned { ca_file } => {
                self.args.self_signed = true;
                self.args.self_signed_ca_file = Some(ca_file.clone());
                ca_source = Some(ca_file);
            }
            Certificate::None => {}
        }
        let running = mrguard::app::serve::start(self.args).await?;
        if let Some(ca) = ca_source {
            ca_pem = std::fs::read(&ca)?;
        }
        Ok(TestServer {
            addr: running.addr,
            metrics_addr: running.metrics_addr,
            running: Some(running),
            ca_pem,
            cert_file,
            key_file,
            config_file,
            dir,
        })
    }
}

/// A running `mrguard serve`. Dropping it without [`TestServer::stop`]
/// leaves the server to the end of the test's runtime.
pub(crate) struct TestServer {
    running: Option<Running>,
    pub(crate) addr: SocketAddr,
    pub(crate) metrics_addr: SocketAddr,
    /// The CA that issued the served certificate, PEM.
    pub(crate) ca_pem: Vec<u8>,
    /// The certificate and key files the server watches.
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    /// The configuration file the server watches, when started with one.
    pub(crate) config_file: PathBuf,
    /// A temporary folder that lives as long as the server.
    pub(crate) dir: tempfile::TempDir,
}

impl TestServer {
    pub(crate) fn builder() -> Builder {
        Builder {
            args: default_args(),
            config: None,
            certificate: Certificate::Generated,
        }
    }

    /// A server with the built-in configuration and fresh certificates.
    pub(crate) async fn start() -> Self {
        Self::builder().start().await
    }

    /// A server with this configuration file and fresh certificates.
    pub(crate) async fn with_config(yaml: &str) -> Self {
        Self::builder().config(yaml).start().await
    }

    /// What `serve` returned: the CA file of --self-signed, readiness.
    pub(crate) fn running(&self) -> &Running {
        self.running.as_ref().expect("the server is running")
    }

    /// A client trusting only the server's CA.
    pub(crate) fn client(&self, proto: Proto) -> TlsClient {
        TlsClient::new(&[&self.ca_pem], proto)
    }

    /// A new connection to the admission listener.
    pub(crate) async fn connect(&self, proto: Proto) -> Conn {
        self.client(proto)
            .connect(self.addr)
            .await
            .expect("the server accepts a connection")
    }

    /// A new TLS connection with no HTTP client on it.
    pub(crate) async fn raw(&self, proto: Proto) -> RawTls {
        self.client(proto)
            .raw(self.addr)
            .await
            .expect("the server completes a handshake")
    }

    /// POSTs a review over a fresh HTTP/1.1 connection; returns the
    /// AdmissionReview `response` after checking the envelope and uid.
    pub(crate) async fn review(&self, path: &str, review: &Value) -> Value {
        self.connect(Proto::Http1).await.review(path, review).await
    }

    /// The metrics listener's exposition text (plain HTTP).
    pub(crate) async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.metrics_addr)
            .await
            .unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    /// Begins the shutdown (readiness off, listener closed, in-flight
    /// requests drained) in the background; the files and addresses stay.
    pub(crate) fn drain(&mut self) -> tokio::task::JoinHandle<()> {
        let running = self.running.take().expect("the server is running");
        tokio::spawn(running.shutdown())
    }

    /// Shuts the server down and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}
