//! `mesh bench pod`: our inference pod against llama.cpp on the same GGUF file with the same thread
//! count, one system at a time in one run: llama.cpp's `llama-bench` (prefill, decode), `llama-server`
//! with parallel slots and continuous batching (the same prompts as ours, over HTTP), `llama-server` with
//! n-gram speculation (the grounded task), then our pod over gRPC. A STREAM-like copy in the same run
//! gives the single-stream decode ceiling.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::bench::common::bandwidth::{measure_copy, DEFAULT_ARRAY_BYTES, DEFAULT_PASSES};
use crate::bench::common::report::{cpu_model, Machine, Report};
use crate::bench::common::scratch::ScratchDir;
use crate::bench::common::sharegpt::{first_turns, FirstTurns};
use crate::bench::pod::gen_phases::{grounded, measure, Plan, SideFigures};
use crate::bench::pod::gguf::GgufWeights;
use crate::bench::pod::llama_cpp::{BenchSpec, LlamaCpp, PINNED_SETTINGS};
use crate::bench::pod::llama_server::{LlamaServer, ServerSpec};
use crate::bench::pod::ours::{Pod, PodSpec};
use crate::bench::pod::prompts::{PromptSizes, Prompts};
use crate::bench::pod::rows::PodFigures;
use mesh_harness::paths;

/// ShareGPT first turns to read: the concurrency phases take them from the start (disjoint between
/// phases), the sized prompts are cut from the text of the last ones.
const SHAREGPT_TURNS: usize = 1000;
/// Shortest ShareGPT first turn used, in characters.
const SHAREGPT_MIN_CHARS: usize = 16;
/// Context of each llama-server slot: room for the longest prompt and its answer.
const CTX_PER_SLOT: usize = 4096;

/// What `mesh bench pod` runs.
#[derive(Clone, Debug)]
pub struct PodBenchOptions {
    /// CPU threads of both systems (llama.cpp `-t`/`-tb`; the pod's `MESH_POD_THREADS`).
    pub threads: usize,
    /// Measured seconds of each concurrency phase.
    pub seconds: u64,
    /// Concurrent requests of the throughput phases.
    pub concurrency: Vec<usize>,
    /// Most tokens of each request of the throughput phases.
    pub max_tokens: u32,
    /// Tokens of the single-stream decode.
    pub decode_tokens: u32,
    /// Prompt tokens of the prefill test.
    pub prefill_tokens: u32,
    /// Tokens of the shared system prompt of the TTFT test.
    pub prefix_tokens: u32,
    /// Distinct prompts (and so samples) of the prefill and TTFT tests, and `llama-bench -r`.
    pub reps: u32,
    /// Longest ShareGPT first turn used, in characters.
    pub max_prompt_chars: usize,
    /// Directory of `llama-bench` and `llama-server` (default: the installer's).
    pub llama_bin_dir: Option<PathBuf>,
    /// Run `scripts/install-llama-cpp.sh` when the binaries are missing (otherwise fail with the command).
    pub install: bool,
    /// More arguments for `inference-pod`.
    pub pod_args: Vec<String>,
    /// Parent of the run's scratch directory (logs).
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early; every process is still stopped.
    pub stop: &'static AtomicBool,
}

/// Runs the suite and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &PodBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(options.threads > 0, "--threads must be at least 1");
    anyhow::ensure!(options.seconds > 0, "--seconds must be at least 1");
    anyhow::ensure!(options.reps > 0, "--reps must be at least 1");
    anyhow::ensure!(
        !options.concurrency.is_empty() && !options.concurrency.contains(&0),
        "--concurrency needs counts of at least 1"
    );
    let mut scratch = ScratchDir::create(&options.dir, "pod")?;
    let result = run_in(options, &scratch);
    if result.is_err() {
        scratch.keep();
        eprintln!("logs of the failed run kept in {}", scratch.path().display());
    }
    result
}

fn run_in(options: &PodBenchOptions, scratch: &ScratchDir) -> anyhow::Result<Report> {
    let log_dir = scratch.path().join("logs");
    let model = paths::smollm2_gguf();
    anyhow::ensure!(model.is_file(), "{} is missing; install it with .ci/setup.sh models", model.display());
    let pod_binary = paths::binary("inference-pod");
    anyhow::ensure!(
        pod_binary.is_file(),
        "{} is missing; build it with cargo build --release -p inference-pod",
        pod_binary.display()
    );
    let llama = LlamaCpp::locate(options.llama_bin_dir.as_deref(), options.install, &log_dir, options.stop)?;
    let peer = llama.label().to_owned();
    eprintln!("CPU: {}; the peer: {peer}", cpu_model());
    let threads = options.threads;

    eprintln!("memory bandwidth: STREAM-like copy, {threads} threads");
    let bandwidth = measure_copy(threads, DEFAULT_ARRAY_BYTES, DEFAULT_PASSES);
    let weights = GgufWeights::read(&model)?;
    eprintln!(
        "  {:.1} GB/s; the GGUF's {} tensors: {:.1} MB read per token -> ceiling {:.0} tok/s",
        bandwidth.gb_per_s(),
        weights.tensors,
        weights.bytes_per_token() as f64 / 1e6,
        bandwidth.ceiling_tok_s(weights.bytes_per_token())
    );
    let turns = first_turns(
        &FirstTurns {
            count: SHAREGPT_TURNS,
            min_chars: SHAREGPT_MIN_CHARS,
            max_chars: options.max_prompt_chars,
        },
        &paths::sharegpt_json(),
    )?;
    interrupted(options)?;

    let pinned = PINNED_SETTINGS.join(" ");
    eprintln!(
        "{peer}: llama-bench -p {} -n {} -t {threads} {pinned}",
        options.prefill_tokens, options.decode_tokens
    );
    let spec = BenchSpec {
        model: model.clone(),
        threads,
        prompt_tokens: options.prefill_tokens,
        gen_tokens: options.decode_tokens,
        reps: options.reps,
    };
    let llama_bench = llama.bench(&spec, &log_dir, options.stop)?;
    eprintln!(
        "  prefill {:.1} tok/s, decode {:.1} tok/s",
        llama_bench.prefill_tok_s, llama_bench.decode_tok_s
    );
    interrupted(options)?;

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let plan = Plan {
        decode_tokens: options.decode_tokens,
        concurrency: options.concurrency.clone(),
        max_tokens: options.max_tokens,
        window: Duration::from_secs(options.seconds),
        stop: options.stop,
    };
    let slots = options.concurrency.iter().copied().max().unwrap_or(1);
    eprintln!("{peer}: llama-server -np {slots} --cont-batching -t {threads} -tb {threads} {pinned}");
    let server_spec = ServerSpec {
        model: model.clone(),
        threads,
        slots,
        ctx_per_slot: CTX_PER_SLOT,
        extra_args: Vec::new(),
    };
    let (prompts, peer_side, peer_grounded) = {
        let server = Arc::new(LlamaServer::start(&llama, &server_spec, "llama-server", &log_dir)?);
        eprintln!("  {} (log: {})", server.url(), server.log_path().display());
        let sizes = PromptSizes {
            prefill_tokens: options.prefill_tokens as usize,
            prefix_tokens: options.prefix_tokens as usize,
            reps: options.reps as usize,
        };
        let prompts = Prompts::build(&server, turns, sizes)?;
        let side = runtime.block_on(measure("llama-server", &server, &prompts, &plan))?;
        let grounded = runtime.block_on(grounded("llama-server", &server, &prompts, Some(false)))?;
        (prompts, side, grounded)
    };
    interrupted(options)?;

    eprintln!("{peer}: llama-server --spec-type ngram-simple (prompt lookup)");
    let peer_grounded_spec = {
        let spec_args = ["--spec-type", "ngram-simple"].map(String::from).to_vec();
        let spec = ServerSpec { slots: 1, extra_args: spec_args, ..server_spec };
        let server = Arc::new(LlamaServer::start(&llama, &spec, "llama-server-spec", &log_dir)?);
        runtime.block_on(grounded("llama-server (ngram-simple)", &server, &prompts, Some(true)))?
    };
    interrupted(options)?;

    eprintln!("ours: inference-pod with {threads} threads");
    let pod_spec = PodSpec { threads, max_queue: (2 * slots).max(64), extra_args: options.pod_args.clone() };
    let pod = Pod::start(&pod_spec, &log_dir)?;
    eprintln!("  log: {}", pod.log_path().display());
    let (our_side, our_grounded, our_grounded_spec, health) = runtime.block_on(async {
        let client = Arc::new(pod.connect().await?);
        let before = client.health().await.context("Health before the run")?;
        anyhow::ensure!(
            before.threads as usize == threads,
            "the pod's compute pool has {} threads, not the {threads} llama.cpp gets",
            before.threads
        );
        eprintln!("  compute pool: {} threads (counted by the pod), kernels: {}", before.threads, before.isa);
        let side = measure("ours", &client, &prompts, &plan).await?;
        let off = grounded("ours (speculation off)", &client, &prompts, Some(false)).await?;
        let on = grounded("ours (speculation on)", &client, &prompts, Some(true)).await?;
        let health = client.health().await.context("Health after the run")?;
        anyhow::Ok((side, off, on, health))
    })?;
    drop(pod);
    if health.weight_bytes_per_token == 0 {
        eprintln!("  the pod reports no weight_bytes_per_token; its ceiling uses the GGUF's");
    }

    compare_prompt_tokens(&our_side, &peer_side);
    let figures = PodFigures {
        peer,
        prefill_tokens: options.prefill_tokens,
        prefix_tokens: options.prefix_tokens,
        bandwidth,
        peer_bytes_per_token: weights.bytes_per_token(),
        our_bytes_per_token: health.weight_bytes_per_token,
        llama_bench,
        peer_side,
        peer_grounded,
        peer_grounded_spec,
        our_side,
        our_grounded,
        our_grounded_spec,
    };
    eprintln!("memory copy bandwidth of this run: {:.1} GB/s ({threads} threads)", bandwidth.gb_per_s());
    Ok(Report { suite: "pod".into(), machine: Machine::current(), rows: figures.rows() })
}

/// Prints how many tokens each system counted for the same prefill prompt: they tokenize the same text
/// with the same vocabulary, so a difference is their chat templates' (llama-server renders the GGUF's
/// own, which adds a default system turn when there is none).
fn compare_prompt_tokens(ours: &SideFigures, peer: &SideFigures) {
    let count = |side: &SideFigures| side.prefill.first().map_or(0, |g| g.prompt_tokens);
    let (ours, peer) = (count(ours), count(peer));
    eprintln!("prompt tokens of the same prefill prompt: ours {ours}, llama-server {peer}");
    if ours.abs_diff(peer) > ours.max(peer) / 20 {
        eprintln!("  warning: the counts differ by more than 5%: the prefill figures compare different work");
    }
}

fn interrupted(options: &PodBenchOptions) -> anyhow::Result<()> {
    anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
    Ok(())
}
