//! A mock API server for the controller's unit tests, on kube's mock
//! service (`tower-test`), in the style of kube-rs' own tests: every request
//! is recorded and answered by a test-supplied function; watches stay open
//! and take events pushed by the test.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::{Request, Response};
use jiff::Timestamp;
use kube::client::Body;
use serde_json::{json, Value};
use tokio::sync::Notify;

type RespBody = BoxBody<Bytes, Infallible>;
type Frames = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

/// One request as the API server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: String,
    pub(crate) content_type: String,
    pub(crate) body: Value,
}

pub(crate) enum Reply {
    Json(u16, Value),
    /// Never answered, like a watch with nothing to say.
    Hang,
    /// A watch that sends these events and stays open for more.
    Watch(Vec<Value>),
}

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    watches: Vec<(String, Frames)>,
}

#[derive(Clone)]
pub(crate) struct MockApi {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

/// A Status body as the API server sends with errors.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

pub(crate) fn client<F>(mut respond: F) -> (kube::Client, MockApi)
where
    F: FnMut(&Recorded) -> Reply + Send + 'static,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<RespBody>>();
    let api = MockApi {
        state: Arc::new(Mutex::new(State::default())),
        changed: Arc::new(Notify::new()),
    };
    let shared = api.clone();
    tokio::spawn(async move {
        let mut hanging = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let header = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            };
            let rec = Recorded {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or("").to_string(),
                content_type: header("content-type"),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let reply = respond(&rec);
            let path = rec.path.clone();
            shared.state.lock().unwrap().requests.push(rec);
            match reply {
                Reply::Json(code, v) => {
                    let body = Full::new(Bytes::from(v.to_string())).boxed();
                    let resp = Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap();
                    send.send_response(resp);
                }
                Reply::Hang => hanging.push(send),
                Reply::Watch(events) => {
                    let (tx, rx) = mpsc::unbounded();
                    for e in events {
                        let _ = tx.unbounded_send(Ok(Frame::data(Bytes::from(format!("{e}\n")))));
                    }
                    shared.state.lock().unwrap().watches.push((path, tx));
                    let resp = Response::builder()
                        .status(200)
                        .body(StreamBody::new(rx).boxed())
                        .unwrap();
                    send.send_response(resp);
                }
            }
            shared.changed.notify_waiters();
        }
    });
    (kube::Client::new(service, "default"), api)
}

impl MockApi {
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Every request that is not a GET.
    pub(crate) fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    /// Waits until `pred` holds for the recorded requests; panics after 10 s.
    pub(crate) async fn wait_for(
        &self,
        what: &str,
        pred: impl Fn(&[Recorded]) -> bool,
    ) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.changed.notified();
            {
                let reqs = self.requests();
                if pred(&reqs) {
                    return reqs;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "timed out waiting for {what}; requests: {:#?}",
                    self.requests()
                );
            }
        }
    }

    /// Sends a watch event on every open watch whose path contains `path`.
    pub(crate) fn push(&self, path: &str, event_type: &str, object: Value) -> usize {
        let line = json!({"type": event_type, "object": object});
        let mut state = self.state.lock().unwrap();
        state.watches.retain(|(_, tx)| !tx.is_closed());
        let mut sent = 0;
        for (p, tx) in &state.watches {
            if p.contains(path)
                && tx
                    .unbounded_send(Ok(Frame::data(Bytes::from(format!("{line}\n")))))
                    .is_ok()
            {
                sent += 1;
            }
        }
        sent
    }

    /// Waits until a watch on `path` is open.
    pub(crate) async fn wait_watch(&self, path: &str) {
        self.wait_for(&format!("a watch on {path}"), |r| {
            r.iter()
                .any(|r| r.path.contains(path) && r.query.contains("watch=true"))
        })
        .await;
    }
}

/// A list response as the API server sends it.
pub(crate) fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "100"}, "items": items})
}

/// The answer to a request for CRDs (`None` for any other): a list of
/// `items`, or a watch that stays open for events the test pushes.
pub(crate) fn crds_reply(r: &Recorded, items: &[Value]) -> Option<Reply> {
    if !r.path.contains("customresourcedefinitions") {
        return None;
    }
    Some(if r.query.contains("watch=true") {
        Reply::Watch(vec![])
    } else {
        Reply::Json(
            200,
            list(
                "CustomResourceDefinitionList",
                "apiextensions.k8s.io/v1",
                items.to_vec(),
            ),
        )
    })
}

/// A clock the test moves by hand.
pub(crate) struct ManualClock(Mutex<Timestamp>);

impl ManualClock {
    pub(crate) fn new(t: Timestamp) -> Self {
        Self(Mutex::new(t))
    }

    pub(crate) fn advance(&self, d: Duration) {
        let mut t = self.0.lock().unwrap();
        *t += jiff::SignedDuration::try_from(d).unwrap();
    }
}

impl super::api::Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}
