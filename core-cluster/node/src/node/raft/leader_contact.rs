//! How recently this node heard from a leader that accepted it: the bound behind bounded-staleness reads.
//!
//! A follower records the time of every AppendEntries (heartbeats included) it accepted; a leader uses the
//! time since a quorum last acknowledged it. Either way, the local state is at most that old plus the
//! replication lag of the entries in flight, so a read that allows `max_staleness_ms` is refused when the
//! last contact is older than that.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::node::state_machine::now_ms;
use crate::node::types::{NodeId, Raft};

/// The time of the last accepted AppendEntries.
#[derive(Debug, Default)]
pub struct LeaderContact {
    last_ms: AtomicI64,
}

impl LeaderContact {
    /// Notes that a leader's AppendEntries was just accepted.
    pub fn touch(&self) {
        self.last_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since this node last knew its state was current: for the leader, since a quorum
    /// acknowledged it; for a follower, since it accepted an AppendEntries. `None` if never.
    pub fn staleness_ms(&self, id: NodeId, raft: &Raft) -> Option<u64> {
        let metrics = raft.metrics().borrow().clone();
        if metrics.current_leader == Some(id) {
            return metrics.millis_since_quorum_ack;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        (last > 0).then(|| u64::try_from(now_ms().saturating_sub(last)).unwrap_or(0))
    }
}
