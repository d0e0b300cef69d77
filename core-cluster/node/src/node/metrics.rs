//! The core node's Prometheus metrics: requests per RPC, cache hits and misses, commit and completion
//! latency, inference pods, and Raft's own state.

use openraft::{BasicNode, RaftMetrics, ServerState};
use shared::metrics::{Counter, Histogram, MetricsText};

use super::pods::PodPool;
use super::types::NodeId;
use crate::node::raft::log_store::SyncStats;

/// Bucket bounds of the group-commit batch size.
const BATCH_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Every counter and histogram of one core node.
#[derive(Debug)]
pub struct Metrics {
    /// `CoreCache.Lookup` calls.
    pub rpc_lookup: Counter,
    /// `CoreCache.Complete` calls.
    pub rpc_complete: Counter,
    /// `Raft.AppendEntries` calls served.
    pub rpc_append_entries: Counter,
    /// `Raft.Vote` calls served.
    pub rpc_vote: Counter,
    /// `Raft.InstallSnapshot` calls served.
    pub rpc_install_snapshot: Counter,
    /// `Raft.ClientWrite` calls served (writes forwarded to this node).
    pub rpc_client_write: Counter,
    /// Lookups that found a fresh entry.
    pub lookup_hits: Counter,
    /// Lookups that found nothing usable.
    pub lookup_misses: Counter,
    /// Completions answered from the state machine without inference.
    pub complete_hits: Counter,
    /// Completions that went to an inference pod.
    pub complete_misses: Counter,
    /// Completions that ended in an error.
    pub complete_errors: Counter,
    /// Writes this node forwarded to the leader and saw committed.
    pub forwarded_writes: Counter,
    /// `CoreStore.Write` calls.
    pub rpc_write: Counter,
    /// `CoreStore.Read` calls.
    pub rpc_read: Counter,
    /// Requests per proposal (group commit batch sizes).
    pub proposal_requests: Histogram,
    /// Entries regenerated under a new model version.
    pub refreshed: Counter,
    /// Refresh jobs that failed.
    pub refresh_failures: Counter,
    /// Time to commit a completion through Raft, in seconds.
    pub commit_seconds: Histogram,
    /// Time from a `Complete` call to its `Done` event (or error), in seconds.
    pub complete_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            rpc_lookup: Counter::default(),
            rpc_complete: Counter::default(),
            rpc_append_entries: Counter::default(),
            rpc_vote: Counter::default(),
            rpc_install_snapshot: Counter::default(),
            rpc_client_write: Counter::default(),
            lookup_hits: Counter::default(),
            lookup_misses: Counter::default(),
            complete_hits: Counter::default(),
            complete_misses: Counter::default(),
            complete_errors: Counter::default(),
            forwarded_writes: Counter::default(),
            rpc_write: Counter::default(),
            rpc_read: Counter::default(),
            proposal_requests: Histogram::with_bounds(BATCH_BOUNDS),
            refreshed: Counter::default(),
            refresh_failures: Counter::default(),
            commit_seconds: Histogram::latency(),
            complete_seconds: Histogram::latency(),
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
}

impl Metrics {
    /// The OpenMetrics text exposition (`mesh_core_*`) of these metrics, Raft's state, the pods, the state
    /// machine's sizes and what the write-ahead log's syncs did.
    pub fn render(
        &self,
        raft: &RaftMetrics<NodeId, BasicNode>,
        pods: &PodPool,
        state: StateSizes,
        log: SyncStats,
    ) -> String {
        const RPCS: &str = "mesh_core_rpc_requests_total";
        const RPCS_HELP: &str = "gRPC requests served, by service method.";
        const CACHE: &str = "mesh_core_cache_requests_total";
        const CACHE_HELP: &str = "Cache reads at the core, by RPC and result.";
        let mut text = MetricsText::default()
            .counter(RPCS, RPCS_HELP, &[("rpc", "lookup")], &self.rpc_lookup)
            .counter(RPCS, RPCS_HELP, &[("rpc", "complete")], &self.rpc_complete)
            .counter(RPCS, RPCS_HELP, &[("rpc", "append_entries")], &self.rpc_append_entries)
            .counter(RPCS, RPCS_HELP, &[("rpc", "vote")], &self.rpc_vote)
            .counter(RPCS, RPCS_HELP, &[("rpc", "install_snapshot")], &self.rpc_install_snapshot)
            .counter(RPCS, RPCS_HELP, &[("rpc", "client_write")], &self.rpc_client_write)
            .counter(RPCS, RPCS_HELP, &[("rpc", "write")], &self.rpc_write)
            .counter(RPCS, RPCS_HELP, &[("rpc", "read")], &self.rpc_read)
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
            .counter(
                "mesh_core_refresh_failures_total",
                "Refresh jobs that failed.",
                &[],
                &self.refresh_failures,
            )
            .counter(CACHE, CACHE_HELP, &[("rpc", "lookup"), ("result", "hit")], &self.lookup_hits)
            .counter(CACHE, CACHE_HELP, &[("rpc", "lookup"), ("result", "miss")], &self.lookup_misses)
            .counter(CACHE, CACHE_HELP, &[("rpc", "complete"), ("result", "hit")], &self.complete_hits)
            .counter(CACHE, CACHE_HELP, &[("rpc", "complete"), ("result", "miss")], &self.complete_misses)
            .counter(
                "mesh_core_complete_errors_total",
                "Completions that ended in an error.",
                &[],
                &self.complete_errors,
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
            .count(
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
            );

        let leader = raft.current_leader.map_or(-1.0, |id| id as f64);
        let applied = raft.last_applied.map_or(0.0, |id| id.index as f64);
        let last_log = raft.last_log_index.map_or(0.0, |i| i as f64);
        let is_leader = if raft.state == ServerState::Leader { 1.0 } else { 0.0 };
        text = text
            .gauge("mesh_core_raft_term", "Current Raft term.", &[], raft.current_term as f64)
            .gauge("mesh_core_raft_leader", "Id of the leader this node knows of, -1 if none.", &[], leader)
            .gauge("mesh_core_raft_is_leader", "1 if this node is the leader.", &[], is_leader)
            .gauge(
                "mesh_core_raft_last_applied",
                "Index of the last log entry applied to the state machine.",
                &[],
                applied,
            )
            .gauge("mesh_core_raft_last_log_index", "Index of the last log entry.", &[], last_log);

        for pod in pods.pods() {
            let labels = [("pod", pod.url())];
            text = text.gauge(
                "mesh_core_pod_healthy",
                "1 if the inference pod answered its last call.",
                &labels,
                if pod.is_healthy() { 1.0 } else { 0.0 },
            );
        }
        for pod in pods.pods() {
            text = text.counter(
                "mesh_core_pod_generate_total",
                "Generate calls sent to each pod.",
                &[("pod", pod.url())],
                pod.generate_calls(),
            );
        }
        for pod in pods.pods() {
            text = text.counter(
                "mesh_core_pod_failures_total",
                "Failed calls to each pod.",
                &[("pod", pod.url())],
                pod.failures(),
            );
        }
        text.finish()
    }
}
