//! `mesh bench pod`: our inference pod against llama.cpp on the same GGUF file with the same thread
//! count, one system at a time in one run: llama.cpp's `llama-bench` (prefill, decode), `llama-server`
//! with parallel slots and continuous batching (the same prompts as ours, over HTTP), `llama-server` with
//! n-gram speculation (the grounded task), then our pod over gRPC. A STREAM-like copy in the same run
//! gives the single-stream decode ceiling.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::bench::common::bandwidth::{measure_copy, Bandwidth, DEFAULT_ARRAY_BYTES, DEFAULT_PASSES};
use crate::bench::common::report::{cpu_model, Machine, Report};
use crate::bench::common::scratch::run_kept;
use crate::bench::common::sharegpt::{first_turns, FirstTurns};
use crate::bench::pod::gen_phases::{grounded, measure, Plan, SideFigures};
use crate::bench::pod::gen_target::Generation;
use crate::bench::pod::gguf::GgufWeights;
use crate::bench::pod::llama_cpp::{BenchSpec, LlamaBench, LlamaCpp, PINNED_SETTINGS};
use crate::bench::pod::llama_server::{LlamaServer, ServerSpec};
use crate::bench::pod::ours::{Pod, PodSpec};
use crate::bench::pod::prompts::{PromptSizes, Prompts};
use crate::bench::pod::rows::PodFigures;
use mesh_harness::paths;
use proto::inference::HealthReply;

/// ShareGPT first turns to read: the concurrency phases take them from the start (disjoint between
/// phases), the sized prompts are cut from the text of the last ones.
const SHAREGPT_TURNS: usize = 1000;
/// Shortest ShareGPT first turn used, in characters.
const SHAREGPT_MIN_CHARS: usize = 16;
/// Context of each llama-server slot: room for the longest prompt and its answer.
const CTX_PER_SLOT: usize = 4096;

/// What `mesh bench pod` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct PodBenchOptions {
    /// CPU threads of both systems.
    // llama.cpp's `-t`/`-tb`; the pod's `MESH_POD_THREADS`.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Measured seconds of each concurrency phase.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Concurrent requests of the throughput phases (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "8,16,32")]
    pub concurrency: Vec<usize>,
    /// Most tokens of each request of the throughput phases (the same for both systems).
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,
    /// Tokens of the single-stream decode.
    #[arg(long, default_value_t = 128)]
    pub decode_tokens: u32,
    /// Prompt tokens of the prefill test.
    #[arg(long, default_value_t = 512)]
    pub prefill_tokens: u32,
    /// Tokens of the shared system prompt of the cached/cold TTFT test.
    #[arg(long, default_value_t = 1024)]
    pub prefix_tokens: u32,
    /// Samples of the prefill and TTFT tests (distinct prompts), and llama-bench repetitions.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Longest ShareGPT first turn sent, in characters.
    #[arg(long, default_value_t = 1000)]
    pub max_prompt_chars: usize,
    /// Directory of llama-bench and llama-server (default: where scripts/install-llama-cpp.sh builds).
    #[arg(long, env = "LLAMA_CPP_BIN_DIR")]
    pub llama_bin_dir: Option<PathBuf>,
    /// Fail with the command to run instead of running scripts/install-llama-cpp.sh when llama.cpp is
    /// missing.
    // True (run the installer) unless `--no-install` is given.
    #[arg(long = "no-install", action = clap::ArgAction::SetFalse)]
    pub install: bool,
    /// An extra argument for inference-pod (repeat for several).
    #[arg(long = "pod-arg", allow_hyphen_values = true)]
    pub pod_args: Vec<String>,
    /// Where the run keeps its logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early; every process is still stopped. From the command
    /// line: the process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
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
    run_kept(&options.dir, "pod", |scratch| run_in(options, scratch))
}

fn run_in(options: &PodBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    let log_dir = scratch.join("logs");
    let model = paths::smollm2_gguf();
    ensure_inputs(&model)?;
    let llama = LlamaCpp::locate(options.llama_bin_dir.as_deref(), options.install, &log_dir, options.stop)?;
    let peer = llama.label().to_owned();
    eprintln!("CPU: {}; the peer: {peer}", cpu_model());
    let (bandwidth, weights) = memory_ceiling(options.threads, &model)?;
    let turns = first_turns(
        &FirstTurns {
            count: SHAREGPT_TURNS,
            min_chars: SHAREGPT_MIN_CHARS,
            max_chars: options.max_prompt_chars,
        },
        &paths::sharegpt_json(),
    )?;
    interrupted(options)?;

    let llama_bench = run_llama_bench(&llama, &model, options, &log_dir)?;
    interrupted(options)?;

    let phases = Phases::new(options, model, &log_dir)?;
    let (prompts, peer_side, peer_grounded) = phases.llama_server(&llama, turns)?;
    interrupted(options)?;
    let peer_grounded_spec = phases.llama_server_speculating(&llama, &prompts)?;
    interrupted(options)?;
    let (our_side, our_grounded, our_grounded_spec, health) = phases.ours(&prompts)?;
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
    let threads = options.threads;
    eprintln!("memory copy bandwidth of this run: {:.1} GB/s ({threads} threads)", bandwidth.gb_per_s());
    Ok(Report { suite: "pod".into(), machine: Machine::current(), rows: figures.rows() })
}

/// Fails with the command that makes it when the model or the pod's binary is missing.
fn ensure_inputs(model: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(model.is_file(), "{} is missing; install it with .ci/setup.sh models", model.display());
    let pod_binary = paths::binary("inference-pod");
    anyhow::ensure!(
        pod_binary.is_file(),
        "{} is missing; build it with cargo build --release -p inference-pod",
        pod_binary.display()
    );
    Ok(())
}

/// The single-stream decode ceiling's two halves: this machine's copy bandwidth on `threads` threads,
/// and the bytes the GGUF's weights make each token read.
fn memory_ceiling(threads: usize, model: &Path) -> anyhow::Result<(Bandwidth, GgufWeights)> {
    eprintln!("memory bandwidth: STREAM-like copy, {threads} threads");
    let bandwidth = measure_copy(threads, DEFAULT_ARRAY_BYTES, DEFAULT_PASSES);
    let weights = GgufWeights::read(model)?;
    eprintln!(
        "  {:.1} GB/s; the GGUF's {} tensors: {:.1} MB read per token -> ceiling {:.0} tok/s",
        bandwidth.gb_per_s(),
        weights.tensors,
        weights.bytes_per_token() as f64 / 1e6,
        bandwidth.ceiling_tok_s(weights.bytes_per_token())
    );
    Ok((bandwidth, weights))
}

/// The peer's prefill and decode as `llama-bench` measures them.
fn run_llama_bench(
    llama: &LlamaCpp,
    model: &Path,
    options: &PodBenchOptions,
    log_dir: &Path,
) -> anyhow::Result<LlamaBench> {
    eprintln!(
        "{}: llama-bench -p {} -n {} -t {} {}",
        llama.label(),
        options.prefill_tokens,
        options.decode_tokens,
        options.threads,
        PINNED_SETTINGS.join(" ")
    );
    let spec = BenchSpec {
        model: model.to_owned(),
        threads: options.threads,
        prompt_tokens: options.prefill_tokens,
        gen_tokens: options.decode_tokens,
        reps: options.reps,
    };
    let llama_bench = llama.bench(&spec, log_dir, options.stop)?;
    eprintln!(
        "  prefill {:.1} tok/s, decode {:.1} tok/s",
        llama_bench.prefill_tok_s, llama_bench.decode_tok_s
    );
    Ok(llama_bench)
}

/// The phases both servers go through ([`measure`], then [`grounded`]), and what they share.
struct Phases<'a> {
    options: &'a PodBenchOptions,
    log_dir: &'a Path,
    runtime: tokio::runtime::Runtime,
    plan: Plan,
    /// `llama-server`'s settings: one slot per client of the highest concurrency.
    server_spec: ServerSpec,
}

impl<'a> Phases<'a> {
    fn new(options: &'a PodBenchOptions, model: PathBuf, log_dir: &'a Path) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let plan = Plan {
            decode_tokens: options.decode_tokens,
            concurrency: options.concurrency.clone(),
            max_tokens: options.max_tokens,
            window: Duration::from_secs(options.seconds),
            stop: options.stop,
        };
        let server_spec = ServerSpec {
            model,
            threads: options.threads,
            slots: options.concurrency.iter().copied().max().unwrap_or(1),
            ctx_per_slot: CTX_PER_SLOT,
            extra_args: Vec::new(),
        };
        Ok(Self { options, log_dir, runtime, plan, server_spec })
    }

    /// `llama-server`: builds the prompts (with its tokenizer), then measures every phase and the
    /// grounded task without speculation. The server is stopped before this returns.
    fn llama_server(
        &self,
        llama: &LlamaCpp,
        turns: Vec<String>,
    ) -> anyhow::Result<(Prompts, SideFigures, Generation)> {
        let (threads, slots) = (self.options.threads, self.server_spec.slots);
        let pinned = PINNED_SETTINGS.join(" ");
        eprintln!(
            "{}: llama-server -np {slots} --cont-batching -t {threads} -tb {threads} {pinned}",
            llama.label()
        );
        let server = Arc::new(LlamaServer::start(llama, &self.server_spec, "llama-server", self.log_dir)?);
        eprintln!("  {} (log: {})", server.url(), server.log_path().display());
        let sizes = PromptSizes {
            prefill_tokens: self.options.prefill_tokens as usize,
            prefix_tokens: self.options.prefix_tokens as usize,
            reps: self.options.reps as usize,
        };
        let prompts = Prompts::build(&server, turns, sizes)?;
        let side = self.runtime.block_on(measure("llama-server", &server, &prompts, &self.plan))?;
        let grounded = self.runtime.block_on(grounded("llama-server", &server, &prompts, Some(false)))?;
        Ok((prompts, side, grounded))
    }

    /// The grounded task on one `llama-server` slot with n-gram speculation (prompt lookup).
    fn llama_server_speculating(&self, llama: &LlamaCpp, prompts: &Prompts) -> anyhow::Result<Generation> {
        eprintln!("{}: llama-server --spec-type ngram-simple (prompt lookup)", llama.label());
        let spec_args = ["--spec-type", "ngram-simple"].map(String::from).to_vec();
        let spec = ServerSpec { slots: 1, extra_args: spec_args, ..self.server_spec.clone() };
        let server = Arc::new(LlamaServer::start(llama, &spec, "llama-server-spec", self.log_dir)?);
        self.runtime.block_on(grounded("llama-server (ngram-simple)", &server, prompts, Some(true)))
    }

    /// Our pod: every phase, the grounded task with speculation off and on, and its health after the
    /// run. The pod is stopped before this returns.
    fn ours(&self, prompts: &Prompts) -> anyhow::Result<(SideFigures, Generation, Generation, HealthReply)> {
        let threads = self.options.threads;
        eprintln!("ours: inference-pod with {threads} threads");
        let pod_spec = PodSpec {
            threads,
            max_queue: (2 * self.server_spec.slots).max(64),
            extra_args: self.options.pod_args.clone(),
        };
        let pod = Pod::start(&pod_spec, self.log_dir)?;
        eprintln!("  log: {}", pod.log_path().display());
        self.runtime.block_on(async {
            let client = Arc::new(pod.connect().await?);
            let before = client.health().await.context("Health before the run")?;
            anyhow::ensure!(
                before.threads as usize == threads,
                "the pod's compute pool has {} threads, not the {threads} llama.cpp gets",
                before.threads
            );
            eprintln!(
                "  compute pool: {} threads (counted by the pod), kernels: {}",
                before.threads, before.isa
            );
            let side = measure("ours", &client, prompts, &self.plan).await?;
            let off = grounded("ours (speculation off)", &client, prompts, Some(false)).await?;
            let on = grounded("ours (speculation on)", &client, prompts, Some(true)).await?;
            let health = client.health().await.context("Health after the run")?;
            anyhow::Ok((side, off, on, health))
        })
    }
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
