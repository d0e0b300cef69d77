//! The replicated state machine in sled: cache entries by key, the last applied log id, the last membership,
//! and the current snapshot.
//!
//! Durability: `apply` writes each batch of entries atomically (one sled transaction with the new last
//! applied id) without its own fsync; the Raft log is durable and openraft re-applies committed entries
//! after a crash. Snapshots are fsynced before they are reported, and openraft purges the log only up to a
//! snapshot, so every purged entry is covered by durable state.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::io::Cursor;

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use shared::completion::CachedCompletion;
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use super::types::{Command, CommandResponse, Entry, NodeId, StorageError, TypeConfig};

const LAST_APPLIED: &[u8] = b"last_applied";
const LAST_MEMBERSHIP: &[u8] = b"last_membership";
const SNAPSHOT_META: &[u8] = b"meta";
const SNAPSHOT_DATA: &[u8] = b"data";

/// Membership as stored: the last membership config and the log id that introduced it.
type Membership = StoredMembership<NodeId, openraft::BasicNode>;

/// What a snapshot is built from: the live entries, the last applied log id and the membership.
type SnapshotState = (SnapshotBody, Option<LogId<NodeId>>, Membership);

/// The cache state machine of one core node.
///
/// Cloning is cheap and shares the trees: the cache service reads entries from a clone while openraft
/// applies to another.
#[derive(Clone, Debug)]
pub struct StateMachineStore {
    /// The database, flushed when a snapshot is saved.
    db: sled::Db,
    /// Cache entries as JSON, keyed by cache key.
    entries: sled::Tree,
    /// Last applied log id and last membership as JSON.
    meta: sled::Tree,
    /// The current snapshot's metadata and bytes.
    snapshot: sled::Tree,
}

/// The bytes of a snapshot: every live entry of the state machine.
#[derive(Debug, Default, Serialize, Deserialize)]
struct SnapshotBody {
    /// The entries, in key order.
    entries: Vec<CachedCompletion>,
}

impl StateMachineStore {
    /// Opens (or creates) the state-machine trees in `db`.
    pub fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self {
            db: db.clone(),
            entries: db.open_tree("sm_entries")?,
            meta: db.open_tree("sm_meta")?,
            snapshot: db.open_tree("sm_snapshot")?,
        })
    }

    /// The entry stored under `key`, expired or not. Reads the local state (bounded staleness).
    pub fn get(&self, key: &str) -> Result<Option<CachedCompletion>, super::CoreError> {
        match self.entries.get(key.as_bytes())? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// The entry under `key` if it belongs to `tenant` and has not expired at `now_ms`.
    pub fn get_fresh(
        &self,
        key: &str,
        tenant: &str,
        now_ms: i64,
    ) -> Result<Option<CachedCompletion>, super::CoreError> {
        Ok(self.get(key)?.filter(|e| e.tenant == tenant && !e.is_expired(now_ms)))
    }

    /// Number of entries stored (expired ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn read_applied(&self) -> Result<(Option<LogId<NodeId>>, Membership), StorageIOError<NodeId>> {
        let read = |key: &[u8]| -> Result<Option<sled::IVec>, StorageIOError<NodeId>> {
            self.meta.get(key).map_err(|e| StorageIOError::read_state_machine(&e))
        };
        let last_applied = match read(LAST_APPLIED)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| StorageIOError::read_state_machine(&e))?,
            None => None,
        };
        let membership = match read(LAST_MEMBERSHIP)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| StorageIOError::read_state_machine(&e))?,
            None => Membership::default(),
        };
        Ok((last_applied, membership))
    }

    /// Copies the applied state, for a snapshot. Called from the state-machine task, so nothing is being
    /// applied at the same time and the copy is consistent.
    fn copy_state(&self) -> Result<SnapshotState, StorageIOError<NodeId>> {
        let (last_applied, membership) = self.read_applied()?;
        let now = now_ms();
        let mut body = SnapshotBody::default();
        for item in self.entries.iter() {
            let (_, bytes) = item.map_err(|e| StorageIOError::read_state_machine(&e))?;
            let entry: CachedCompletion =
                serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_state_machine(&e))?;
            // Expired entries are never served, so a snapshot leaves them out: compaction for free.
            if !entry.is_expired(now) {
                body.entries.push(entry);
            }
        }
        Ok((body, last_applied, membership))
    }

    /// Saves a snapshot as the current one and fsyncs it.
    async fn save_snapshot(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        data: &[u8],
    ) -> Result<(), StorageError> {
        let write_err = |e: &(dyn std::error::Error + 'static)| {
            StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::from_dyn(e, None))
        };
        let meta_bytes = serde_json::to_vec(meta).map_err(|e| write_err(&e))?;
        let mut batch = sled::Batch::default();
        batch.insert(SNAPSHOT_META, meta_bytes);
        batch.insert(SNAPSHOT_DATA, data);
        self.snapshot.apply_batch(batch).map_err(|e| write_err(&e))?;
        self.db.flush_async().await.map_err(|e| write_err(&e))?;
        Ok(())
    }

    /// Replaces the whole state with `body` at `last_applied`, atomically.
    fn replace_state(
        &self,
        body: &SnapshotBody,
        last_applied: &Option<LogId<NodeId>>,
        membership: &Membership,
    ) -> Result<(), StorageIOError<NodeId>> {
        let mut new_entries = Vec::with_capacity(body.entries.len());
        for entry in &body.entries {
            let bytes = serde_json::to_vec(entry).map_err(|e| StorageIOError::write_state_machine(&e))?;
            new_entries.push((entry.key.as_bytes().to_vec(), bytes));
        }
        let keep: BTreeSet<&[u8]> = new_entries.iter().map(|(k, _)| k.as_slice()).collect();
        let mut stale = Vec::new();
        for key in self.entries.iter().keys() {
            let key = key.map_err(|e| StorageIOError::read_state_machine(&e))?;
            if !keep.contains(key.as_ref()) {
                stale.push(key);
            }
        }
        let applied =
            serde_json::to_vec(last_applied).map_err(|e| StorageIOError::write_state_machine(&e))?;
        let membership =
            serde_json::to_vec(membership).map_err(|e| StorageIOError::write_state_machine(&e))?;
        let result: Result<(), TransactionError<()>> =
            (&self.entries, &self.meta).transaction(|(entries, meta)| {
                for key in &stale {
                    entries.remove(key.clone())?;
                }
                for (key, value) in &new_entries {
                    entries.insert(key.as_slice(), value.as_slice())?;
                }
                meta.insert(LAST_APPLIED, applied.as_slice())?;
                meta.insert(LAST_MEMBERSHIP, membership.as_slice())?;
                Ok::<(), ConflictableTransactionError<()>>(())
            });
        result.map_err(|e| StorageIOError::write_state_machine(&io_error(e)))
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A failed sled transaction as an I/O error. The transactions here never abort, so only storage fails.
fn io_error(e: TransactionError<()>) -> std::io::Error {
    match e {
        TransactionError::Storage(e) => std::io::Error::other(e),
        TransactionError::Abort(()) => std::io::Error::other("transaction aborted"),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError> {
        Ok(self.read_applied()?)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut responses = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        for entry in entries {
            last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => responses.push(CommandResponse::Empty),
                EntryPayload::Normal(Command::Put { entry: completion }) => {
                    let bytes = serde_json::to_vec(&completion)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &e))?;
                    puts.push((completion.key.as_bytes().to_vec(), bytes));
                    responses.push(CommandResponse::Stored { key: completion.key });
                }
                EntryPayload::Membership(m) => {
                    membership = Some(Membership::new(Some(entry.log_id), m));
                    responses.push(CommandResponse::Empty);
                }
            }
        }
        let Some(last) = last_applied else {
            return Ok(responses);
        };
        let applied = serde_json::to_vec(&Some(last)).map_err(|e| StorageIOError::apply(last, &e))?;
        let membership = match membership {
            Some(m) => Some(serde_json::to_vec(&m).map_err(|e| StorageIOError::apply(last, &e))?),
            None => None,
        };
        let result: Result<(), TransactionError<()>> =
            (&self.entries, &self.meta).transaction(|(tx_entries, tx_meta)| {
                for (key, value) in &puts {
                    tx_entries.insert(key.as_slice(), value.as_slice())?;
                }
                tx_meta.insert(LAST_APPLIED, applied.as_slice())?;
                if let Some(m) = &membership {
                    tx_meta.insert(LAST_MEMBERSHIP, m.as_slice())?;
                }
                Ok::<(), ConflictableTransactionError<()>>(())
            });
        result.map_err(|e| StorageIOError::apply(last, &io_error(e)))?;
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { store: self.clone(), state: self.copy_state() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let body: SnapshotBody = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        self.replace_state(&body, &meta.last_log_id, &meta.last_membership)?;
        self.save_snapshot(meta, &data).await?;
        tracing::info!(snapshot = %meta.snapshot_id, entries = body.entries.len(), "installed snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let read_err = |e: &(dyn std::error::Error + 'static)| {
            StorageIOError::read_snapshot(None, openraft::AnyError::from_dyn(e, None))
        };
        let meta = self.snapshot.get(SNAPSHOT_META).map_err(|e| read_err(&e))?;
        let data = self.snapshot.get(SNAPSHOT_DATA).map_err(|e| read_err(&e))?;
        let (Some(meta), Some(data)) = (meta, data) else {
            return Ok(None);
        };
        let meta = serde_json::from_slice(&meta).map_err(|e| read_err(&e))?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data.to_vec())) }))
    }
}

/// Builds a snapshot from a copy of the state taken when openraft asked for the builder.
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// Where the snapshot is saved.
    store: StateMachineStore,
    /// The copied state, or why it could not be read.
    state: Result<SnapshotState, StorageIOError<NodeId>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (body, last_log_id, last_membership) =
            std::mem::replace(&mut self.state, Ok((SnapshotBody::default(), None, Membership::default())))?;
        let data = serde_json::to_vec(&body).map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let unique = self.store.db.generate_id().map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let snapshot_id = match &last_log_id {
            Some(id) => format!("{}-{}-{unique}", id.leader_id.term, id.index),
            None => format!("none-{unique}"),
        };
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        self.store.save_snapshot(&meta, &data).await?;
        tracing::info!(snapshot = %meta.snapshot_id, entries = body.entries.len(), bytes = data.len(), "built snapshot");
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}
