//! How recently a leader that a quorum acknowledged confirmed this node's applied state: the bound behind
//! bounded-staleness reads, lookups and the change feed.
//!
//! A leader's state is confirmed when a quorum last acknowledged it. A follower's is confirmed by an
//! accepted AppendEntries only under two conditions:
//! - the sender was a leader a quorum acknowledged: every AppendEntries carries the sender's time since its
//!   last quorum acknowledgement, so a deposed leader's heartbeats (accepted by a follower on its side of a
//!   partition) carry an ever older confirmation and confirm nothing new;
//! - this node has applied the commit index that AppendEntries carried: a follower replaying a long backlog
//!   is not fresh merely because it heard from the leader.
//!
//! Times are monotonic ([`Instant`]), so a wall-clock step moves no bound.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::node::types::{NodeId, Raft};

/// Confirmations kept while this node applies up to their commit index. A follower applies within a few
/// AppendEntries; when it falls further behind, the oldest confirmations go and it counts as stale
/// until it catches up to a kept one.
const PENDING_CONFIRMATIONS: usize = 64;

/// When the accepted AppendEntries confirmed the leader's state, and its commit index.
#[derive(Clone, Copy, Debug)]
struct Confirmation {
    at: Instant,
    commit: u64,
}

/// Confirmations from accepted AppendEntries.
#[derive(Debug, Default)]
pub struct LeaderContact(Mutex<Confirmations>);

#[derive(Debug, Default)]
struct Confirmations {
    /// The newest confirmation whose commit index this node had applied when it was last looked at.
    applied: Option<Confirmation>,
    /// Newer confirmations, oldest first, waiting for their commit index to be applied.
    pending: VecDeque<Confirmation>,
}

impl LeaderContact {
    /// Notes an accepted AppendEntries: its sender's time since a quorum acknowledged it (`None`: not
    /// known, which confirms nothing) and the commit index it carried.
    pub fn accepted(&self, leader_quorum_age: Option<Duration>, commit: u64) {
        let Some(age) = leader_quorum_age else { return };
        let Some(at) = Instant::now().checked_sub(age) else { return };
        let pending = &mut self.0.lock().expect("leader contact lock").pending;
        if pending.back().is_some_and(|last| last.at >= at && last.commit >= commit) {
            return;
        }
        if pending.len() == PENDING_CONFIRMATIONS {
            pending.pop_front();
        }
        pending.push_back(Confirmation { at, commit });
    }

    /// How long ago this node last knew its applied state was current: for the leader, since a quorum
    /// acknowledged it; for a follower, since the newest confirmation whose commit index it has applied.
    /// `None` if never.
    pub fn staleness(&self, id: NodeId, raft: &Raft) -> Option<Duration> {
        let (leading, quorum_ack, applied) = {
            let metrics = raft.metrics();
            let m = metrics.borrow();
            let leading = crate::node::context::known_leader(id, &m) == Some(id);
            (leading, m.millis_since_quorum_ack, m.last_applied.map_or(0, |id| id.index))
        };
        if leading {
            return quorum_ack.map(Duration::from_millis);
        }
        let confirmed = self.confirmed_at(applied)?;
        Some(confirmed.elapsed())
    }

    /// [`staleness`](Self::staleness) in whole milliseconds.
    pub fn staleness_ms(&self, id: NodeId, raft: &Raft) -> Option<u64> {
        self.staleness(id, raft).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// The newest confirmation time whose commit index is at or below `applied`; moves the pending
    /// confirmations it covers into the applied slot.
    fn confirmed_at(&self, applied: u64) -> Option<Instant> {
        let mut confirmations = self.0.lock().expect("leader contact lock");
        let Confirmations { applied: slot, pending } = &mut *confirmations;
        while let Some(newest) = pending.front().copied().filter(|c| c.commit <= applied) {
            pending.pop_front();
            if slot.is_none_or(|old| old.at < newest.at) {
                *slot = Some(newest);
            }
        }
        slot.map(|c| c.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_counts_once_its_commit_index_is_applied() {
        let contact = LeaderContact::default();
        assert_eq!(contact.confirmed_at(100), None, "never confirmed");
        contact.accepted(Some(Duration::from_millis(20)), 10);
        contact.accepted(Some(Duration::ZERO), 50);
        let first = contact.confirmed_at(10).expect("index 10 applied");
        assert!(first.elapsed() >= Duration::from_millis(20));
        // Behind the newer commit index, the older confirmation stands.
        assert_eq!(contact.confirmed_at(49), Some(first));
        let second = contact.confirmed_at(50).expect("index 50 applied");
        assert!(second > first);
    }

    #[test]
    fn an_unknown_quorum_age_confirms_nothing() {
        let contact = LeaderContact::default();
        contact.accepted(None, 1);
        assert_eq!(contact.confirmed_at(1), None);
    }

    #[test]
    fn a_deposed_leaders_heartbeats_confirm_nothing_newer() {
        let contact = LeaderContact::default();
        contact.accepted(Some(Duration::from_millis(10)), 5);
        let confirmed = contact.confirmed_at(5).expect("applied");
        // The deposed leader's last quorum acknowledgement only grows older with each heartbeat.
        std::thread::sleep(Duration::from_millis(30));
        contact.accepted(Some(confirmed.elapsed() + Duration::from_millis(1)), 5);
        assert_eq!(contact.confirmed_at(5), Some(confirmed));
    }

    #[test]
    fn a_follower_far_behind_keeps_a_bounded_queue() {
        let contact = LeaderContact::default();
        for commit in 1..=1_000 {
            contact.accepted(Some(Duration::ZERO), commit);
        }
        assert_eq!(contact.0.lock().expect("lock").pending.len(), PENDING_CONFIRMATIONS);
        assert!(contact.confirmed_at(900).is_none(), "the confirmations it could use were dropped");
        assert!(contact.confirmed_at(1_000).is_some());
    }
}
