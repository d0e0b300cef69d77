//! A closed-loop load generator: N tasks, each issuing one operation after another for a fixed time, with
//! the latency of every operation recorded. The same generator drives every system a suite compares, so
//! that the client is never the difference being measured.

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

/// What one closed-loop run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Concurrent clients (tasks) that ran.
    pub clients: usize,
    /// Operations that succeeded.
    pub ops: u64,
    /// Operations that failed (not counted in `ops` nor in the latencies).
    pub errors: u64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
    /// Wall time from the start of the first task to the end of the last.
    pub elapsed: Duration,
    /// Latencies of the successful operations, sorted ascending.
    pub latencies: Vec<Duration>,
}

impl LoadResult {
    /// Successful operations per second.
    pub fn ops_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }

    /// The latency at quantile `q` (0..=1) in milliseconds; 0 when nothing succeeded.
    pub fn percentile_ms(&self, q: f64) -> f64 {
        percentile(&self.latencies, q).as_secs_f64() * 1000.0
    }

    /// One line for a person: clients, ops/s, p50, p99, errors.
    pub fn summary(&self) -> String {
        format!(
            "{} clients: {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
            self.clients,
            self.ops_per_s(),
            self.percentile_ms(0.5),
            self.percentile_ms(0.99),
            self.errors
        )
    }
}

/// The value at quantile `q` of an ascending slice (nearest rank); zero when empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

/// Runs `clients` tasks for `duration`, or until `stop` is set; task `c` calls `op(c, seq)` with `seq` = 0,
/// 1, 2... and waits for each call before the next. Operations started before the end are let finish.
pub async fn closed_loop<F, Fut, E>(
    clients: usize,
    duration: Duration,
    stop: &'static AtomicBool,
    op: F,
) -> LoadResult
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = JoinSet::new();
    for client in 0..clients {
        let op = Arc::clone(&op);
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let (mut errors, mut first_error) = (0u64, None);
            let mut seq = 0u64;
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                let begun = Instant::now();
                match op(client, seq).await {
                    Ok(()) => latencies.push(begun.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
                seq += 1;
            }
            (latencies, errors, first_error)
        });
    }
    let mut result = LoadResult {
        clients,
        ops: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((latencies, errors, first_error)) => {
                result.latencies.extend(latencies);
                result.errors += errors;
                if result.first_error.is_none() {
                    result.first_error = first_error;
                }
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| format!("load task failed: {e}"));
            }
        }
    }
    result.elapsed = started.elapsed();
    result.ops = result.latencies.len() as u64;
    result.latencies.sort_unstable();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_takes_the_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&values, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&values, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[tokio::test]
    async fn closed_loop_counts_successes_and_errors_apart() {
        static NEVER: AtomicBool = AtomicBool::new(false);
        let result = closed_loop(4, Duration::from_millis(100), &NEVER, |client, seq| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if client == 0 && seq == 0 {
                Err("boom")
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!(result.errors, 1);
        assert_eq!(result.first_error.as_deref(), Some("boom"));
        assert!(result.ops >= 4, "{result:?}");
        assert_eq!(result.latencies.len() as u64, result.ops);
        assert!(result.percentile_ms(0.5) >= 5.0);
    }
}
