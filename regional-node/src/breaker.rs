//! The circuit breaker toward the core cluster.
//!
//! Closed, it counts consecutive calls that found no core node reachable; at `failures` in a row it
//! opens. Open, calls fail at once (no connection attempts piling up behind a dead cluster) until
//! `open_for` has passed; then it half-opens and lets one call through as a probe. The probe's success
//! closes it; its failure opens it for another `open_for`. Calls the core answered, even with an error,
//! count as successes: the core is there.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where the breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail at once.
    Open,
    /// One probe is in flight; other calls fail at once.
    HalfOpen,
}

impl BreakerState {
    /// 0 closed, 1 half-open, 2 open (the metric's value).
    pub fn as_gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        }
    }
}

/// A consecutive-failure circuit breaker.
#[derive(Debug)]
pub struct CircuitBreaker {
    failures: u32,
    open_for: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: BreakerState,
    consecutive: u32,
    opened_at: Instant,
    opened: u64,
}

/// Permission to call; report how the call went with [`CircuitBreaker::record`].
#[derive(Debug)]
#[must_use]
pub struct Permit {
    probe: bool,
}

impl CircuitBreaker {
    /// Opens after `failures` consecutive failures (at least 1), for `open_for`.
    pub fn new(failures: u32, open_for: Duration) -> Self {
        Self {
            failures: failures.max(1),
            open_for,
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive: 0,
                opened_at: Instant::now(),
                opened: 0,
            }),
        }
    }

    /// A permit to call, or the whole seconds until a probe will be let through.
    pub fn admit(&self) -> Result<Permit, u64> {
        self.admit_at(Instant::now())
    }

    /// [`CircuitBreaker::admit`] with `now` as the time.
    fn admit_at(&self, now: Instant) -> Result<Permit, u64> {
        let mut inner = self.lock();
        match inner.state {
            BreakerState::Closed => Ok(Permit { probe: false }),
            BreakerState::Open => {
                let waited = now.saturating_duration_since(inner.opened_at);
                if waited >= self.open_for {
                    inner.state = BreakerState::HalfOpen;
                    // From now on `opened_at` is when the probe went out.
                    inner.opened_at = now;
                    Ok(Permit { probe: true })
                } else {
                    Err((self.open_for - waited).as_secs().max(1))
                }
            }
            // A probe whose outcome never came (its caller went away, its task was dropped) must not
            // hold the breaker half-open for good: after another open period, another probe goes.
            BreakerState::HalfOpen if now.saturating_duration_since(inner.opened_at) >= self.open_for => {
                inner.opened_at = now;
                tracing::warn!("the last probe of the core never reported: probing again");
                Ok(Permit { probe: true })
            }
            BreakerState::HalfOpen => Err(1),
        }
    }

    /// How the permitted call went: `reached` is false when no core node could be reached.
    pub fn record(&self, permit: Permit, reached: bool) {
        self.record_at(permit, reached, Instant::now());
    }

    /// [`CircuitBreaker::record`] with `now` as the time.
    fn record_at(&self, permit: Permit, reached: bool, now: Instant) {
        let mut inner = self.lock();
        if reached {
            inner.consecutive = 0;
            if permit.probe || inner.state == BreakerState::HalfOpen {
                tracing::info!("core reachable again: circuit closed");
            }
            inner.state = BreakerState::Closed;
            return;
        }
        inner.consecutive = inner.consecutive.saturating_add(1);
        let trips = permit.probe || inner.consecutive >= self.failures;
        if trips && inner.state != BreakerState::Open {
            inner.state = BreakerState::Open;
            inner.opened_at = now;
            inner.opened += 1;
            tracing::warn!(failures = inner.consecutive, "core unreachable: circuit open");
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// Times the breaker has opened.
    pub fn times_opened(&self) -> u64 {
        self.lock().opened
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A breaker on a clock the test moves: `admit` and `record` at the clock's time.
    struct Clocked {
        breaker: CircuitBreaker,
        now: Instant,
    }

    impl Clocked {
        fn new(failures: u32, open_for: Duration) -> Self {
            Self { breaker: CircuitBreaker::new(failures, open_for), now: Instant::now() }
        }

        fn admit(&self) -> Result<Permit, u64> {
            self.breaker.admit_at(self.now)
        }

        fn record(&self, permit: Permit, reached: bool) {
            self.breaker.record_at(permit, reached, self.now);
        }

        fn state(&self) -> BreakerState {
            self.breaker.state()
        }

        fn times_opened(&self) -> u64 {
            self.breaker.times_opened()
        }

        /// Moves the clock on by `by`, in place of sleeping.
        fn advance(&mut self, by: Duration) {
            self.now += by;
        }
    }

    #[test]
    fn opens_after_consecutive_failures_probes_once_and_closes_on_success() {
        let mut breaker = Clocked::new(2, Duration::from_millis(50));
        let permit = breaker.admit().expect("closed");
        breaker.record(permit, false);
        let permit = breaker.admit().expect("one failure keeps it closed");
        breaker.record(permit, true);
        for _ in 0..2 {
            let permit = breaker.admit().expect("closed");
            breaker.record(permit, false);
        }
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(breaker.admit().is_err(), "open: fail fast");
        breaker.advance(Duration::from_millis(60));
        let probe = breaker.admit().expect("half-open lets one probe through");
        assert!(breaker.admit().is_err(), "only one probe at a time");
        breaker.record(probe, false);
        assert_eq!(breaker.state(), BreakerState::Open, "a failed probe opens it again");
        breaker.advance(Duration::from_millis(60));
        let probe = breaker.admit().expect("probe");
        breaker.record(probe, true);
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.times_opened(), 2);
    }

    #[test]
    fn an_abandoned_probe_does_not_hold_the_breaker_half_open() {
        let mut breaker = Clocked::new(1, Duration::from_millis(50));
        breaker.record(breaker.admit().expect("closed"), false);
        breaker.advance(Duration::from_millis(60));
        // The probe's caller disconnects: its permit is dropped unrecorded.
        drop(breaker.admit().expect("probe"));
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert!(breaker.admit().is_err(), "the probe may still be running");
        breaker.advance(Duration::from_millis(60));
        let probe = breaker.admit().expect("another probe after an open period");
        breaker.record(probe, true);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
