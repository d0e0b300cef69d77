//! Counters of replication, rendered with the daemon's other metrics.

use shared::metrics::{Counter, Family, MetricsText};

use super::store::ReplicaStats;

shared::label_values! {
    /// Why a peer's record was refused ([`super::wire::Refused`]).
    pub enum RefusedReason("reason") {
        /// A version without a value.
        Empty = "empty",
        /// An answer filed under another key.
        Misfiled = "misfiled",
        /// An answer without the core's signature over what it says.
        Unsigned = "unsigned",
        /// An answer dated ahead of this node's clock.
        Future = "future",
        /// A clock counter out of range.
        DotRange = "dot_range",
    }
}

/// What replication did since the start.
#[derive(Debug, Default)]
pub struct ReplicationMetrics {
    /// Records sent to peers (deltas and anti-entropy pushes).
    pub records_sent: Counter,
    /// Records from peers that changed this node's state.
    pub records_merged: Counter,
    /// Records from peers that changed nothing (already held, or stale).
    pub records_ignored: Counter,
    /// New keys neither replicated nor accepted because their tenant was past its byte budget.
    pub over_budget: Counter,
    /// Encoded bytes of every replication message sent (batches, requests).
    pub bytes_sent: Counter,
    /// Encoded bytes of every replication message received (replies, fetched records).
    pub bytes_received: Counter,
    /// Anti-entropy rounds run against a peer.
    pub anti_entropy_rounds: Counter,
    /// Key ranges found different by anti-entropy.
    pub ranges_repaired: Counter,
    /// Tombstones collected after every peer acknowledged them.
    pub tombstones_collected: Counter,
    /// Records dropped because every answer in them expired.
    pub records_expired: Counter,
    /// Records from peers refused, by reason.
    pub refused: Family<RefusedReason, Counter>,
}

impl ReplicationMetrics {
    /// Appends the replication metrics and the store's gauges to `text`.
    pub fn render(&self, text: MetricsText, region: &str, stats: ReplicaStats) -> MetricsText {
        let r = [("region", region)];
        text.counter(
            "mesh_regional_replication_records_sent_total",
            "Records sent to peers.",
            &r,
            &self.records_sent,
        )
        .counter(
            "mesh_regional_replication_records_merged_total",
            "Records from peers that changed this node's state.",
            &r,
            &self.records_merged,
        )
        .counter(
            "mesh_regional_replication_records_ignored_total",
            "Records from peers already held or stale.",
            &r,
            &self.records_ignored,
        )
        .family(
            "mesh_regional_replication_refused_total",
            "Records from peers refused: unsigned or forged answers, future dates, clock counters out of range.",
            &r,
            &self.refused,
        )
        .counter(
            "mesh_regional_replication_over_budget_total",
            "New keys not replicated or accepted: their tenant was past its byte budget.",
            &r,
            &self.over_budget,
        )
        .counter(
            "mesh_regional_replication_sent_bytes_total",
            "Encoded bytes of replication messages sent.",
            &r,
            &self.bytes_sent,
        )
        .counter(
            "mesh_regional_replication_received_bytes_total",
            "Encoded bytes of replication messages received.",
            &r,
            &self.bytes_received,
        )
        .counter(
            "mesh_regional_anti_entropy_rounds_total",
            "Anti-entropy rounds run against a peer.",
            &r,
            &self.anti_entropy_rounds,
        )
        .counter(
            "mesh_regional_anti_entropy_ranges_repaired_total",
            "Key ranges anti-entropy found different.",
            &r,
            &self.ranges_repaired,
        )
        .counter(
            "mesh_regional_tombstones_collected_total",
            "Tombstones collected after every peer acknowledged them.",
            &r,
            &self.tombstones_collected,
        )
        .counter(
            "mesh_regional_replica_records_expired_total",
            "Replicated records dropped after their TTL.",
            &r,
            &self.records_expired,
        )
        .gauge("mesh_regional_replica_records", "Replicated records held.", &r, stats.records as f64)
        .gauge("mesh_regional_replica_tombstones", "Tombstones held.", &r, stats.tombstones as f64)
    }
}
