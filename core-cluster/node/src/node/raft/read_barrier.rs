//! Coalesced read barriers for linearizable reads on the leader.
//!
//! A linearizable read needs the leader to confirm, with a quorum, that it still leads, and to wait until
//! its state machine has applied up to the commit index seen then (openraft's `ensure_linearizable`). One
//! such round covers every read that arrived before the round started, so concurrent readers share
//! rounds: a reader waits for the first round that starts after it arrived, and at most one round is in
//! flight. Under load this turns one quorum round trip per read into one per batch of reads.
//!
//! A node also waits, once, until it has applied every entry its log held when the process started
//! ([`ReadBarrier::from_start`]). A leader restored after a power loss may have read back an older
//! committed index than it had acknowledged (the committed pointer rides on the next sync), and openraft
//! fixes a read's index before the quorum round, at `max(noop, committed)`: without the start floor, a
//! read in the first round trip could miss an acknowledged write. Entries at or below the floor that
//! were never committed delay reads until the leader commits them (its own log is never truncated).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::node::error::CoreError;
use crate::node::types::Raft;

/// Shares quorum rounds between concurrent linearizable reads.
#[derive(Debug, Default)]
pub struct ReadBarrier {
    /// Tickets handed out, one per reader.
    issued: AtomicU64,
    /// Every ticket at or below this is covered by a finished round. Held while a round runs.
    covered: Mutex<u64>,
    /// The last log index when the process started, until this node has applied it (then 0).
    start_floor: AtomicU64,
}

impl ReadBarrier {
    /// A barrier that also waits until the entries the log held at start (up to `last_log_index`) are
    /// applied.
    pub fn from_start(last_log_index: u64) -> Self {
        Self { start_floor: AtomicU64::new(last_log_index), ..Self::default() }
    }

    /// Returns once a quorum round that started after this call has confirmed leadership and the state
    /// machine has caught up to it.
    pub async fn wait(&self, raft: &Raft, timeout: Duration) -> Result<(), CoreError> {
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut covered = self.covered.lock().await;
        if *covered >= ticket {
            return Ok(());
        }
        // Every ticket issued so far belongs to a reader that arrived before this round starts.
        let round = self.issued.load(Ordering::SeqCst);
        match tokio::time::timeout(timeout, raft.ensure_linearizable()).await {
            Ok(Ok(_)) => {
                self.wait_for_start_floor(raft, timeout).await?;
                *covered = round;
                Ok(())
            }
            Ok(Err(e)) => Err(CoreError::NoQuorum(format!("linearizable read: {e}"))),
            Err(_) => Err(CoreError::NoQuorum("linearizable read: no quorum answered in time".into())),
        }
    }

    /// Waits until the log's entries at start are applied (at once after the first time).
    async fn wait_for_start_floor(&self, raft: &Raft, timeout: Duration) -> Result<(), CoreError> {
        let floor = self.start_floor.load(Ordering::Acquire);
        if floor == 0 {
            return Ok(());
        }
        raft.wait(Some(timeout))
            .applied_index_at_least(Some(floor), "the entries held at start")
            .await
            .map_err(|e| {
                CoreError::NoQuorum(format!("linearizable read: entries held at start not applied: {e}"))
            })?;
        self.start_floor.store(0, Ordering::Release);
        Ok(())
    }
}
