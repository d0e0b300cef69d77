//! What one connection is doing, for the two limits bytes on the wire cannot enforce over HTTP/2:
//!
//! - **Idle**: a connection with no request in flight for the idle time is closed, whatever its
//!   keep-alive PINGs and their ACKs say (they move bytes, so a byte-based timer never fires).
//! - **Write progress**: a response that has data for its client which the client does not take
//!   (an HTTP/2 stream whose flow-control window stays at zero, a socket nobody reads) within the
//!   write timeout closes its connection, rather than pinning its handler and what it holds.
//!
//! A request is in flight from its arrival until its response body is dropped (sent, or reset).
//! A response body "waits on the client" from the moment it is handed to the connection, and from each
//! frame it yields, until the connection asks it for more.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::Frame;

/// What a connection's watchdog should do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Requests are in flight, or it has not been idle long.
    Busy,
    /// No request in flight for the idle time: close it gracefully.
    Idle,
    /// A response has waited on its client for longer than the write timeout: drop the connection.
    Stuck,
}

/// One connection's requests in flight and response bodies.
#[derive(Debug)]
pub(super) struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `epoch` when the last request in flight ended (or the connection opened).
    idle_since_ms: AtomicU64,
    /// Each live response body's "waiting on the client since" (milliseconds since `epoch`, plus one;
    /// 0: the connection has asked it for more since its last frame).
    bodies: Mutex<Vec<Weak<AtomicU64>>>,
}

impl Activity {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            bodies: Mutex::new(Vec::new()),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// What to do with the connection now, under `idle` and `write_timeout`.
    pub(super) fn verdict(&self, idle: Duration, write_timeout: Duration) -> Verdict {
        let now = self.now_ms();
        let waited_too_long =
            |since: u64| since != 0 && now.saturating_sub(since - 1) >= millis(write_timeout);
        let stuck = {
            let mut bodies = self.bodies.lock().unwrap_or_else(PoisonError::into_inner);
            bodies.retain(|b| b.strong_count() > 0);
            bodies
                .iter()
                .filter_map(Weak::upgrade)
                .any(|since| waited_too_long(since.load(Ordering::Relaxed)))
        };
        if stuck {
            return Verdict::Stuck;
        }
        let idle_for = now.saturating_sub(self.idle_since_ms.load(Ordering::Relaxed));
        if self.in_flight.load(Ordering::Acquire) == 0 && idle_for >= millis(idle) {
            return Verdict::Idle;
        }
        Verdict::Busy
    }

    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight { activity: Arc::clone(self) }
    }

    fn track(&self) -> Arc<AtomicU64> {
        let since = Arc::new(AtomicU64::new(self.now_ms() + 1));
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&since));
        since
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One request in flight; its end when dropped.
struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.activity;
        // The time first, so a watchdog that sees the count at zero never reads an older idle start.
        activity.idle_since_ms.store(activity.now_ms(), Ordering::Relaxed);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The middleware that counts a connection's requests and watches their response bodies.
pub(super) async fn track(State(activity): State<Arc<Activity>>, request: Request, next: Next) -> Response {
    let in_flight = activity.start();
    let response = next.run(request).await;
    let since = activity.track();
    response.map(|inner| Body::new(TrackedBody { inner, since, in_flight }))
}

/// A response body that records when it last waited on its client.
struct TrackedBody {
    inner: Body,
    since: Arc<AtomicU64>,
    in_flight: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        // Asked for more: whatever it yielded before has been taken.
        this.since.store(0, Ordering::Relaxed);
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            this.since.store(this.in_flight.activity.now_ms() + 1, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_only_with_nothing_in_flight_and_stuck_only_when_a_body_waits() {
        let activity = Activity::new();
        let (idle, write) = (Duration::ZERO, Duration::from_secs(3600));
        assert_eq!(activity.verdict(idle, write), Verdict::Idle);
        let in_flight = activity.start();
        assert_eq!(activity.verdict(idle, write), Verdict::Busy, "a request in flight");
        let since = activity.track();
        assert_eq!(activity.verdict(idle, Duration::ZERO), Verdict::Stuck, "handed over, never taken");
        since.store(0, Ordering::Relaxed);
        assert_eq!(activity.verdict(idle, Duration::ZERO), Verdict::Busy, "taken");
        drop((since, in_flight));
        assert_eq!(activity.verdict(idle, Duration::ZERO), Verdict::Idle, "a dropped body waits on no one");
    }
}
