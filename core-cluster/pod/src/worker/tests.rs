//! The step loop on the real model: batching, prefix caching, speculation, preemption, limits.

use std::time::Duration;

use super::*;
use crate::chat_template::encode_prompt;
use crate::config::EngineConfig;
use crate::request::{ChatMessage, ChatRole, FinishReason, GenerationSummary};
use crate::test_support::engine;

fn prompt(system: Option<&str>, question: &str) -> Vec<u32> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(ChatMessage::new(ChatRole::System, system));
    }
    messages.push(ChatMessage::new(ChatRole::User, question));
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
            GenerationEvent::Piece(piece) => text.push_str(&piece.text),
            GenerationEvent::ChoiceDone { .. } => {}
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

/// Every choice's text and pieces, the `ChoiceDone`s in order, and the summary of a request.
struct Choices {
    texts: Vec<String>,
    pieces: Vec<crate::generation::Piece>,
    done: Vec<(u32, FinishReason, u32)>,
    summary: GenerationSummary,
}

fn collect_choices(worker: &Worker, prompt: Vec<u32>, submission: Submission) -> Choices {
    let n = submission.sampling.n as usize;
    let mut events = worker.submit(prompt, submission).expect("submit");
    let (mut texts, mut pieces, mut done) = (vec![String::new(); n], Vec::new(), Vec::new());
    while let Some(event) = events.blocking_recv() {
        match event {
            GenerationEvent::Piece(piece) => {
                texts[piece.choice as usize].push_str(&piece.text);
                pieces.push(piece);
            }
            GenerationEvent::ChoiceDone { choice, finish_reason, completion_tokens } => {
                done.push((choice, finish_reason, completion_tokens))
            }
            GenerationEvent::Done(summary) => return Choices { texts, pieces, done, summary },
            GenerationEvent::Failed(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the stream ended without Done");
}

#[test]
fn several_choices_fork_one_prompt_and_draw_as_their_seeds_say() {
    let question = prompt(Some("You are a poet."), "Write one line about the sea.");
    let (worker, metrics) = worker(EngineConfig::default(), 8);
    let sampled = |n: u32, seed: u64| {
        let mut s = submission(12, false);
        s.sampling = SamplingParams { temperature: 1.0, seed: Some(seed), n, ..SamplingParams::greedy(12) };
        s
    };
    let computed_before = metrics.step_tokens.get();
    let three = collect_choices(&worker, question.clone(), sampled(3, 41));
    let computed = metrics.step_tokens.get() - computed_before;
    let mut ended: Vec<u32> = three.done.iter().map(|&(choice, _, _)| choice).collect();
    ended.sort_unstable();
    assert_eq!(ended, [0, 1, 2], "each choice ends once");
    let tokens: u32 = three.done.iter().map(|&(_, _, tokens)| tokens).sum();
    assert_eq!(three.summary.completion_tokens, tokens, "usage counts every choice");
    assert_eq!(three.summary.prompt_tokens as usize, question.len());
    // The prompt was computed once: the forks share its KV and only their own tokens are computed.
    assert!(
        computed < question.len() as u64 + u64::from(tokens),
        "computed {computed} tokens for a {}-token prompt and {tokens} generated",
        question.len()
    );
    // Choice i of a seeded request is what the request alone draws with seed + i.
    for choice in 0..3u64 {
        let (alone, _) = generate(&worker, question.clone(), sampled(1, 41 + choice));
        assert_eq!(three.texts[choice as usize], alone, "choice {choice}");
    }
    assert!(three.texts.iter().any(|t| *t != three.texts[0]), "three draws, one text: {:?}", three.texts);
}

#[test]
fn choices_that_find_the_batch_full_start_on_their_own_and_still_finish() {
    // Two sequences at most in the batch: of four choices, one forks and two wait for a place (their
    // prompt then comes from the prefix cache).
    let (worker, _) =
        worker(EngineConfig { max_running: 2, speculative: false, ..EngineConfig::default() }, 8);
    let mut asked = submission(8, false);
    asked.sampling = SamplingParams { temperature: 1.0, seed: Some(5), n: 4, ..SamplingParams::greedy(8) };
    let four = collect_choices(&worker, prompt(None, "Name a fruit."), asked);
    let mut ended: Vec<u32> = four.done.iter().map(|&(choice, _, _)| choice).collect();
    ended.sort_unstable();
    assert_eq!(ended, [0, 1, 2, 3], "every choice ends once");
    let tokens: u32 = four.done.iter().map(|&(_, _, tokens)| tokens).sum();
    assert_eq!(four.summary.completion_tokens, tokens);
}

#[test]
fn log_probabilities_cover_every_token_of_the_text_and_rank_the_best() {
    let (worker, _) = worker(EngineConfig::default(), 8);
    let mut asked = submission(16, true);
    asked.sampling.logprobs = Some(3);
    let answer = collect_choices(&worker, prompt(None, "What is the capital of France?"), asked);
    let logged: Vec<_> = answer.pieces.iter().flat_map(|p| p.logprobs.iter()).collect();
    let bytes: Vec<u8> = logged.iter().flat_map(|t| t.bytes.iter().copied()).collect();
    assert_eq!(String::from_utf8_lossy(&bytes), answer.texts[0], "one entry per token of the text");
    let reported = if answer.summary.finish_reason == FinishReason::Stop { 1 } else { 0 };
    assert_eq!(
        logged.len() as u32 + reported,
        answer.summary.completion_tokens,
        "all but the end of the turn"
    );
    for token in logged {
        assert_eq!(token.top.len(), 3);
        assert!(token.top.windows(2).all(|w| w[0].1 >= w[1].1), "most likely first: {token:?}");
        // Greedy decoding takes the most likely token.
        assert_eq!((&token.top[0].0, token.top[0].1), (&token.bytes, token.logprob));
        assert!(token.logprob <= 0.0 && token.logprob.is_finite());
    }
    assert_eq!(answer.summary.draft_tokens, 0, "a request for log-probabilities does not speculate");
}
