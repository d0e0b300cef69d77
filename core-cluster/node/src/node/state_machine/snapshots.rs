//! The state machine's snapshots: written to a file from the live tables, made current, installed
//! from a file, and the builder openraft drives. File and database work runs on the blocking pool.

#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use openraft::{LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError};
use proto::raft::SnapshotTable;
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use super::{
    decode, entry_heads, tx_error, Membership, StateMachineStore, Written, CLOCK, FEED_FLOOR, LAST_APPLIED,
    LAST_MEMBERSHIP,
};
use crate::node::raft::snapshot_file::{Header, SnapshotDir, SnapshotFile, SnapshotReader};
use crate::node::types::{NodeId, StorageError, TypeConfig};

impl StateMachineStore {
    /// Writes the live state to a new snapshot file, row by row as the tables store them. Called from the
    /// state-machine task, so nothing is being applied at the same time and the file is consistent.
    /// Dead entries too: the snapshot is the state, so a replica that installs it equals one that applied
    /// the log (the sweeps remove dead entries, in the log).
    pub(super) fn write_snapshot(&self) -> Result<Written, StorageIOError<NodeId>> {
        let err = |e: &dyn std::fmt::Display| {
            StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string()))
        };
        let (last_applied, membership) = self.read_applied()?;
        let clock_ms = self.clock_ms().map_err(|e| err(&e))?;
        let feed_floor = self.feed_floor().map_err(|e| err(&e))?;
        self.models.write_back(&self.model_rows).map_err(|e| err(&e))?;
        let unique = self.db.generate_id().map_err(|e| err(&e))?;
        let mut writer = self.snapshots.writer(unique).map_err(|e| err(&e))?;
        writer.header(clock_ms, feed_floor).map_err(|e| err(&e))?;
        for (table, tree) in self.tables() {
            // Entries as whole rows: their heads' pointers mean nothing in another node's content log.
            let rows: Box<dyn Iterator<Item = std::io::Result<(sled::IVec, Vec<u8>)>>> = match table {
                SnapshotTable::Entries => Box::new(
                    entry_heads::rows(&self.index, &self.contents)
                        .map(|item| item.map(|(k, v)| (k.into(), v))),
                ),
                _ => Box::new(tree.iter().map(|item| {
                    item.map(|(k, v)| (k, v.to_vec())).map_err(|e| std::io::Error::other(e.to_string()))
                })),
            };
            for item in rows {
                let (key, value) = item.map_err(|e| err(&e))?;
                writer.row(table, &key, &value).map_err(|e| err(&e))?;
            }
        }
        let (path, rows) = writer.finish().map_err(|e| err(&e))?;
        Ok((path, rows, last_applied, membership))
    }

    /// The tables a snapshot holds, with their snapshot names.
    pub(super) fn tables(&self) -> [(SnapshotTable, &sled::Tree); 5] {
        [
            (SnapshotTable::Entries, &self.entries),
            (SnapshotTable::Tenants, &self.tenants),
            (SnapshotTable::Models, &self.model_rows),
            (SnapshotTable::Requests, &self.requests),
            (SnapshotTable::Feed, &self.feed),
        ]
    }

    /// Makes the complete snapshot file at `file` the current snapshot, described by `meta`: the file is
    /// synced, its metadata written and synced beside it, the file renamed, and older snapshots removed. A
    /// snapshot older than the current one (a build that finished after an install) is discarded instead:
    /// `None`.
    pub(super) async fn keep_snapshot(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        file: &Path,
    ) -> Result<Option<PathBuf>, StorageError> {
        let write_err = |e: &(dyn std::error::Error + 'static)| {
            StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::from_dyn(e, None))
        };
        let _keeping = self.keeping.lock().await;
        if self.current_meta()?.is_some_and(|current| current.last_log_id > meta.last_log_id) {
            self.snapshots.discard(file);
            return Ok(None);
        }
        let meta_bytes = serde_json::to_vec(meta).map_err(|e| write_err(&e))?;
        let (snapshots, file_owned, id) = (self.snapshots.clone(), file.to_owned(), meta.snapshot_id.clone());
        let kept = blocking(move || snapshots.keep(&file_owned, &id, &meta_bytes))
            .await
            .and_then(|kept| kept)
            .map_err(|e| write_err(&e))?;
        let covered = meta.last_log_id.map_or(0, |id| id.index);
        self.durable_snapshot.send_if_modified(|current| std::mem::replace(current, covered) != covered);
        Ok(Some(kept))
    }

    /// The last log index the current snapshot covers, as it becomes durable (for
    /// [`super::log_store::LogStore::purge_behind`]).
    pub fn durable_snapshot(&self) -> tokio::sync::watch::Receiver<u64> {
        self.durable_snapshot.subscribe()
    }

    /// The current snapshot's metadata.
    pub(super) fn current_meta(
        &self,
    ) -> Result<Option<SnapshotMeta<NodeId, openraft::BasicNode>>, StorageError> {
        let read_err = |e: &(dyn std::error::Error + 'static)| {
            StorageIOError::read_snapshot(None, openraft::AnyError::from_dyn(e, None))
        };
        Ok(current(&self.snapshots).map_err(|e| read_err(&e))?.map(|(meta, _)| meta))
    }

    /// The current snapshot, opened.
    pub(super) fn current_snapshot(&self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(meta) = self.current_meta()? else { return Ok(None) };
        let file = match SnapshotFile::open(&self.snapshots.file_of(&meta.snapshot_id)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageIOError::read_snapshot(Some(meta.signature()), &e).into()),
        };
        Ok(Some(Snapshot { meta, snapshot: Box::new(file) }))
    }

    /// [`StateMachineStore::write_snapshot`] off the runtime's threads (the caller, the state-machine
    /// task, waits, so nothing is applied meanwhile).
    pub(super) async fn write_snapshot_blocking(&self) -> Result<Written, StorageIOError<NodeId>> {
        let store = self.clone();
        blocking(move || store.write_snapshot())
            .await
            .unwrap_or_else(|e| Err(StorageIOError::write_snapshot(None, &e)))
    }

    /// Replaces the whole state with the rows of a snapshot file at `last_applied`, atomically. The rows
    /// are read one at a time; sled's transaction then holds them until it commits.
    pub(super) fn replace_state<R: std::io::Read>(
        &self,
        file: R,
        last_applied: &Option<LogId<NodeId>>,
        membership: &Membership,
    ) -> Result<u64, StorageIOError<NodeId>> {
        let err = |e: &dyn std::fmt::Display| {
            StorageIOError::write_state_machine(&std::io::Error::other(e.to_string()))
        };
        let (header, mut reader) = SnapshotReader::open(file).map_err(|e| err(&e))?;
        let Header { clock_ms, feed_floor } = header;
        // The entries (the bulk of a snapshot) go to the content log as they are read; only the other
        // tables' rows are held until the transaction that writes them.
        let mut entries = entry_heads::Stager::begin(&self.contents).map_err(|e| err(&e))?;
        let mut encoded: TableRows = Default::default();
        let mut rows = 0;
        while let Some(row) = reader.next_row().map_err(|e| err(&e))? {
            if row.table == SnapshotTable::Entries {
                entries.push(row.key, row.value).map_err(|e| err(&e))?;
            } else {
                encoded[row.table as usize].push((row.key, row.value));
            }
            rows += 1;
        }
        let staged = entries.finish().map_err(|e| err(&e))?;
        self.replace_with(encoded, staged, clock_ms, feed_floor, last_applied, membership)?;
        Ok(rows)
    }

    /// Replaces the whole state with `entries` (staged in the content log) and `encoded` (the other
    /// tables' rows, as stored) at `last_applied`, atomically.
    pub(super) fn replace_with(
        &self,
        encoded: TableRows,
        mut staged: entry_heads::Staged,
        clock_ms: i64,
        feed_floor: u64,
        last_applied: &Option<LogId<NodeId>>,
        membership: &Membership,
    ) -> Result<(), StorageIOError<NodeId>> {
        let err = |e: &dyn std::fmt::Display| {
            StorageIOError::write_state_machine(&std::io::Error::other(e.to_string()))
        };
        let trees = self.tables().map(|(_, tree)| tree);
        let mut stale: Vec<Vec<sled::IVec>> = Vec::new();
        // The entries' rows are in a new part of the content log; their heads go to the index once the
        // other tables are written (sled's entries tree gets them at a clean stop).
        for (table, (tree, rows)) in
            self.tables().map(|(table, _)| table).iter().zip(trees.iter().zip(&encoded))
        {
            if *table == SnapshotTable::Entries {
                stale.push(Vec::new());
                continue;
            }
            let keep: BTreeSet<&[u8]> = rows.iter().map(|(k, _)| k.as_slice()).collect();
            let mut gone = Vec::new();
            for key in tree.iter().keys() {
                let key = key.map_err(|e| err(&e))?;
                if !keep.contains(key.as_ref()) {
                    gone.push(key);
                }
            }
            stale.push(gone);
        }
        let applied = serde_json::to_vec(last_applied).map_err(|e| err(&e))?;
        let membership = serde_json::to_vec(membership).map_err(|e| err(&e))?;
        let clock = serde_json::to_vec(&clock_ms).map_err(|e| err(&e))?;
        let feed_floor = serde_json::to_vec(&feed_floor).map_err(|e| err(&e))?;
        let result: Result<(), TransactionError<String>> =
            (&self.tenants, &self.model_rows, &self.requests, &self.feed, &self.meta).transaction(
                |(tenants, models, requests, feed, meta)| {
                    for (i, tree) in [tenants, models, requests, feed].into_iter().enumerate() {
                        let i = i + 1; // after the entries
                        for key in &stale[i] {
                            tree.remove(key.clone())?;
                        }
                        for (key, value) in &encoded[i] {
                            tree.insert(key.as_slice(), value.as_slice())?;
                        }
                    }
                    meta.insert(LAST_APPLIED, applied.as_slice())?;
                    meta.insert(LAST_MEMBERSHIP, membership.as_slice())?;
                    meta.insert(CLOCK, clock.as_slice())?;
                    meta.insert(FEED_FLOOR, feed_floor.as_slice())?;
                    Ok::<(), ConflictableTransactionError<String>>(())
                },
            );
        result.map_err(|e| StorageIOError::write_state_machine(&tx_error(e)))?;
        self.index.replace(std::mem::take(&mut staged.heads));
        entry_heads::replaced(&self.contents, &staged).map_err(|e| err(&e))?;
        self.models.reload(&self.model_rows).map_err(|e| err(&e))?;
        let index = super::request_rows::RequestIndex::build(&self.requests).map_err(|e| err(&e))?;
        self.remembered_ids.store(index.len(), std::sync::atomic::Ordering::Relaxed);
        *self.request_index.lock().expect("the request index's lock is never poisoned") = index;
        self.applied.send_replace(last_applied.as_ref().map_or(0, |id| id.index));
        Ok(())
    }
}

/// Rows as stored, by snapshot table.
pub(super) type TableRows = [Vec<(Vec<u8>, Vec<u8>)>; 5];

/// The current snapshot: the newest complete one in `dir` (a crash in the middle of a keep may leave two)
/// and its file.
pub(super) fn current(
    dir: &SnapshotDir,
) -> std::io::Result<Option<(SnapshotMeta<NodeId, openraft::BasicNode>, PathBuf)>> {
    let mut newest: Option<(SnapshotMeta<NodeId, openraft::BasicNode>, PathBuf)> = None;
    for (file, bytes) in dir.kept()? {
        let meta: SnapshotMeta<NodeId, openraft::BasicNode> = decode(&bytes)?;
        if newest.as_ref().is_none_or(|(n, _)| meta.last_log_id > n.last_log_id) {
            newest = Some((meta, file));
        }
    }
    Ok(newest)
}

/// Runs blocking file and database work on tokio's blocking pool: a core node's runtime has one worker
/// by default, which the Raft messages and heartbeats need meanwhile.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, std::io::Error> {
    tokio::task::spawn_blocking(work).await.map_err(std::io::Error::other)
}

/// Builds a snapshot from the file written when openraft asked for the builder.
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// Where the snapshot is saved.
    pub(super) store: StateMachineStore,
    /// The snapshot's file, or why it could not be written.
    pub(super) written: Option<Result<Written, StorageIOError<NodeId>>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let written = match self.written.take() {
            Some(written) => written,
            None => self.store.write_snapshot_blocking().await,
        };
        let (file, rows, last_log_id, last_membership) = written?;
        let unique = self.store.db.generate_id().map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let snapshot_id = match &last_log_id {
            Some(id) => format!("{}-{}-{unique}", id.leader_id.term, id.index),
            None => format!("none-{unique}"),
        };
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        let Some(kept) = self.store.keep_snapshot(&meta, &file).await? else {
            // An install made a newer snapshot current meanwhile: that one is the snapshot.
            tracing::info!(snapshot = %meta.snapshot_id, "built snapshot superseded by an installed one");
            let current = self.store.current_snapshot()?;
            return current.ok_or_else(|| {
                StorageIOError::read_snapshot(None, &std::io::Error::other("no snapshot")).into()
            });
        };
        let opened = SnapshotFile::open(&kept)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        tracing::info!(snapshot = %meta.snapshot_id, rows, "built snapshot");
        Ok(Snapshot { meta, snapshot: Box::new(opened) })
    }
}
