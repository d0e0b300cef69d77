//! The one deadline loop the harness and the cross-process tests wait with, in three shapes:
//! - [`poll_until`]: probe every [`POLL_INTERVAL`] until the probe returns `Some`;
//! - [`poll_every`]: the same with another pause between probes (a probe that sends a request or
//!   reads logs, or a tight timing loop);
//! - [`poll_reporting`]: the probe also says how far things are, and the failure shows the last of it.

use std::fmt::Display;
use std::ops::ControlFlow::{self, Break, Continue};
use std::time::{Duration, Instant};

/// Pause between two probes of [`poll_until`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `probe` until it returns `Some`, or fails once `timeout` has passed since the first call,
/// naming `what` it waited for. `probe` is called at least once; an error from it ends the wait.
pub fn poll_until<T>(
    timeout: Duration,
    what: &str,
    probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    poll_every(POLL_INTERVAL, timeout, what, probe)
}

/// [`poll_until`] with `interval` between two probes.
pub fn poll_every<T>(
    interval: Duration,
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    poll(interval, timeout, || Ok(probe()?.map_or(Continue(()), Break)))?
        .map_err(|()| anyhow::anyhow!("{what}: not within {timeout:?}"))
}

/// [`poll_every`] for a probe that reports what it saw: `Break(value)` ends the wait, `Continue(seen)`
/// goes on, and the failure after `timeout` ends with the last `seen`.
pub fn poll_reporting<T, S: Display>(
    interval: Duration,
    timeout: Duration,
    what: &str,
    probe: impl FnMut() -> anyhow::Result<ControlFlow<T, S>>,
) -> anyhow::Result<T> {
    poll(interval, timeout, probe)?
        .map_err(|seen| anyhow::anyhow!("{what}: not within {timeout:?}; last seen: {seen}"))
}

/// The loop: `Ok(Ok(value))` when `probe` breaks, `Ok(Err(seen))` with its last `Continue` after `timeout`.
fn poll<T, S>(
    interval: Duration,
    timeout: Duration,
    mut probe: impl FnMut() -> anyhow::Result<ControlFlow<T, S>>,
) -> anyhow::Result<Result<T, S>> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe()? {
            Break(value) => return Ok(Ok(value)),
            Continue(seen) if Instant::now() >= deadline => return Ok(Err(seen)),
            Continue(_) => std::thread::sleep(interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_first_value_and_fails_after_the_deadline() {
        let mut calls = 0;
        let value = poll_until(Duration::from_secs(5), "the third call", || {
            calls += 1;
            Ok((calls == 3).then_some(calls))
        })
        .expect("a value");
        assert_eq!(value, 3);
        let err = poll_until(Duration::from_millis(60), "never", || Ok(None::<()>)).expect_err("times out");
        assert!(err.to_string().contains("never"), "{err}");
    }

    #[test]
    fn probes_at_least_once_and_passes_a_probe_error_on() {
        let mut calls = 0;
        let value = poll_until(Duration::ZERO, "the first call", || {
            calls += 1;
            Ok(Some(calls))
        })
        .expect("a value");
        assert_eq!(value, 1);
        let err = poll_until(Duration::from_secs(5), "a failing probe", || -> anyhow::Result<Option<()>> {
            anyhow::bail!("the process exited")
        })
        .expect_err("the probe's error");
        assert_eq!(err.to_string(), "the process exited");
    }

    #[test]
    fn poll_every_waits_its_interval_between_probes() {
        let started = Instant::now();
        let mut calls = 0;
        poll_every(Duration::from_millis(30), Duration::from_secs(5), "the third call", || {
            calls += 1;
            Ok((calls == 3).then_some(()))
        })
        .expect("a value");
        assert!(started.elapsed() >= Duration::from_millis(60), "{:?}", started.elapsed());
        let err = poll_every(Duration::from_millis(1), Duration::from_millis(20), "never", || Ok(None::<()>))
            .expect_err("times out");
        assert!(err.to_string().starts_with("never: not within"), "{err}");
    }

    #[test]
    fn poll_reporting_names_the_last_thing_it_saw() {
        let mut calls = 0;
        let value = poll_reporting(Duration::from_millis(1), Duration::from_secs(5), "two calls", || {
            calls += 1;
            Ok(if calls == 2 { Break("done") } else { Continue(calls) })
        })
        .expect("a value");
        assert_eq!(value, "done");
        let mut seen = 0;
        let err = poll_reporting(Duration::from_millis(1), Duration::from_millis(20), "never", || {
            seen += 1;
            Ok(Continue::<(), _>(format!("call {seen}")))
        })
        .expect_err("times out");
        assert!(err.to_string().ends_with(&format!("last seen: call {seen}")), "{err}");
    }
}
