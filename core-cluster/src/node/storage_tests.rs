//! The sled stores against openraft's own storage test suite, plus restart durability and snapshots.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    CommittedLeaderId, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, StorageIOError, Vote,
};
use shared::completion::CachedCompletion;

use super::log_store::LogStore;
use super::state_machine::{now_ms, StateMachineStore};
use super::types::{Command, CommandResponse, Entry, NodeId, StorageError, TypeConfig};

/// A directory under the system temp dir, removed when dropped.
pub(super) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, unique path (not created yet) tagged with `tag`.
    pub(super) fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = format!(
            "core-node-{tag}-{}-{}-{}",
            std::process::id(),
            now_ms(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Self(std::env::temp_dir().join(unique))
    }

    /// The directory.
    pub(super) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(path: &std::path::Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    let db = sled::Config::new().path(path).open().map_err(|e| StorageIOError::write(&e))?;
    Ok((
        LogStore::open(&db).map_err(|e| StorageIOError::write(&e))?,
        StateMachineStore::open(&db).map_err(|e| StorageIOError::write(&e))?,
    ))
}

/// Builds a fresh pair of stores in its own temp dir for every suite case.
struct TempStores;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for TempStores {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = TempDir::new("suite");
        let (log, sm) = open(&dir.0)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(TempStores).expect("openraft storage suite");
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn completion(key: &str, tenant: &str, ttl_s: u64) -> CachedCompletion {
    CachedCompletion {
        key: key.into(),
        tenant: tenant.into(),
        model: "m".into(),
        model_version: 1,
        content: format!("answer for {key}"),
        finish_reason: "stop".into(),
        prompt_tokens: 3,
        completion_tokens: 4,
        etag: CachedCompletion::etag_of(key, "stop"),
        created_ms: now_ms(),
        ttl_s,
    }
}

fn put(index: u64, entry: CachedCompletion) -> Entry {
    Entry { log_id: log_id(1, index), payload: EntryPayload::Normal(Command::Put { entry }) }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

#[test]
fn state_survives_a_restart() {
    let dir = TempDir::new("restart");
    runtime().block_on(async {
        {
            let (mut log, mut sm) = open(&dir.0).expect("open");
            log.save_vote(&Vote::new(3, 2)).await.expect("vote");
            let entries = vec![put(1, completion("a", "dev", 600)), put(2, completion("b", "dev", 600))];
            // `blocking_append` waits for the flush callback, as openraft does.
            log.blocking_append(entries.clone()).await.expect("append");
            let replies = sm.apply(entries).await.expect("apply");
            assert_eq!(
                replies,
                vec![
                    CommandResponse::Stored { key: "a".into() },
                    CommandResponse::Stored { key: "b".into() }
                ]
            );
        }
        let (mut log, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
        assert_eq!(log.try_get_log_entries(1..3).await.expect("logs").len(), 2);
        assert_eq!(sm.applied_state().await.expect("applied").0, Some(log_id(1, 2)));
        assert_eq!(sm.get("a").expect("read").map(|e| e.content), Some("answer for a".to_owned()));
    });
}

#[test]
fn reads_honour_tenant_and_expiry() {
    let dir = TempDir::new("fresh");
    runtime().block_on(async {
        let (_, mut sm) = open(&dir.0).expect("open");
        let mut old = completion("old", "dev", 1);
        old.created_ms -= 5_000;
        sm.apply(vec![put(1, completion("k", "dev", 600)), put(2, old)]).await.expect("apply");
        let now = now_ms();
        assert!(sm.get_fresh("k", "dev", now).expect("read").is_some());
        assert!(sm.get_fresh("k", "other-tenant", now).expect("read").is_none());
        assert!(sm.get_fresh("old", "dev", now).expect("read").is_none());
        assert!(sm.get_fresh("missing", "dev", now).expect("read").is_none());
    });
}

#[test]
fn snapshots_carry_live_entries_and_replace_state() {
    let (a, b) = (TempDir::new("snap-a"), TempDir::new("snap-b"));
    runtime().block_on(async {
        let (_, mut leader) = open(&a.0).expect("open");
        let (_, mut follower) = open(&b.0).expect("open");
        let mut expired = completion("gone", "dev", 1);
        expired.created_ms -= 5_000;
        leader.apply(vec![put(1, completion("x", "dev", 600)), put(2, expired)]).await.expect("apply");
        follower.apply(vec![put(1, completion("stale", "dev", 600))]).await.expect("apply");

        let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 2)));
        let mut receiving = follower.begin_receiving_snapshot().await.expect("begin");
        *receiving = Cursor::new(snapshot.snapshot.into_inner());
        follower.install_snapshot(&snapshot.meta, receiving).await.expect("install");

        assert!(follower.get("x").expect("read").is_some());
        assert!(follower.get("gone").expect("read").is_none(), "expired entries stay out of snapshots");
        assert!(follower.get("stale").expect("read").is_none(), "installing replaces the old state");
        assert_eq!(follower.applied_state().await.expect("applied").0, Some(log_id(1, 2)));
        let current = follower.get_current_snapshot().await.expect("current").expect("a snapshot");
        assert_eq!(current.meta, snapshot.meta);
    });
}
