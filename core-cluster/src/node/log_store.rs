//! The Raft log store in sled: log entries, the vote, the committed pointer and the last purged id.
//!
//! Durability: `append` and `save_vote` return (and report the append as flushed) only after
//! `flush_async` has fsynced the whole database, so an acknowledged entry or vote survives a crash.
//! `truncate` and `purge` flush too. The committed pointer is written without a flush: it may lag after a
//! crash, which only means that openraft re-applies fewer entries at startup before the leader tells it more.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::types::{Entry, NodeId, StorageError, TypeConfig};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The Raft log of one core node, in two sled trees of the node's database.
///
/// Cloning is cheap and shares the trees; openraft's log readers are clones.
#[derive(Clone, Debug)]
pub struct LogStore {
    /// The database, flushed to make writes durable.
    db: sled::Db,
    /// Log entries as JSON, keyed by big-endian index so that key order is log order.
    logs: sled::Tree,
    /// Vote, committed and last purged log ids as JSON.
    meta: sled::Tree,
}

impl LogStore {
    /// Opens (or creates) the log trees in `db`.
    pub fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self { db: db.clone(), logs: db.open_tree("raft_log")?, meta: db.open_tree("raft_meta")? })
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageIOError<NodeId>> {
        let Some(bytes) = self.meta.get(key).map_err(|e| StorageIOError::read(&e))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| StorageIOError::read(&e))
    }

    fn write_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageIOError<NodeId>> {
        let bytes = serde_json::to_vec(value).map_err(|e| StorageIOError::write(&e))?;
        self.meta.insert(key, bytes).map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), sled::Error> {
        self.db.flush_async().await.map(|_| ())
    }

    fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageIOError<NodeId>> {
        let Some((_, bytes)) = self.logs.last().map_err(|e| StorageIOError::read_logs(&e))? else {
            return Ok(None);
        };
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        Ok(Some(entry.log_id))
    }

    /// Keys of all entries at or after `index`, newest first.
    fn keys_from(&self, index: u64) -> Result<Vec<sled::IVec>, StorageIOError<NodeId>> {
        let mut keys = Vec::new();
        for item in self.logs.range(index_key(index)..).rev() {
            let (key, _) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// The sled key of log index `index`.
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_bound(bound: Bound<&u64>) -> Bound<[u8; 8]> {
    match bound {
        Bound::Included(i) => Bound::Included(index_key(*i)),
        Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let bounds = (key_bound(range.start_bound()), key_bound(range.end_bound()));
        let mut entries = Vec::new();
        for item in self.logs.range(bounds) {
            let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            entries.push(serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_logs(&e))?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId<NodeId>> = self.read_meta(LAST_PURGED)?;
        let last_log_id = self.last_log_id()?.or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        self.meta.insert(VOTE, bytes).map_err(|e| StorageIOError::write_vote(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.read_meta(VOTE)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError> {
        Ok(self.write_meta(COMMITTED, &committed)?)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        Ok(self.read_meta::<Option<LogId<NodeId>>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes =
                serde_json::to_vec(&entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, &e))?;
            batch.insert(&index_key(entry.log_id.index), bytes);
        }
        // One atomic batch: a crash never leaves a hole in the middle of an append.
        self.logs.apply_batch(batch).map_err(|e| StorageIOError::write_logs(&e))?;
        match self.flush().await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(&e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for key in self.keys_from(log_id.index)? {
            batch.remove(key);
        }
        self.logs.apply_batch(batch).map_err(|e| StorageIOError::write_logs(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        // Record the purge point first: if a crash falls between the two writes, the log still reads as
        // consecutive from last_purged + 1.
        self.write_meta(LAST_PURGED, &log_id)?;
        let mut batch = sled::Batch::default();
        for item in self.logs.range(..=index_key(log_id.index)) {
            let (key, _) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            batch.remove(key);
        }
        self.logs.apply_batch(batch).map_err(|e| StorageIOError::write_logs(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}
