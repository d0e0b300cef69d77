//! Building one step: decodes first, then prefill chunks of running sequences, then admissions,
//! with preemption by recompute when the KV cache runs out.

use crate::kv::{BlockCopy, BlockManager, OutOfBlocks, SeqBlocks};

use super::plan::{Aborted, PlanItem, StepPlan};
use super::sequence::{SeqId, Sequence};
use super::state::Scheduler;

/// The least a prefilling sequence gets of a shared step, however many share it.
const MIN_PREFILL_SHARE: usize = 32;

/// A step under construction.
struct StepBuilder {
    /// Tokens left in this step's budget.
    budget: usize,
    /// Most prompt tokens one sequence may prefill in this step: its tenant's equal share of the budget
    /// among the tenants that want prefill, split among that tenant's prefilling sequences (so neither
    /// a long prompt nor a tenant with many holds the step while another's short one waits).
    prefill_shares: PrefillShares,
    /// Planned items with the copies their writes need, in plan order.
    entries: Vec<(PlanItem, Vec<BlockCopy>)>,
    /// Sequences preempted so far.
    preempted: Vec<SeqId>,
    /// Sequences aborted so far.
    aborted: Vec<Aborted>,
}

impl StepBuilder {
    /// The tokens `seq` may take now: what is left of the budget, and no more than its prefill share
    /// while it prefills.
    fn allowance(&self, seq: &Sequence) -> usize {
        if seq.is_decoding() {
            self.budget
        } else {
            self.budget.min(self.prefill_shares.of(seq.salt))
        }
    }

    /// Drops `id`'s item (it was preempted after being planned) and refunds its tokens.
    fn unplan(&mut self, id: SeqId) {
        if let Some(at) = self.entries.iter().position(|(item, _)| item.seq == id) {
            let (item, _) = self.entries.remove(at);
            self.budget += item.tokens.len();
        }
    }

    /// The finished plan.
    fn into_plan(self) -> StepPlan {
        let mut plan = StepPlan { preempted: self.preempted, aborted: self.aborted, ..StepPlan::default() };
        for (item, copies) in self.entries {
            plan.items.push(item);
            plan.copies.extend(copies);
        }
        plan
    }
}

/// Each tenant's share of a step's prefill budget, per prefilling sequence.
struct PrefillShares {
    per_tenant: usize,
    sequences: std::collections::HashMap<u64, usize>,
}

impl PrefillShares {
    /// Shares of `budget` among the tenants (salts) of `prefilling`, one entry per sequence.
    fn new(budget: usize, prefilling: impl Iterator<Item = u64>) -> Self {
        let mut sequences = std::collections::HashMap::new();
        for tenant in prefilling {
            *sequences.entry(tenant).or_insert(0) += 1;
        }
        Self { per_tenant: budget / sequences.len().max(1), sequences }
    }

    /// The prefill tokens one sequence of `tenant` may take this step.
    fn of(&self, tenant: u64) -> usize {
        let split = self.sequences.get(&tenant).copied().unwrap_or(1).max(1);
        (self.per_tenant / split).max(MIN_PREFILL_SHARE)
    }
}

/// Where a sequence wants to compute this step, already fitted to the free blocks.
struct Fitted {
    /// First position.
    start: usize,
    /// One past the last position.
    end: usize,
}

impl Scheduler {
    /// Plans the next forward step.
    ///
    /// 1. Running sequences that are decoding get their uncomputed tokens (one, or one plus
    ///    drafts), interactive first, each all or nothing within the token budget.
    /// 2. Running sequences still prefilling get chunks of what is left of the budget, each at most
    ///    its share: the budget split equally among the tenants with sequences that want prefill
    ///    (running and waiting), then among each tenant's (at least [`MIN_PREFILL_SHARE`]). A long
    ///    prompt, or a tenant's many, is prefilled over more steps while others wait, rather than
    ///    holding every step until it is done.
    /// 3. Waiting sequences are admitted (prefix-cache hits count as computed) while the batch
    ///    and budget have room, unless this step preempted something.
    ///
    /// When a running sequence cannot get the blocks it needs, the lowest-priority,
    /// latest-arrived running sequence is preempted (freed, to be recomputed from the front of
    /// its waiting class) until it can; a sequence that cannot fit even alone is aborted.
    pub fn schedule(&mut self, bm: &mut BlockManager) -> StepPlan {
        let mut order: Vec<(bool, _, u64, SeqId)> = self
            .running
            .iter()
            .filter_map(|id| self.seqs.get(id))
            .map(|s| (!s.is_decoding(), s.priority, s.arrival, s.id))
            .collect();
        order.sort_unstable();
        let prefilling = order
            .iter()
            .filter(|(prefill, ..)| *prefill)
            .map(|(.., id)| *id)
            .chain(self.waiting.iter().map(|(id, _)| id))
            .filter_map(|id| self.seqs.get(&id).map(Sequence::salt));
        let budget = self.config.max_batched_tokens;
        let prefill_shares = PrefillShares::new(budget, prefilling);
        let mut step = StepBuilder {
            budget,
            prefill_shares,
            entries: Vec::new(),
            preempted: Vec::new(),
            aborted: Vec::new(),
        };
        for (_, _, _, id) in order {
            self.schedule_running(bm, id, &mut step);
        }
        if step.preempted.is_empty() {
            self.admit(bm, &mut step);
        }
        step.into_plan()
    }

    /// Plans a running sequence, preempting others (or itself) if blocks run short.
    fn schedule_running(&mut self, bm: &mut BlockManager, id: SeqId, step: &mut StepBuilder) {
        loop {
            // It may have been preempted earlier in this step.
            let Some(seq) = self.seqs.get(&id).filter(|s| s.is_running()) else { return };
            let Some((start, end)) = seq.wanted(step.allowance(seq)) else { return };
            let Some(blocks) = seq.blocks.as_ref() else { return };
            if let Some(fit) = fit(bm, seq, blocks, start, end) {
                self.plan(bm, id, fit, step);
                return;
            }
            let error = OutOfBlocks {
                needed: bm.blocks_needed(blocks, start, end),
                available: bm.available_blocks(),
            };
            if self.running.len() <= 1 {
                self.abort_in_step(bm, id, error, step);
                return;
            }
            let victim = self
                .running
                .iter()
                .filter_map(|r| self.seqs.get(r))
                .max_by_key(|s| (s.priority, s.arrival))
                .map_or(id, |s| s.id);
            self.preempt(bm, victim, step);
            if victim == id {
                return;
            }
        }
    }

    /// Admits waiting sequences in queue order while there is room.
    fn admit(&mut self, bm: &mut BlockManager, step: &mut StepBuilder) {
        while self.running.len() < self.config.max_running && step.budget > 0 {
            let Some(id) = self.waiting.front() else { return };
            let Some(seq) = self.seqs.get_mut(&id) else {
                // Unreachable while the queue and the map agree; drop the stray id.
                self.waiting.pop_front();
                continue;
            };
            let (blocks, cached) = bm.allocate_prefix(seq.salt, &seq.tokens);
            seq.computed = cached;
            let fitted = seq.wanted(step.allowance(seq)).and_then(|(s, e)| fit(bm, seq, &blocks, s, e));
            let Some(fitted) = fitted else {
                seq.computed = 0;
                if self.running.is_empty() {
                    // Nothing else holds blocks, so it can never fit.
                    let error = OutOfBlocks {
                        needed: bm.blocks_needed(&blocks, cached, seq.tokens.len()),
                        available: bm.available_blocks(),
                    };
                    seq.blocks = Some(blocks);
                    self.waiting.pop_front();
                    self.abort_in_step(bm, id, error, step);
                    continue;
                }
                bm.free(blocks);
                return;
            };
            seq.cached_prompt_tokens = cached;
            seq.blocks = Some(blocks);
            self.waiting.pop_front();
            self.running.push(id);
            self.plan(bm, id, fitted, step);
        }
    }

    /// Reserves the blocks for `fit` and adds the item to the step.
    fn plan(&mut self, bm: &mut BlockManager, id: SeqId, fit: Fitted, step: &mut StepBuilder) {
        let Some(seq) = self.seqs.get_mut(&id) else { return };
        let Some(blocks) = seq.blocks.as_mut() else { return };
        // `fit` checked the blocks are there; a failure here would be a bug, and planning nothing
        // for the sequence this step is the safe answer.
        if bm.ensure_capacity(blocks, fit.end).is_err() {
            return;
        }
        let Ok(copies) = bm.prepare_write(blocks, fit.start, fit.end) else { return };
        seq.scheduled = fit.end;
        let item = PlanItem {
            seq: id,
            start_pos: fit.start,
            tokens: seq.tokens[fit.start..fit.end].to_vec(),
            block_table: blocks.table().to_vec(),
            num_logits: seq.logits_for(fit.start, fit.end),
        };
        step.budget -= item.tokens.len();
        step.entries.push((item, copies));
    }

    /// Frees a running sequence and puts it back at the front of its waiting class.
    fn preempt(&mut self, bm: &mut BlockManager, id: SeqId, step: &mut StepBuilder) {
        let Some(seq) = self.seqs.get_mut(&id) else { return };
        if let Some(blocks) = seq.reset_for_recompute() {
            bm.free(blocks);
        }
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id, seq.priority, seq.salt);
        step.unplan(id);
        step.preempted.push(id);
        self.preemptions_total += 1;
    }

    /// Removes a sequence that cannot fit and reports it in the plan.
    fn abort_in_step(
        &mut self,
        bm: &mut BlockManager,
        id: SeqId,
        error: OutOfBlocks,
        step: &mut StepBuilder,
    ) {
        if self.remove(bm, id).is_ok() {
            step.unplan(id);
            step.aborted.push(Aborted { seq: id, error });
            self.aborted_total += 1;
        }
    }
}

/// Fits `start..end` to the available blocks: a decode (or the decode-like tail) whole or not at
/// all, a prefill shortened to the longest chunk whose blocks are available.
fn fit(bm: &BlockManager, seq: &Sequence, blocks: &SeqBlocks, start: usize, end: usize) -> Option<Fitted> {
    let available = bm.available_blocks();
    if bm.blocks_needed(blocks, start, end) <= available {
        return Some(Fitted { start, end });
    }
    if seq.is_decoding() {
        return None;
    }
    // Blocks needed grow with the end: binary-search the longest chunk that fits.
    let (mut lo, mut hi) = (start, end); // lo fits (trivially: nothing), hi does not
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if bm.blocks_needed(blocks, start, mid) <= available {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let end = seq.clamp_end(start, lo)?;
    Some(Fitted { start, end })
}
