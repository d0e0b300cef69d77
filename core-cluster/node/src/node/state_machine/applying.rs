//! Applying a batch of log entries: once this node's log holds them durably ([`crate::node::raft::durable_log`]),
//! the commands through an overlay, then the batch's writes to the trees ([`super::overlay`]).

use openraft::{EntryPayload, StorageIOError};

use super::super::apply::apply_proposal;
use super::super::types::{Entry, NodeId, ProposalResponse, StorageError};
use super::snapshots::blocking;
use super::{entry_heads, overlay, Membership, StateMachineStore, CLOCK, LAST_APPLIED, LAST_MEMBERSHIP};
use crate::node::raft::durable_log::DurableLog;

/// Batches of at least this many requests are applied on tokio's blocking pool, so that the node's runtime
/// (one thread by default) meanwhile sends and answers Raft messages: at 64 clients the leader's apply
/// held back the next AppendEntries, and a follower's its answer to the next heartbeat, by 1-2 ms a round.
/// Smaller ones are applied in place, where a thread hand-off would cost more than it saves.
const APPLY_ON_BLOCKING_POOL: usize = 8;

impl StateMachineStore {
    /// Makes every apply wait until this node's log holds its entries durably (`durable_log`).
    pub fn applying_durable(mut self, durable_log: DurableLog) -> Self {
        self.durable_log = Some(durable_log);
        self
    }

    /// Applies `entries` once they are durable in this node's log: small batches on this thread, larger
    /// ones on the blocking pool ([`APPLY_ON_BLOCKING_POOL`]).
    pub(super) async fn apply_entries(
        &mut self,
        entries: Vec<Entry>,
    ) -> Result<Vec<ProposalResponse>, StorageError> {
        let Some(last) = entries.last().map(|e| e.log_id) else {
            return Ok(Vec::new());
        };
        if let Some(durable_log) = &self.durable_log {
            durable_log.wait_for(last.index).await.map_err(|e| StorageIOError::apply(last, &e))?;
        }
        let requests: usize = entries
            .iter()
            .map(|e| match &e.payload {
                EntryPayload::Normal(proposal) => proposal.requests.len(),
                _ => 0,
            })
            .sum();
        // Held until the batch is written, on whichever thread writes it.
        let permit = self.writes.permit().await.map_err(|e| StorageIOError::apply(last, &e))?;
        let responses = if requests < APPLY_ON_BLOCKING_POOL {
            permit.finish(self.apply_now(&entries))?
        } else {
            let store = self.clone();
            blocking(move || permit.finish(store.apply_now(&entries)))
                .await
                .map_err(|e| StorageIOError::apply(last, &e))??
        };
        self.applied.send_replace(last.index);
        Ok(responses)
    }

    /// Applies `entries` (at least one) on this thread: their commands through an overlay, then the
    /// batch's writes to the trees.
    pub(super) fn apply_now(
        &self,
        entries: &[Entry],
    ) -> Result<Vec<ProposalResponse>, StorageIOError<NodeId>> {
        let Some(last) = entries.last().map(|e| e.log_id) else {
            return Ok(Vec::new());
        };
        let start_clock = self
            .clock_ms()
            .map_err(|e| StorageIOError::apply(last, &std::io::Error::other(e.to_string())))?;
        let mut membership = None;
        for entry in entries {
            if let EntryPayload::Membership(m) = &entry.payload {
                membership = Some(Membership::new(Some(entry.log_id), m.clone()));
            }
        }
        let applied = serde_json::to_vec(&Some(last)).map_err(|e| StorageIOError::apply(last, &e))?;
        let membership = match membership {
            Some(m) => Some(serde_json::to_vec(&m).map_err(|e| StorageIOError::apply(last, &e))?),
            None => None,
        };
        let trees = [&self.entries, &self.tenants, &self.model_rows, &self.requests, &self.feed, &self.meta];
        // Only openraft's state-machine task applies, one batch at a time: the lock is never contended.
        let mut request_index =
            self.request_index.lock().expect("the request index's lock is never poisoned");
        let cache = (&*self.index, &*self.contents);
        let mut overlay = overlay::Overlay::new(trees, &request_index, &self.models, cache);
        let mut clock = start_clock;
        let mut last_stamp = None;
        let mut responses = Vec::with_capacity(entries.len());
        let apply_err = |e: std::io::Error| StorageIOError::apply(last, &e);
        for entry in entries {
            match &entry.payload {
                EntryPayload::Normal(proposal) => {
                    clock = clock.max(proposal.issued_ms);
                    last_stamp = Some(proposal.issued_ms);
                    let revision = entry.log_id.index;
                    overlay.begin_proposal(revision);
                    let applied = apply_proposal(&mut overlay, revision, clock, &proposal.requests)
                        .map_err(apply_err)?;
                    responses.push(ProposalResponse { applied });
                }
                EntryPayload::Blank | EntryPayload::Membership(_) => {
                    responses.push(ProposalResponse::default())
                }
            }
        }
        let clock_bytes = serde_json::to_vec(&clock).map_err(|e| StorageIOError::apply(last, &e))?;
        overlay.set_raw(overlay::Table::Meta, CLOCK, Some(clock_bytes));
        overlay.set_raw(overlay::Table::Meta, LAST_APPLIED, Some(applied));
        if let Some(m) = membership {
            overlay.set_raw(overlay::Table::Meta, LAST_MEMBERSHIP, Some(m));
        }
        let written = overlay.into_writes().map_err(apply_err)?;
        overlay::commit(trees, cache, &written, LAST_APPLIED).map_err(apply_err)?;
        entry_heads::compact(&self.index, &self.contents).map_err(apply_err)?;
        self.models.set(written.models);
        request_index.apply(written.request_index);
        self.remembered_ids.store(request_index.len(), std::sync::atomic::Ordering::Relaxed);
        if let Some(stamp) = last_stamp {
            let ahead = stamp.saturating_sub(super::now_ms()).max(0);
            self.leader_ahead_ms.store(ahead, std::sync::atomic::Ordering::Relaxed);
            *self.last_stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((stamp, std::time::Instant::now()));
        }
        Ok(responses)
    }
}
