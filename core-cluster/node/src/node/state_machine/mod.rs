//! The replicated state machine: cache entries (heads in memory, [`entry_index`], and rows in the content
//! log, [`contents`]), and in sled tenants, models, applied request ids, the state machine's clock, the last
//! applied log id and the last membership; snapshots are files of [`crate::node::raft::snapshot_file`], written and read
//! one row at a time, with their metadata beside them.
//!
//! Durability: `apply` writes each batch of log entries to the trees without a sync and without making it
//! atomic (`overlay.rs`). The trees are trusted only after a clean stop ([`super::clean_stop`]); after any
//! other, [`StateMachineStore::open`] starts again from the current snapshot (or from nothing), and
//! openraft applies the durable log after it again. Snapshots are synced, with their metadata beside them,
//! before they are reported, and openraft purges the log only up to a snapshot, so every purged entry is
//! covered by durable state.
//!
//! Time: the state machine's clock is the largest `issued_ms` of the proposals applied so far (the leader's
//! clock, never the replica's), so every replica stamps the same creation times and agrees on what had
//! expired at a given log index. Reads decide expiry at that clock too, so a read never sees time go
//! backwards, on one node or across a failover; the leader proposes a [`Command::Sweep`] every tick, which
//! keeps the clock moving on an idle cluster. Dead entries (expired at that clock, or invalidated by an
//! epoch or version) are never served; the leader lists them in a later sweep, and applying it removes
//! those still dead at its log time. Nothing changes outside `apply` and snapshot installation, so replicas
//! that applied the same log prefix hold the same state, and a snapshot is that whole state.
//!
//! The change feed: every log entry that invalidated something, moved a model's version or changed a
//! tenant's settings leaves a [`FeedRow`] at its index (its revision), which `CoreCache.Watch` streams to
//! the regional tier ([`crate::node::services::change_feed`]). Sweeps compact rows older than [`FEED_RETENTION_MS`] and
//! raise the feed's floor, below which a watcher must resync.

// openraft's storage error is large, and every trait method returns it; the private helpers return it too
// rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{LogId, Snapshot, SnapshotMeta, StorageIOError, StoredMembership};
#[cfg(test)]
use serde::{Deserialize, Serialize};

use sled::transaction::TransactionError;

mod applying;
mod contents;
mod digest;
mod entry_heads;
mod entry_index;
mod models;
mod opening;
mod overlay;
mod request_rows;
mod rows;
mod snapshots;
mod write_permit;

pub use digest::StateDigest;

use rows::Row;
use snapshots::blocking;
pub use snapshots::SnapshotBuilder;

use super::error::CoreError;
#[cfg(test)]
use super::records::AppliedRequest;
use super::records::{
    EntryHead, FeedRow, ModelState, StoredEntry, TenantState, FEED_RETENTION_MS, REQUEST_ID_RETENTION_MS,
};
use super::types::{Command, Entry, NodeId, ProposalResponse, StorageError, TypeConfig};
use crate::node::background::canary_judge::ModelArms;
use crate::node::raft::durable_log::DurableLog;
use crate::node::raft::snapshot_file::{SnapshotDir, SnapshotFile};
use shared::changes::Resync;
use shared::model_spec::ModelSpec;

const LAST_APPLIED: &[u8] = b"last_applied";
const LAST_MEMBERSHIP: &[u8] = b"last_membership";
const CLOCK: &[u8] = b"clock_ms";
/// Where binaries before snapshot metadata files kept the current snapshot's metadata (in `sm_snapshot`).
const LEGACY_SNAPSHOT_META: &[u8] = b"meta";
/// The meta key of the highest revision compacted out of the change feed.
pub(crate) const FEED_FLOOR: &[u8] = b"feed_floor";

/// Membership as stored: the last membership config and the log id that introduced it.
type Membership = StoredMembership<NodeId, openraft::BasicNode>;

/// Every tenant and every model, by name.
type Directory = (BTreeMap<String, TenantState>, BTreeMap<String, ModelState>);

/// A snapshot written to its file: the file, its rows, the last applied log id and the membership.
type Written = (PathBuf, u64, Option<LogId<NodeId>>, Membership);

/// How the previous run of a node ended ([`super::clean_stop`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreviousStop {
    /// It flushed and synced the trees and left the marker: they hold exactly what it applied.
    Clean,
    /// It crashed, was killed, or never ran: the trees may hold part of a batch, or miss writes.
    Unclean,
}

/// The cache state machine of one core node.
///
/// Cloning is cheap and shares the trees: the services read from a clone while openraft applies to another.
#[derive(Clone, Debug)]
pub struct StateMachineStore {
    /// The database, flushed when a snapshot is saved.
    db: sled::Db,
    /// Each cache entry's head by key as of the last clean stop ([`entry_index`]).
    entries: sled::Tree,
    /// Each cache entry's head by key, as applied ([`entry_heads`]).
    index: Arc<entry_index::EntryIndex>,
    /// The entries' stored rows ([`contents`]).
    contents: Arc<contents::Contents>,
    /// [`TenantState`] JSON by tenant name.
    tenants: sled::Tree,
    /// [`ModelState`] rows by model name, written back from `models` at snapshots and at a clean stop.
    model_rows: sled::Tree,
    /// Every model, as applied ([`models`]).
    models: Arc<models::Models>,
    /// Applied request ids, a row per proposal ([`request_rows`]).
    requests: sled::Tree,
    /// Which row holds each applied request id; changed only with the rows.
    request_index: Arc<std::sync::Mutex<request_rows::RequestIndex>>,
    /// How many ids the index holds, for the metrics (the index's lock is held while a batch applies).
    remembered_ids: Arc<std::sync::atomic::AtomicUsize>,
    /// How far the last applied proposal's stamp was ahead of this node's wall clock, in milliseconds (0
    /// when it was not ahead): the alarm for a leader elected with a clock ahead
    /// ([`crate::node::writes::leader_clock`]).
    leader_ahead_ms: Arc<std::sync::atomic::AtomicI64>,
    /// The last applied proposal's stamp and when it was applied (monotonic), from which
    /// [`StateMachineStore::log_time_ms`] reckons the log time now.
    last_stamp: Arc<std::sync::Mutex<Option<(i64, std::time::Instant)>>>,
    /// Last applied log id, last membership and the clock, as JSON.
    meta: sled::Tree,
    /// The snapshot files.
    snapshots: SnapshotDir,
    /// Held while a snapshot becomes the current one (builds and installs run on different tasks).
    keeping: Arc<tokio::sync::Mutex<()>>,
    /// The last log index the current (durable) snapshot covers.
    durable_snapshot: Arc<tokio::sync::watch::Sender<u64>>,
    /// Held while a batch or a snapshot is written to the trees; closed by [`StateMachineStore::close`].
    writes: write_permit::TreeLock,
    /// [`FeedRow`] JSON by revision (big-endian log index).
    feed: sled::Tree,
    /// The last applied log index, for watchers of the feed.
    applied: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    /// How far this node's log is durable: an entry is applied only once it is
    /// ([`crate::node::raft::durable_log`]). Absent in tests that apply entries no log holds.
    durable_log: Option<DurableLog>,
}

/// The whole state, decoded, for tests that compare replicas.
#[cfg(test)]
#[derive(Debug, Default, Serialize, Deserialize)]
struct SnapshotBody {
    /// The state machine's clock.
    clock_ms: i64,
    /// Every entry (dead ones not yet swept included), in key order.
    entries: Vec<(String, StoredEntry)>,
    /// Every tenant.
    tenants: Vec<(String, TenantState)>,
    /// Every model.
    models: Vec<(String, ModelState)>,
    /// Request ids still remembered.
    requests: Vec<(String, AppliedRequest)>,
    /// The change feed's rows.
    #[serde(default)]
    feed: Vec<(u64, FeedRow)>,
    /// The feed's floor.
    #[serde(default)]
    feed_floor: u64,
}

/// What a watcher of the feed gets after a revision.
#[derive(Debug)]
pub enum FeedRead {
    /// Rows after it were compacted: the watcher must resync.
    Compacted,
    /// The rows after it (up to a limit), in revision order.
    Rows(Vec<(u64, FeedRow)>),
}

/// Sweeps list at most this many items of each kind. The leader sweeps every tick (a second), so garbage
/// collection keeps up with up to this many writes (each leaves a request id) a second, more than a core
/// node sustains; a backlog (after a leader change) is worked off at this rate.
const SWEEP_LIMIT: usize = 10_000;
/// Entry heads a sweep examines, from where the previous sweep stopped: a full pass over a million
/// entries takes 25 sweeps, and no sweep walks the whole index.
const ENTRY_SCAN_LIMIT: usize = 40_000;

/// Where the next sweep goes on examining entry heads: after this key (`None`: from the first).
pub type SweepCursor = Option<Box<[u8]>>;

/// The keys of the entries whose heads `stale` picks, at most [`SWEEP_LIMIT`] of them among at most
/// [`ENTRY_SCAN_LIMIT`] heads after `cursor`; and where the next scan goes on (`None` once it reached
/// the last key, so the next pass starts again from the first).
fn sweepable(
    entries: &entry_index::EntryIndex,
    cursor: SweepCursor,
    stale: impl Fn(&EntryHead) -> bool,
) -> Result<(Vec<String>, SweepCursor), CoreError> {
    let mut keys = Vec::new();
    let mut scanned = 0;
    for (key, bytes) in entries.iter_after(cursor) {
        scanned += 1;
        if stale(&entry_heads::decode(&bytes)?.0) {
            keys.push(String::from_utf8_lossy(&key).into_owned());
        }
        if keys.len() == SWEEP_LIMIT || scanned == ENTRY_SCAN_LIMIT {
            return Ok((keys, Some(key)));
        }
    }
    Ok((keys, None))
}

fn decode<T: Row>(bytes: &[u8]) -> std::io::Result<T> {
    T::from_row(bytes)
}

impl StateMachineStore {
    fn tenant(&self, name: &str) -> Result<Option<TenantState>, CoreError> {
        Ok(self.tenants.get(name.as_bytes())?.map(|b| decode(&b)).transpose()?)
    }

    /// The entry under `key` if `tenant` owns it and it is live at the state machine's clock, from the
    /// local applied state.
    pub fn read(&self, key: &str, tenant: &str) -> Result<Option<StoredEntry>, CoreError> {
        let now_ms = self.clock_ms()?;
        let Some(stored) = entry_heads::entry(&self.index, &self.contents, key.as_bytes())? else {
            return Ok(None);
        };
        if stored.entry.tenant != tenant {
            return Ok(None);
        }
        let tenant = self.tenant(tenant)?;
        let live =
            self.models.with(&stored.entry.model, |model| stored.is_live(tenant.as_ref(), model, now_ms));
        Ok(live.then_some(stored))
    }

    /// Whether `tenant` exists.
    pub fn has_tenant(&self, tenant: &str) -> Result<bool, CoreError> {
        Ok(self.tenants.contains_key(tenant.as_bytes())?)
    }

    /// Every registered model and its current version, by name.
    pub fn model_versions(&self) -> Result<Vec<(String, u64)>, CoreError> {
        Ok(self.models.versions())
    }

    /// Every model's name, current version and version on trial (if any).
    pub fn model_arms(&self) -> Vec<ModelArms> {
        let all = self.models.all().into_iter();
        all.map(|(model, m)| ModelArms { model, current: m.version, trial: m.canary.map(|c| c.version) })
            .collect()
    }

    /// Every model with a version on trial: its name, current version and trial version.
    pub fn canaries(&self) -> Vec<(String, u64, u64)> {
        let all = self.models.all().into_iter();
        all.filter_map(|(name, m)| Some((name, m.version, m.canary?.version))).collect()
    }

    /// Every registered model's registry metadata, by name (models registered without one have none).
    pub fn model_specs(&self) -> Vec<(String, ModelSpec)> {
        self.models.all().into_iter().filter_map(|(name, m)| Some((name, m.spec?))).collect()
    }

    /// The current version of `model`, if it is registered.
    pub fn model_version(&self, model: &str) -> Result<Option<u64>, CoreError> {
        Ok(self.models.with(model, |m| m.map(|m| m.version)))
    }

    /// The state machine's clock: the leader's time of the last applied proposal.
    pub fn clock_ms(&self) -> Result<i64, CoreError> {
        Ok(self.meta.get(CLOCK)?.map(|b| decode(&b)).transpose()?.unwrap_or(0))
    }

    /// The log time now, as this node reckons it: the last applied proposal's stamp plus the monotonic
    /// time since it was applied (a leader's stamps run on its monotonic clock too,
    /// [`crate::node::writes::leader_clock`]); before any proposal was applied here, the larger of the
    /// state machine's clock and the wall clock. The change feed sends it, so that other tiers judge
    /// TTLs on the core's clock ([`shared::core_clock`]).
    pub fn log_time_ms(&self) -> i64 {
        let last = *self.last_stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match last {
            Some((stamp, at)) => {
                stamp.saturating_add(i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX / 2))
            }
            None => self.clock_ms().unwrap_or(0).max(now_ms()),
        }
    }

    /// Number of entries stored (dead ones not yet swept included).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Number of applied request ids remembered (each costs the in-memory index a few dozen bytes).
    pub fn remembered_request_ids(&self) -> usize {
        self.remembered_ids.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the state machine holds, for the metrics. Counting dead entries walks every entry head (a few
    /// milliseconds a hundred thousand); a size that cannot be read counts as 0.
    pub fn sizes(&self) -> super::metrics::StateSizes {
        let (content_bytes, content_live_bytes) = self.contents.sizes();
        let snapshot_bytes = self.snapshots.kept().map_or(0, |kept| {
            kept.iter().filter_map(|(file, _)| std::fs::metadata(file).ok()).map(|m| m.len()).sum()
        });
        super::metrics::StateSizes {
            entries: self.len(),
            request_ids: self.remembered_request_ids(),
            content_bytes,
            content_live_bytes,
            dead_entries: self.dead_entries().unwrap_or(0),
            feed_rows: self.feed.len(),
            snapshot_bytes,
            leader_ahead_ms: self.leader_ahead_ms.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Entries dead at the state machine's clock that no sweep removed yet.
    fn dead_entries(&self) -> Result<usize, CoreError> {
        let dead = self.dead_at_clock()?;
        let mut count = 0;
        for (_, bytes) in self.index.iter() {
            count += usize::from(dead(&entry_heads::decode(&bytes)?.0));
        }
        Ok(count)
    }

    /// Whether an entry head is dead (expired or invalidated) at the state machine's clock.
    fn dead_at_clock(&self) -> Result<impl Fn(&EntryHead) -> bool, CoreError> {
        let clock = self.clock_ms()?;
        let (tenants, models) = self.directory()?;
        Ok(move |head: &EntryHead| !head.is_live(tenants.get(&head.tenant), models.get(&head.model), clock))
    }

    /// Number of tenants.
    pub fn tenant_count(&self) -> usize {
        self.tenants.len()
    }

    /// Number of registered models.
    pub fn model_count(&self) -> usize {
        self.models.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// Tenants and models, for liveness checks over many entries.
    fn directory(&self) -> Result<Directory, CoreError> {
        let mut tenants = BTreeMap::new();
        for item in self.tenants.iter() {
            let (k, v) = item?;
            tenants.insert(String::from_utf8_lossy(&k).into_owned(), decode(&v)?);
        }
        Ok((tenants, self.models.all()))
    }

    /// What the leader's next sweep should list: entries dead at the clock (among the heads after
    /// `cursor`), request ids and feed rows past their retention (at most [`SWEEP_LIMIT`] of each), and
    /// the cursor for the sweep after. Only a proposal: applying it decides again.
    ///
    /// Request ids and feed rows are kept in log order, which is log-time order, so the listing stops at
    /// the first one still within its retention: its cost is what it lists, not what is kept.
    pub fn sweep_candidates(&self, cursor: SweepCursor) -> Result<(Command, SweepCursor), CoreError> {
        let clock = self.clock_ms()?;
        let (entries, cursor) = sweepable(&self.index, cursor, self.dead_at_clock()?)?;
        let mut requests = Vec::new();
        'rows: for row in self.request_rows() {
            for (id, request) in row? {
                if request.issued_ms.saturating_add(REQUEST_ID_RETENTION_MS) >= clock
                    || requests.len() == SWEEP_LIMIT
                {
                    break 'rows;
                }
                requests.push(id);
            }
        }
        let mut feed = Vec::new();
        for item in self.feed.iter() {
            let (revision, bytes) = item?;
            let row: FeedRow = decode(&bytes)?;
            // Rows are in revision order, which is log-time order.
            if row.at_ms.saturating_add(FEED_RETENTION_MS) >= clock || feed.len() == SWEEP_LIMIT {
                break;
            }
            feed.push(revision_of(&revision));
        }
        Ok((Command::Sweep { entries, requests, feed }, cursor))
    }

    /// The feed's rows after `revision`, at most `limit`, or [`FeedRead::Compacted`] when some were
    /// compacted away.
    pub fn feed_after(&self, revision: u64, limit: usize) -> Result<FeedRead, CoreError> {
        if revision < self.feed_floor()? {
            return Ok(FeedRead::Compacted);
        }
        let mut rows = Vec::new();
        for item in self.feed.range(revision.saturating_add(1).to_be_bytes()..).take(limit) {
            let (key, bytes) = item?;
            rows.push((revision_of(&key), decode(&bytes)?));
        }
        // A sweep applied meanwhile may have removed rows after `revision` (it raises the floor first).
        if revision < self.feed_floor()? {
            return Ok(FeedRead::Compacted);
        }
        Ok(FeedRead::Rows(rows))
    }

    /// The highest revision compacted out of the feed (0: none).
    pub fn feed_floor(&self) -> Result<u64, CoreError> {
        Ok(self.meta.get(FEED_FLOOR)?.map(|b| decode(&b)).transpose()?.unwrap_or(0))
    }

    /// Where a watcher that cannot follow the feed starts again: the applied revision, the clock as its
    /// floor, every model's version and the tenants that cache sampled answers.
    ///
    /// Read beside `apply`: the revision is read first, so anything applied meanwhile is at most sent
    /// again after it (every change is idempotent), and the floor can only be later (more conservative).
    pub fn resync_point(&self) -> Result<Resync, CoreError> {
        let revision = self.applied_index();
        let floor_ms = self.clock_ms()?;
        let (tenants, models) = self.directory()?;
        Ok(Resync {
            revision,
            floor_ms,
            specs: models.iter().filter_map(|(name, m)| Some((name.clone(), m.spec.clone()?))).collect(),
            canaries: models
                .iter()
                .filter_map(|(name, m)| m.canary.map(|c| (name.clone(), c.version, c.percent)))
                .collect(),
            models: models.into_iter().map(|(name, model)| (name, model.version)).collect(),
            cache_sampled: tenants
                .into_iter()
                .filter(|(_, t)| t.policy.cache_sampled)
                .map(|(n, _)| n)
                .collect(),
            tenant_floors: Vec::new(),
            tag_floors: Vec::new(),
            tagged_floors: Vec::new(),
            model_version_floors: Vec::new(),
        })
    }

    /// Every row of applied request ids, in log order.
    fn request_rows(&self) -> impl Iterator<Item = Result<request_rows::RequestRow, CoreError>> + '_ {
        self.requests.iter().map(|item| Ok(request_rows::decode_row(&item?.1)?))
    }

    /// The last applied log index (0: none).
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Notified with every new applied index.
    pub fn applied_updates(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    fn read_applied(&self) -> Result<(Option<LogId<NodeId>>, Membership), StorageIOError<NodeId>> {
        let read = |key: &[u8]| -> Result<Option<sled::IVec>, StorageIOError<NodeId>> {
            self.meta.get(key).map_err(|e| StorageIOError::read_state_machine(&e))
        };
        let last_applied = match read(LAST_APPLIED)? {
            Some(b) => decode(&b).map_err(|e| StorageIOError::read_state_machine(&e))?,
            None => None,
        };
        let membership = match read(LAST_MEMBERSHIP)? {
            Some(b) => decode(&b).map_err(|e| StorageIOError::read_state_machine(&e))?,
            None => Membership::default(),
        };
        Ok((last_applied, membership))
    }

    /// Copies the live state, decoded.
    #[cfg(test)]
    fn copy_state(&self) -> Result<(SnapshotBody, Option<LogId<NodeId>>), StorageIOError<NodeId>> {
        let err = |e: &dyn std::fmt::Display| {
            StorageIOError::read_state_machine(&std::io::Error::other(e.to_string()))
        };
        let (last_applied, _) = self.read_applied()?;
        let clock_ms = self.clock_ms().map_err(|e| err(&e))?;
        let (tenants, models) = self.directory().map_err(|e| err(&e))?;
        let feed_floor = self.feed_floor().map_err(|e| err(&e))?;
        let mut body = SnapshotBody { clock_ms, feed_floor, ..Default::default() };
        // Dead entries too: the snapshot is the state, so a replica that installs it equals one that
        // applied the log (the sweeps remove dead entries, in the log).
        for item in entry_heads::rows(&self.index, &self.contents) {
            let (key, bytes) = item.map_err(|e| err(&e))?;
            let stored: StoredEntry = decode(&bytes).map_err(|e| err(&e))?;
            body.entries.push((String::from_utf8_lossy(&key).into_owned(), stored));
        }
        for item in self.feed.iter() {
            let (revision, bytes) = item.map_err(|e| err(&e))?;
            body.feed.push((revision_of(&revision), decode(&bytes).map_err(|e| err(&e))?));
        }
        for row in self.request_rows() {
            body.requests.extend(row.map_err(|e| err(&e))?);
        }
        body.requests.sort_by(|a, b| a.0.cmp(&b.0));
        body.tenants = tenants.into_iter().collect();
        body.models = models.into_iter().collect();
        Ok((body, last_applied))
    }

    /// The whole state and the last applied log id as JSON, for tests that compare replicas.
    #[cfg(test)]
    pub fn export(&self) -> serde_json::Value {
        let (body, applied) = self.copy_state().expect("the state is readable");
        serde_json::json!({ "state": body, "applied": applied })
    }
}

/// The revision a feed key stands for (keys are big-endian log indexes).
fn revision_of(key: &[u8]) -> u64 {
    key.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A failed sled transaction as an I/O error: storage failed, or a value did not encode or decode.
fn tx_error(e: TransactionError<String>) -> std::io::Error {
    match e {
        TransactionError::Storage(e) => std::io::Error::other(e),
        TransactionError::Abort(message) => std::io::Error::other(message),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError> {
        Ok(self.read_applied()?)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ProposalResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        self.apply_entries(entries.into_iter().collect()).await
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { store: self.clone(), written: Some(self.write_snapshot_blocking().await) }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError> {
        let err = |e: &dyn std::fmt::Display| {
            StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string()))
        };
        let unique = self.db.generate_id().map_err(|e| err(&e))?;
        Ok(Box::new(self.snapshots.receiving(unique).map_err(|e| err(&e))?))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<SnapshotFile>,
    ) -> Result<(), StorageError> {
        let read_err = |e: &dyn std::fmt::Display| {
            StorageIOError::read_snapshot(Some(meta.signature()), &std::io::Error::other(e.to_string()))
        };
        tracing::info!(snapshot = %meta.snapshot_id, last = ?meta.last_log_id, "installing snapshot");
        let received = snapshot.received().map(Path::to_owned);
        let file = snapshot.into_rewound().map_err(|e| read_err(&e))?;
        let (store, last, membership) = (self.clone(), meta.last_log_id, meta.last_membership.clone());
        // The permit is held until the snapshot is kept: a clean stop waits for it, so a node never stops
        // with trees at the installed index and a current snapshot older than them (its next start would
        // wait for a snapshot that never comes).
        let permit = self.writes.permit().await.map_err(|e| read_err(&e))?;
        let installed = async {
            let rows = blocking(move || store.replace_state(&file, &last, &membership))
                .await
                .map_err(|e| read_err(&e))??;
            let file = match received {
                Some(path) => path,
                // Not one this store opened: the state it now holds is written out as the snapshot.
                None => self.write_snapshot_blocking().await?.0,
            };
            self.keep_snapshot(meta, &file).await?;
            Ok::<_, StorageError>(rows)
        };
        let rows = permit.finish(installed.await)?;
        tracing::info!(snapshot = %meta.snapshot_id, rows, "installed snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        self.current_snapshot()
    }
}
