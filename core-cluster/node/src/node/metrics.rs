//! The core node's Prometheus metrics: requests per RPC, cache hits and misses, commit and completion
//! latency, inference pods, and Raft's own state.

use openraft::{BasicNode, RaftMetrics, ServerState};
use shared::label_values;
use shared::metrics::{Counter, Family, Histogram, MetricsText};

use super::backends::Backends;
use super::background::canary_judge::{ArmStats, ModelArms};
use super::services::auto_model::Decision;
use super::types::NodeId;
use crate::node::raft::log_store::SyncStats;
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Bucket bounds of the group-commit batch size.
const BATCH_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

label_values! {
    /// The gRPC method a request called.
    pub enum Rpc("rpc") {
        /// `CoreCache.Lookup`.
        Lookup = "lookup",
        /// `CoreCache.Complete`.
        Complete = "complete",
        /// `Raft.AppendEntries`.
        AppendEntries = "append_entries",
        /// `Raft.Vote`.
        Vote = "vote",
        /// `Raft.InstallSnapshot`.
        InstallSnapshot = "install_snapshot",
        /// `Raft.ClientWrite` (writes forwarded to this node).
        ClientWrite = "client_write",
        /// `CoreStore.Write`.
        Write = "write",
        /// `CoreStore.Read`.
        Read = "read",
    }
}

label_values! {
    /// Whether a cache read at the core found a fresh entry.
    pub enum CacheResult("result") {
        /// A fresh entry answered.
        Hit = "hit",
        /// Nothing usable.
        Miss = "miss",
    }
}

/// Every counter and histogram of one core node.
#[derive(Debug)]
pub struct Metrics {
    /// Requests served, by gRPC method.
    pub rpcs: Family<Rpc, Counter>,
    /// `CoreCache.Lookup` results.
    pub lookups: Family<CacheResult, Counter>,
    /// `CoreCache.Complete` results: answered from the state machine, or sent to an inference pod.
    pub completions: Family<CacheResult, Counter>,
    /// Completions that ended in an error.
    pub complete_errors: Counter,
    /// Generations stopped because their caller hung up.
    pub complete_cancelled: Counter,
    /// Completions the asked model's fallback answered.
    pub fallbacks: Counter,
    /// Writes this node forwarded to the leader and saw committed.
    pub forwarded_writes: Counter,
    /// Requests per proposal (group commit batch sizes).
    pub proposal_requests: Histogram,
    /// Entries regenerated under a new model version.
    pub refreshed: Counter,
    /// Refresh jobs that failed.
    pub refresh_failures: Counter,
    /// Time to commit a completion through Raft, in seconds.
    pub commit_seconds: Histogram,
    /// Proposals whose time the leader clamped, its wall clock being outside the log-time band.
    pub clamped_stamps: Counter,
    /// Time from a `Complete` call to its `Done` event (or error), in seconds.
    pub complete_seconds: Histogram,
    /// `model: "auto"` generations, by the model that answered and how many rungs it climbed.
    pub auto_answers: Mutex<BTreeMap<(String, usize), u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            rpcs: Family::default(),
            lookups: Family::default(),
            completions: Family::default(),
            complete_errors: Counter::default(),
            complete_cancelled: Counter::default(),
            fallbacks: Counter::default(),
            forwarded_writes: Counter::default(),
            proposal_requests: Histogram::with_bounds(BATCH_BOUNDS),
            refreshed: Counter::default(),
            refresh_failures: Counter::default(),
            commit_seconds: Histogram::latency(),
            clamped_stamps: Counter::default(),
            complete_seconds: Histogram::latency(),
            auto_answers: Mutex::default(),
        }
    }
}

/// What the state machine holds, for the metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct StateSizes {
    /// Entries, expired ones included.
    pub entries: usize,
    /// Applied request ids remembered.
    pub request_ids: usize,
    /// Bytes in the content log.
    pub content_bytes: u64,
    /// Bytes of the content log current entries point to.
    pub content_live_bytes: u64,
    /// Entries dead at the state machine's clock (expired or invalidated) that no sweep removed yet.
    pub dead_entries: usize,
    /// Rows of the change feed not yet compacted.
    pub feed_rows: usize,
    /// Bytes of the snapshot files kept.
    pub snapshot_bytes: u64,
    /// How far the last applied proposal's stamp was ahead of this node's clock, in milliseconds.
    pub leader_ahead_ms: i64,
}

impl Metrics {
    /// The OpenMetrics text exposition (`mesh_core_*`) of these metrics, Raft's state, the pods, the state
    /// machine's sizes and what the write-ahead log's syncs did.
    pub fn render(
        &self,
        raft: &RaftMetrics<NodeId, BasicNode>,
        backends: &Backends,
        state: StateSizes,
        log: SyncStats,
        arms: &ArmStats,
        models: &[ModelArms],
    ) -> String {
        let text = self.auto(self.requests(MetricsText::default()));
        let text = arms.exposition(text, models);
        let text = storage(text, state, log);
        let text = raft_state(text, raft);
        backend_health(text, backends).finish()
    }

    /// Counts one `model: "auto"` generation.
    pub fn record_auto(&self, decision: &Decision) {
        let mut answers = self.auto_answers.lock().unwrap_or_else(PoisonError::into_inner);
        *answers.entry((decision.answered_by.clone(), decision.escalations.len())).or_default() += 1;
    }

    /// `model: "auto"` generations by answering model and escalations.
    fn auto(&self, mut text: MetricsText) -> MetricsText {
        let answers = self.auto_answers.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for ((model, escalations), count) in answers {
            text = text.count(
                "mesh_core_auto_generations_total",
                "model: auto generations, by the model that answered and the rungs it climbed past (escalations).",
                &[("model", &model), ("escalations", &escalations.to_string())],
                count,
            );
        }
        text
    }

    /// Requests served, cache results, commits and refreshes.
    fn requests(&self, text: MetricsText) -> MetricsText {
        const CACHE: &str = "mesh_core_cache_requests_total";
        const CACHE_HELP: &str = "Cache reads at the core, by RPC and result.";
        text.family(
            "mesh_core_rpc_requests_total",
            "gRPC requests served, by service method.",
            &[],
            &self.rpcs,
        )
        .histogram(
            "mesh_core_proposal_requests",
            "Client requests per Raft entry proposed by this node (group commit).",
            &[],
            &self.proposal_requests,
        )
        .counter(
            "mesh_core_refreshed_total",
            "Entries regenerated after a model-version bump.",
            &[],
            &self.refreshed,
        )
        .counter("mesh_core_refresh_failures_total", "Refresh jobs that failed.", &[], &self.refresh_failures)
        .family(CACHE, CACHE_HELP, &[("rpc", "lookup")], &self.lookups)
        .family(CACHE, CACHE_HELP, &[("rpc", "complete")], &self.completions)
        .counter(
            "mesh_core_complete_errors_total",
            "Completions that ended in an error.",
            &[],
            &self.complete_errors,
        )
        .counter(
            "mesh_core_completions_cancelled_total",
            "Generations stopped because their caller hung up (nothing committed).",
            &[],
            &self.complete_cancelled,
        )
        .counter(
            "mesh_core_fallbacks_total",
            "Completions answered by the asked model's fallback model (--fallback-models).",
            &[],
            &self.fallbacks,
        )
        .counter(
            "mesh_core_clock_clamped_stamps_total",
            "Proposals whose time this leader clamped to its log-time band because its wall clock stepped.",
            &[],
            &self.clamped_stamps,
        )
        .counter(
            "mesh_core_forwarded_writes_total",
            "Writes forwarded to the leader and committed.",
            &[],
            &self.forwarded_writes,
        )
        .histogram(
            "mesh_core_commit_seconds",
            "Time to commit a completion through Raft.",
            &[],
            &self.commit_seconds,
        )
        .histogram(
            "mesh_core_complete_seconds",
            "Time from a Complete call to its last event.",
            &[],
            &self.complete_seconds,
        )
    }
}

/// What the write-ahead log's syncs did and what the state machine holds.
fn storage(text: MetricsText, state: StateSizes, log: SyncStats) -> MetricsText {
    text.count(
        "mesh_core_wal_syncs_total",
        "fdatasyncs of the Raft write-ahead log (one per group commit).",
        &[],
        log.syncs,
    )
    .count(
        "mesh_core_wal_synced_writes_total",
        "Appends, votes, truncations and purges those syncs made durable (per sync: the group-commit factor).",
        &[],
        log.synced_writes,
    )
    .count(
        "mesh_core_commits_held_back_total",
        "AppendEntries that told followers a lower commit index than the leader's, because the leader's own log was not yet synced that far.",
        &[],
        log.commits_held_back,
    )
    .gauge(
        "mesh_core_entries",
        "Entries in the local state machine (expired ones included).",
        &[],
        state.entries as f64,
    )
    .gauge(
        "mesh_core_request_ids",
        "Applied request ids remembered for deduplication (10 minutes each), held in an in-memory index.",
        &[],
        state.request_ids as f64,
    )
    .gauge(
        "mesh_core_content_log_bytes",
        "Bytes in the state machine's content log, where entries' rows are kept (overwritten and removed ones until compacted).",
        &[],
        state.content_bytes as f64,
    )
    .gauge(
        "mesh_core_content_log_live_bytes",
        "Bytes of the content log that current entries point to.",
        &[],
        state.content_live_bytes as f64,
    )
    .gauge(
        "mesh_core_dead_entries",
        "Entries dead at the state machine's clock (expired or invalidated) that no sweep has removed yet.",
        &[],
        state.dead_entries as f64,
    )
    .gauge("mesh_core_feed_rows", "Rows of the change feed not yet compacted.", &[], state.feed_rows as f64)
    .gauge(
        "mesh_core_snapshot_bytes",
        "Bytes of the snapshot files this node keeps.",
        &[],
        state.snapshot_bytes as f64,
    )
    .gauge(
        "mesh_core_leader_clock_ahead_ms",
        "How far the last applied proposal's time was ahead of this node's clock (0 if not ahead): a leader's clock ahead of the followers'.",
        &[],
        state.leader_ahead_ms as f64,
    )
}

/// Raft's state as this node sees it.
fn raft_state(text: MetricsText, raft: &RaftMetrics<NodeId, BasicNode>) -> MetricsText {
    let leader = raft.current_leader.map_or(-1.0, |id| id as f64);
    let applied = raft.last_applied.map_or(0.0, |id| id.index as f64);
    let last_log = raft.last_log_index.map_or(0.0, |i| i as f64);
    let is_leader = if raft.state == ServerState::Leader { 1.0 } else { 0.0 };
    text.gauge("mesh_core_raft_term", "Current Raft term.", &[], raft.current_term as f64)
        .gauge("mesh_core_raft_leader", "Id of the leader this node knows of, -1 if none.", &[], leader)
        .gauge("mesh_core_raft_is_leader", "1 if this node is the leader.", &[], is_leader)
        .gauge(
            "mesh_core_raft_last_applied",
            "Index of the last log entry applied to the state machine.",
            &[],
            applied,
        )
        .gauge("mesh_core_raft_last_log_index", "Index of the last log entry.", &[], last_log)
}

/// Each model backend's health, calls and failures (labelled `pod` with the backend's URL, whichever its
/// kind, as the dashboards and alerts read them).
fn backend_health(mut text: MetricsText, backends: &Backends) -> MetricsText {
    for backend in backends.all().iter() {
        text = text.gauge(
            "mesh_core_pod_healthy",
            "1 if the model backend (pod or OpenAI-compatible server) answered its last call.",
            &[("pod", backend.url())],
            if backend.is_healthy() { 1.0 } else { 0.0 },
        );
    }
    for backend in backends.all().iter() {
        text = text.counter(
            "mesh_core_pod_generate_total",
            "Generations sent to each model backend.",
            &[("pod", backend.url())],
            backend.generate_calls(),
        );
    }
    for backend in backends.all().iter() {
        text = text.gauge(
            "mesh_core_backend_breaker_open",
            "1 while the model backend's circuit breaker keeps generations away.",
            &[("backend", backend.url()), ("kind", backend.kind_name())],
            if backend.is_open() { 1.0 } else { 0.0 },
        );
    }
    for backend in backends.all().iter().filter(|b| b.rates().is_measured()) {
        text = text.gauge(
            "mesh_core_backend_prefill_tokens_per_second",
            "The model backend's measured prompt tokens a second for one request (moving average), as routing predicts with.",
            &[("backend", backend.url()), ("kind", backend.kind_name())],
            backend.rates().now().prefill_tokens_per_s,
        );
    }
    for backend in backends.all().iter().filter(|b| b.rates().is_measured()) {
        text = text.gauge(
            "mesh_core_backend_decode_tokens_per_second",
            "The model backend's measured generated tokens a second for one request (moving average).",
            &[("backend", backend.url()), ("kind", backend.kind_name())],
            backend.rates().now().decode_tokens_per_s,
        );
    }
    for backend in backends.all().iter() {
        if let Some(throughput) = backend.rates().throughput() {
            text = text.gauge(
                "mesh_core_backend_throughput_tokens_per_second",
                "The model backend's generated tokens finished a second while busy, over all its requests (moving average), as routing predicts its queue's draining with.",
                &[("backend", backend.url()), ("kind", backend.kind_name())],
                throughput,
            );
        }
    }
    for backend in backends.all().iter() {
        text = text.counter(
            "mesh_core_pod_failures_total",
            "Failed calls to each model backend.",
            &[("pod", backend.url())],
            backend.failures(),
        );
    }
    text
}
