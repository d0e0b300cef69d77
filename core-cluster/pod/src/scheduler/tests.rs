//! Unit tests of the scheduler, one behaviour each, driven through the mock engine.

use crate::kv::BlockManager;

use super::mock_engine::MockEngine;
use super::*;

/// A scheduler, its block manager and the mock engine, checked after every call.
struct Harness {
    sched: Scheduler,
    bm: BlockManager,
    engine: MockEngine,
}

impl Harness {
    fn new(max_running: usize, max_batched_tokens: usize, num_blocks: usize, block_size: usize) -> Self {
        let bm = BlockManager::new(num_blocks, block_size);
        let engine = MockEngine::new(&bm);
        let sched = Scheduler::new(SchedulerConfig { max_running, max_batched_tokens, max_waiting: 16 });
        Self { sched, bm, engine }
    }

    fn add(&mut self, id: u64, salt: u64, prompt: Vec<u32>, priority: Priority) {
        self.sched.add(SeqId(id), salt, prompt, priority).expect("admitted to the queue");
    }

    fn check(&self) {
        self.sched.check_invariants(&self.bm).expect("scheduler invariants hold");
    }

    /// Schedules and runs one step, committing everything, without sampling.
    fn step(&mut self) -> StepPlan {
        let plan = self.sched.schedule(&mut self.bm);
        self.engine.run(&mut self.sched, &mut self.bm, &plan, PlanItem::end_pos).expect("plan runs");
        self.check();
        plan
    }

    /// One step, then appends `token` to every item that got logits.
    fn step_and_sample(&mut self, token: u32) -> StepPlan {
        let plan = self.step();
        for item in plan.items.iter().filter(|i| i.num_logits > 0) {
            self.sched.append(item.seq, token).expect("logits came back");
        }
        self.check();
        plan
    }

    fn seq(&self, id: u64) -> &Sequence {
        self.sched.sequence(SeqId(id)).expect("sequence is live")
    }

    fn item(plan: &StepPlan, id: u64) -> Option<&PlanItem> {
        plan.items.iter().find(|i| i.seq == SeqId(id))
    }
}

fn prompt(len: u32) -> Vec<u32> {
    (100..100 + len).collect()
}

#[test]
fn admission_limit_and_bad_requests() {
    let mut sched =
        Scheduler::new(SchedulerConfig { max_running: 4, max_batched_tokens: 16, max_waiting: 2 });
    sched.add(SeqId(1), 0, prompt(3), Priority::Batch).expect("room");
    assert_eq!(
        sched.add(SeqId(1), 0, prompt(3), Priority::Batch),
        Err(SchedulerError::DuplicateSeq(SeqId(1)))
    );
    assert_eq!(sched.add(SeqId(2), 0, vec![], Priority::Batch), Err(SchedulerError::EmptyPrompt));
    sched.add(SeqId(2), 0, prompt(3), Priority::Interactive).expect("room");
    assert_eq!(
        sched.add(SeqId(3), 0, prompt(3), Priority::Interactive),
        Err(SchedulerError::QueueFull { waiting: 2 })
    );
    let bm = BlockManager::new(8, 4);
    let stats = sched.stats(&bm);
    assert_eq!((stats.waiting_interactive, stats.waiting_batch, stats.running), (1, 1, 0));
}

#[test]
fn interactive_is_admitted_before_batch_fifo_within_class() {
    let mut h = Harness::new(1, 64, 32, 4);
    h.add(1, 0, prompt(4), Priority::Batch);
    h.add(2, 0, prompt(4), Priority::Interactive);
    h.add(3, 0, prompt(4), Priority::Interactive);
    let order: Vec<SeqId> = (0..3)
        .map(|_| {
            let plan = h.step_and_sample(7);
            let id = plan.items[0].seq;
            h.sched.finish(&mut h.bm, id).expect("live");
            id
        })
        .collect();
    assert_eq!(order, [SeqId(2), SeqId(3), SeqId(1)]);
}

#[test]
fn long_prompt_is_chunked_while_another_sequence_decodes_every_step() {
    let mut h = Harness::new(4, 8, 64, 4);
    h.add(1, 0, prompt(3), Priority::Batch);
    h.step_and_sample(7);
    h.add(2, 0, prompt(30), Priority::Interactive);
    let mut prefill_steps = 0;
    while h.seq(2).computed() < 30 {
        let plan = h.step_and_sample(7);
        assert!(plan.num_tokens() <= 8, "budget respected");
        let decode = &plan.items[0];
        assert_eq!(decode.seq, SeqId(1), "the decode goes first, even ahead of an interactive prefill");
        assert_eq!((decode.tokens.len(), decode.num_logits), (1, 1));
        let chunk = Harness::item(&plan, 2).expect("the prefill gets the rest of the budget");
        assert_eq!(chunk.tokens.len(), (30 - chunk.start_pos).min(7));
        let last = chunk.end_pos() == 30;
        assert_eq!(chunk.num_logits, usize::from(last), "logits only for the final chunk");
        prefill_steps += 1;
    }
    assert_eq!(prefill_steps, 5, "30 tokens in chunks of 7");
    assert_eq!(h.seq(1).tokens().len(), 3 + 1 + 5, "seq 1 decoded in every step");
}

#[test]
fn interactive_prefill_gets_the_budget_before_batch_prefill() {
    let mut h = Harness::new(4, 40, 64, 4);
    h.add(1, 0, prompt(30), Priority::Batch);
    h.add(2, 0, prompt(30), Priority::Interactive);
    let plan = h.sched.schedule(&mut h.bm);
    assert_eq!(
        plan.items.iter().map(|i| (i.seq, i.tokens.len())).collect::<Vec<_>>(),
        [(SeqId(2), 30), (SeqId(1), 10)]
    );
    // The engine only got through five tokens of each: both are running and still prefilling.
    h.engine.run(&mut h.sched, &mut h.bm, &plan, |i| i.start_pos + 5).expect("plan runs");
    h.check();
    let plan = h.step();
    let chunks: Vec<_> = plan.items.iter().map(|i| (i.seq, i.start_pos, i.tokens.len())).collect();
    assert_eq!(chunks, [(SeqId(2), 5, 25), (SeqId(1), 5, 15)], "interactive takes its whole chunk first");
}

#[test]
fn admission_reuses_the_tenants_cached_prefix_only() {
    let mut h = Harness::new(4, 64, 32, 4);
    h.add(1, 5, prompt(10), Priority::Interactive);
    h.step_and_sample(7);
    h.sched.finish(&mut h.bm, SeqId(1)).expect("live");

    h.add(2, 5, prompt(10), Priority::Interactive);
    h.add(3, 6, prompt(10), Priority::Interactive);
    let plan = h.step();
    let hit = Harness::item(&plan, 2).expect("admitted");
    assert_eq!((hit.start_pos, hit.tokens.len()), (8, 2));
    assert_eq!(h.seq(2).cached_prompt_tokens(), 8);
    let miss = Harness::item(&plan, 3).expect("admitted");
    assert_eq!(miss.start_pos, 0, "another tenant's identical prompt must not hit");
    assert_eq!(h.seq(3).cached_prompt_tokens(), 0);
}

#[test]
fn preemption_takes_the_lowest_priority_latest_arrival_which_later_completes() {
    // Three 3-token prompts fill all six 2-token blocks; the third token of generation needs a
    // seventh.
    let mut h = Harness::new(3, 64, 6, 2);
    h.add(1, 0, vec![1, 2, 3], Priority::Interactive);
    h.add(2, 0, vec![4, 5, 6], Priority::Batch);
    h.add(3, 0, vec![7, 8, 9], Priority::Batch);
    h.step_and_sample(10);
    h.step_and_sample(11);
    assert_eq!(h.bm.available_blocks(), 0);
    let victim_tokens = h.seq(3).tokens().to_vec();

    let plan = h.step_and_sample(12);
    assert_eq!(plan.preempted, [SeqId(3)]);
    assert_eq!(plan.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [SeqId(1), SeqId(2)]);
    assert!(!h.seq(3).is_running());
    assert_eq!(h.seq(3).computed(), 0);
    assert_eq!(h.seq(3).tokens(), victim_tokens, "generated tokens are kept for recompute");
    assert_eq!(h.sched.stats(&h.bm).preemptions_total, 1);
    assert_eq!(h.sched.stats(&h.bm).waiting_batch, 1);

    h.sched.finish(&mut h.bm, SeqId(1)).expect("live");
    h.sched.finish(&mut h.bm, SeqId(2)).expect("live");
    let plan = h.step_and_sample(13);
    let item = Harness::item(&plan, 3).expect("readmitted");
    assert_eq!((item.end_pos(), item.num_logits), (5, 1), "prompt and generated tokens recomputed");
    assert_eq!(h.seq(3).tokens(), [7, 8, 9, 10, 11, 13]);
    h.sched.finish(&mut h.bm, SeqId(3)).expect("live");
    assert_eq!(h.bm.available_blocks(), 6);
}

#[test]
fn a_sequence_that_cannot_fit_alone_is_aborted_not_looped() {
    let mut h = Harness::new(2, 64, 2, 2);
    h.add(1, 0, prompt(6), Priority::Interactive);
    let plan = h.step();
    assert_eq!(plan.items[0].tokens.len(), 4, "the prefill is cut to the blocks there are");
    let plan = h.step();
    assert_eq!(plan.aborted.len(), 1);
    assert_eq!(plan.aborted[0].seq, SeqId(1));
    assert!(plan.items.is_empty() && plan.preempted.is_empty());
    assert!(h.sched.is_empty());
    assert_eq!(h.bm.available_blocks(), 2);
    assert_eq!(h.sched.stats(&h.bm).aborted_total, 1);
}

#[test]
fn speculative_drafts_are_verified_in_one_item_and_rolled_back() {
    let mut h = Harness::new(2, 8, 16, 4);
    h.add(1, 0, prompt(6), Priority::Interactive);
    h.step_and_sample(7); // 7 tokens, 6 computed
    h.sched.append_drafts(SeqId(1), &[20, 21, 22]).expect("fits the budget");
    assert_eq!(
        h.sched.append_drafts(SeqId(1), &[1, 2, 3, 4, 5]),
        Err(SchedulerError::TooManyDrafts { seq: SeqId(1), drafts: 8, budget: 8 })
    );
    let plan = h.step();
    let item = &plan.items[0];
    assert_eq!((item.start_pos, item.tokens.clone(), item.num_logits), (6, vec![7, 20, 21, 22], 4));
    // The first draft is accepted, the other two rejected; then the bonus token.
    h.sched.rollback(&mut h.bm, SeqId(1), 8).expect("valid length");
    assert_eq!(h.seq(1).tokens(), [100, 101, 102, 103, 104, 105, 7, 20]);
    assert_eq!(h.seq(1).drafts(), 1, "still a draft until the next sampled token accepts it");
    assert_eq!(h.seq(1).computed(), 8);
    assert_eq!(h.seq(1).block_table().len(), 2);
    h.sched.append(SeqId(1), 30).expect("all computed");
    assert_eq!(h.seq(1).drafts(), 0);
    let plan = h.step();
    assert_eq!((plan.items[0].start_pos, plan.items[0].num_logits), (8, 1));
    h.check();
}

#[test]
fn preemption_drops_unverified_drafts() {
    let mut h = Harness::new(2, 16, 4, 2);
    h.add(1, 0, vec![1, 2, 3], Priority::Interactive);
    h.add(2, 0, vec![4, 5, 6], Priority::Batch);
    h.step_and_sample(9); // both: 4 tokens, 3 computed, 2 blocks each: the pool is full
    h.sched.append_drafts(SeqId(2), &[40, 41]).expect("fits");
    h.sched.append_drafts(SeqId(1), &[30, 31]).expect("fits");
    let plan = h.step();
    assert_eq!(plan.preempted, [SeqId(2)]);
    assert_eq!(h.seq(2).tokens(), [4, 5, 6, 9]);
    assert_eq!(h.seq(2).drafts(), 0);
    assert_eq!(plan.items[0].num_logits, 3);
}

#[test]
fn forked_sequences_copy_their_shared_tail_on_write() {
    let mut h = Harness::new(4, 16, 16, 4);
    h.add(1, 0, prompt(6), Priority::Interactive);
    h.step();
    h.sched.fork(&mut h.bm, SeqId(1), SeqId(2)).expect("room in the batch");
    h.check();
    assert_eq!(h.seq(2).block_table(), h.seq(1).block_table());
    h.sched.append(SeqId(1), 1).expect("computed");
    h.sched.append(SeqId(2), 2).expect("computed");
    let plan = h.step();
    assert_eq!(plan.items.len(), 2);
    assert_eq!(plan.copies.len(), 1, "one of the two copies the shared partial block");
    assert_eq!(h.seq(1).block_table()[0], h.seq(2).block_table()[0], "the full block stays shared");
    assert_ne!(h.seq(1).block_table()[1], h.seq(2).block_table()[1]);
    assert_eq!(h.sched.fork(&mut h.bm, SeqId(1), SeqId(2)), Err(SchedulerError::DuplicateSeq(SeqId(2))));
}

#[test]
fn engine_misuse_is_refused() {
    let mut h = Harness::new(2, 16, 16, 4);
    h.add(1, 0, prompt(6), Priority::Interactive);
    assert_eq!(h.sched.append(SeqId(1), 1), Err(SchedulerError::NotRunning(SeqId(1))));
    let plan = h.sched.schedule(&mut h.bm);
    assert_eq!(plan.items[0].end_pos(), 6);
    assert_eq!(
        h.sched.commit(&mut h.bm, SeqId(1), 7),
        Err(SchedulerError::NotScheduled { seq: SeqId(1), requested: 7, scheduled: 6 })
    );
    assert_eq!(h.sched.append(SeqId(1), 1), Err(SchedulerError::Uncomputed { seq: SeqId(1), uncomputed: 6 }));
    assert_eq!(
        h.sched.rollback(&mut h.bm, SeqId(1), 0),
        Err(SchedulerError::BadRollback { seq: SeqId(1), len: 0, tokens: 6 })
    );
    assert_eq!(h.sched.commit(&mut h.bm, SeqId(9), 1), Err(SchedulerError::UnknownSeq(SeqId(9))));
    h.check();
}

#[test]
fn abort_and_finish_release_everything() {
    let mut h = Harness::new(1, 16, 16, 4);
    h.add(1, 0, prompt(9), Priority::Interactive);
    h.add(2, 0, prompt(9), Priority::Batch);
    h.step_and_sample(3);
    assert!(h.seq(1).is_running() && !h.seq(2).is_running());
    h.sched.abort(&mut h.bm, SeqId(2)).expect("waiting sequences can be aborted");
    h.check();
    assert_eq!(h.sched.finish(&mut h.bm, SeqId(1)).expect("live").len(), 10);
    assert_eq!(h.sched.abort(&mut h.bm, SeqId(1)), Err(SchedulerError::UnknownSeq(SeqId(1))));
    assert!(h.sched.is_empty());
    assert_eq!(h.bm.available_blocks(), 16);
    h.check();
}

#[test]
fn a_step_that_preempts_admits_nobody() {
    let mut h = Harness::new(3, 64, 4, 2);
    h.add(1, 0, vec![1, 2, 3], Priority::Interactive);
    h.add(2, 0, vec![4, 5, 6], Priority::Batch);
    h.step_and_sample(9);
    h.add(3, 0, vec![7], Priority::Interactive);
    h.step_and_sample(9); // position 3 fits in the second blocks
    let plan = h.step_and_sample(9); // position 4 needs a fifth block
    assert_eq!(plan.preempted, [SeqId(2)]);
    assert!(Harness::item(&plan, 3).is_none(), "no admission in a step that preempted");
    let plan = h.step_and_sample(9);
    assert!(Harness::item(&plan, 3).is_some(), "admitted the next step");
}

#[test]
fn a_long_prefill_shares_its_steps_with_a_short_prompt_that_arrives() {
    // A budget of 512 tokens a step, a 2,000-token prompt of one tenant being prefilled.
    let mut h = Harness::new(8, 512, 256, 16);
    h.add(1, 7, prompt(2000), Priority::Interactive);
    let first = h.step();
    assert_eq!(Harness::item(&first, 1).map(|i| i.tokens.len()), Some(512), "alone, it takes the step");
    // Another tenant's short question arrives: the next step shares the budget, and the question is
    // prefilled whole in it rather than after the long prompt's remaining steps.
    h.add(2, 8, prompt(30), Priority::Interactive);
    let shared = h.step();
    assert_eq!(Harness::item(&shared, 1).map(|i| i.tokens.len()), Some(256), "an equal share");
    assert_eq!(Harness::item(&shared, 2).map(|i| i.tokens.len()), Some(30), "the short prompt, whole");
    assert_eq!(Harness::item(&shared, 2).map(|i| i.num_logits), Some(1), "its first token comes now");
}

#[test]
fn a_tenant_with_many_long_prompts_gets_one_tenants_share_of_a_step() {
    let mut h = Harness::new(8, 512, 512, 16);
    for id in 1..=3 {
        h.add(id, 7, prompt(2000), Priority::Interactive);
    }
    h.step();
    h.add(9, 8, prompt(300), Priority::Interactive);
    let shared = h.step();
    let took = |id| Harness::item(&shared, id).map_or(0, |i| i.tokens.len());
    assert_eq!(took(9), 256, "half the step for the other tenant's one prompt");
    assert_eq!(took(1) + took(2) + took(3), 255, "the flooding tenant's three share the other half");
}
