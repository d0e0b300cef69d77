//! Snapshots in proportion to the state: a node builds one when the log it appended since its last
//! snapshot reaches the larger of a floor and that snapshot's size.
//!
//! A snapshot is the whole state, so a fixed count of entries between snapshots rewrites a large cache
//! far more often than it changes: `mesh bench core` wrote 53 MB and then 108 MB snapshots inside its
//! measured phases at openraft's count of 5,000 entries, and the phase with the second one lost a quarter
//! of its puts. With the log since the last snapshot at least as large as the snapshot, a node writes at
//! most about as much snapshot as log. Replicas wait a quarter or a half of that longer by their id, so
//! that they do not all write theirs at once. openraft's count policy stays as a backstop
//! ([`crate::node::config::RaftTuning::snapshot_logs`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::node::types::{NodeId, Raft};

/// How often the log's growth is checked.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a node that appended `since` bytes of log since its last snapshot, which took `snapshot`
/// bytes, should build the next one, given the `floor` in bytes.
pub fn due(since: u64, snapshot: u64, floor: u64, node: NodeId) -> bool {
    let base = floor.max(snapshot);
    since >= base.saturating_add(base / 4 * (node % 3))
}

/// Bytes of the current snapshot file in `dir` (files still being written are named `partial-*`).
fn snapshot_bytes(dir: &Path) -> u64 {
    let Ok(files) = std::fs::read_dir(dir) else { return 0 };
    files
        .flatten()
        .filter(|f| {
            let name = f.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".snap") && !name.starts_with("partial")
        })
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0)
}

/// Runs until the state machine goes away (`durable` closes): asks `raft` for a snapshot whenever
/// [`due`] says so. `appended` counts the log's bytes, of which `backlog` were already past the last
/// snapshot when the node started (so a restart does not forget the log it had grown); `durable` moves
/// whenever a snapshot is kept (built here or installed from the leader), whose file is in `dir`.
pub async fn run(
    node: NodeId,
    raft: Raft,
    appended: Arc<AtomicU64>,
    backlog: u64,
    mut durable: watch::Receiver<u64>,
    dir: PathBuf,
    floor: u64,
) {
    let mut mark = appended.load(Ordering::Relaxed).saturating_sub(backlog);
    let mut snapshot = snapshot_bytes(&dir);
    let mut check = tokio::time::interval(CHECK_INTERVAL);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = durable.changed() => {
                if changed.is_err() {
                    return;
                }
                mark = appended.load(Ordering::Relaxed);
                let dir = dir.clone();
                snapshot = tokio::task::spawn_blocking(move || snapshot_bytes(&dir)).await.unwrap_or(snapshot);
            }
            _ = check.tick() => {
                let now = appended.load(Ordering::Relaxed);
                if due(now.saturating_sub(mark), snapshot, floor, node) {
                    tracing::info!(log_bytes = now - mark, snapshot_bytes = snapshot, "building a snapshot");
                    if let Err(e) = raft.trigger().snapshot().await {
                        tracing::warn!(error = %e, "could not ask for a snapshot");
                    }
                    // Not again until this one is kept (which moves the mark) or as much log again.
                    mark = now;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_small_state_snapshots_at_the_floor_and_a_large_one_at_its_own_size() {
        assert!(!due(63 * MIB, 10 * MIB, 64 * MIB, 3));
        assert!(due(64 * MIB, 10 * MIB, 64 * MIB, 3));
        assert!(!due(100 * MIB, 200 * MIB, 64 * MIB, 3));
        assert!(due(200 * MIB, 200 * MIB, 64 * MIB, 3));
    }

    #[test]
    fn replicas_wait_by_their_id() {
        let at = |node| (0..).map(|m| m * MIB).find(|&since| due(since, 0, 64 * MIB, node));
        assert_eq!(at(3), Some(64 * MIB));
        assert_eq!(at(1), Some(80 * MIB));
        assert_eq!(at(2), Some(96 * MIB));
    }

    #[test]
    fn the_current_snapshot_file_is_measured_and_partial_ones_are_not() {
        let dir = std::env::temp_dir().join(format!("snapshot-trigger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(snapshot_bytes(&dir), 0);
        std::fs::write(dir.join("1-4999-1.snap"), vec![0u8; 300]).expect("write");
        std::fs::write(dir.join("partial-2.snap"), vec![0u8; 900]).expect("write");
        assert_eq!(snapshot_bytes(&dir), 300);
        std::fs::remove_dir_all(&dir).expect("clean");
        assert_eq!(snapshot_bytes(&dir), 0);
    }
}
