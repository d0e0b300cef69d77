//! The step loop on the real model: batching, prefix caching, speculation, preemption, limits.

use std::time::Duration;

use super::*;
use crate::chat_template::encode_prompt;
use crate::config::EngineConfig;
use crate::request::{ChatMessage, FinishReason, GenerationSummary, Role};
use crate::test_support::engine;

fn prompt(system: Option<&str>, question: &str) -> Vec<u32> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(ChatMessage::new(Role::System, system));
    }
    messages.push(ChatMessage::new(Role::User, question));
    encode_prompt(engine().tokenizer(), &messages).expect("prompt")
}

fn worker(engine_config: EngineConfig, max_queue: usize) -> (Worker, Arc<PodMetrics>) {
    let metrics = Arc::new(PodMetrics::default());
    let worker = Worker::spawn(
        Arc::clone(engine()),
        Arc::clone(&metrics),
        engine_config.loop_config(max_queue),
        max_queue,
    )
    .expect("spawn");
    (worker, metrics)
}

fn submission(max_tokens: u32, speculative: bool) -> Submission {
    Submission {
        sampling: SamplingParams::greedy(max_tokens),
        tenant: "tenant-a".into(),
        priority: Priority::Interactive,
        speculative: Some(speculative),
    }
}

/// Waits for a generation's text and summary.
fn collect(mut events: UnboundedReceiver<GenerationEvent>) -> (String, GenerationSummary) {
    let mut text = String::new();
    while let Some(event) = events.blocking_recv() {
        match event {
            GenerationEvent::Text(t) => text.push_str(&t),
            GenerationEvent::Done(summary) => return (text, summary),
            GenerationEvent::Failed(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the stream ended without Done");
}

fn generate(worker: &Worker, prompt: Vec<u32>, submission: Submission) -> (String, GenerationSummary) {
    collect(worker.submit(prompt, submission).expect("submit"))
}

const QUESTIONS: [&str; 4] = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "How many legs does a spider have?",
];

#[test]
fn concurrent_requests_give_the_answers_they_give_alone() {
    let (solo, _) = worker(EngineConfig { speculative: false, ..EngineConfig::default() }, 8);
    let alone: Vec<String> =
        QUESTIONS.iter().map(|q| generate(&solo, prompt(None, q), submission(24, false)).0).collect();

    let (batched, metrics) = worker(EngineConfig { speculative: false, ..EngineConfig::default() }, 8);
    let streams: Vec<_> = QUESTIONS
        .iter()
        .map(|q| batched.submit(prompt(None, q), submission(24, false)).expect("submit"))
        .collect();
    let together: Vec<String> = streams.into_iter().map(|s| collect(s).0).collect();
    assert_eq!(together, alone);
    // Batched: fewer steps than one per token per request means they shared steps.
    assert!(metrics.generated_tokens.get() > 0);
}

#[test]
fn a_shared_prefix_is_served_from_the_cache_for_the_same_tenant_only() {
    let (worker, _) = worker(EngineConfig::default(), 8);
    let system = "You are a meticulous assistant for a bookshop. ".repeat(12);
    let (_, first) = generate(&worker, prompt(Some(&system), "Do you sell maps?"), submission(4, false));
    assert_eq!(first.cached_prompt_tokens, 0);
    let (_, second) =
        generate(&worker, prompt(Some(&system), "Are you open on Sunday?"), submission(4, false));
    assert!(second.cached_prompt_tokens >= 96, "{second:?}");
    assert!(second.cached_prompt_tokens < second.prompt_tokens);
    let other = Submission { tenant: "tenant-b".into(), ..submission(4, false) };
    let (_, stranger) = generate(&worker, prompt(Some(&system), "Are you open on Sunday?"), other);
    assert_eq!(stranger.cached_prompt_tokens, 0, "another tenant must not reuse the blocks");
}

#[test]
fn speculative_greedy_output_is_identical_and_drafts_get_accepted() {
    let code = "fn add(a: i32, b: i32) -> i32 {\n    let total = a + b;\n    total\n}\n".repeat(3);
    let question = format!("Repeat this code exactly:\n{code}");
    let (worker, _) = worker(EngineConfig::default(), 8);
    let (plain, _) = generate(&worker, prompt(None, &question), submission(60, false));
    let (fast, summary) = generate(&worker, prompt(None, &question), submission(60, true));
    assert_eq!(fast, plain);
    assert!(summary.draft_tokens > 0 && summary.accepted_draft_tokens > 0, "{summary:?}");
}

#[test]
fn preemption_under_a_tiny_cache_still_completes_every_request() {
    let tiny = EngineConfig { kv_blocks: 9, block_size: 8, speculative: false, ..EngineConfig::default() };
    let (solo, _) = worker(EngineConfig { speculative: false, ..EngineConfig::default() }, 8);
    let alone: Vec<String> =
        QUESTIONS.iter().map(|q| generate(&solo, prompt(None, q), submission(16, false)).0).collect();
    let (small, metrics) = worker(tiny, 8);
    let streams: Vec<_> = QUESTIONS
        .iter()
        .map(|q| small.submit(prompt(None, q), submission(16, false)).expect("submit"))
        .collect();
    let together: Vec<String> = streams.into_iter().map(|s| collect(s).0).collect();
    assert_eq!(together, alone);
    assert!(metrics.preempted.get() > 0, "9 blocks of 8 cannot hold four sequences at once");
}

#[test]
fn max_tokens_and_cancellation_are_honoured() {
    let (worker, metrics) = worker(EngineConfig::default(), 8);
    let (_, summary) =
        generate(&worker, prompt(None, "Write a long story about a dragon."), submission(5, true));
    assert_eq!((summary.finish_reason, summary.completion_tokens), (FinishReason::Length, 5));
    assert!(summary.timings.ttft >= summary.timings.prefill);

    drop(worker.submit(prompt(None, "Count to one hundred."), submission(200, false)).expect("submit"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metrics.cancelled.get() == 0 {
        assert!(std::time::Instant::now() < deadline, "the abandoned request was never dropped");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn refuses_work_beyond_the_queue_limit() {
    let (worker, _) = worker(EngineConfig::default(), 0);
    let refused = worker.submit(prompt(None, "hi"), submission(1, false));
    assert!(matches!(refused, Err(InferenceError::QueueFull(0))));
}

#[test]
fn a_step_loop_that_panics_is_no_longer_alive() {
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let guard = AliveGuard(Arc::clone(&alive));
    let thread = std::thread::spawn(move || {
        let _guard = guard;
        panic!("a bug in a step");
    });
    assert!(thread.join().is_err());
    assert!(!alive.load(std::sync::atomic::Ordering::Acquire), "the pod must stop saying it is ready");
}

#[test]
fn penalties_steer_the_model_off_what_it_already_said_and_do_not_speculate() {
    // The model repeats the code it is asked to repeat; a strong repetition penalty makes it say
    // something else, deterministically (greedy), and the request decodes without drafts.
    let code = "fn add(a: i32, b: i32) -> i32 {\n    let total = a + b;\n    total\n}\n".repeat(3);
    let question = format!("Repeat this code exactly:\n{code}");
    let (worker, _) = worker(EngineConfig::default(), 8);
    let (plain, _) = generate(&worker, prompt(None, &question), submission(40, false));
    let mut penalized = submission(40, true);
    penalized.sampling.penalties =
        crate::request::Penalties { frequency: 1.0, presence: 0.5, repetition: 1.8 };
    let (steered, summary) = generate(&worker, prompt(None, &question), penalized.clone());
    assert_ne!(steered, plain, "the penalties changed nothing");
    assert_eq!(summary.draft_tokens, 0, "a penalized request speculated: {summary:?}");
    let (again, _) = generate(&worker, prompt(None, &question), penalized);
    assert_eq!(again, steered, "greedy decoding with penalties is deterministic");
}
