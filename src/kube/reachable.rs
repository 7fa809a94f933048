//! Whether the API server answers this process, so that watches waiting out
//! a backoff retry as soon as it is back.
//!
//! While kube-apiserver restarts (64 s at 1,000 CRDs), every watcher fails
//! and backs off, doubling up to 30 s plus up to 100 % jitter. When the
//! server was ready again, most watchers were still asleep: every kind was
//! watched again only 117 s later (BENCHMARKS.md, "The controller at
//! 100,000 MRs"). The client's stack ([`answers_layer`]) sees every
//! response; the first success after a transport failure or a 503 is a
//! recovery, and [`recoveries`] wakes the sleeping watchers
//! (`retry::backoff_on_failure`). They then list one by one behind the
//! collection-read limit (`list_limit`), not all at once.
//!
//! One signal per process: every client of the process talks to the same
//! API server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use hyper::http;
use tokio::sync::watch;

/// Recoveries closer together than this are one: a server that flaps while
/// it starts must not wake every watcher on every answer.
const SETTLE: Duration = Duration::from_secs(2);

struct Signal {
    down: AtomicBool,
    tx: watch::Sender<u64>,
    last: Mutex<Option<Instant>>,
}

impl Signal {
    fn new() -> Self {
        Self {
            down: AtomicBool::new(false),
            tx: watch::channel(0).0,
            last: Mutex::new(None),
        }
    }

    /// A request failed in a way that says the server is not there.
    fn saw_failure(&self) {
        self.down.store(true, Ordering::SeqCst);
    }

    /// The server answered a request successfully.
    fn saw_answer(&self) {
        if !self.down.load(Ordering::SeqCst) {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < SETTLE) {
            // Still down as far as the next answer is concerned.
            return;
        }
        if self.down.swap(false, Ordering::SeqCst) {
            *last = Some(Instant::now());
            self.tx.send_modify(|n| *n += 1);
            tracing::debug!("the API server answers again: waking the watches' backoffs");
        }
    }
}

fn global() -> &'static Signal {
    static SIGNAL: OnceLock<Signal> = OnceLock::new();
    SIGNAL.get_or_init(Signal::new)
}

/// Changes on every recovery of the API server.
pub(crate) fn recoveries() -> watch::Receiver<u64> {
    global().tx.subscribe()
}

/// One response, or the failure to get one.
type Answered<R, E> = Result<http::Response<R>, E>;

/// A [`tower::Layer`] that reports what the API server's answers say of
/// it to the process's signal ([`recoveries`]).
pub(crate) fn answers_layer<R, E>(
) -> tower::util::MapResultLayer<impl FnOnce(Answered<R, E>) -> Answered<R, E> + Clone> {
    observe_answers(global())
}

fn observe_answers<R, E>(
    signal: &'static Signal,
) -> tower::util::MapResultLayer<impl FnOnce(Answered<R, E>) -> Answered<R, E> + Clone> {
    tower::util::MapResultLayer::new(move |r: Answered<R, E>| {
        match &r {
            Err(_) => signal.saw_failure(),
            Ok(resp) if resp.status() == http::StatusCode::SERVICE_UNAVAILABLE => {
                signal.saw_failure()
            }
            Ok(resp) if resp.status().is_success() => signal.saw_answer(),
            Ok(_) => {}
        }
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    /// A failure then an answer is one recovery; answers alone are none;
    /// a second recovery within [`SETTLE`] waits for an answer after it.
    #[tokio::test]
    async fn a_success_after_a_failure_is_a_recovery() {
        let signal: &'static Signal = Box::leak(Box::new(Signal::new()));
        let mut rx = signal.tx.subscribe();
        let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(200));
        let s = status.clone();
        let mut svc =
            observe_answers(signal).layer(tower::service_fn(move |_req: http::Request<()>| {
                let code = s.load(Ordering::SeqCst);
                async move {
                    if code == 0 {
                        return Err("connection refused");
                    }
                    Ok(http::Response::builder().status(code).body(()).unwrap())
                }
            }));
        let mut call = async |code: u16| {
            status.store(code, Ordering::SeqCst);
            let req = http::Request::get("/apis").body(()).unwrap();
            let _ = svc.ready().await.unwrap().call(req).await;
        };
        call(200).await;
        assert!(!rx.has_changed().unwrap(), "no failure, no recovery");
        call(0).await;
        call(404).await;
        assert!(
            !rx.has_changed().unwrap(),
            "a 404 is not an answer that counts"
        );
        call(200).await;
        assert!(rx.has_changed().unwrap());
        let _ = rx.borrow_and_update();
        // Flapping at once: the next recovery waits SETTLE.
        call(503).await;
        call(200).await;
        assert!(!rx.has_changed().unwrap());
        *signal.last.lock().unwrap() = Some(Instant::now() - SETTLE);
        call(200).await;
        assert!(
            rx.has_changed().unwrap(),
            "the answer after SETTLE recovers"
        );
    }
}
