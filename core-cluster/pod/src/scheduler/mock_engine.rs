//! A stand-in for the model engine in tests: a KV pool of fingerprints that checks every plan.
//!
//! The "KV" of position `p` is a fingerprint of the tenant salt and tokens `0..=p`. Running a plan
//! performs its copies, checks that each item reads back exactly its own sequence's KV for every
//! position before `start_pos` (so prefix-cache hits, copy-on-write, eviction and preemption all
//! served the right content), writes its positions, and commits them.

use std::collections::HashSet;

use crate::kv::BlockManager;

use super::{PlanItem, Scheduler, StepPlan};

/// The KV fingerprints of `tokens` under `salt`, one per position.
pub(super) fn kv_values(salt: u64, tokens: &[u32]) -> Vec<u64> {
    let mut h = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xcbf2_9ce4_8422_2325;
    tokens
        .iter()
        .map(|&t| {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3).rotate_left(17);
            h
        })
        .collect()
}

/// The fake KV pool.
pub(super) struct MockEngine {
    /// One fingerprint per slot (`None`: never written).
    pool: Vec<Option<u64>>,
    /// Tokens per block.
    block_size: usize,
}

impl MockEngine {
    /// A pool matching `bm`'s geometry.
    pub(super) fn new(bm: &BlockManager) -> Self {
        Self { pool: vec![None; bm.num_blocks() * bm.block_size()], block_size: bm.block_size() }
    }

    fn slot(&self, item: &PlanItem, pos: usize) -> usize {
        item.block_table[pos / self.block_size].index() * self.block_size + pos % self.block_size
    }

    /// Checks `plan` against the scheduler's limits and state, runs it, and commits each item up
    /// to `commit_to(item)` (clamped to the item's range).
    pub(super) fn run(
        &mut self,
        sched: &mut Scheduler,
        bm: &mut BlockManager,
        plan: &StepPlan,
        commit_to: impl Fn(&PlanItem) -> usize,
    ) -> Result<(), String> {
        let config = *sched.config();
        if plan.num_tokens() > config.max_batched_tokens {
            return Err(format!(
                "{} tokens over the budget of {}",
                plan.num_tokens(),
                config.max_batched_tokens
            ));
        }
        if plan.items.len() > config.max_running {
            return Err(format!("{} items, max_running {}", plan.items.len(), config.max_running));
        }
        let mut seen = HashSet::new();
        for item in &plan.items {
            if !seen.insert(item.seq) {
                return Err(format!("{} planned twice", item.seq));
            }
            let seq = sched.sequence(item.seq).ok_or(format!("planned {} is not live", item.seq))?;
            if !seq.is_running() || seq.computed() != item.start_pos || item.tokens.is_empty() {
                return Err(format!("item {item:?} does not continue running {seq:?}"));
            }
            if seq.tokens().get(item.start_pos..item.end_pos()) != Some(&item.tokens[..]) {
                return Err(format!("item {item:?} tokens differ from the sequence's"));
            }
            if seq.block_table() != item.block_table || item.num_logits > item.tokens.len() {
                return Err(format!("item {item:?} has a stale table or too many logits"));
            }
            for pos in item.start_pos..item.end_pos() {
                let block = item.block_table[pos / self.block_size];
                if bm.ref_count(block) != 1 || bm.registered_hash(block).is_some() {
                    return Err(format!("{} writes shared or cached {block:?}", item.seq));
                }
            }
        }
        for c in &plan.copies {
            for k in 0..self.block_size {
                self.pool[c.dst.index() * self.block_size + k] =
                    self.pool[c.src.index() * self.block_size + k];
            }
        }
        for item in &plan.items {
            let seq = sched.sequence(item.seq).ok_or("vanished")?;
            let want = kv_values(seq.salt(), &seq.tokens()[..item.end_pos()]);
            for (pos, w) in want.iter().enumerate().take(item.start_pos) {
                if self.pool[self.slot(item, pos)] != Some(*w) {
                    return Err(format!("{} reads wrong KV at position {pos}", item.seq));
                }
            }
            for (pos, w) in want.iter().enumerate().skip(item.start_pos) {
                let s = self.slot(item, pos);
                self.pool[s] = Some(*w);
            }
        }
        for item in &plan.items {
            let to = commit_to(item).clamp(item.start_pos, item.end_pos());
            sched.commit(bm, item.seq, to).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
