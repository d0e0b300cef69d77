//! How a state machine starts and stops: [`StateMachineStore::open`] trusts the trees only after a clean
//! stop and otherwise starts again from the current snapshot; [`StateMachineStore::close`] makes what was
//! applied whole on disk for the next start ([`super::super::clean_stop`]).

#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{LogId, SnapshotMeta, StorageIOError};

use super::super::error::CoreError;
use super::super::types::NodeId;
use super::{
    contents, decode, entry_heads, entry_index, models, request_rows, snapshots, write_permit, Membership,
    PreviousStop, StateMachineStore, LAST_APPLIED, LEGACY_SNAPSHOT_META,
};
use crate::node::raft::snapshot_file::SnapshotDir;

/// Moves the current snapshot's metadata that an older binary kept in the `sm_snapshot` tree into the
/// snapshot directory, beside its file (once: the tree goes after).
fn adopt_legacy_snapshot_meta(db: &sled::Db, snapshots: &SnapshotDir) -> Result<(), CoreError> {
    if !db.tree_names().iter().any(|name| name.as_ref() == b"sm_snapshot") {
        return Ok(());
    }
    let legacy = db.open_tree("sm_snapshot")?;
    if let Some(bytes) = legacy.get(LEGACY_SNAPSHOT_META)? {
        let meta: SnapshotMeta<NodeId, openraft::BasicNode> = decode(&bytes)?;
        if snapshots.file_of(&meta.snapshot_id).exists() && snapshots.kept()?.is_empty() {
            snapshots.write_meta(&meta.snapshot_id, &bytes)?;
            tracing::info!(snapshot = %meta.snapshot_id, "snapshot metadata moved beside its file");
        }
    }
    drop(legacy);
    db.drop_tree("sm_snapshot")?;
    Ok(())
}

impl StateMachineStore {
    /// Opens (or creates) the state-machine trees in `db`, with snapshot files in `dir/snapshots` and the
    /// entries' rows in `dir/contents`. After a stop that was not clean the trees are not trusted: the
    /// state becomes the current snapshot's (or nothing, before the first snapshot), and openraft applies
    /// the log after it again; so does a clean stop's state whose content log misses a row.
    pub fn open(db: &sled::Db, dir: &Path, previous: PreviousStop) -> Result<Self, CoreError> {
        let meta = db.open_tree("sm_meta")?;
        let entries = db.open_tree("sm_entries")?;
        let tenants = db.open_tree("sm_tenants")?;
        let model_rows = db.open_tree("sm_models")?;
        let models = Arc::new(models::Models::load(&model_rows)?);
        let requests = db.open_tree("sm_request_rows")?;
        let feed = db.open_tree("sm_feed")?;
        let snapshots = SnapshotDir::open(&dir.join("snapshots"))?;
        let contents = Arc::new(contents::Contents::open(&dir.join("contents"))?);
        let index = Arc::new(match previous {
            PreviousStop::Clean => entry_index::EntryIndex::load(&entries)?,
            PreviousStop::Unclean => entry_index::EntryIndex::default(),
        });
        adopt_legacy_snapshot_meta(db, &snapshots)?;
        let last_applied: Option<LogId<NodeId>> =
            meta.get(LAST_APPLIED)?.map(|b| decode(&b)).transpose()?.flatten();
        let request_index = request_rows::RequestIndex::build(&requests)?;
        let applied = tokio::sync::watch::Sender::new(last_applied.map_or(0, |id| id.index));
        let current = snapshots::current(&snapshots)?;
        let covered = current.as_ref().and_then(|(m, _)| m.last_log_id).map_or(0, |id| id.index);
        let store = Self {
            feed,
            applied: std::sync::Arc::new(applied),
            db: db.clone(),
            entries,
            index,
            contents,
            tenants,
            model_rows,
            models,
            requests,
            remembered_ids: Arc::new(request_index.len().into()),
            leader_ahead_ms: Arc::default(),
            last_stamp: Arc::default(),
            request_index: Arc::new(std::sync::Mutex::new(request_index)),
            meta,
            snapshots,
            keeping: Arc::default(),
            writes: write_permit::TreeLock::default(),
            durable_snapshot: Arc::new(tokio::sync::watch::Sender::new(covered)),
            durable_log: None,
        };
        match previous {
            PreviousStop::Unclean => store.start_over(current, last_applied)?,
            PreviousStop::Clean => match entry_heads::adopt(&store.index, &store.contents) {
                Ok(()) => {}
                // The content log lost rows a clean stop had synced (a file removed or cut short): the
                // snapshot and the log after it still hold them.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    tracing::warn!(
                        error = %e,
                        "state machine: the content log does not hold every entry's row; starting again from \
                         the snapshot and the log after it"
                    );
                    store.start_over(current, last_applied)?;
                }
                Err(e) => return Err(e.into()),
            },
        }
        Ok(store)
    }

    /// Waits for the write to the trees in progress, if any, refuses every later one, and flushes the
    /// database. Returns whether it then holds the whole of what was applied (no write failed part way),
    /// which [`super::clean_stop::leave`] may then record.
    pub async fn close(&self) -> Result<bool, CoreError> {
        let whole = self.writes.close().await;
        self.models.write_back(&self.model_rows)?;
        self.index.write_back(&self.entries)?;
        self.contents.sync()?;
        self.db.flush_async().await?;
        Ok(whole)
    }

    /// After a stop that was not clean: the state becomes `current`'s (or empty), and what older layouts
    /// kept beside the trees goes.
    fn start_over(
        &self,
        current: Option<(SnapshotMeta<NodeId, openraft::BasicNode>, PathBuf)>,
        found: Option<LogId<NodeId>>,
    ) -> Result<(), CoreError> {
        for older in [&b"sm_redo"[..], b"sm_requests"] {
            self.db.drop_tree(older)?;
        }
        let io = |e: StorageIOError<NodeId>| CoreError::Io(std::io::Error::other(e.to_string()));
        let from = match current {
            Some((meta, file)) => {
                let file = std::io::BufReader::new(std::fs::File::open(file)?);
                self.replace_state(file, &meta.last_log_id, &meta.last_membership).map_err(io)?;
                meta.last_log_id
            }
            None => {
                let nothing = super::entry_heads::Stager::begin(&self.contents)?.finish()?;
                self.replace_with(Default::default(), nothing, 0, 0, &None, &Membership::default())
                    .map_err(io)?;
                None
            }
        };
        if found.is_some() {
            tracing::info!(
                ?found,
                ?from,
                "state machine: the previous run did not stop cleanly; starting again from the snapshot and \
                 the log after it"
            );
        }
        Ok(())
    }
}
