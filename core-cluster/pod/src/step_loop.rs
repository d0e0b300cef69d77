//! The step loop: continuous batching on the one thread that owns the model's KV cache.
//!
//! Every iteration takes in new requests, lets speculating sequences append drafts, asks the
//! scheduler for a step (decodes first, then prefill chunks, within a token budget), runs one
//! forward pass over every sequence in it, and hands each sequence the tokens its logits give.
//! Sequences join and leave the batch at every step.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::engine::Engine;
use super::generation::{Generation, GenerationEvent, Progress};
use super::kv::BlockManager;
use super::load::Load;
use super::metrics::PodMetrics;
use super::model::{Batch, BatchSequence, KvPool, KvPrecision};
use super::request::{FinishReason, Priority, SamplingParams};
use super::scheduler::{PlanItem, Scheduler, SchedulerConfig, SchedulerError, SeqId};
use super::speculative::{SpeculativeConfig, Speculator};
use super::InferenceError;

/// How the step loop sizes its cache and batches.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// KV cache blocks.
    pub kv_blocks: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// How keys and values are stored.
    pub kv_precision: KvPrecision,
    /// Most sequences in one step.
    pub max_running: usize,
    /// Most tokens in one step (chunked prefill fills what decodes leave).
    pub max_batched_tokens: usize,
    /// Most sequences waiting to start.
    pub max_waiting: usize,
    /// Whether requests that do not say speculate.
    pub speculative_by_default: bool,
    /// How speculation drafts.
    pub speculative: SpeculativeConfig,
}

/// A generation waiting to join the loop.
pub struct Job {
    /// The templated prompt.
    pub prompt: Vec<u32>,
    /// How to sample.
    pub sampling: SamplingParams,
    /// The tenant, which salts the prefix cache.
    pub tenant: String,
    /// Interactive or batch.
    pub priority: Priority,
    /// Speculate or not; `None` for the default.
    pub speculative: Option<bool>,
    /// When it was queued.
    pub enqueued: Instant,
    /// The request's span.
    pub span: tracing::Span,
    /// Where events go; closed when the client has gone.
    pub events: UnboundedSender<GenerationEvent>,
}

/// The loop's state: the cache, the scheduler and every live generation.
pub struct StepLoop {
    engine: Arc<Engine>,
    config: LoopConfig,
    pool: KvPool,
    blocks: BlockManager,
    scheduler: Scheduler,
    generations: HashMap<SeqId, Generation>,
    next_id: u64,
    /// Keys the tenant salts, so nobody outside the process can aim at another tenant's blocks.
    salts: std::collections::hash_map::RandomState,
    metrics: Arc<PodMetrics>,
    load: Arc<Load>,
}

impl StepLoop {
    /// Allocates the KV cache.
    pub fn new(engine: Arc<Engine>, config: LoopConfig, metrics: Arc<PodMetrics>, load: Arc<Load>) -> Self {
        let pool =
            KvPool::new(engine.model().shape(), config.kv_blocks, config.block_size, config.kv_precision);
        let blocks = BlockManager::new(config.kv_blocks, config.block_size);
        let scheduler = Scheduler::new(SchedulerConfig {
            max_running: config.max_running,
            max_batched_tokens: config.max_batched_tokens,
            max_waiting: config.max_waiting,
        });
        load.total_blocks.store(config.kv_blocks, Ordering::Relaxed);
        load.block_size.store(config.block_size, Ordering::Relaxed);
        load.free_blocks.store(config.kv_blocks, Ordering::Relaxed);
        tracing::info!(
            blocks = config.kv_blocks,
            block_size = config.block_size,
            precision = ?config.kv_precision,
            mib = pool.bytes() / (1 << 20),
            "KV cache allocated"
        );
        Self {
            engine,
            config,
            pool,
            blocks,
            scheduler,
            generations: HashMap::new(),
            next_id: 0,
            salts: Default::default(),
            metrics,
            load,
        }
    }

    /// Runs until every sender of `jobs` is gone and the last generation has finished.
    pub fn run(mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            if self.generations.is_empty() {
                match jobs.recv() {
                    Ok(job) => self.admit(job),
                    Err(_) => break,
                }
            }
            while let Ok(job) = jobs.try_recv() {
                self.admit(job);
            }
            self.drop_abandoned();
            if !self.generations.is_empty() {
                self.step();
            }
            self.publish_load();
        }
        tracing::debug!("step loop stopped");
    }

    fn admit(&mut self, job: Job) {
        self.load.queued.fetch_sub(1, Ordering::Relaxed);
        let id = SeqId(self.next_id);
        self.next_id += 1;
        let salt = self.salts.hash_one(&job.tenant);
        // Drafts are verified against the unpenalized distribution, so a request with penalties decodes
        // one token at a time; so do requests of several choices and requests for log-probabilities
        // (each token's row is scored as it is sampled).
        let plain =
            job.sampling.penalties.is_none() && job.sampling.n == 1 && job.sampling.logprobs.is_none();
        let speculate = job.speculative.unwrap_or(self.config.speculative_by_default) && plain;
        let speculator = speculate.then(|| Speculator::new(&self.config.speculative, &job.prompt));
        let generation =
            Generation::new(job.sampling, &job.prompt, speculator, job.events, job.span, job.enqueued);
        match self.scheduler.add(id, salt, job.prompt, job.priority) {
            Ok(()) => {
                self.generations.insert(id, generation);
            }
            Err(SchedulerError::QueueFull { waiting }) => generation.fail(InferenceError::QueueFull(waiting)),
            Err(e) => generation.fail(InferenceError::InvalidRequest(e.to_string())),
        }
    }

    fn drop_abandoned(&mut self) {
        let gone: Vec<SeqId> =
            self.generations.iter().filter(|(_, g)| g.is_abandoned()).map(|(id, _)| *id).collect();
        for id in gone {
            self.generations.remove(&id);
            let _ = self.scheduler.abort(&mut self.blocks, id);
            self.metrics.cancelled.inc();
            tracing::debug!(seq = id.0, "client left; sequence dropped");
        }
    }

    /// Lets every speculating sequence that is about to decode append a draft.
    fn draft(&mut self) {
        let context = self.engine.context_len();
        for (&id, generation) in &mut self.generations {
            let remaining = generation.remaining();
            let Some(speculator) = generation.speculator.as_mut() else { continue };
            let Some(sequence) = self.scheduler.sequence(id) else { continue };
            let decoding = sequence.is_running()
                && sequence.drafts() == 0
                && sequence.computed() + 1 == sequence.tokens().len()
                && sequence.tokens().len() > sequence.prompt_len();
            if !decoding {
                continue;
            }
            // Accepted drafts plus the one token verification adds must fit the limits.
            let room = context.saturating_sub(sequence.tokens().len() + 1);
            let limit = remaining.saturating_sub(1).min(room);
            let draft = speculator.propose(limit);
            if !draft.is_empty() && self.scheduler.append_drafts(id, &draft).is_ok() {
                generation.pending_drafts = draft;
            }
        }
    }

    fn step(&mut self) {
        self.draft();
        let started = Instant::now();
        let plan = self.scheduler.schedule(&mut self.blocks);
        for aborted in &plan.aborted {
            if let Some(generation) = self.generations.remove(&aborted.seq) {
                generation.fail(InferenceError::KvCacheFull {
                    needed: aborted.error.needed,
                    available: aborted.error.available,
                });
                self.metrics.failed.inc();
            }
        }
        for id in &plan.preempted {
            self.metrics.preempted.inc();
            // Preemption dropped the sequence's unverified drafts; it is recomputed from its tokens.
            if let Some(generation) = self.generations.get_mut(id) {
                generation.pending_drafts.clear();
            }
        }
        for copy in &plan.copies {
            self.pool.copy_block(copy.src.index(), copy.dst.index());
        }
        if plan.items.is_empty() {
            // Nothing fits this step (everything waits on blocks): yield instead of spinning.
            std::thread::sleep(std::time::Duration::from_millis(1));
            return;
        }
        let tables: Vec<Vec<u32>> =
            plan.items.iter().map(|i| i.block_table.iter().map(|b| b.0).collect()).collect();
        let mut batch = Batch::default();
        for (item, table) in plan.items.iter().zip(&tables) {
            batch.push(BatchSequence {
                tokens: &item.tokens,
                start: item.start_pos,
                table,
                logits: item.num_logits,
            });
        }
        self.metrics.step_tokens.add(batch.tokens() as u64);
        let logits = match self.engine.model().forward(&batch, &mut self.pool) {
            Ok(logits) => logits,
            Err(e) => {
                tracing::error!(error = %e, "forward step failed");
                for item in &plan.items {
                    if let Some(generation) = self.generations.remove(&item.seq) {
                        generation.fail(InferenceError::Internal(e.to_string()));
                        self.metrics.failed.inc();
                    }
                    let _ = self.scheduler.abort(&mut self.blocks, item.seq);
                }
                return;
            }
        };
        let vocab = self.engine.model().shape().vocab;
        let mut row = 0;
        for item in &plan.items {
            let rows = &logits[row * vocab..(row + item.num_logits) * vocab];
            row += item.num_logits;
            self.advance(item, rows, vocab, started);
        }
    }

    /// Marks an item's tokens computed and, when it produced logits, samples and streams (for every
    /// choice forked from it at this step too).
    fn advance(&mut self, item: &PlanItem, rows: &[f32], vocab: usize, started: Instant) {
        let id = item.seq;
        let _ = self.scheduler.commit(&mut self.blocks, id, item.end_pos());
        let Some(generation) = self.generations.get_mut(&id) else { return };
        generation.admitted.get_or_insert(started);
        if item.num_logits == 0 {
            return;
        }
        let forks = self.fork_choices(id);
        self.take_tokens(id, item.start_pos, rows, vocab);
        let last = &rows[rows.len() - vocab..];
        for fork in forks {
            self.take_tokens(fork, 0, last, vocab);
        }
    }

    /// Starts the other choices of a request of several once its prompt is computed: each forks the
    /// sequence (sharing its KV blocks copy-on-write) and takes its first token from the same logits.
    /// A choice that finds the batch full starts as a sequence of its own instead, most of whose prompt
    /// the prefix cache then holds.
    fn fork_choices(&mut self, parent: SeqId) -> Vec<SeqId> {
        let Some(generation) = self.generations.get_mut(&parent) else { return Vec::new() };
        if !std::mem::take(&mut generation.unforked) {
            return Vec::new();
        }
        let children: Vec<Generation> =
            (1..generation.params.n).map(|choice| generation.fork(choice)).collect();
        let mut forks = Vec::with_capacity(children.len());
        for child in children {
            let id = SeqId(self.next_id);
            self.next_id += 1;
            if self.scheduler.fork(&mut self.blocks, parent, id).is_ok() {
                self.generations.insert(id, child);
                forks.push(id);
                continue;
            }
            let Some(sequence) = self.scheduler.sequence(parent) else {
                child.fail(InferenceError::Internal("the request's sequence is gone".into()));
                continue;
            };
            let (salt, priority) = (sequence.salt(), sequence.priority());
            let prompt = sequence.tokens()[..sequence.prompt_len()].to_vec();
            match self.scheduler.add(id, salt, prompt, priority) {
                Ok(()) => {
                    self.generations.insert(id, child);
                }
                Err(SchedulerError::QueueFull { waiting }) => child.fail(InferenceError::QueueFull(waiting)),
                Err(e) => child.fail(InferenceError::Internal(e.to_string())),
            }
        }
        forks
    }

    /// Samples (or verifies drafts) from a sequence's logits `rows`, streams the tokens and says what
    /// happens to it next. `start` is where the step's tokens of the sequence began.
    fn take_tokens(&mut self, id: SeqId, start: usize, rows: &[f32], vocab: usize) {
        let Some(generation) = self.generations.get_mut(&id) else { return };
        let _entered = generation.span.clone().entered();
        let tokens = if !generation.pending_drafts.is_empty()
            && rows.len() == (generation.pending_drafts.len() + 1) * vocab
        {
            let draft = std::mem::take(&mut generation.pending_drafts);
            let rows: Vec<&[f32]> = rows.chunks_exact(vocab).collect();
            let Some(speculator) = generation.speculator.as_mut() else { return };
            let verdict = speculator.verify(&mut generation.sampler, &draft, &rows);
            // Keep the verified token and the accepted drafts; drop the rest and their KV.
            let _ = self.scheduler.rollback(&mut self.blocks, id, start + 1 + verdict.accepted);
            verdict.tokens
        } else {
            let token = generation.sample(&rows[rows.len() - vocab..]);
            if let Some(speculator) = generation.speculator.as_mut() {
                speculator.push(token);
            }
            vec![token]
        };
        generation.first_token_at.get_or_insert_with(Instant::now);

        let context = self.engine.context_len();
        let length = self.scheduler.sequence(id).map_or(0, |s| s.tokens().len());
        let tokenizer = Arc::clone(self.engine.tokenizer());
        let accepted = tokens.len() - 1;
        let mut progress = Progress::Continue;
        for (i, &token) in tokens.iter().enumerate() {
            // Accepted drafts are already in the sequence; the last token joins it below.
            let position = length - accepted + i;
            progress = generation.take(token, &tokenizer, context.saturating_sub(position + 1));
            if progress != Progress::Continue {
                break;
            }
        }
        match progress {
            Progress::Continue => {
                if let Some(&last) = tokens.last() {
                    let _ = self.scheduler.append(id, last);
                }
            }
            Progress::Finished(reason) => self.finish(id, reason),
            Progress::Abandoned => {
                self.generations.remove(&id);
                let _ = self.scheduler.abort(&mut self.blocks, id);
                self.metrics.cancelled.inc();
            }
        }
    }

    fn finish(&mut self, id: SeqId, reason: FinishReason) {
        let cached = self.scheduler.sequence(id).map_or(0, |s| s.cached_prompt_tokens());
        let _ = self.scheduler.finish(&mut self.blocks, id);
        let Some(mut generation) = self.generations.remove(&id) else { return };
        match generation.finish(reason, cached) {
            Ok(Some(summary)) => self.metrics.record(&summary),
            // Another choice of the request is still generating.
            Ok(None) => {}
            Err(_) => self.metrics.cancelled.inc(),
        }
    }

    fn publish_load(&self) {
        let stats = self.scheduler.stats(&self.blocks);
        self.load.running.store(stats.running, Ordering::Relaxed);
        self.load.waiting.store(stats.waiting_interactive + stats.waiting_batch, Ordering::Relaxed);
        self.load.free_blocks.store(stats.available_blocks, Ordering::Relaxed);
    }
}
