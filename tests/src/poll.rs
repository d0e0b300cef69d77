//! [`poll_until`]: the one deadline loop the cross-process tests wait with.

use std::time::{Duration, Instant};

/// Pause between two polls.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `probe` until it returns `Some`, or fails once `timeout` has passed since the first call,
/// naming `what` it waited for. `probe` is called at least once.
pub fn poll_until<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{what}: not within {timeout:?}");
        }
        std::thread::sleep(POLL_INTERVAL);
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
}
