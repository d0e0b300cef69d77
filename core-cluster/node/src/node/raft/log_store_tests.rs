//! The log store's purges behind a snapshot install: openraft's core task is never held until the
//! install is durable, and the log never holds a hole.

use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};

use crate::node::raft::log_store::LogStore;
use crate::node::storage_tests::TempDir;
use crate::node::types::{Entry, NodeId};

fn log_id(index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn blank(index: u64) -> Entry {
    Entry { log_id: log_id(index), payload: EntryPayload::Blank }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// A log holding entries 0..=5 whose purges wait for a durable snapshot, and the sender of that
/// snapshot's last index.
async fn log_behind_a_snapshot(dir: &TempDir) -> (LogStore, tokio::sync::watch::Sender<u64>) {
    let (covered, covered_rx) = tokio::sync::watch::channel(0u64);
    let mut log = LogStore::open(dir.path(), Duration::from_secs(10)).expect("open").purge_behind(covered_rx);
    log.blocking_append((0..=5).map(blank)).await.expect("append");
    (log, covered)
}

#[test]
fn a_purge_behind_an_install_returns_at_once_and_votes_go_on_while_the_install_runs() {
    let dir = TempDir::new("purge-returns");
    runtime().block_on(async {
        let (mut log, covered) = log_behind_a_snapshot(&dir).await;
        // openraft installs a snapshot up to 100 and purges behind it on its core task.
        tokio::time::timeout(Duration::from_secs(2), log.purge(log_id(100)))
            .await
            .expect("the purge does not wait for the install to be durable")
            .expect("purge");
        tokio::time::timeout(Duration::from_secs(2), log.save_vote(&Vote::new(2, 2)))
            .await
            .expect("a vote is saved while the install runs")
            .expect("vote");
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, None, "nothing is purged before the snapshot is durable");
        assert_eq!(state.last_log_id, Some(log_id(5)));

        covered.send_replace(100);
        let mut purged = None;
        for _ in 0..100 {
            purged = log.get_log_state().await.expect("state").last_purged_log_id;
            if purged.is_some() {
                break;
            }
            // Deliberate: the deferred purge runs on a task of its own; poll for it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(purged, Some(log_id(100)), "the purge is written once the snapshot is durable");
    });
}

#[test]
fn an_append_past_a_pending_purge_waits_for_it_so_the_log_holds_no_hole() {
    let dir = TempDir::new("purge-no-hole");
    runtime().block_on(async {
        let (mut log, covered) = log_behind_a_snapshot(&dir).await;
        log.purge(log_id(100)).await.expect("purge");
        let mut appending = log.clone();
        let append = tokio::spawn(async move { appending.blocking_append([blank(101)]).await });
        // Deliberate: long enough for an append that did not wait to have written entry 101.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!append.is_finished(), "entry 101 waits while the log ends at 5 and the purge to 100 waits");
        assert_eq!(log.get_log_state().await.expect("state").last_log_id, Some(log_id(5)));

        covered.send_replace(100);
        tokio::time::timeout(Duration::from_secs(5), append)
            .await
            .expect("the append goes on once the snapshot is durable")
            .expect("task")
            .expect("append");
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(log_id(100)));
        assert_eq!(state.last_log_id, Some(log_id(101)));
    });
}

#[test]
fn a_purge_the_durable_snapshot_already_covers_is_written_before_it_returns() {
    let dir = TempDir::new("purge-covered");
    runtime().block_on(async {
        let (mut log, covered) = log_behind_a_snapshot(&dir).await;
        covered.send_replace(3);
        log.purge(log_id(3)).await.expect("purge");
        assert_eq!(log.get_log_state().await.expect("state").last_purged_log_id, Some(log_id(3)));
    });
}
