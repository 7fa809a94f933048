//! The baseline: a no-op admission server on exactly mrguard's stack (the
//! same `HttpsServer` accept loop, rustls with ring and the same
//! `ServerConfig`, hyper auto h1/h2, axum, a multi-threaded tokio runtime)
//! that reads the body with the same limit, parses it as JSON and answers
//! a fixed "allowed" review echoing the uid. mrguard's cost over it is the
//! cost of mrguard's own logic.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, Limited};
use mrguard::pki::PemPair;
use mrguard::server::{ConnLimits, HttpsServer};
use mrguard::tls::CertStore;

async fn review(body: Body) -> Response {
    let bytes: Bytes = match Limited::new(body, mrguard::server::MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "too large").into_response(),
    };
    let v: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return (StatusCode::BAD_REQUEST, "bad json").into_response(),
    };
    let uid = v["request"]["uid"].as_str().unwrap_or("");
    let out = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":{},"allowed":true}}}}"#,
        serde_json::Value::from(uid)
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        out,
    )
        .into_response()
}

pub(crate) fn router() -> axum::Router {
    axum::Router::new()
        .route("/mutate", post(|b: Body| review(b)))
        .route("/validate", post(|b: Body| review(b)))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
}

/// Serves until killed; prints nothing (the parent polls /healthz).
pub(crate) fn serve(listen: SocketAddr, cert: &Path, key: &Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve_https(
        listen,
        cert,
        key,
        router(),
        Duration::from_secs(1),
    ))
}

/// `app` over mrguard's HTTPS stack on `listen`, with `serve`'s connection
/// limits, until the process is killed.
pub(crate) async fn serve_https(
    listen: SocketAddr,
    cert: &Path,
    key: &Path,
    app: axum::Router,
    drain_timeout: Duration,
) -> anyhow::Result<()> {
    let pair = PemPair::read(cert, key)?;
    let store = CertStore::new(pair.certified_key()?, None);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let server = HttpsServer::new(
        listener,
        store.server_config(),
        app,
        ConnLimits {
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(120),
            drain_timeout,
            max_connections: None,
        },
    );
    let (_trigger, signal) = mrguard::shutdown::channel();
    server.run(signal).await;
    Ok(())
}
