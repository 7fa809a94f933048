//! Read deadlines per connection, kept by wrapping the TLS stream, because
//! hyper's own HTTP/1.1 header timeout also runs while a keep-alive
//! connection waits idle (closing pooled connections after a second, which
//! races with clients reusing them) and hyper has none for HTTP/2.
//!
//! - Waiting for a request, nothing arrived yet: the idle deadline (long).
//! - A request's first bytes arrived: the whole head must follow within the
//!   header deadline, however slowly it trickles.
//! - A request is being served: no deadline here; the handler's request
//!   timeout bounds the body.
//!
//! The first request on a connection must start within the header deadline.
//! On HTTP/2 the guard ends once the first request has started: streams
//! are multiplexed and keep-alive pings find dead peers.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Requests in flight on one connection, shared with its service.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    started: AtomicUsize,
}

impl Activity {
    /// Marks a request as started until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Between requests, nothing read yet; cut at the instant.
    Idle(Instant),
    /// Part of a request head read; cut at the instant.
    Head(Instant),
    Serving,
    /// HTTP/2 after its first request: no deadlines.
    Off,
}

pub(crate) struct Guarded<S> {
    inner: S,
    activity: Arc<Activity>,
    phase: Phase,
    timer: Pin<Box<Sleep>>,
    header_timeout: Duration,
    idle_timeout: Duration,
    h2: bool,
}

impl<S> Guarded<S> {
    pub(crate) fn new(
        inner: S,
        activity: Arc<Activity>,
        header_timeout: Duration,
        idle_timeout: Duration,
        h2: bool,
    ) -> Self {
        let first = Instant::now() + header_timeout;
        Self {
            inner,
            activity,
            phase: Phase::Head(first),
            timer: Box::pin(tokio::time::sleep_until(first)),
            header_timeout,
            idle_timeout,
            h2,
        }
    }

    fn timed_out(&self) -> io::Error {
        let what = match self.phase {
            Phase::Idle(_) => "the connection was idle too long",
            _ => "the request head did not arrive in time",
        };
        io::Error::new(io::ErrorKind::TimedOut, what)
    }

    /// Moves the phase on from what the service reports.
    fn update(&mut self) {
        if matches!(self.phase, Phase::Off) {
            return;
        }
        if self.activity.in_flight.load(Ordering::Acquire) > 0 {
            self.phase = if self.h2 { Phase::Off } else { Phase::Serving };
        } else if matches!(self.phase, Phase::Serving) {
            self.phase = Phase::Idle(Instant::now() + self.idle_timeout);
        } else if self.h2 && self.activity.started.load(Ordering::Acquire) > 0 {
            self.phase = Phase::Off;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.update();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let deadline = match (this.phase, &polled) {
            (Phase::Serving | Phase::Off, _) => return polled,
            (_, Poll::Ready(Err(_))) => return polled,
            (Phase::Idle(_), Poll::Ready(Ok(()))) if buf.filled().len() > before => {
                let d = Instant::now() + this.header_timeout;
                this.phase = Phase::Head(d);
                d
            }
            (Phase::Idle(d) | Phase::Head(d), _) => d,
        };
        if Instant::now() >= deadline {
            return Poll::Ready(Err(this.timed_out()));
        }
        if polled.is_pending() {
            if this.timer.deadline() != deadline {
                this.timer.as_mut().reset(deadline);
            }
            if this.timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(this.timed_out()));
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const HEAD: Duration = Duration::from_millis(200);
    const IDLE: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_cut_at_the_header_deadline() {
        let (client, server) = tokio::io::duplex(64);
        let mut g = Guarded::new(server, Arc::default(), HEAD, IDLE, false);
        let mut buf = [0u8; 8];
        let err = g.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(client);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_between_requests_gets_the_idle_deadline_and_heads_the_header_one() {
        let (mut client, server) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut g = Guarded::new(server, activity.clone(), HEAD, IDLE, false);
        let mut buf = [0u8; 8];
        client.write_all(b"GET").await.unwrap();
        assert_eq!(g.read(&mut buf).await.unwrap(), 3);
        // A request is served, then the connection waits far longer than
        // the header deadline without being cut.
        let req = activity.begin();
        client.write_all(b"body").await.unwrap();
        assert_eq!(g.read(&mut buf).await.unwrap(), 4);
        drop(req);
        let waited = tokio::time::timeout(IDLE / 2, g.read(&mut buf)).await;
        assert!(waited.is_err(), "cut while idle: {waited:?}");
        // The next head starts and trickles: cut at the header deadline.
        let trickle = async {
            loop {
                client.write_all(b"x").await.unwrap();
                tokio::time::sleep(HEAD / 4).await;
            }
        };
        let read = async {
            loop {
                if let Err(e) = g.read(&mut buf).await {
                    return e;
                }
            }
        };
        let err = tokio::select! { e = read => e, _ = trickle => unreachable!() };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_cut_at_the_idle_deadline() {
        let (mut client, server) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut g = Guarded::new(server, activity.clone(), HEAD, IDLE, false);
        let mut buf = [0u8; 8];
        let req = activity.begin();
        client.write_all(b"GET").await.unwrap();
        assert_eq!(g.read(&mut buf).await.unwrap(), 3);
        drop(req);
        let started = Instant::now();
        let err = g.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn http2_is_unguarded_after_its_first_request() {
        let (mut client, server) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut g = Guarded::new(server, activity.clone(), HEAD, IDLE, true);
        let mut buf = [0u8; 8];
        drop(activity.begin());
        let waited = tokio::time::timeout(IDLE * 3, g.read(&mut buf)).await;
        assert!(waited.is_err(), "an HTTP/2 connection was cut: {waited:?}");
        client.write_all(b"PING").await.unwrap();
        assert_eq!(g.read(&mut buf).await.unwrap(), 4);
    }
}
