//! A backend's circuit breaker: after [`FAILURES_TO_OPEN`] failed calls in a row it opens, and an open
//! backend gets no generation until [`OPEN_FOR`] has passed (then it is half-open: a generation that
//! fails opens it again). A successful generation closes it; a health probe's answer does not (a
//! server may answer its health check and fail every generation). A busy server (429) is not failing
//! and does not count.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed calls in a row that open the breaker.
pub const FAILURES_TO_OPEN: u32 = 3;
/// How long an open breaker keeps generations away.
pub const OPEN_FOR: Duration = Duration::from_secs(5);

/// One backend's breaker.
#[derive(Debug, Default)]
pub struct Breaker {
    failures_in_a_row: AtomicU32,
    open_until: Mutex<Option<Instant>>,
}

impl Breaker {
    /// Whether a generation may go to the backend at `now`.
    pub fn admits(&self, now: Instant) -> bool {
        self.open_until.lock().map(|until| until.is_none_or(|until| now >= until)).unwrap_or(true)
    }

    /// Whether the breaker is open at `now`.
    pub fn is_open(&self, now: Instant) -> bool {
        !self.admits(now)
    }

    /// A call succeeded (or a probe answered): closed.
    pub fn record_success(&self) {
        self.failures_in_a_row.store(0, Ordering::Relaxed);
        if let Ok(mut until) = self.open_until.lock() {
            *until = None;
        }
    }

    /// A call failed at `now`: open once enough have in a row (again, after a failed half-open try).
    pub fn record_failure(&self, now: Instant) {
        let failures = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= FAILURES_TO_OPEN {
            if let Ok(mut until) = self.open_until.lock() {
                *until = Some(now + OPEN_FOR);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_failures_in_a_row_half_opens_later_and_closes_on_success() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        breaker.record_failure(t0);
        breaker.record_failure(t0);
        assert!(breaker.admits(t0), "two failures leave it closed");
        breaker.record_failure(t0);
        assert!(breaker.is_open(t0 + Duration::from_secs(1)));
        assert!(breaker.admits(t0 + OPEN_FOR), "half-open: one try may go");
        breaker.record_failure(t0 + OPEN_FOR);
        assert!(breaker.is_open(t0 + OPEN_FOR + Duration::from_secs(1)), "the failed try opens it again");
        breaker.record_success();
        assert!(breaker.admits(t0 + OPEN_FOR + Duration::from_secs(1)));
        breaker.record_failure(t0);
        assert!(breaker.admits(t0), "a success started the count again");
    }
}
