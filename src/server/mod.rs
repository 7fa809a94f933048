//! The HTTPS admission server: a TCP accept loop, a bounded TLS handshake
//! per connection, then hyper's HTTP/1.1 or HTTP/2 connection (as ALPN
//! chose) serving the axum router, with read deadlines from `guard`. On
//! shutdown it stops accepting and drains. The metrics listener runs the
//! same loop, over TLS or plain HTTP/1.1, with a connection limit.

mod admission;
mod guard;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::Instrument;

pub use admission::AMPLIFICATION;
pub use routes::{router, AppState, RouteLimits, MAX_BODY_BYTES};

/// HTTP/2 flow-control windows (docs/security.md, "Memory budget").
pub const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's window: several streams at full speed.
pub const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;

/// Per-connection limits of an HTTPS listener.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Time for the TLS handshake and for each request's headers (from the
    /// first byte of the request; the first request from the handshake).
    pub header_read_timeout: Duration,
    /// How long an HTTP/1.1 keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long in-flight requests get to finish after shutdown starts.
    pub drain_timeout: Duration,
    /// Connections open at once; the next is accepted when one closes.
    /// `None`: no limit (the admission port sheds by requests instead).
    pub max_connections: Option<usize>,
}

/// The accept loop; HTTPS unless built with [`HttpsServer::plain`].
pub struct HttpsServer {
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    app: axum::Router,
    limits: ConnLimits,
}

type Builders = (
    Arc<hyper::server::conn::http1::Builder>,
    Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
);

impl HttpsServer {
    /// A server that accepts on `listener` and serves `app` over `tls`.
    pub fn new(
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        app: axum::Router,
        limits: ConnLimits,
    ) -> Self {
        Self {
            listener,
            acceptor: Some(TlsAcceptor::from(tls)),
            app,
            limits,
        }
    }

    /// The same loop over plain HTTP/1.1 (the metrics listener without TLS).
    pub fn plain(listener: TcpListener, app: axum::Router, limits: ConnLimits) -> Self {
        Self {
            listener,
            acceptor: None,
            app,
            limits,
        }
    }

    /// The address the listener is bound to.
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
        let mut h1 = hyper::server::conn::http1::Builder::new();
        // guard::Guarded keeps the header and idle deadlines instead.
        h1.timer(TokioTimer::new())
            .header_read_timeout(None)
            .keep_alive(true);
        let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        // A stream's window is what h2 buffers of a body nobody reads yet
        // (a request waiting for the body budget); the connection's window
        // caps it for all its streams (docs/security.md). Smaller stream
        // windows made an 8 MiB body miss the request timeout.
        h2.timer(TokioTimer::new())
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONNECTION_WINDOW)
            .max_concurrent_streams(250)
            .keep_alive_interval(Some(Duration::from_secs(30)));
        let builders: Builders = (Arc::new(h1), Arc::new(h2));
        let slots = limits
            .max_connections
            .map(|n| Arc::new(Semaphore::new(n.max(1))));
        loop {
            // At the limit, stop accepting: new connections wait in the
            // kernel's backlog instead of costing memory here.
            let slot = match &slots {
                Some(s) => tokio::select! {
                    p = s.clone().acquire_owned() => p.ok(),
                    _ = shutdown.wait() => break,
                },
                None => None,
            };
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
            let builders = builders.clone();
            let limits = limits.clone();
            let watcher = graceful.watcher();
            tokio::spawn(
                async move {
                    let _slot = slot;
                    let Some(acceptor) = acceptor else {
                        return serve_connection(tcp, false, app, builders, &limits, watcher).await;
                    };
                    let tls = match tokio::time::timeout(
                        limits.header_read_timeout,
                        acceptor.accept(tcp),
                    )
                    .await
                    {
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
                    // ALPN decides; HTTP/2 over TLS without ALPN is not a thing
                    // (RFC 9113 §3.2), so no sniffing read without a deadline.
                    let is_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    serve_connection(tls, is_h2, app, builders, &limits, watcher).await;
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

/// Serves one connection with the guard's read deadlines.
async fn serve_connection<S>(
    stream: S,
    is_h2: bool,
    app: axum::Router,
    (h1, h2): Builders,
    limits: &ConnLimits,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(guard::Activity::default());
    let io = TokioIo::new(guard::Guarded::new(
        stream,
        activity.clone(),
        limits.header_read_timeout,
        limits.idle_timeout,
        is_h2,
    ));
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = activity.begin();
        let answer = app.clone().oneshot(req.map(axum::body::Body::new));
        async move {
            let response = answer.await;
            drop(in_flight);
            response
        }
    });
    let result = if is_h2 {
        watcher.watch(h2.serve_connection(io, service)).await
    } else {
        watcher.watch(h1.serve_connection(io, service)).await
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
