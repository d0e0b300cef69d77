//! Property test: random workloads on a small KV pool, so that prefix hits, eviction, copy-on-write,
//! preemption and aborts all happen, checked after every operation.
//!
//! Checked: the scheduler's and the block manager's invariants (including reference counts: no
//! leak, no double free) after every call; every plan against the limits and, through the mock
//! engine's KV fingerprints, that each item reads its own sequence's KV; that a sequence is only
//! aborted when it cannot fit in the whole pool; and that once adds stop, every sequence
//! completes and all blocks come back.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::kv::BlockManager;

use super::mock_engine::MockEngine;
use super::*;

#[derive(Debug, Clone)]
enum Op {
    Add { tenant: u64, prompt: Vec<u32>, interactive: bool },
    Step { seed: u64, partial: bool },
    Drafts { seq: usize, n: usize },
    Fork { seq: usize },
    Rollback { seq: usize, back: usize },
    Finish { seq: usize },
    Abort { seq: usize },
}

fn op() -> impl Strategy<Value = Op> {
    // Tiny alphabets and two tenants so that prompts share prefixes often.
    prop_oneof![
        3 => (0..2u64, prop::collection::vec(0..3u32, 1..16), any::<bool>())
            .prop_map(|(tenant, prompt, interactive)| Op::Add { tenant, prompt, interactive }),
        6 => (any::<u64>(), prop::bool::weighted(0.2)).prop_map(|(seed, partial)| Op::Step { seed, partial }),
        1 => (any::<usize>(), 1..4usize).prop_map(|(seq, n)| Op::Drafts { seq, n }),
        1 => any::<usize>().prop_map(|seq| Op::Fork { seq }),
        1 => (any::<usize>(), 1..4usize).prop_map(|(seq, back)| Op::Rollback { seq, back }),
        1 => any::<usize>().prop_map(|seq| Op::Finish { seq }),
        1 => any::<usize>().prop_map(|seq| Op::Abort { seq }),
    ]
}

/// A small deterministic generator for the engine's choices within a step.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

struct World {
    sched: Scheduler,
    bm: BlockManager,
    engine: MockEngine,
    /// Live sequence ids, in creation order.
    live: Vec<SeqId>,
    next_id: u64,
}

impl World {
    fn pick(&self, i: usize) -> Option<SeqId> {
        (!self.live.is_empty()).then(|| self.live[i % self.live.len()])
    }

    fn forget(&mut self, id: SeqId) {
        self.live.retain(|&l| l != id);
    }

    /// One engine step: schedule, run (committing all, or a random prefix of each item), then
    /// verify drafts, sample, and finish sequences that generated enough.
    fn step(&mut self, seed: u64, partial: bool) -> Result<(), TestCaseError> {
        let mut rng = Lcg(seed);
        let lens: HashMap<SeqId, usize> =
            self.live.iter().filter_map(|&id| Some((id, self.sched.sequence(id)?.tokens().len()))).collect();
        let plan = self.sched.schedule(&mut self.bm);
        for a in &plan.aborted {
            let len = lens.get(&a.seq).copied().unwrap_or(0);
            prop_assert!(
                len.div_ceil(self.bm.block_size()) > self.bm.num_blocks(),
                "{} aborted with {} tokens, which fit in the pool",
                a.seq,
                len
            );
            prop_assert!(self.sched.sequence(a.seq).is_none());
            self.forget(a.seq);
        }
        for p in &plan.preempted {
            prop_assert!(plan.items.iter().all(|i| i.seq != *p), "{} preempted yet planned", p);
        }
        let cuts: Vec<usize> =
            plan.items.iter().map(|i| i.start_pos + rng.below(i.tokens.len() + 1)).collect();
        let commit_to = |item: &PlanItem| {
            let at = plan.items.iter().position(|i| i.seq == item.seq).unwrap_or(0);
            if partial {
                cuts[at]
            } else {
                item.end_pos()
            }
        };
        self.engine.run(&mut self.sched, &mut self.bm, &plan, commit_to).map_err(TestCaseError::fail)?;
        self.check()?;
        for item in plan.items.iter().filter(|i| i.num_logits > 0) {
            let Some(seq) = self.sched.sequence(item.seq) else { continue };
            if seq.computed() < seq.tokens().len() {
                continue; // partially committed: no logits for the end yet
            }
            let (len, drafts) = (seq.tokens().len(), seq.drafts());
            if item.start_pos < len - drafts {
                // Logits for the last sampled token and each draft (unless an earlier partial
                // commit already covered some of them).
                prop_assert_eq!(item.num_logits, drafts + 1);
            }
            let accepted = rng.below(drafts + 1);
            self.sched.rollback(&mut self.bm, item.seq, len - drafts + accepted).map_err(fail)?;
            self.sched.append(item.seq, rng.below(3) as u32).map_err(fail)?;
            let seq = self.sched.sequence(item.seq).ok_or(TestCaseError::fail("vanished"))?;
            let target = 2 + (item.seq.0 % 4) as usize;
            if seq.tokens().len() >= seq.prompt_len() + target {
                self.sched.finish(&mut self.bm, item.seq).map_err(fail)?;
                self.forget(item.seq);
            }
            self.check()?;
        }
        Ok(())
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Add { tenant, prompt, interactive } => {
                let id = SeqId(self.next_id);
                self.next_id += 1;
                let priority = if interactive { Priority::Interactive } else { Priority::Batch };
                match self.sched.add(id, tenant, prompt, priority) {
                    Ok(()) => self.live.push(id),
                    Err(SchedulerError::QueueFull { waiting }) => {
                        prop_assert!(waiting >= self.sched.config().max_waiting)
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            Op::Step { seed, partial } => self.step(seed, partial)?,
            Op::Drafts { seq, n } => {
                let Some(id) = self.pick(seq) else { return Ok(()) };
                let Some(s) = self.sched.sequence(id) else { return Ok(()) };
                if s.is_running() && s.computed() + 1 == s.tokens().len() {
                    let before = s.drafts();
                    match self.sched.append_drafts(id, &vec![1; n]) {
                        Ok(()) => {}
                        Err(SchedulerError::TooManyDrafts { .. }) => {
                            prop_assert!(before + n + 1 > self.sched.config().max_batched_tokens)
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
            }
            Op::Fork { seq } => {
                let Some(parent) = self.pick(seq) else { return Ok(()) };
                let child = SeqId(self.next_id);
                self.next_id += 1;
                match self.sched.fork(&mut self.bm, parent, child) {
                    Ok(()) => self.live.push(child),
                    Err(SchedulerError::RunningFull | SchedulerError::NotRunning(_)) => {}
                    Err(e) => return Err(fail(e)),
                }
            }
            Op::Rollback { seq, back } => {
                let Some(id) = self.pick(seq) else { return Ok(()) };
                let len = self.sched.sequence(id).map_or(0, |s| s.tokens().len());
                if len > back {
                    self.sched.rollback(&mut self.bm, id, len - back).map_err(fail)?;
                    // With nothing left to compute, the engine samples from the logits it holds.
                    if self.sched.sequence(id).is_some_and(|s| s.computed() == len - back) {
                        self.sched.append(id, 2).map_err(fail)?;
                    }
                }
            }
            Op::Finish { seq } | Op::Abort { seq } => {
                let Some(id) = self.pick(seq) else { return Ok(()) };
                if matches!(op, Op::Finish { .. }) {
                    self.sched.finish(&mut self.bm, id).map_err(fail)?;
                } else {
                    self.sched.abort(&mut self.bm, id).map_err(fail)?;
                }
                self.forget(id);
            }
        }
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        self.sched.check_invariants(&self.bm).map_err(TestCaseError::fail)?;
        prop_assert_eq!(self.sched.len(), self.live.len());
        Ok(())
    }
}

fn fail(e: SchedulerError) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_workloads_keep_invariants_and_drain(
        max_running in 1..5usize,
        max_batched_tokens in 1..13usize,
        max_waiting in 1..7usize,
        num_blocks in 1..13usize,
        block_size in 1..5usize,
        ops in prop::collection::vec(op(), 1..100),
    ) {
        let bm = BlockManager::new(num_blocks, block_size);
        let engine = MockEngine::new(&bm);
        let config = SchedulerConfig { max_running, max_batched_tokens, max_waiting };
        let mut w = World { sched: Scheduler::new(config), bm, engine, live: Vec::new(), next_id: 0 };
        for op in ops {
            w.apply(op)?;
        }
        // No more arrivals: everything must complete (or be aborted as too long) in bounded steps.
        let mut steps = 0;
        while !w.sched.is_empty() {
            prop_assert!(steps < 2_000, "no progress: {:?}", w.sched.stats(&w.bm));
            w.step(steps, false)?;
            steps += 1;
        }
        prop_assert_eq!(w.bm.available_blocks(), num_blocks);
        w.bm.check_ref_counts([]).map_err(TestCaseError::fail)?;
        w.bm.check_invariants().map_err(TestCaseError::fail)?;
    }
}
