//! The server's limits (header-read timeout, request timeout, concurrency
//! cap) against real slow and greedy clients over TLS, on HTTP/1.1 and
//! HTTP/2. Bounds are generous: they prove a cut happens, not how fast.

use std::time::Duration;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use tokio::io::AsyncWriteExt;

use crate::support::tls::{full, Body};
use crate::support::{fixtures, read_until_closed, Proto, TestServer};

fn review_body() -> Vec<u8> {
    serde_json::to_vec(&fixtures::review("002_validate_CREATE_VPC_sample-vpc.json")).unwrap()
}

/// A fresh HTTP/1.1 request on its own connection still gets a real answer.
async fn still_serving(h: &TestServer) {
    let resp = h
        .review(
            "/validate",
            &fixtures::review("002_validate_CREATE_VPC_sample-vpc.json"),
        )
        .await;
    assert_eq!(resp["allowed"], true);
}

#[tokio::test]
async fn slow_headers_on_http1_are_cut_by_the_header_read_timeout() {
    let h = TestServer::builder()
        .header_read_timeout(Duration::from_millis(300))
        .start()
        .await;
    let mut tls = h.raw(Proto::Http1).await;
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    // Trickle one header byte at a time, far slower than any real client.
    let trickle = async {
        for _ in 0..100 {
            if tls.write_all(b"X").await.is_err() || tls.flush().await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(8), trickle).await;
    assert!(
        matches!(cut, Ok(true)),
        "the server kept a connection with slowly arriving headers open"
    );
    still_serving(&h).await;
    h.stop().await;
}

#[tokio::test]
async fn slow_headers_on_http2_are_cut_by_the_header_read_timeout() {
    let h = TestServer::builder()
        .header_read_timeout(Duration::from_millis(300))
        .start()
        .await;
    let mut tls = h.raw(Proto::Http2).await;
    // The client preface and SETTINGS, then a HEADERS frame announcing
    // 64 bytes of header block whose bytes trickle in one at a time.
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    tls.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await.unwrap();
    tls.write_all(&[0, 0, 64, 0x1, 0x4 | 0x1, 0, 0, 0, 1])
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let trickle = async {
        for _ in 0..64 {
            if tls.write_all(&[0x82]).await.is_err() || tls.flush().await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // All sent: the frame is complete; the connection must be gone by now.
        let (_, closed) = read_until_closed(&mut tls, Duration::from_millis(100)).await;
        closed
    };
    let cut = tokio::time::timeout(Duration::from_secs(10), trickle).await;
    assert!(
        matches!(cut, Ok(true)),
        "the server kept an HTTP/2 connection with a trickling header block open"
    );
    still_serving(&h).await;
    h.stop().await;
}

#[tokio::test]
async fn a_silent_connection_is_cut_before_and_after_the_handshake() {
    let h = TestServer::builder()
        .header_read_timeout(Duration::from_millis(300))
        .start()
        .await;
    // No TLS handshake at all.
    let mut tcp = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (_, closed) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    assert!(closed, "a connection that never handshakes stays open");
    // A handshake, then nothing: the first request's headers never come.
    let mut tls = h.raw(Proto::Http1).await;
    let (_, closed) = read_until_closed(&mut tls, Duration::from_secs(5)).await;
    assert!(closed, "a connection that never sends a request stays open");
    let mut tls = h.raw(Proto::Http2).await;
    let (_, closed) = read_until_closed(&mut tls, Duration::from_secs(5)).await;
    assert!(
        closed,
        "an HTTP/2 connection that never sends its preface stays open"
    );
    still_serving(&h).await;
    h.stop().await;
}

#[tokio::test]
async fn a_slow_body_on_http1_gets_408_from_the_request_timeout() {
    let h = TestServer::builder()
        .request_timeout(Duration::from_millis(400))
        .start()
        .await;
    let body = review_body();
    let mut tls = h.raw(Proto::Http1).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = tokio::io::split(tls);
    let writer = tokio::spawn(async move {
        for chunk in body.chunks(16) {
            if wr.write_all(chunk).await.is_err() {
                return;
            }
            let _ = wr.flush().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (out, _) = read_until_closed(&mut rd, Duration::from_secs(8)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive in time"), "{text}");
    writer.abort();
    still_serving(&h).await;
    h.stop().await;
}

/// A body that yields `chunk`-sized pieces of `body` every `every`.
fn trickled(body: Vec<u8>, chunk: usize, every: Duration) -> Body {
    let stream = futures::stream::unfold((body, 0usize), move |(body, at)| async move {
        if at >= body.len() {
            return None;
        }
        if at > 0 {
            tokio::time::sleep(every).await;
        }
        let end = (at + chunk).min(body.len());
        let frame = Frame::data(Bytes::copy_from_slice(&body[at..end]));
        Some((Ok(frame), (body, end)))
    });
    StreamBody::new(stream).boxed_unsync()
}

#[tokio::test]
async fn a_slow_body_on_http2_gets_408_and_the_connection_keeps_serving() {
    let h = TestServer::builder()
        .request_timeout(Duration::from_millis(400))
        .start()
        .await;
    let mut conn = h.connect(Proto::Http2).await;
    let req = hyper::Request::post("https://localhost/validate")
        .header("content-type", "application/json")
        .body(trickled(review_body(), 16, Duration::from_millis(100)))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(8), conn.send(req))
        .await
        .expect("the slow request is answered")
        .unwrap();
    assert_eq!(resp.status(), 408);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("did not arrive in time"));
    // Other streams on the same connection are unaffected.
    let req = hyper::Request::post("https://localhost/validate")
        .header("content-type", "application/json")
        .body(trickled(review_body(), 1 << 20, Duration::ZERO))
        .unwrap();
    let resp = conn.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    h.stop().await;
}

#[tokio::test]
async fn beyond_the_concurrency_cap_requests_get_503_with_retry_after() {
    let h = TestServer::builder()
        .max_concurrent_requests(2)
        .request_timeout(Duration::from_secs(3))
        .start()
        .await;
    // Two requests hold the two slots while their bodies trickle in.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut conn = h.connect(Proto::Http2).await;
        let req = hyper::Request::post("https://localhost/validate")
            .header("content-type", "application/json")
            .body(trickled(review_body(), 256, Duration::from_millis(300)))
            .unwrap();
        slow.push(tokio::spawn(async move {
            let resp = conn.send(req).await.unwrap();
            let status = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = h.connect(Proto::Http1).await;
    let resp = {
        let req = hyper::Request::post("/validate")
            .header("host", "localhost")
            .body(full(review_body()))
            .unwrap();
        h.connect(Proto::Http1).await.send(req).await.unwrap()
    };
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], 503, "{v}");
    // The shed request is counted: an admission request that ended in an
    // error before anything was decoded, and a rejection for overload.
    let m = h.metrics().await;
    for needle in [
        r#"mrguard_admission_requests_total{group="",kind="",operation="",result="error",webhook="validate"} 1"#,
        r#"mrguard_admission_rejected_total{reason="overloaded",webhook="validate"} 1"#,
    ] {
        assert!(m.contains(needle), "missing {needle} in\n{m}");
    }
    // Probes are not admission requests and are never capped.
    assert_eq!(conn.get("/healthz").await.unwrap().0, 200);
    // The slow ones still complete normally, and then there is room again.
    for s in slow {
        let (status, body) = s.await.unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let resp = conn
        .review(
            "/validate",
            &fixtures::review("002_validate_CREATE_VPC_sample-vpc.json"),
        )
        .await;
    assert_eq!(resp["allowed"], true);
    h.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_the_header_read_timeout() {
    let h = TestServer::builder()
        .header_read_timeout(Duration::from_millis(300))
        .start()
        .await;
    let review = fixtures::review("002_validate_CREATE_VPC_sample-vpc.json");
    for proto in [Proto::Http1, Proto::Http2] {
        let mut conn = h.connect(proto).await;
        assert_eq!(conn.review("/validate", &review).await["allowed"], true);
        // Idle for longer than the header timeout, as a pooled connection is.
        tokio::time::sleep(Duration::from_millis(900)).await;
        let again = conn
            .post("/validate", serde_json::to_vec(&review).unwrap())
            .await;
        assert!(
            matches!(again, Ok((200, _))),
            "{proto:?}: an idle keep-alive connection was closed: {again:?}"
        );
    }
    h.stop().await;
}
