//! Retrying watches without flooding the log or the API server.
//!
//! kube's watcher emits `Event::Init` before every (re)list, and kube's
//! `StreamBackoff` resets its backoff on every `Ok` item, so a list that
//! fails every time (a 403 on an MR kind the chart's RBAC does not cover)
//! was retried about once a second forever, and a latch that reset on any
//! `Ok` logged the error and a false "watch recovered" each time (measured
//! against a real API server: 340 KB of log in 3 minutes). Here the backoff
//! (kube's client-go-like default: 0.8 s doubling to 30 s, jittered) and the
//! log latch reset only when a list or watch really delivered something.
//! The backoff is any kube-runtime [`Backoff`], the controller's one
//! ([`api::Backoff`]) in its watch flavour; unlike kube's `StreamBackoff`,
//! the sleep ends when the API server recovers (`reachable`), and, as
//! there, a backoff that gives up ends the stream.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;

use super::api::{self, KubeError};
use crate::metrics::controller::ControllerMetrics;

/// Whether a watcher item shows that the API server answered a list or a
/// watch. `Init` is only the watcher announcing a (re)list it has not made
/// yet.
pub(crate) fn watcher_progress<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(item, Ok(e) if !matches!(e, watcher::Event::Init))
}

/// kube's watch timeout (`timeoutSeconds`), the longest a watch lasts.
const WATCH_TIMEOUT_MAX: u32 = 290;

/// A watcher's configuration, with its own watch timeout drawn from
/// [`WATCH_TIMEOUT_MAX`]/2 to [`WATCH_TIMEOUT_MAX`] s. kube-runtime sends
/// every watch 290 s: watches that start together (after an API-server
/// restart, or a provider family installed) end and are renewed together
/// every 290 s, and at 100,000 MRs one minute saw 765 watch requests and
/// the minute before none (BENCHMARKS.md). client-go's reflectors draw
/// each watch's timeout from 5 to 10 minutes for the same reason;
/// kube-runtime fixes it per watcher, so it is drawn per watcher.
pub(crate) fn watch_config() -> watcher::Config {
    let min = WATCH_TIMEOUT_MAX / 2;
    watcher::Config::default().timeout(fastrand::u32(min..=WATCH_TIMEOUT_MAX))
}

/// Waits out a backoff after every error of `stream`: the delay grows
/// across relists and resets only on items for which `progress` is true.
/// A sleeping stream wakes early when the API server recovers
/// (`reachable`): after a restart the watches are back within seconds of
/// the server, not after up to 60 s of backoff each.
/// `wait` says which items are failures to wait after (errors, usually).
pub(crate) fn backoff_on_failure<S, T, E>(
    stream: S,
    progress: fn(&Result<T, E>) -> bool,
    wait: fn(&Result<T, E>) -> bool,
) -> impl Stream<Item = Result<T, E>> + Send
where
    S: Stream<Item = Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    backoff_until_recovery(
        stream,
        progress,
        wait,
        api::Backoff::for_watches(),
        super::reachable::recoveries(),
    )
}

/// [`backoff_on_failure`] woken by `recoveries`.
fn backoff_until_recovery<S, T, E, B>(
    stream: S,
    progress: fn(&Result<T, E>) -> bool,
    wait: fn(&Result<T, E>) -> bool,
    backoff: B,
    recoveries: tokio::sync::watch::Receiver<u64>,
) -> impl Stream<Item = Result<T, E>> + Send
where
    S: Stream<Item = Result<T, E>> + Send,
    T: Send,
    E: Send,
    B: Backoff,
{
    struct State<S, B> {
        inner: std::pin::Pin<Box<S>>,
        backoff: B,
        wait: Option<Duration>,
        gave_up: bool,
        recoveries: tokio::sync::watch::Receiver<u64>,
    }
    let state = State {
        inner: Box::pin(stream),
        backoff,
        wait: None,
        gave_up: false,
        recoveries,
    };
    futures::stream::unfold(state, move |mut st| async move {
        if st.gave_up {
            return None;
        }
        if let Some(d) = st.wait.take() {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                // The backoff starts over: a server that answers a Lease
                // request may not serve every kind yet (404s and 503s for
                // a few seconds after a restart), and the grown delay made
                // those retries wait 25-50 s more (measured at 1,000 kinds:
                // every kind watched 35-54 s after the server was ready).
                Ok(()) = st.recoveries.changed() => st.backoff.reset(),
            }
        }
        let item = st.inner.next().await?;
        if progress(&item) {
            st.backoff.reset();
        }
        if wait(&item) {
            // A backoff that gives up ends the stream after this item, as
            // kube's does.
            match st.backoff.next() {
                Some(d) => st.wait = Some(d),
                None => st.gave_up = true,
            }
            // Only a recovery after this failure ends the wait early.
            st.recoveries.borrow_and_update();
        }
        Some((item, st))
    })
}

/// A watcher stream with [`backoff_on_failure`]. An expired watch (410
/// Gone: after an API-server restart, every watch) counts as progress, as
/// the server answered: its relist waits the shortest step, not the delay
/// that grew while the server was away. An event that did not decode is
/// progress too, and is not waited after: the watch is fine, and waiting
/// after each made it read one event per backoff step (measured: a burst
/// of 1,000 new CRDs, each first seen with `conditions: null`, which the
/// CRD view did not decode, held the coverage for minutes).
pub(crate) fn backoff_watcher<K: Send, S>(
    stream: S,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    backoff_on_failure(
        stream,
        |item| {
            watcher_progress(item)
                || undecoded_event(item)
                || matches!(item, Err(watcher::Error::WatchError(s)) if s.code == 410)
        },
        |item| item.is_err() && !undecoded_event(item),
    )
}

/// An item that is a watch event kube-client could not decode
/// ([`super::api::undecoded`]).
pub(crate) fn undecoded_event<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    item.as_ref().err().is_some_and(super::api::undecoded)
}

/// Logs a watch's failure once per failure streak: the first error of a
/// streak is logged (an RBAC denial at error level, naming verb and
/// resource), the rest are only counted, and "recovered" is logged when the
/// API server answers again.
#[derive(Debug, Default)]
pub(crate) struct ErrorOnce {
    failing: bool,
}

impl ErrorOnce {
    /// Records a failure. Returns whether it was logged.
    pub(crate) fn failed(
        &mut self,
        e: &KubeError,
        metrics: Option<&ControllerMetrics>,
        what: &str,
    ) -> bool {
        if let (true, KubeError::Api { resource, .. }) = (e.is_expired(), e) {
            // The watch's resourceVersion fell out of the API server's
            // window (410 Gone): the watcher lists again. Expected, so
            // counted apart and not a failure streak.
            if let Some(m) = metrics {
                m.watch_restarts.with_label_values(&[resource]).inc();
            }
            tracing::debug!(error = %e, "{what}: the watch expired; listing again");
            return false;
        }
        if self.failing {
            e.count(metrics);
            tracing::debug!(error = %e, "{what} (still failing)");
            return false;
        }
        e.log(metrics, what);
        self.failing = true;
        true
    }

    /// Records that the API server answered. Returns whether a failure
    /// streak ended.
    pub(crate) fn ok(&mut self, what: &str) -> bool {
        if std::mem::take(&mut self.failing) {
            tracing::info!("{what}: recovered");
            return true;
        }
        false
    }

    #[cfg(test)]
    pub(crate) fn failing(&self) -> bool {
        self.failing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, list, status, Reply};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Each watcher's timeout is its own, within kube's 290 s: watchers
    /// started together spread their renewals over 145 s.
    #[test]
    fn watch_timeouts_are_drawn_per_watcher() {
        let timeouts: Vec<u32> = (0..1000)
            .map(|_| watch_config().timeout.expect("a timeout is set"))
            .collect();
        assert!(timeouts.iter().all(|t| (145..=290).contains(t)));
        let distinct: std::collections::BTreeSet<_> = timeouts.iter().collect();
        // 146 values, 1,000 draws: every value is all but certain.
        assert!(distinct.len() > 120, "{distinct:?}");
        let mean = timeouts.iter().map(|&t| f64::from(t)).sum::<f64>() / 1000.0;
        assert!((200.0..235.0).contains(&mean), "{mean}");
    }

    /// Events that do not decode leave the watch healthy: no wait after
    /// them (paused clock: 100 of them took 100 backoff steps before).
    #[tokio::test(start_paused = true)]
    async fn undecodable_events_are_not_waited_after() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({})).unwrap();
        let items = (0..100).map(move |_| {
            Err::<watcher::Event<()>, _>(watcher::Error::WatchFailed(kube::Error::Api(Box::new(
                status.clone(),
            ))))
        });
        let start = tokio::time::Instant::now();
        let mut s = Box::pin(backoff_watcher(futures::stream::iter(items)));
        let mut n = 0;
        while let Some(item) = s.next().await {
            assert!(undecoded_event(&item));
            n += 1;
        }
        assert_eq!(n, 100);
        assert!(
            start.elapsed() < Duration::from_millis(1),
            "{:?}",
            start.elapsed()
        );
    }

    /// A forbidden list, then (from the fifth try on) an allowed one:
    /// returns the virtual times of the list calls.
    async fn list_times(stream_backoff: bool) -> Vec<Duration> {
        let start = tokio::time::Instant::now();
        let times = Arc::new(Mutex::new(Vec::new()));
        let t = times.clone();
        let (client, _api) = mock::client(move |r| {
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            let mut t = t.lock().unwrap();
            t.push(start.elapsed());
            if t.len() < 6 {
                Reply::Json(403, status(403, "Forbidden", "configmaps is forbidden"))
            } else {
                Reply::Json(200, list("ConfigMapList", "v1", vec![]))
            }
        });
        let api: Api<ConfigMap> = Api::all(client);
        let w = watcher(api, watcher::Config::default());
        let mut s = if stream_backoff {
            backoff_watcher(w).boxed()
        } else {
            // What the controller did before: kube's default_backoff,
            // which resets on the Init that precedes every relist.
            kube::runtime::WatchStreamExt::default_backoff(w).boxed()
        };
        let mut latch = ErrorOnce::default();
        let (mut logged, mut recovered) = (0, 0);
        while let Some(item) = s.next().await {
            match &item {
                Err(_) => {
                    let e = KubeError::Setup("forbidden".into());
                    logged += usize::from(latch.failed(&e, None, "watch"));
                }
                Ok(_) if watcher_progress(&item) => {
                    recovered += usize::from(latch.ok("watch"));
                    if matches!(item, Ok(watcher::Event::InitDone)) {
                        break;
                    }
                }
                Ok(_) => {}
            }
        }
        if stream_backoff {
            assert_eq!((logged, recovered), (1, 1), "one streak, logged once");
        }
        let t = times.lock().unwrap().clone();
        t
    }

    use kube::runtime::watcher::watcher;

    /// The backoff between failed lists doubles across
    /// relists (0.8 s, 1.6 s, … each with up to 100% jitter) instead of
    /// restarting at 0.8 s after every `Init`.
    #[tokio::test(start_paused = true)]
    async fn the_backoff_grows_across_relists_and_the_error_is_logged_once() {
        let t = list_times(true).await;
        assert_eq!(t.len(), 6, "{t:?}");
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        // Attempt k waits in [0.8·2^(k-1), 1.6·2^(k-1)).
        for (k, g) in gaps.iter().enumerate() {
            let min = 0.8 * f64::from(1 << k);
            assert!(
                *g >= min * 0.99 && *g < min * 2.01,
                "gap {k}: {g} s of {gaps:?}"
            );
        }

        // The old wiring, for contrast: never more than 1.6 s apart.
        let t = list_times(false).await;
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        assert!(gaps.iter().all(|g| *g < 1.61), "{gaps:?}");
    }

    /// A stream asleep in its backoff retries when the API server
    /// recovers, not when the delay is over, and starts its backoff over;
    /// a recovery before the failure does not cut the wait short.
    #[tokio::test(start_paused = true)]
    async fn a_recovery_ends_the_backoff() {
        let start = tokio::time::Instant::now();
        let polled = Arc::new(Mutex::new(Vec::new()));
        let p = polled.clone();
        let failures = futures::stream::repeat_with(move || {
            p.lock().unwrap().push(start.elapsed());
            Err::<(), ()>(())
        });
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let mut s = Box::pin(backoff_until_recovery(
            failures,
            |_| false,
            Result::is_err,
            api::Backoff::for_watches(),
            rx,
        ));
        // A recovery before the failures is old news: six failures wait
        // 0.8 + 1.6 + 3.2 + 6.4 + 12.8 s at least.
        tx.send_modify(|n| *n += 1);
        for _ in 0..6 {
            s.next().await;
        }
        let failed_at = start.elapsed();
        assert!(failed_at >= Duration::from_millis(24_800), "{failed_at:?}");
        // Asleep (25.6 s or more) when the server comes back after 3 s.
        let wake = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            tx.send_modify(|n| *n += 1);
            tx
        });
        s.next().await;
        let retried = start.elapsed() - failed_at;
        assert!(
            retried >= Duration::from_secs(3) && retried < Duration::from_millis(3100),
            "retried {retried:?} after the failure, not when the server recovered (3 s)"
        );
        assert_eq!(polled.lock().unwrap().len(), 7);
        // Still failing after the recovery: the backoff started over.
        s.next().await;
        let again = start.elapsed() - failed_at - retried;
        assert!(
            again >= Duration::from_millis(800) && again < Duration::from_millis(1600),
            "after a recovery the next retry waits the shortest step, not {again:?}"
        );
        drop(wake);
    }

    /// A 410 Gone is a watch restart, counted apart, never a logged
    /// failure nor the start of a failure streak.
    #[test]
    fn an_expired_watch_is_counted_not_logged() {
        let registry = prometheus::Registry::new();
        let m = ControllerMetrics::register(&registry).unwrap();
        let gone = KubeError::Api {
            verb: "watch",
            resource: "secrets".into(),
            object: "x".into(),
            source: Box::new(kube::Error::Api(Box::new(
                kube::core::Status::failure("too old", "Expired").with_code(410),
            ))),
        };
        let mut l = ErrorOnce::default();
        assert!(!l.failed(&gone, Some(&m), "w"));
        assert!(!l.failing());
        assert_eq!(m.watch_restarts.with_label_values(&["secrets"]).get(), 1);
        assert_eq!(
            m.api_errors
                .with_label_values(&["watch", "secrets", "410"])
                .get(),
            0
        );
    }

    #[test]
    fn error_once_logs_once_per_streak() {
        let mut l = ErrorOnce::default();
        let e = KubeError::Setup("x".into());
        assert!(l.failed(&e, None, "w"));
        assert!(!l.failed(&e, None, "w"));
        assert!(l.failing());
        assert!(l.ok("w"));
        assert!(!l.ok("w"));
        assert!(l.failed(&e, None, "w"));
    }
}
