//! Replication of the hot set and of invalidations between regional nodes.
//!
//! Each replicated key is a [`record::Record`]: a multi-value register under `crdts` vector clocks, with
//! invalidations as tombstones. Concurrent writes resolve the same way on every node, a stale write never
//! brings back an invalidated entry, and tombstones go only once every peer has acknowledged them
//! ([`store`]).
//!
//! What replicates: an answer becomes a record when its key is hot ([`lookup_frequency`]: a frequency
//! sketch with aging, `--replicate-min-lookups`), and every later answer or invalidation of a replicated key
//! follows. Cold answers stay local; another region fetches them on demand from the core, which holds
//! every answer.
//!
//! How: every node dials every peer ([`link`]) and streams its own writes over a bidirectional gRPC
//! stream (deltas one way, acknowledgements back); [`service`] is the receiving end. On every connect,
//! after a lagging delta feed, and every `--anti-entropy-interval-ms`, the link runs anti-entropy
//! ([`anti_entropy`]): digests of 256 key ranges, then per-key summaries of the ranges that differ, then
//! only the records the peer lacks or holds differently, pushed on the delta stream (the peer's own link
//! pushes the other way). So a partition or a restart heals by itself.
//!
//! # Layout
//! - [`record`]: the register and its merge (proptested laws in `record_tests.rs`).
//! - [`store`]: the node's records in memory and sled, range digests, tombstone collection.
//! - [`anti_entropy`]: the pure steps of a round (proptested convergence in `store_tests.rs`).
//! - [`wire`]: records to and from protobuf.
//! - [`lookup_frequency`], [`metrics`], [`link`], [`service`].
//! - `model_tests`: offer, invalidate, merge, acknowledgement and collection driven together against
//!   each node's view of the core's feed (late deltas after collection included).

pub mod anti_entropy;
pub mod link;
pub mod lookup_frequency;
pub mod metrics;
pub mod record;
pub mod service;
pub mod store;
pub mod wire;

#[cfg(test)]
mod model_tests;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shared::completion::CachedCompletion;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use self::lookup_frequency::LookupFrequency;
use self::metrics::ReplicationMetrics;
use self::record::{Record, Resolved, Tombstone, Value};
use self::store::ReplicaStore;
use crate::RegionalError;

/// Keys changed by local writes, buffered for the links; a link that falls further behind runs
/// anti-entropy instead.
const CHANGE_FEED: usize = 16 * 1024;

/// Where merged records take effect: the exact tier of the node.
pub trait Applier: Send + Sync + 'static {
    /// `key`'s record changed to `record` (merged from a peer).
    fn apply(&self, key: &str, record: &Record);

    /// Whether a peer's answer may be merged at all: false when an invalidation the node knows of (from
    /// the core's feed) covers it, so a delta that raced a tombstone, even one collected long ago, never
    /// brings the answer back.
    fn admits(&self, _entry: &CachedCompletion) -> bool {
        true
    }
}

/// How replication is set up.
#[derive(Clone, Debug)]
pub struct ReplicationSettings {
    /// This node's actor id in every clock (unique in the mesh).
    pub node_id: String,
    /// gRPC URLs of every peer.
    pub peers: Vec<String>,
    /// Lookups that make a key hot.
    pub min_lookups: u8,
    /// Time between anti-entropy rounds with each peer (and between sweeps).
    pub anti_entropy_interval: Duration,
    /// This node's identity, presented to peers and required of them.
    pub identity: daemon_runtime::TierIdentity,
    /// Bytes of live answers one tenant may have replicated here: past them its new keys are neither
    /// replicated from here nor accepted from peers (keys it has keep being updated).
    pub tenant_bytes: usize,
    /// The core's answer key: when set, a peer's answer is merged only if the core signed it.
    pub answer_verifier: Option<shared::answer_signature::AnswerVerifier>,
}

/// What a peer link reports for the status route.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PeerView {
    /// The peer's URL.
    pub url: String,
    /// Whether the delta stream is up.
    pub connected: bool,
    /// The last failure, if the stream is down.
    pub last_error: Option<String>,
    /// Anti-entropy rounds completed with this peer.
    pub anti_entropy_rounds: u64,
    /// Key ranges the last round found different.
    pub last_differing_ranges: usize,
    /// The last batch sequence number the peer acknowledged on the current stream.
    pub acked_seq: u64,
}

/// The replication state of a node.
pub struct Replication {
    settings: ReplicationSettings,
    store: ReplicaStore,
    hot: LookupFrequency,
    changes: broadcast::Sender<String>,
    peers: Vec<Mutex<PeerView>>,
    /// Counters.
    pub metrics: ReplicationMetrics,
}

impl Replication {
    /// Opens the replicated state (in `db` when given).
    pub fn new(settings: ReplicationSettings, db: Option<&sled::Db>) -> Result<Self, RegionalError> {
        if settings.node_id.is_empty() {
            return Err(RegionalError::Config("the replication node id must not be empty".into()));
        }
        let store = ReplicaStore::open(&settings.node_id, settings.peers.len(), db)?;
        let peers = settings
            .peers
            .iter()
            .map(|url| Mutex::new(PeerView { url: url.clone(), ..PeerView::default() }))
            .collect();
        Ok(Self {
            hot: LookupFrequency::new(settings.min_lookups),
            changes: broadcast::channel(CHANGE_FEED).0,
            store,
            peers,
            metrics: ReplicationMetrics::default(),
            settings,
        })
    }

    /// The records.
    pub fn store(&self) -> &ReplicaStore {
        &self.store
    }

    /// The settings.
    pub fn settings(&self) -> &ReplicationSettings {
        &self.settings
    }

    /// Counts a lookup of `key`; true when the key is now hot.
    pub fn touch(&self, key: &str) -> bool {
        self.hot.touch(key)
    }

    /// The node holds `entry` live: replicate it if its key is hot (`hot`, when the caller has just
    /// touched the key; else the sketch is asked) or already replicated, unless the record holds it
    /// already. Returns false when the entry must not be kept at all: the key holds an invalidation made
    /// at or after the answer was created (a lagging core read, or a stale copy, of what was invalidated).
    pub fn offer(&self, entry: &CachedCompletion, hot: Option<bool>, now_ms: i64) -> bool {
        // Decided and written under the store's lock, so a tombstone merged from a peer meanwhile is
        // either seen here (and the answer refused) or merged after this write (and it wins).
        let over_budget = self.over_budget(&entry.tenant, entry.size_bytes());
        let (admitted, wanted) = self.store.write_local_if(&entry.key, now_ms, |record| {
            let (admitted, wanted) = match record {
                None if over_budget => {
                    self.metrics.over_budget.inc();
                    (true, false)
                }
                None => (true, hot.unwrap_or_else(|| self.hot.is_hot(&entry.key))),
                Some(r) if invalidated_after(r, entry) => (false, false),
                // An older answer (a lagging core read, a slow flight) never supersedes a newer one held.
                Some(r) if newer_answer_held(r, entry, now_ms) => (true, false),
                Some(r) => (true, r.is_tombstone() || !r.holds_answer(entry)),
            };
            ((admitted, wanted), wanted.then(|| Value::Live(entry.clone())))
        });
        if wanted {
            let _ = self.changes.send(entry.key.clone());
        }
        admitted
    }

    /// Records an invalidation of `key` by `tenant` and sends it to every peer, when this node holds a
    /// replicated answer of `tenant` under it; returns whether it did. A tombstone supersedes whatever
    /// answer its peers hold under the key, so one written for a key this node holds no answer of the
    /// tenant for could drop another tenant's copies everywhere. Peers that hold the tenant's answer
    /// tombstone it themselves from their own feed, and a delta that races the invalidation is refused
    /// by the receiving node's cutoffs ([`Applier::admits`]).
    pub fn invalidate(&self, key: &str, tenant: &str, now_ms: i64) -> bool {
        let Some(record) = self.store.get(key) else { return false };
        let superseded: Vec<&CachedCompletion> = record
            .versions()
            .iter()
            .filter_map(|v| match &v.value {
                Value::Live(answer) => Some(answer),
                Value::Tombstone(_) => None,
            })
            .collect();
        if !superseded.iter().any(|answer| answer.tenant == tenant) {
            return false;
        }
        let tombstone = Tombstone::of(tenant, now_ms, superseded);
        self.store.write_local(key, Value::Tombstone(tombstone), now_ms);
        let _ = self.changes.send(key.to_owned());
        true
    }

    /// Merges a record from a peer and applies it when it changed anything; the reason when it is
    /// refused (counted by reason).
    pub fn merge_remote(
        &self,
        wire: proto::replication::Record,
        applier: &dyn Applier,
    ) -> Result<(), wire::Refused> {
        let checks =
            wire::Checks { verifier: self.settings.answer_verifier.as_ref(), now_ms: crate::clock::now_ms() };
        let (key, record) = wire::from_wire(wire, checks).inspect_err(|refused| {
            self.metrics.refused.get(refused.label()).inc();
        })?;
        if let Some(answer) = live_answer(&record) {
            if !applier.admits(answer) {
                self.metrics.records_ignored.inc();
                return Ok(());
            }
            if !self.store.contains(&key) && self.over_budget(&answer.tenant, answer.size_bytes()) {
                self.metrics.over_budget.inc();
                return Ok(());
            }
        }
        match self.store.merge(&key, &record, &|answer| applier.admits(answer)) {
            Some(merged) => {
                self.metrics.records_merged.inc();
                applier.apply(&key, &merged);
            }
            None => self.metrics.records_ignored.inc(),
        }
        Ok(())
    }

    /// Whether `size` more bytes of `tenant` would take it past its budget.
    fn over_budget(&self, tenant: &str, size: usize) -> bool {
        self.store.tenant_bytes(tenant).saturating_add(size) > self.settings.tenant_bytes
    }

    /// Every peer's link state.
    pub fn peer_views(&self) -> Vec<PeerView> {
        self.peers.iter().map(|p| p.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect()
    }

    fn update_peer(&self, index: usize, update: impl FnOnce(&mut PeerView)) {
        if let Some(peer) = self.peers.get(index) {
            update(&mut peer.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Starts a link to every peer and the periodic sweep; abort the handles to stop them.
    pub fn spawn(self: &Arc<Self>) -> Result<Vec<JoinHandle<()>>, RegionalError> {
        let mut tasks = Vec::new();
        for (index, url) in self.settings.peers.iter().enumerate() {
            let link = link::Link::new(Arc::clone(self), index, url)?;
            tasks.push(tokio::spawn(link.run()));
        }
        let this = Arc::clone(self);
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(this.settings.anti_entropy_interval);
            loop {
                tick.tick().await;
                let sweep = this.store.sweep(crate::clock::now_ms());
                this.metrics.tombstones_collected.add(sweep.collected as u64);
                this.metrics.records_expired.add(sweep.expired as u64);
            }
        }));
        Ok(tasks)
    }
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication").field("node_id", &self.settings.node_id).finish_non_exhaustive()
    }
}

/// Whether `record` holds an invalidation made at or after `entry` was created.
fn invalidated_after(record: &Record, entry: &CachedCompletion) -> bool {
    record.versions().iter().any(|v| match &v.value {
        Value::Tombstone(t) => t.invalidated_ms >= entry.created_ms,
        Value::Live(_) => false,
    })
}

/// Whether `record` holds a live answer created after `entry`.
fn newer_answer_held(record: &Record, entry: &CachedCompletion, now_ms: i64) -> bool {
    record.versions().iter().any(|v| match &v.value {
        Value::Live(held) => held.created_ms > entry.created_ms && !held.is_expired(now_ms),
        Value::Tombstone(_) => false,
    })
}

/// The answer a record reads as, if any.
pub fn live_answer(record: &Record) -> Option<&CachedCompletion> {
    match record.resolve() {
        Some(Resolved::Live(entry)) => Some(entry),
        _ => None,
    }
}

#[cfg(test)]
mod offer_tests {
    use super::*;

    fn replication() -> Arc<Replication> {
        with_budget(usize::MAX)
    }

    fn with_budget(tenant_bytes: usize) -> Arc<Replication> {
        let settings = ReplicationSettings {
            node_id: "here".into(),
            peers: vec![],
            min_lookups: 1,
            anti_entropy_interval: Duration::from_secs(5),
            identity: daemon_runtime::TierIdentity::insecure_secret("a-development-secret-of-32-bytes!")
                .expect("credential"),
            tenant_bytes,
            answer_verifier: None,
        };
        Arc::new(Replication::new(settings, None).expect("replication"))
    }

    fn entry(key: &str, created_ms: i64) -> CachedCompletion {
        CachedCompletion { tenant: "t".into(), created_ms, ..CachedCompletion::example(key, "answer") }
    }

    /// What an offer decides and writes happens under one lock: a peer's tombstone that arrives while
    /// the offer decides (here: merged from another thread during the decision) lands after the write,
    /// and wins as a concurrent invalidation. Deciding and writing under two locks let the write
    /// supersede that tombstone (its clock dominated everything held, the tombstone included).
    #[test]
    fn a_tombstone_merged_while_an_offer_decides_is_not_superseded() {
        let replication = replication();
        let mut tombstone = Record::default();
        tombstone.write_at(
            "peer",
            1,
            Value::Tombstone(Tombstone { tenant: "t".into(), invalidated_ms: 2_000, covers_until_ms: None }),
        );
        let admitted = replication.store().write_local_if("k", 1_500, |record| {
            assert!(record.is_none(), "nothing held yet");
            let merging = {
                let (replication, tombstone) = (Arc::clone(&replication), tombstone.clone());
                std::thread::spawn(move || replication.store().merge("k", &tombstone, &|_| true))
            };
            std::thread::sleep(Duration::from_millis(50));
            (merging, Some(Value::Live(entry("k", 1_000))))
        });
        admitted.join().expect("merge");
        let record = replication.store().get("k").expect("a record");
        assert!(matches!(record.resolve(), Some(Resolved::Invalidated)), "the answer was resurrected");
        assert!(!replication.offer(&entry("k", 1_000), Some(true), 1_600), "an older answer is refused");
    }

    #[test]
    fn only_the_owner_invalidating_its_answer_writes_a_tombstone() {
        let replication = replication();
        assert!(replication.offer(&entry("k", 1_000), Some(true), 1_100), "tenant t's answer");
        assert!(!replication.invalidate("k", "someone-else", 1_200), "another tenant's key");
        assert!(!replication.invalidate("absent", "t", 1_200), "a key holding no answer of the tenant");
        let record = replication.store().get("k").expect("a record");
        assert!(matches!(record.resolve(), Some(Resolved::Live(_))), "t's answer stays for its peers too");
        assert!(replication.invalidate("k", "t", 1_300));
        let record = replication.store().get("k").expect("a record");
        assert!(matches!(record.resolve(), Some(Resolved::Invalidated)));
    }

    #[test]
    fn an_older_answer_offered_never_supersedes_a_newer_one() {
        let replication = replication();
        let newer = CachedCompletion { content: "newer".into(), ..entry("k", 2_000) };
        assert!(replication.offer(&newer, Some(true), 2_100));
        let older = CachedCompletion { content: "older".into(), ..entry("k", 1_000) };
        replication.offer(&older, Some(true), 2_200);
        let record = replication.store().get("k").expect("a record");
        assert_eq!(live_answer(&record).map(|e| e.content.as_str()), Some("newer"));
    }

    #[test]
    fn a_tenant_past_its_budget_replicates_no_new_keys_and_others_still_do() {
        struct Admit;
        impl Applier for Admit {
            fn apply(&self, _: &str, _: &Record) {}
        }
        let of = |tenant: &str, key: &str| CachedCompletion { tenant: tenant.into(), ..entry(key, 1_000) };
        let size = of("flood", "k0").size_bytes();
        let replication = with_budget(3 * size);
        for i in 0..5 {
            replication.offer(&of("flood", &format!("k{i}")), Some(true), 2_000);
        }
        assert_eq!(replication.store().tenant_bytes("flood"), 3 * size, "three fit, two did not");
        assert_eq!(replication.metrics.over_budget.get(), 2);
        // The same from a peer: a new key of the flooding tenant is not taken, another tenant's is.
        let mut peer = Record::default();
        peer.write_at("peer", 1, Value::Live(of("flood", "from-peer")));
        assert!(replication.merge_remote(wire::to_wire("from-peer", &peer), &Admit).is_ok());
        assert!(replication.store().get("from-peer").is_none());
        let mut quiet = Record::default();
        quiet.write_at("peer", 1, Value::Live(of("quiet", "quiet-key")));
        assert!(replication.merge_remote(wire::to_wire("quiet-key", &quiet), &Admit).is_ok());
        assert!(replication.store().get("quiet-key").is_some());
        assert_eq!(replication.store().tenant_bytes("quiet"), of("quiet", "quiet-key").size_bytes());
    }
}
