//! The Raft log store: log entries, the vote, the committed pointer and the purge point, in the node's
//! [write-ahead log](crate::wal).
//!
//! Durability: `append` returns once the entries are written and readable. A follower's appends are
//! reported flushed to openraft only once they are `fdatasync`ed; a leader's own are reported at once, so
//! that openraft replicates them while the leader's disk syncs, and what depends on them waits for the
//! sync through [`DurableLog`]. `save_vote`, `truncate` and `purge` return only after their sync. The
//! committed pointer is written without waiting: it may lag after a crash, which only means that
//! openraft re-applies fewer entries at startup before the leader tells it more.
//! Entries are stored in the binary form of [`log_codec`](crate::node::raft::log_codec); the newest are also kept
//! decoded ([`RecentEntries`]), since the leader reads each one again for every follower and to apply it.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use tokio::sync::oneshot;

use crate::node::raft::durable_log::DurableLog;
use crate::node::raft::log_codec;
use crate::node::raft::recent_entries::RecentEntries;
use crate::node::types::{Entry, NodeId, StorageError, TypeConfig};
use crate::wal::fs::OsDir;
use crate::wal::{Done, Wal, WalOptions};

/// The Raft log of one core node.
///
/// Cloning is cheap and shares the log; openraft's log readers are clones.
#[derive(Clone, Debug)]
pub struct LogStore {
    wal: Arc<Wal>,
    /// The newest entries, decoded.
    recent: Arc<RecentEntries>,
    /// The last log index a durable snapshot covers, when purges must wait for one
    /// ([`LogStore::purge_behind`]).
    durable_snapshot: Option<tokio::sync::watch::Receiver<u64>>,
    /// This node, when it syncs another leader's entries itself and reports its own at once
    /// ([`LogStore::syncing_followed_entries`]).
    me: Option<NodeId>,
    /// How far the log is durable.
    durable: DurableLog,
    /// Encoded bytes of the entries the log held when it was opened and of every one appended since.
    appended: Arc<AtomicU64>,
    /// The furthest purge openraft asked for that waits for a durable snapshot ([`LogStore::purge`]).
    pending_purge: Arc<std::sync::Mutex<Option<LogId<NodeId>>>>,
    /// Held while a purge is written, so that purges reach the log one at a time and in order.
    purging: Arc<tokio::sync::Mutex<()>>,
}

impl LogStore {
    /// Opens (or creates) the log in directory `path`, waiting up to `lock_wait` for a previous instance
    /// to let go of it.
    pub fn open(path: &Path, lock_wait: Duration) -> io::Result<Self> {
        let dir = OsDir::open(path, lock_wait)?;
        let wal = Arc::new(Wal::open(Arc::new(dir), WalOptions::default())?);
        let recent = Arc::new(RecentEntries::new(RECENT_BYTES));
        let durable = DurableLog::new(wal.last_log_id());
        let appended = Arc::new(AtomicU64::new(wal.entry_bytes_after(0)));
        Ok(Self {
            wal,
            recent,
            durable_snapshot: None,
            me: None,
            durable,
            appended,
            pending_purge: Arc::default(),
            purging: Arc::default(),
        })
    }

    /// Makes node `me` sync entries that another leader sent on the appending task
    /// ([`Wal::append_and_sync`]) rather than on the log's flusher thread (at one client on 2 cores this
    /// took a follower's two thread wake-ups off every write's path), and report the entries it appends
    /// as the leader at once, leaving their sync to the flusher thread ([`crate::node::raft::durable_log`]).
    pub fn syncing_followed_entries(mut self, me: NodeId) -> Self {
        self.me = Some(me);
        self
    }

    /// Makes every purge wait until `durable_snapshot` (the last index the state machine's durable
    /// snapshot covers) reaches the purge point. openraft purges the log as soon as it installs a snapshot
    /// from the leader, on another task than the install; without this, a crash between the purge and
    /// the installed state reaching the disk would leave entries that are neither in the log nor durable.
    /// The wait happens off openraft's core task ([`LogStore::purge`]), which meanwhile votes and appends.
    pub fn purge_behind(mut self, durable_snapshot: tokio::sync::watch::Receiver<u64>) -> Self {
        self.durable_snapshot = Some(durable_snapshot);
        self
    }

    /// How far the log is durable (what the state machine and the replication of a leader wait for).
    pub fn durable_log(&self) -> DurableLog {
        self.durable.clone()
    }

    /// Whether `entries` are this node's own, appended as the leader of the vote it holds.
    fn leading(&self, entries: &[Entry]) -> bool {
        let (Some(me), Some(last)) = (self.me, entries.last()) else { return false };
        let vote = self.wal.meta().vote;
        vote.is_some_and(|v| v.committed && v.leader_id == last.log_id.leader_id && v.leader_id.node_id == me)
    }

    /// Encoded bytes of the entries the log held when it was opened (after entry 0) and of every one
    /// appended since (what the snapshot trigger measures the log's growth by).
    pub fn appended_bytes(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.appended)
    }

    /// Encoded bytes of the entries in the log after index `index` (at a restart: the log a snapshot
    /// covering `index` left behind it).
    pub fn entry_bytes_after(&self, index: u64) -> u64 {
        self.wal.entry_bytes_after(index)
    }

    /// What the log's syncs did so far.
    pub fn sync_stats(&self) -> SyncStats {
        let (syncs, synced_writes) = self.wal.sync_stats();
        SyncStats { syncs, synced_writes, commits_held_back: self.durable.held_back_total() }
    }
}

/// What a log's syncs did so far, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// `fdatasync`s of the write-ahead log.
    pub syncs: u64,
    /// Appends, votes, truncations and purges those syncs made durable.
    pub synced_writes: u64,
    /// AppendEntries whose commit index waited for this node's sync ([`DurableLog::clamp_commit`]).
    pub commits_held_back: u64,
}

/// A callback for the log and the receiver that waits for it.
fn durable() -> (Done, oneshot::Receiver<io::Result<()>>) {
    let (tx, rx) = oneshot::channel();
    (Box::new(move |result| drop(tx.send(result))), rx)
}

/// Waits for a write's sync.
async fn synced(rx: oneshot::Receiver<io::Result<()>>) -> io::Result<()> {
    rx.await.unwrap_or_else(|_| Err(io::Error::other("the write-ahead log stopped")))
}

/// Encoded bytes of the newest entries kept decoded ([`RecentEntries`]).
const RECENT_BYTES: usize = 16 << 20;

fn index_bound(bound: Bound<&u64>, start: bool) -> u64 {
    match (bound, start) {
        (Bound::Included(i), true) => *i,
        (Bound::Excluded(i), true) => i.saturating_add(1),
        (Bound::Unbounded, true) => 0,
        (Bound::Included(i), false) => i.saturating_add(1),
        (Bound::Excluded(i), false) => *i,
        (Bound::Unbounded, false) => u64::MAX,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = index_bound(range.start_bound(), true);
        let end = index_bound(range.end_bound(), false);
        if let Some(entries) = self.recent.get(start, end) {
            return Ok(entries);
        }
        let stored = self.wal.read(start, end).map_err(|e| StorageIOError::read_logs(&e))?;
        stored
            .into_iter()
            .map(|(log_id, bytes)| {
                let payload = log_codec::decode_payload(&bytes)
                    .map_err(|e| StorageIOError::read_log_at_index(log_id.index, &e))?;
                Ok(Entry { log_id, payload })
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState { last_purged_log_id: self.wal.meta().last_purged, last_log_id: self.wal.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let (done, rx) = durable();
        self.wal.save_vote(vote, done).map_err(|e| StorageIOError::write_vote(&e))?;
        synced(rx).await.map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.wal.meta().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError> {
        self.wal.save_committed(committed.as_ref()).map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        Ok(self.wal.meta().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        if let Some(first) = entries.first() {
            self.settle_purge_before(first.log_id.index).await?;
        }
        let encoded: Vec<_> =
            entries.iter().map(|entry| (entry.log_id, log_codec::encode_payload(&entry.payload))).collect();
        let sizes: Vec<usize> = encoded.iter().map(|(_, bytes)| bytes.len()).collect();
        self.appended.fetch_add(sizes.iter().sum::<usize>() as u64, Ordering::Relaxed);
        let last = entries.last().map(|e| e.log_id);
        let durable = self.durable.clone();
        let synced = move |result: &io::Result<()>| match result {
            Ok(()) => durable.synced(last),
            Err(e) => durable.failed(e),
        };
        let reported_now = if self.leading(&entries) {
            let done: Done = Box::new(move |result| synced(&result));
            self.wal.append(encoded, done).map_err(|e| StorageIOError::write_logs(&e))?;
            Some(callback)
        } else {
            let done: Done = Box::new(move |result| {
                synced(&result);
                callback.log_io_completed(result);
            });
            let appended = match self.me {
                Some(_) => self.wal.append_and_sync(encoded, done),
                None => self.wal.append(encoded, done),
            };
            appended.map_err(|e| StorageIOError::write_logs(&e))?;
            None
        };
        // Readable from here on, as from the log itself.
        for (entry, size) in entries.into_iter().zip(sizes) {
            self.recent.push(entry, size);
        }
        if let Some(callback) = reported_now {
            callback.log_io_completed(Ok(()));
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        self.recent.truncate(log_id.index);
        let (done, rx) = durable();
        self.wal.truncate(log_id.index, done).map_err(|e| StorageIOError::write_logs(&e))?;
        synced(rx).await.map_err(|e| StorageIOError::write_logs(&e))?;
        // Every earlier append's sync has reported (in order, before this one), so this is the log's end.
        self.durable.synced(self.wal.last_log_id());
        Ok(())
    }

    /// Purges the log up to `log_id` at once when no durable snapshot must cover it first
    /// ([`LogStore::purge_behind`]) or one already does; otherwise records the purge and writes it from
    /// a task of its own once the snapshot is durable. openraft awaits a purge on its core task, right
    /// after handing a snapshot install to the state machine: waiting there for the install's end (seconds
    /// for a large state) kept a follower from voting and appending, so a leader lost meanwhile left a
    /// 3-node cluster without one. An append that would leave a hole behind a recorded purge waits for it
    /// ([`LogStore::settle_purge_before`]).
    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let covered = self.durable_snapshot.as_ref().map(|durable| *durable.borrow());
        if covered.is_none_or(|covered| covered >= log_id.index) {
            return self.purge_now(log_id).await;
        }
        {
            let mut pending = self.pending_purge.lock().expect("pending purge");
            if pending.is_none_or(|p| p.index < log_id.index) {
                *pending = Some(log_id);
            }
        }
        let store = self.clone();
        tokio::spawn(async move {
            if let Err(e) = store.purge_when_covered(log_id).await {
                tracing::error!(error = %e, index = log_id.index, "a deferred log purge failed");
            }
        });
        Ok(())
    }
}

impl LogStore {
    /// Waits until the durable snapshot covers `log_id`, then purges up to it (unless a purge as far or
    /// further was written meanwhile). Ends quietly when the state machine stopped.
    async fn purge_when_covered(&self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        if let Some(mut durable) = self.durable_snapshot.clone() {
            if durable.wait_for(|&covered| covered >= log_id.index).await.is_err() {
                return Ok(());
            }
        }
        self.purge_now(log_id).await?;
        let mut pending = self.pending_purge.lock().expect("pending purge");
        if pending.is_some_and(|p| p.index <= log_id.index) {
            *pending = None;
        }
        Ok(())
    }

    /// Before entries from index `first` on are appended: when the log ends before `first - 1` (openraft
    /// counts the entries up to a snapshot it installed as purged) and a recorded purge covers that gap,
    /// waits for the purge, so the log never holds a hole.
    async fn settle_purge_before(&self, first: u64) -> Result<(), StorageError> {
        // Nearly every append finds no purge waiting: that check alone stays on the write path.
        let Some(purge) = *self.pending_purge.lock().expect("pending purge") else { return Ok(()) };
        let next = self.wal.last_log_id().map_or(0, |last| last.index + 1);
        if first <= next || purge.index + 1 < first {
            return Ok(());
        }
        self.purge_when_covered(purge).await
    }

    /// Writes a purge up to `log_id` and waits for its sync, then removes the segments it emptied.
    async fn purge_now(&self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let _one_at_a_time = self.purging.lock().await;
        if self.wal.meta().last_purged.is_some_and(|purged| purged.index >= log_id.index) {
            return Ok(());
        }
        self.recent.purge(log_id.index);
        let (done, rx) = durable();
        self.wal.purge(&log_id, done).map_err(|e| StorageIOError::write_logs(&e))?;
        synced(rx).await.map_err(|e| StorageIOError::write_logs(&e))?;
        // The purge point is durable, so whole segments before it can go.
        let wal = Arc::clone(&self.wal);
        tokio::task::spawn_blocking(move || wal.remove_purged_segments())
            .await
            .map_err(|e| StorageIOError::write_logs(&io::Error::other(e)))?
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}
