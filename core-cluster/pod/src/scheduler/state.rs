//! [`Scheduler`]: the live sequences and their lifecycle (add, commit, append, rollback, fork,
//! finish, abort). Building a step is in `step.rs`.

use std::collections::HashMap;

use crate::kv::BlockManager;

use super::config::SchedulerConfig;
use super::error::SchedulerError;
use super::queue::WaitingQueue;
use super::sequence::{Priority, SeqId, Sequence};
use super::stats::SchedulerStats;

/// Continuous-batching scheduler: owns the sequences, decides each step's batch, and keeps their
/// KV blocks in step with the [`BlockManager`] passed to each call.
///
/// The engine's loop: [`schedule`](Self::schedule), perform the plan's copies and forward pass,
/// then for each item [`commit`](Self::commit) the computed positions, and where logits came back
/// [`rollback`](Self::rollback) rejected drafts, [`append`](Self::append) the sampled token (and
/// optionally [`append_drafts`](Self::append_drafts)), or [`finish`](Self::finish).
#[derive(Debug)]
pub struct Scheduler {
    /// Limits.
    pub(super) config: SchedulerConfig,
    /// Every live sequence, waiting or running.
    pub(super) seqs: HashMap<SeqId, Sequence>,
    /// Sequences waiting for admission.
    pub(super) waiting: WaitingQueue,
    /// Sequences in the batch (holding blocks), in admission order.
    pub(super) running: Vec<SeqId>,
    /// Next arrival tick.
    pub(super) next_arrival: u64,
    /// Preemptions since start.
    pub(super) preemptions_total: u64,
    /// Sequences aborted by the scheduler because they could not fit, since start.
    pub(super) aborted_total: u64,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config: config.normalized(),
            seqs: HashMap::new(),
            waiting: WaitingQueue::default(),
            running: Vec::new(),
            next_arrival: 0,
            preemptions_total: 0,
            aborted_total: 0,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// A live sequence.
    pub fn sequence(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Live sequences, waiting and running.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Whether no sequence is live.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Counters and gauges for metrics.
    pub fn stats(&self, bm: &BlockManager) -> SchedulerStats {
        SchedulerStats {
            waiting_interactive: self.waiting.len_of(Priority::Interactive),
            waiting_batch: self.waiting.len_of(Priority::Batch),
            running: self.running.len(),
            available_blocks: bm.available_blocks(),
            cached_blocks: bm.cached_blocks(),
            preemptions_total: self.preemptions_total,
            aborted_total: self.aborted_total,
        }
    }

    /// Queues a new sequence (interactive ahead of batch; within a class the tenants take turns, FIFO
    /// within a tenant). `salt` is the tenant's prefix-cache salt, and names the tenant.
    pub fn add(
        &mut self,
        id: SeqId,
        salt: u64,
        prompt: Vec<u32>,
        priority: Priority,
    ) -> Result<(), SchedulerError> {
        if self.seqs.contains_key(&id) {
            return Err(SchedulerError::DuplicateSeq(id));
        }
        if prompt.is_empty() {
            return Err(SchedulerError::EmptyPrompt);
        }
        if self.waiting.len() >= self.config.max_waiting {
            return Err(SchedulerError::QueueFull { waiting: self.waiting.len() });
        }
        let seq = Sequence {
            id,
            salt,
            priority,
            arrival: self.tick(),
            prompt_len: prompt.len(),
            tokens: prompt,
            drafts: 0,
            computed: 0,
            scheduled: 0,
            cached_prompt_tokens: 0,
            blocks: None,
        };
        self.seqs.insert(id, seq);
        self.waiting.push_back(id, priority, salt);
        Ok(())
    }

    /// Marks a running sequence's tokens up to `computed_upto` as computed (their KV is written)
    /// and registers newly full blocks in the prefix cache. Committing less than is already
    /// computed changes nothing; committing past what was scheduled is refused.
    pub fn commit(
        &mut self,
        bm: &mut BlockManager,
        id: SeqId,
        computed_upto: usize,
    ) -> Result<(), SchedulerError> {
        let seq = self.running_mut(id)?;
        if computed_upto > seq.scheduled {
            return Err(SchedulerError::NotScheduled {
                seq: id,
                requested: computed_upto,
                scheduled: seq.scheduled,
            });
        }
        if computed_upto <= seq.computed {
            return Ok(());
        }
        seq.computed = computed_upto;
        if let Some(blocks) = seq.blocks.as_mut() {
            bm.register_full_blocks(blocks, &seq.tokens[..computed_upto]);
        }
        Ok(())
    }

    /// Appends a sampled token. Every token before it must be computed (its logits sampled it);
    /// any drafts still there are thereby accepted (roll back the rejected ones first).
    pub fn append(&mut self, id: SeqId, token: u32) -> Result<(), SchedulerError> {
        let seq = self.running_mut(id)?;
        if seq.computed < seq.tokens.len() {
            return Err(SchedulerError::Uncomputed { seq: id, uncomputed: seq.tokens.len() - seq.computed });
        }
        seq.tokens.push(token);
        seq.drafts = 0;
        Ok(())
    }

    /// Appends draft tokens for speculative verification: the next step computes the last
    /// sampled token and all drafts together and returns logits for each.
    pub fn append_drafts(&mut self, id: SeqId, drafts: &[u32]) -> Result<(), SchedulerError> {
        let budget = self.config.max_batched_tokens;
        let seq = self.running_mut(id)?;
        let total = seq.drafts + drafts.len();
        // The verification step computes the last sampled token too.
        if total + 1 > budget {
            return Err(SchedulerError::TooManyDrafts { seq: id, drafts: total, budget });
        }
        seq.tokens.extend_from_slice(drafts);
        seq.drafts = total;
        Ok(())
    }

    /// Keeps only the first `len` tokens (rejected drafts, or any other rollback): tokens,
    /// computed positions and blocks past `len` are dropped. Drafts before `len` stay drafts until
    /// the next [`append`](Self::append). When all `len` tokens are computed, nothing is left to
    /// schedule until the engine appends the token it samples from the logits it already has
    /// (after verification: the bonus token).
    pub fn rollback(&mut self, bm: &mut BlockManager, id: SeqId, len: usize) -> Result<(), SchedulerError> {
        let seq = self.seqs.get_mut(&id).ok_or(SchedulerError::UnknownSeq(id))?;
        let tokens = seq.tokens.len();
        if len == 0 || len > tokens {
            return Err(SchedulerError::BadRollback { seq: id, len, tokens });
        }
        seq.drafts = seq.drafts.saturating_sub(tokens - len);
        seq.tokens.truncate(len);
        seq.prompt_len = seq.prompt_len.min(len);
        seq.computed = seq.computed.min(len);
        seq.scheduled = seq.scheduled.min(len);
        if let Some(blocks) = seq.blocks.as_mut() {
            bm.truncate(blocks, len);
        }
        Ok(())
    }

    /// Starts `child` as a copy of the running `parent`, sharing its KV blocks (copy-on-write),
    /// for several choices of one prompt. The child counts as the latest arrival.
    pub fn fork(&mut self, bm: &mut BlockManager, parent: SeqId, child: SeqId) -> Result<(), SchedulerError> {
        if self.seqs.contains_key(&child) {
            return Err(SchedulerError::DuplicateSeq(child));
        }
        if self.running.len() >= self.config.max_running {
            return Err(SchedulerError::RunningFull);
        }
        let arrival = self.tick();
        let p = self.running_mut(parent)?;
        let blocks = p.blocks.as_ref().map(|b| bm.fork(b));
        let seq = Sequence {
            id: child,
            salt: p.salt,
            priority: p.priority,
            arrival,
            tokens: p.tokens.clone(),
            prompt_len: p.prompt_len,
            drafts: p.drafts,
            computed: p.computed,
            scheduled: p.computed,
            cached_prompt_tokens: p.cached_prompt_tokens,
            blocks,
        };
        self.seqs.insert(child, seq);
        self.running.push(child);
        Ok(())
    }

    /// Removes a completed sequence, frees its blocks and returns its tokens.
    pub fn finish(&mut self, bm: &mut BlockManager, id: SeqId) -> Result<Vec<u32>, SchedulerError> {
        let seq = self.remove(bm, id)?;
        Ok(seq.tokens)
    }

    /// Removes a cancelled sequence, waiting or running, and frees its blocks.
    pub fn abort(&mut self, bm: &mut BlockManager, id: SeqId) -> Result<(), SchedulerError> {
        self.remove(bm, id).map(drop)
    }

    /// Takes a sequence out of the scheduler and releases its blocks.
    pub(super) fn remove(&mut self, bm: &mut BlockManager, id: SeqId) -> Result<Sequence, SchedulerError> {
        let mut seq = self.seqs.remove(&id).ok_or(SchedulerError::UnknownSeq(id))?;
        match seq.blocks.take() {
            Some(blocks) => {
                self.running.retain(|&r| r != id);
                bm.free(blocks);
            }
            None => {
                self.waiting.remove(id, seq.priority, seq.salt);
            }
        }
        Ok(seq)
    }

    /// A running sequence, mutably.
    fn running_mut(&mut self, id: SeqId) -> Result<&mut Sequence, SchedulerError> {
        let seq = self.seqs.get_mut(&id).ok_or(SchedulerError::UnknownSeq(id))?;
        if !seq.is_running() {
            return Err(SchedulerError::NotRunning(id));
        }
        Ok(seq)
    }

    /// The next arrival tick.
    fn tick(&mut self) -> u64 {
        self.next_arrival += 1;
        self.next_arrival
    }
}
