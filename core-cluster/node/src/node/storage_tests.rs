//! The log store (write-ahead log) and the state machine (sled) against openraft's own storage test suite,
//! plus restart durability and snapshots.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    CommittedLeaderId, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, StorageIOError, Vote,
};
use shared::completion::CachedCompletion;

use super::clean_stop;
use super::hot_prompts::HotPrompts;
use super::records::ModelState;
use super::state_machine::{now_ms, FeedRead, StateMachineStore};
use super::types::{
    Command, Entry, NodeId, Outcome, Proposal, ProposalResponse, Request, StorageError, TenantPolicy,
    TypeConfig,
};
use crate::node::raft::log_store::LogStore;

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

/// A snapshot's file copied into a file `store` receives, as openraft copies the chunks it is sent.
pub(super) async fn transfer(
    snapshot: &openraft::Snapshot<super::types::TypeConfig>,
    store: &mut StateMachineStore,
) -> Box<crate::node::raft::snapshot_file::SnapshotFile> {
    use tokio::io::{AsyncSeekExt as _, AsyncWriteExt as _};
    let mut source = snapshot.snapshot.try_clone().expect("the snapshot's file");
    source.rewind().await.expect("rewind");
    let mut receiving = store.begin_receiving_snapshot().await.expect("begin");
    tokio::io::copy(&mut source, &mut *receiving).await.expect("copy");
    receiving.flush().await.expect("flush");
    receiving
}

/// The state machine's sled database under `path`.
fn open_db(path: &std::path::Path) -> Result<sled::Db, StorageError> {
    // sled's flusher thread holds the file lock for a moment after the last handle is dropped, so a
    // reopen in the same process may have to wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::Config::new().path(path.join("state")).open() {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            opened => return Ok(opened.map_err(|e| StorageIOError::write(&e))?),
        }
    }
}

fn open(path: &std::path::Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    let previous = clean_stop::take(path).map_err(|e| StorageIOError::write(&e))?;
    let db = open_db(path)?;
    Ok((
        LogStore::open(&path.join("wal"), std::time::Duration::from_secs(10))
            .map_err(|e| StorageIOError::write(&e))?,
        StateMachineStore::open(&db, path, previous).map_err(|e| StorageIOError::write(&e))?,
    ))
}

/// Stops the stores opened under `path` as a core node does when asked to ([`clean_stop`]).
async fn stop_cleanly(path: &std::path::Path, sm: StateMachineStore) {
    assert!(sm.close().await.expect("close"), "every write was whole");
    drop(sm);
    clean_stop::leave(path, &path.join("state")).expect("leave the marker");
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
        tenant: tenant.into(),
        prompt_tokens: 3,
        completion_tokens: 4,
        etag: CachedCompletion::etag_of(key, "stop"),
        created_ms: now_ms(),
        ttl_s,
        ..CachedCompletion::example(key, format!("answer for {key}"))
    }
}

fn proposal(index: u64, issued_ms: i64, commands: Vec<Command>) -> Entry {
    let requests = commands.into_iter().map(|command| Request { id: String::new(), command });
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(Proposal { issued_ms, requests: requests.collect() }),
    }
}

/// Entry 1 of every test: model `m` version 1 and tenant `dev`.
fn seed() -> Entry {
    proposal(
        1,
        0,
        vec![
            Command::RegisterModel { model: "m".into(), version: 1, spec: None },
            Command::SetTenantPolicy { tenant: "dev".into(), policy: TenantPolicy::default() },
        ],
    )
}

fn put(index: u64, issued_ms: i64, entry: CachedCompletion) -> Entry {
    proposal(index, issued_ms, vec![Command::Put { entry, content_class: "stable".into(), prompt: None }])
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

fn stored_key(response: &ProposalResponse) -> Option<&str> {
    match &response.applied.first()?.outcome {
        Outcome::Stored { key, .. } => Some(key),
        _ => None,
    }
}

#[test]
fn state_survives_a_restart() {
    let dir = TempDir::new("restart");
    runtime().block_on(async {
        let now = now_ms();
        {
            let (mut log, mut sm) = open(&dir.0).expect("open");
            log.save_vote(&Vote::new(3, 2)).await.expect("vote");
            let entries = vec![
                seed(),
                put(2, now, completion("a", "dev", 600)),
                put(3, now, completion("b", "dev", 600)),
            ];
            // `blocking_append` waits for the flush callback, as openraft does.
            log.blocking_append(entries.clone()).await.expect("append");
            let replies = sm.apply(entries).await.expect("apply");
            let keys: Vec<Option<&str>> = replies.iter().skip(1).map(stored_key).collect();
            assert_eq!(keys, vec![Some("a"), Some("b")]);
            stop_cleanly(&dir.0, sm).await;
        }
        let (mut log, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
        assert_eq!(log.try_get_log_entries(1..4).await.expect("logs").len(), 3);
        assert_eq!(sm.applied_state().await.expect("applied").0, Some(log_id(1, 3)));
        let a = sm.read("a", "dev").expect("read").map(|s| s.entry.content);
        assert_eq!(a, Some("answer for a".to_owned()));
        assert_eq!(sm.clock_ms().expect("clock"), now);
    });
}

#[test]
fn a_content_log_cut_short_after_a_clean_stop_starts_the_state_again_from_the_snapshot() {
    let dir = TempDir::new("cut-contents");
    runtime().block_on(async {
        let now = now_ms();
        {
            let (_, mut sm) = open(&dir.0).expect("open");
            sm.apply(vec![seed(), put(2, now, completion("a", "dev", 600))]).await.expect("apply");
            sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot at 2");
            sm.apply(vec![put(3, now, completion("b", "dev", 600))]).await.expect("apply");
            stop_cleanly(&dir.0, sm).await;
        }
        for segment in std::fs::read_dir(dir.0.join("contents")).expect("contents") {
            let file = std::fs::OpenOptions::new().write(true).open(segment.expect("segment").path());
            file.expect("open segment").set_len(0).expect("cut");
        }
        let (_, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(sm.applied_state().await.expect("applied").0, Some(log_id(1, 2)), "the snapshot's");
        let a = sm.read("a", "dev").expect("read").map(|s| s.entry.content);
        assert_eq!(a, Some("answer for a".to_owned()));
        assert_eq!(sm.read("b", "dev").expect("read"), None, "after the snapshot: openraft applies it again");
    });
}

#[test]
fn after_a_stop_that_was_not_clean_the_state_is_the_snapshot_and_the_log_after_it_applies_again() {
    let dir = TempDir::new("unclean");
    runtime().block_on(async {
        let now = now_ms();
        {
            let (_, mut sm) = open(&dir.0).expect("open");
            sm.apply(vec![seed(), put(2, now, completion("a", "dev", 600))]).await.expect("apply");
            sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot at 2");
            sm.apply(vec![put(3, now, completion("b", "dev", 600))]).await.expect("apply");
            // Dropped without a clean stop, as a kill leaves it.
        }
        let (_, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(sm.applied_state().await.expect("applied").0, Some(log_id(1, 2)), "the snapshot's");
        let a = sm.read("a", "dev").expect("read").map(|s| s.entry.content);
        assert_eq!(a, Some("answer for a".to_owned()));
        assert_eq!(sm.read("b", "dev").expect("read"), None, "not trusted: applied again from the log");
        sm.apply(vec![put(3, now, completion("b", "dev", 600))]).await.expect("apply again");
        let b = sm.read("b", "dev").expect("read").map(|s| s.entry.content);
        assert_eq!(b, Some("answer for b".to_owned()));
    });
    let fresh = TempDir::new("unclean-no-snapshot");
    runtime().block_on(async {
        {
            let (_, mut sm) = open(&fresh.0).expect("open");
            sm.apply(vec![seed(), put(2, now_ms(), completion("a", "dev", 600))]).await.expect("apply");
        }
        let (_, mut sm) = open(&fresh.0).expect("reopen");
        assert_eq!(sm.applied_state().await.expect("applied").0, None, "no snapshot: nothing applied");
        assert!(sm.is_empty() && sm.tenant_count() == 0, "the whole log applies again");
    });
}

#[test]
fn a_snapshot_whose_metadata_an_older_binary_kept_in_sled_is_adopted() {
    let dir = TempDir::new("legacy-snapshot-meta");
    runtime().block_on(async {
        let now = now_ms();
        {
            let (_, mut sm) = open(&dir.0).expect("open");
            sm.apply(vec![seed(), put(2, now, completion("a", "dev", 600))]).await.expect("apply");
            let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.expect("snapshot at 2");
            drop(sm);
            // As an older binary left it: the metadata in the `sm_snapshot` tree, no file beside the rows.
            for item in std::fs::read_dir(dir.0.join("snapshots")).expect("dir") {
                let path = item.expect("item").path();
                if path.extension().is_some_and(|e| e == "meta") {
                    std::fs::remove_file(path).expect("remove");
                }
            }
            let db = open_db(&dir.0).expect("db");
            let meta = serde_json::to_vec(&snapshot.meta).expect("json");
            db.open_tree("sm_snapshot").expect("tree").insert("meta", meta).expect("insert");
            db.flush().expect("flush");
        }
        let (_, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(sm.applied_state().await.expect("applied").0, Some(log_id(1, 2)), "from the adopted one");
        let current = sm.get_current_snapshot().await.expect("current").expect("a snapshot");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 2)));
        assert!(sm.read("a", "dev").expect("read").is_some());
    });
}

#[test]
fn rows_an_older_binary_wrote_as_json_are_read_digested_alike_and_applied_over() {
    let dir = TempDir::new("json-rows");
    runtime().block_on(async {
        let now = now_ms();
        let (stored, digest) = {
            let (_, mut sm) = open(&dir.0).expect("open");
            sm.apply(vec![seed(), put(2, now, completion("a", "dev", 600))]).await.expect("apply");
            let read = (sm.read("a", "dev").expect("read").expect("stored"), sm.digest().expect("digest"));
            stop_cleanly(&dir.0, sm).await;
            read
        };
        {
            // The entry and its model as a binary before prost rows left them.
            let db = open_db(&dir.0).expect("db");
            let json = serde_json::to_vec(&stored).expect("json");
            db.open_tree("sm_entries").expect("tree").insert("a", json).expect("insert");
            let mut hot = HotPrompts::default();
            hot.record("a", 1);
            let model = serde_json::to_vec(&ModelState {
                version: 1,
                epoch: 0,
                hot,
                spec: None,
                ..Default::default()
            })
            .expect("json");
            db.open_tree("sm_models").expect("tree").insert("m", model).expect("insert");
            db.flush().expect("flush");
        }
        let (_, mut sm) = open(&dir.0).expect("reopen");
        assert_eq!(sm.read("a", "dev").expect("read"), Some(stored));
        assert_eq!(sm.digest().expect("digest"), digest, "a JSON row digests as its prost copy does");
        sm.apply(vec![put(3, now, completion("b", "dev", 600))]).await.expect("apply over JSON rows");
        let b = sm.read("b", "dev").expect("read").map(|s| s.entry.content);
        assert_eq!(b, Some("answer for b".to_owned()));
    });
}

#[test]
fn reads_honour_tenant_and_expiry() {
    let dir = TempDir::new("fresh");
    runtime().block_on(async {
        let (_, mut sm) = open(&dir.0).expect("open");
        let now = now_ms();
        // Created at the (old) time of its proposal, with a one-second TTL: expired now.
        sm.apply(vec![
            seed(),
            put(2, now - 5_000, completion("old", "dev", 1)),
            put(3, now, completion("k", "dev", 600)),
        ])
        .await
        .expect("apply");
        assert!(sm.read("k", "dev").expect("read").is_some());
        assert!(sm.read("k", "other-tenant").expect("read").is_none());
        assert!(sm.read("old", "dev").expect("read").is_none());
        assert!(sm.read("missing", "dev").expect("read").is_none());
        assert_eq!(sm.len(), 2, "nothing is removed outside the log");
        let (sweep, _) = sm.sweep_candidates(None).expect("candidates");
        let applied = sm.apply(vec![proposal(4, now, vec![sweep])]).await.expect("apply");
        assert_eq!(
            applied[0].applied[0].outcome,
            Outcome::Swept { entries: 1, requests: 0, feed: 1 },
            "the expired entry and the seed's feed row (logged at time 0) are swept, through the log"
        );
        assert_eq!(sm.len(), 1);
        assert!(matches!(sm.feed_after(0, 10).expect("feed"), FeedRead::Compacted));
        assert!(matches!(sm.feed_after(1, 10).expect("feed"), FeedRead::Rows(rows) if rows.is_empty()));
    });
}

#[test]
fn snapshots_carry_the_whole_state_and_replace_it() {
    let (a, b) = (TempDir::new("snap-a"), TempDir::new("snap-b"));
    runtime().block_on(async {
        let (_, mut leader) = open(&a.0).expect("open");
        let (_, mut follower) = open(&b.0).expect("open");
        let now = now_ms();
        leader
            .apply(vec![
                seed(),
                put(2, now - 5_000, completion("gone", "dev", 1)),
                put(3, now, completion("x", "dev", 600)),
            ])
            .await
            .expect("apply");
        follower.apply(vec![seed(), put(2, now, completion("stale", "dev", 600))]).await.expect("apply");

        let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 3)));
        let receiving = transfer(&snapshot, &mut follower).await;
        follower.install_snapshot(&snapshot.meta, receiving).await.expect("install");

        assert!(follower.read("x", "dev").expect("read").is_some());
        assert_eq!(follower.len(), 2, "a snapshot is the whole state, swept or not; installing replaces it");
        assert!(follower.read("stale", "dev").expect("read").is_none());
        assert!(follower.read("gone", "dev").expect("read").is_none(), "still dead after the install");
        assert_eq!(follower.applied_state().await.expect("applied").0, Some(log_id(1, 3)));
        assert_eq!(follower.digest().expect("digest"), leader.digest().expect("digest"));
        let current = follower.get_current_snapshot().await.expect("current").expect("a snapshot");
        assert_eq!(current.meta, snapshot.meta);

        // The installed entries' heads reach sled at a clean stop, replacing the ones there before.
        let digest = follower.digest().expect("digest");
        stop_cleanly(&b.0, follower).await;
        let (_, follower) = open(&b.0).expect("reopen");
        assert_eq!(follower.digest().expect("digest"), digest);
        assert_eq!(follower.len(), 2);
        assert!(follower.read("stale", "dev").expect("read").is_none());
        assert!(follower.read("x", "dev").expect("read").is_some());
    });
}

/// A put of `key` under request id `id`, as entry `index`.
fn put_with_id(index: u64, issued_ms: i64, id: &str, key: &str) -> Entry {
    let command =
        Command::Put { entry: completion(key, "dev", 600), content_class: "stable".into(), prompt: None };
    let requests = vec![Request { id: id.into(), command }];
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(Proposal { issued_ms, requests: requests.into() }),
    }
}

/// Garbage collection keeps up with sustained writes: one sweep lists every request id past its retention
/// (thousands a second at load), not a fixed few per half minute, and stops at the first one still kept.
#[test]
fn one_sweep_collects_thousands_of_old_request_ids() {
    let dir = TempDir::new("sweep-ids");
    runtime().block_on(async {
        let (_, mut sm) = open(&dir.0).expect("open");
        let old = now_ms() - crate::node::records::REQUEST_ID_RETENTION_MS - 60_000;
        let mut entries = vec![seed()];
        entries.extend((0..2_500u64).map(|i| put_with_id(2 + i, old, &format!("rq-{i}"), "k")));
        entries.push(put_with_id(2_502, now_ms(), "rq-young", "k"));
        sm.apply(entries).await.expect("apply");
        let (sweep, _) = sm.sweep_candidates(None).expect("candidates");
        let Command::Sweep { requests, .. } = &sweep else { panic!("a sweep") };
        assert_eq!(requests.len(), 2_500, "every old id, and not the young one");
        let applied = sm.apply(vec![proposal(2_503, now_ms(), vec![sweep])]).await.expect("apply");
        assert!(matches!(applied[0].applied[0].outcome, Outcome::Swept { requests: 2_500, .. }));
        let (again, _) = sm.sweep_candidates(None).expect("candidates");
        assert!(matches!(again, Command::Sweep { requests, .. } if requests.is_empty()));
    });
}

fn duplicate(response: &ProposalResponse) -> bool {
    response.applied.first().is_some_and(|a| a.duplicate)
}

#[test]
fn request_ids_are_remembered_over_a_restart_and_a_snapshot_install() {
    let (a, b) = (TempDir::new("ids-a"), TempDir::new("ids-b"));
    runtime().block_on(async {
        let now = now_ms();
        {
            let (_, mut sm) = open(&a.0).expect("open");
            let replies = sm
                .apply(vec![seed(), put_with_id(2, now, "r1", "x"), put_with_id(3, now, "r2", "y")])
                .await
                .expect("apply");
            assert!(!replies.iter().any(duplicate), "first time for every id");
            assert_eq!(sm.remembered_request_ids(), 2);
            let retry = sm.apply(vec![put_with_id(4, now, "r1", "x")]).await.expect("apply");
            assert!(duplicate(&retry[0]), "a retry in a later batch is a duplicate");
            stop_cleanly(&a.0, sm).await;
        }
        let (_, mut leader) = open(&a.0).expect("reopen");
        let retry = leader.apply(vec![put_with_id(5, now, "r2", "y")]).await.expect("apply");
        assert!(duplicate(&retry[0]), "remembered over a restart");

        let (_, mut follower) = open(&b.0).expect("open");
        let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
        let receiving = transfer(&snapshot, &mut follower).await;
        follower.install_snapshot(&snapshot.meta, receiving).await.expect("install");
        let replies = follower
            .apply(vec![put_with_id(6, now, "r1", "x"), put_with_id(7, now, "r3", "z")])
            .await
            .expect("apply");
        assert!(duplicate(&replies[0]), "remembered over a snapshot install");
        assert!(!duplicate(&replies[1]), "a new id is new");
        assert_eq!(follower.remembered_request_ids(), 3, "r1 and r2 from the snapshot, r3 applied after");
    });
}

/// The stores as a core node wires them: node 1's log reports its own appends as leader at once, and the
/// state machine applies only what that log holds durably.
fn open_as_node_1(path: &std::path::Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    let (log, sm) = open(path)?;
    let log = log.syncing_followed_entries(1);
    let sm = sm.applying_durable(log.durable_log());
    Ok((log, sm))
}

/// Builds node 1's stores for every suite case: the log alone (the suite applies entries no log holds).
struct NodeOneLogs;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for NodeOneLogs {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = TempDir::new("suite-node-1");
        let (log, sm) = open(&dir.0)?;
        Ok((dir, log.syncing_followed_entries(1), sm))
    }
}

#[test]
fn passes_openraft_storage_suite_as_a_node_that_reports_its_own_appends_at_once() {
    Suite::test_all(NodeOneLogs).expect("openraft storage suite");
}

/// Entry `index` of leader `node` in `term`, with no requests.
fn blank(term: u64, node: NodeId, index: u64) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(term, node), index), payload: EntryPayload::Blank }
}

#[test]
fn entries_another_leader_sent_are_durable_when_reported_and_a_truncation_moves_the_end_back() {
    let dir = TempDir::new("durable-followed");
    runtime().block_on(async {
        let (mut log, _) = open_as_node_1(&dir.0).expect("open");
        let durable = log.durable_log();
        log.save_vote(&Vote::new_committed(3, 3)).await.expect("vote");
        // Node 1's own entries of an older term, sent back by the leader of term 3, are followed too.
        log.blocking_append([blank(1, 1, 1), blank(1, 1, 2)]).await.expect("append");
        assert_eq!(durable.last().map(|id| id.index), Some(2), "synced before it was reported");
        log.blocking_append((3..=5).map(|i| blank(3, 3, i))).await.expect("append");
        assert_eq!(durable.last().map(|id| id.index), Some(5));
        log.truncate(blank(3, 3, 4).log_id).await.expect("truncate");
        assert_eq!(durable.last(), Some(blank(3, 3, 3).log_id));
    });
}

#[test]
fn a_leaders_own_entries_become_durable_after_they_are_reported_and_apply_waits_for_that() {
    let dir = TempDir::new("durable-leading");
    runtime().block_on(async {
        let (mut log, mut sm) = open_as_node_1(&dir.0).expect("open");
        let durable = log.durable_log();
        log.save_vote(&Vote::new_committed(1, 1)).await.expect("vote");
        let entries = vec![seed(), put(2, now_ms(), completion("a", "dev", 600))];
        log.blocking_append(entries.clone()).await.expect("append");
        tokio::time::timeout(std::time::Duration::from_secs(10), durable.wait_for(2))
            .await
            .expect("the flusher syncs the leader's entries")
            .expect("synced");
        let replies = sm.apply(entries).await.expect("apply");
        assert_eq!(stored_key(&replies[1]), Some("a"));

        // An entry the log does not hold durably yet is applied only once it is.
        let (_, sm) = open(&dir.0.join("lagging")).expect("open");
        let durable = crate::node::raft::durable_log::DurableLog::new(Some(log_id(1, 1)));
        let mut sm = sm.applying_durable(durable.clone());
        let entries = vec![seed(), put(2, now_ms(), completion("b", "dev", 600))];
        let applying = tokio::spawn(async move { sm.apply(entries).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!applying.is_finished(), "entry 2 is not durable yet");
        durable.synced(Some(log_id(1, 2)));
        let replies = applying.await.expect("task").expect("apply");
        assert_eq!(stored_key(&replies[1]), Some("b"));
    });
}
