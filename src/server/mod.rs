//! The HTTPS admission server: a TCP accept loop, a bounded TLS handshake
//! per connection, then hyper's auto (HTTP/1.1 or HTTP/2) connection
//! serving the axum router. On shutdown it stops accepting and drains.

pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

pub use routes::{router, AppState, RouteLimits, MAX_BODY_BYTES};

#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Time for the TLS handshake and for each request's headers.
    pub header_read_timeout: Duration,
    /// How long in-flight requests get to finish after shutdown starts.
    pub drain_timeout: Duration,
}

pub struct HttpsServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: axum::Router,
    limits: ConnLimits,
}

impl HttpsServer {
    pub fn new(
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        app: axum::Router,
        limits: ConnLimits,
    ) -> Self {
        Self {
            listener,
            acceptor: TlsAcceptor::from(tls),
            app,
            limits,
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` fires, then drains open connections.
    pub async fn run(self, shutdown: crate::shutdown::Signal) {
        let Self {
            listener,
            acceptor,
            app,
            limits,
        } = self;
        let graceful = GracefulShutdown::new();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(250)
            .keep_alive_interval(Some(Duration::from_secs(30)));
        let builder = Arc::new(builder);
        loop {
            let (tcp, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        // EMFILE and friends: back off briefly, keep serving.
                        tracing::warn!(error = %e, "failed to accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.wait() => break,
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let app = app.clone();
            let builder = builder.clone();
            let handshake_timeout = limits.header_read_timeout;
            let watcher = graceful.watcher();
            tokio::spawn(
                async move {
                    let tls =
                        match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake timed out");
                                return;
                            }
                        };
                    let service = TowerToHyperService::new(app);
                    let conn = builder.serve_connection(TokioIo::new(tls), service);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                .instrument(tracing::debug_span!("conn", %peer)),
            );
        }
        // Close the listener first so new connections are refused at once.
        drop(listener);
        if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the drain timeout; closing them");
        }
    }
}
