//! The write floor: a plain loop that appends one record to a file and fsyncs it (fdatasync, as a Raft or
//! etcd write-ahead log does), on the same disk as the clusters' data. A replicated write that waits for its
//! own fsync cannot beat it at one client; batching many writes per fsync is how both clusters go past it.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::bench::common::load::LoadResult;

/// Appends `record_bytes` records to `<dir>/fsync-floor.log`, each followed by an fdatasync, for
/// `duration` or until `stop` is set; removes the file afterwards.
pub fn write_fsync_floor(
    dir: &Path,
    record_bytes: usize,
    duration: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<LoadResult> {
    let path = dir.join("fsync-floor.log");
    let mut file = File::options()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let record = vec![b'r'; record_bytes];
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        let begun = Instant::now();
        file.write_all(&record)?;
        file.sync_data()?;
        latencies.push(begun.elapsed());
    }
    let elapsed = started.elapsed();
    drop(file);
    let _ = std::fs::remove_file(&path);
    latencies.sort_unstable();
    Ok(LoadResult {
        clients: 1,
        ops: latencies.len() as u64,
        errors: 0,
        first_error: None,
        elapsed,
        latencies,
    })
}
