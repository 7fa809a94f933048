//! Raw bytes into the admission router through hyper's HTTP/1.1 or HTTP/2
//! server over an in-memory connection: request lines, headers, chunked
//! bodies and HTTP/2 frames as a client could send them. Time is paused,
//! so the server's timeouts fire at once instead of stalling the fuzzer.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn router() -> axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let registry = prometheus::Registry::new();
            let state = mrguard::server::AppState {
                config: mrguard::live_config::ConfigStore::new(crate::configs()[1].clone(), None),
                cluster: Default::default(),
                metrics: Some(Arc::new(
                    mrguard::metrics::AdmissionMetrics::register(&registry).expect("metrics"),
                )),
                ready: Arc::new(AtomicBool::new(true)),
            };
            let limits = mrguard::server::RouteLimits {
                max_body_bytes: 64 * 1024,
                request_timeout: Duration::from_secs(1),
                max_concurrent_requests: 8,
                max_inflight_body_bytes: 128 * 1024,
                max_inflight_wait: Duration::from_secs(1),
            };
            mrguard::server::router(state, &limits)
        })
        .clone()
}

/// Serves `data` as one connection's bytes; the first byte picks HTTP/2
/// (odd: after the client preface) or HTTP/1.1. Checks that the server
/// never panics or hangs, and that HTTP/1.1 never answers 500.
pub fn serve_bytes(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let h2 = mode & 1 == 1;
    let input: Vec<u8> = if h2 {
        [H2_PREFACE, rest].concat()
    } else {
        rest.to_vec()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let answer = runtime.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let app = router();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
        let serve = async move {
            let io = TokioIo::new(server);
            if h2 {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(io, service)
                    .await;
            } else {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            }
        };
        let talk = async move {
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            let mut out = Vec::new();
            let _ = client.read_to_end(&mut out).await;
            out
        };
        let (_, out) =
            tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(serve, talk) })
                .await
                .expect("the connection ends (paused time: timeouts fire at once)");
        out
    });
    if !h2 {
        assert!(
            !answer.windows(12).any(|w| w == b"HTTP/1.1 500"),
            "a 500: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}
