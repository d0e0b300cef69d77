//! Coalesced read barriers for linearizable reads on the leader.
//!
//! A linearizable read needs the leader to confirm, with a quorum, that it still leads, and to wait until
//! its state machine has applied up to the commit index seen then (openraft's `ensure_linearizable`). One
//! such round covers every read that arrived before the round started, so concurrent readers share
//! rounds: a reader waits for the first round that starts after it arrived, and at most one round is in
//! flight. Under load this turns one quorum round trip per read into one per batch of reads.

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
}

impl ReadBarrier {
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
                *covered = round;
                Ok(())
            }
            Ok(Err(e)) => Err(CoreError::NoQuorum(format!("linearizable read: {e}"))),
            Err(_) => Err(CoreError::NoQuorum("linearizable read: no quorum answered in time".into())),
        }
    }
}
