//! A closed loop of blocking HTTP clients on threads of their own: each client sends its next request as
//! soon as the previous answer is read, for a fixed time. Used where the system under test is an HTTP
//! server and the peer's own tool (redis-benchmark) is a closed loop too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bench::common::load::LoadResult;

/// Runs `clients` threads calling `op(client)` in a loop for `duration` (or until `stop`); every call
/// that returns `Ok` is one operation, timed.
pub fn closed_loop_threads<F>(clients: usize, duration: Duration, stop: &AtomicBool, op: F) -> LoadResult
where
    F: Fn(usize) -> anyhow::Result<()> + Sync,
{
    let started = Instant::now();
    let deadline = started + duration;
    let per_client: Vec<(Vec<Duration>, u64, Option<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|client| {
                let op = &op;
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    let (mut errors, mut first_error) = (0u64, None);
                    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                        let begun = Instant::now();
                        match op(client) {
                            Ok(()) => latencies.push(begun.elapsed()),
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| format!("{e:#}"));
                            }
                        }
                    }
                    (latencies, errors, first_error)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut result = LoadResult {
        clients,
        ops: 0,
        errors: 0,
        first_error: None,
        elapsed: started.elapsed(),
        latencies: Vec::new(),
    };
    for (latencies, errors, first_error) in per_client {
        result.latencies.extend(latencies);
        result.errors += errors;
        if result.first_error.is_none() {
            result.first_error = first_error;
        }
    }
    result.ops = result.latencies.len() as u64;
    result.latencies.sort_unstable();
    result
}
