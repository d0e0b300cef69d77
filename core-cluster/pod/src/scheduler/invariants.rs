//! [`Scheduler::check_invariants`]: what must hold between any two calls, for tests and debug
//! assertions.

use std::collections::HashSet;

use crate::kv::BlockManager;

use super::state::Scheduler;

impl Scheduler {
    /// Checks the scheduler's invariants and the block manager's, including that the running
    /// sequences' tables account for every block reference (nothing leaked, nothing freed twice).
    /// O(sequences + blocks).
    ///
    /// - Every live sequence is either waiting (in its class's queue, no blocks, nothing
    ///   computed, no drafts) or running (in the batch, with blocks), never both, never twice.
    /// - The batch holds at most `max_running` sequences.
    /// - A running sequence has `computed <= scheduled <= tokens`, a non-empty verified prefix,
    ///   and a block table covering its computed tokens.
    pub fn check_invariants(&self, bm: &BlockManager) -> Result<(), String> {
        let mut seen = HashSet::new();
        for (id, priority) in self.waiting.iter() {
            let s = self.seqs.get(&id).ok_or(format!("waiting {id} is not live"))?;
            if !seen.insert(id) {
                return Err(format!("{id} is queued twice"));
            }
            if s.priority != priority || s.is_running() || s.computed != 0 || s.drafts != 0 {
                return Err(format!("waiting {id} is in the wrong state: {s:?}"));
            }
        }
        if self.running.len() > self.config.max_running {
            return Err(format!("{} running, max {}", self.running.len(), self.config.max_running));
        }
        for &id in &self.running {
            let s = self.seqs.get(&id).ok_or(format!("running {id} is not live"))?;
            if !seen.insert(id) {
                return Err(format!("{id} is both waiting and running, or running twice"));
            }
            let blocks = s.blocks.as_ref().ok_or(format!("running {id} holds no blocks"))?;
            if !(s.computed <= s.scheduled && s.scheduled <= s.tokens.len()) || s.drafts >= s.tokens.len() {
                return Err(format!("running {id} has inconsistent counts: {s:?}"));
            }
            if blocks.table().len() * bm.block_size() < s.computed {
                return Err(format!("running {id}'s blocks do not cover its computed tokens"));
            }
            if blocks.hashed_blocks() * bm.block_size() > s.computed {
                return Err(format!("running {id} has hashes for uncomputed blocks"));
            }
        }
        if seen.len() != self.seqs.len() {
            return Err(format!("{} live sequences but {} queued or running", self.seqs.len(), seen.len()));
        }
        bm.check_invariants()?;
        bm.check_ref_counts(self.running.iter().filter_map(|id| self.seqs.get(id)?.blocks.as_ref()))
    }
}
