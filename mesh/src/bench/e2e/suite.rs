//! `mesh bench e2e`: what the whole mesh does for the people who run it, on ShareGPT traffic (the
//! natural and popular mixes of [`e2e_workload`](crate::bench::e2e::workload)), against two other systems on the
//! same machine in the same run, one after another so that none shares the CPUs with another:
//!
//! 1. the mesh with caching off: the same deployment, every request sent `cache-control: no-cache,
//!    no-store`, so each one reaches the pod (the baseline);
//! 2. the mesh as `make up` deploys it (edge, 2 regional nodes, 3 core nodes, the pod, mutual TLS);
//! 3. GPTCache in front of llama-server on the same GGUF and threads ([`e2e_peer`](crate::bench::e2e::peer)).
//!
//! Each system gets, per mix: a warm-up (the mix's first conversations at 8 clients), then one phase
//! per concurrency step (a closed loop), then one per arrival rate (an open loop: conversations start at
//! Poisson arrivals whatever is in flight, so a system that falls behind queues, as a service does), then
//! the agreement audit of a sample of its semantic hits
//! ([`e2e_agreement`](crate::bench::e2e::agreement)). Every system gets the same requests: a popular step runs
//! for a fixed time from a fixed offset; a natural step replays a fixed number of conversations per
//! client, each step where the last one ended, so that the mix's repeats and rewrites meet the
//! questions they repeat.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::bench::common::report::{cpu_model, Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use crate::bench::e2e::agreement::{audit, paraphrase_ceiling, Agreement};
use crate::bench::e2e::driver::{learn_generated, Endpoint, Load, Phase, StepFigures, Turn, Until};
use crate::bench::e2e::peer::GptCacheStack;
use crate::bench::e2e::workload::{sharegpt_pairs, Mix, Workload, WorkloadSpec};
use crate::bench::pod::llama_cpp::LlamaCpp;
use mesh_harness::mesh::{Mesh, MeshSpec};
use mesh_harness::paths;

/// The cache-off mesh's name in the report.
pub const CACHE_OFF: &str = "mesh, cache off";
/// The peer stack's name in the report.
pub const PEER_STACK: &str = "GPTCache + llama-server";
/// Clients of the warm-up.
const WARMUP_CLIENTS: usize = 8;

/// What `mesh bench e2e` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct E2eBenchOptions {
    /// Measured seconds of each concurrency step.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// The concurrency steps (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub concurrency: Vec<usize>,
    /// Arrival-rate steps after the concurrency steps, in conversations per second (comma-separated):
    /// conversations start at Poisson arrivals, however many are in flight (an open loop).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Most tokens of every answer.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: u32,
    /// Conversations of each system's warm-up, per mix.
    #[arg(long, default_value_t = 64)]
    pub warmup: usize,
    /// Conversations of each mix's sequence.
    #[arg(long, default_value_t = 4000)]
    pub length: usize,
    /// Distinct first turns the popular mix draws from.
    #[arg(long, default_value_t = 1000)]
    pub popular_pool: usize,
    /// Conversations each client replays in a natural step (steps run back to back through the mix).
    #[arg(long, default_value_t = 6)]
    pub natural_per_client: usize,
    /// A labelled ShareGPT question and, 24 conversations later, its paraphrase or near miss are woven
    /// into the natural mix every this many conversations (0: none).
    #[arg(long, default_value_t = 10)]
    pub pair_every: usize,
    /// Longest user turn sent, in characters.
    #[arg(long, default_value_t = 600)]
    pub max_prompt_chars: usize,
    /// The TTFT p99 target; the report gives the highest step each system holds it at.
    #[arg(long, default_value_t = 5000)]
    pub ttft_target_ms: u64,
    /// Semantic hits audited against fresh answers, per system and mix.
    #[arg(long, default_value_t = 40)]
    pub agreement_samples: usize,
    /// CPU threads of llama-server and of the mesh's pod.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Which mixes (natural, popular; comma-separated).
    // Names, each read by [`Mix::parse`] when the run starts.
    #[arg(long, value_delimiter = ',', default_value = "natural,popular")]
    pub mixes: Vec<String>,
    /// A directory holding llama-server (default: scripts/install-llama-cpp.sh's).
    #[arg(long)]
    pub llama_bin_dir: Option<PathBuf>,
    /// Fail instead of building llama.cpp or installing GPTCache when they are missing.
    // True (run the installer) unless `--no-install` is given.
    #[arg(long = "no-install", action = clap::ArgAction::SetFalse)]
    pub install: bool,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early. From the command line: the
    /// process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// One system's results on one mix.
struct MixResult {
    steps: Vec<StepFigures>,
    agreement: Agreement,
}

/// A system under test, running.
struct Running {
    endpoint: Endpoint,
    /// Where a fresh answer (cache bypassed) comes from.
    fresh: Endpoint,
    _mesh: Option<Mesh>,
    _stack: Option<GptCacheStack>,
}

/// Runs the suite; every process it starts is stopped before it returns.
pub fn run(options: &E2eBenchOptions) -> anyhow::Result<Report> {
    let mixes = options.mixes.iter().map(|name| Mix::parse(name)).collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!options.concurrency.is_empty() && options.seconds > 0, "--concurrency and --seconds");
    run_kept(&options.dir, "e2e", |scratch| run_in(options, &mixes, scratch))
}

fn run_in(options: &E2eBenchOptions, mixes: &[Mix], scratch: &Path) -> anyhow::Result<Report> {
    let log_dir = scratch.join("logs");
    let llama = LlamaCpp::locate(options.llama_bin_dir.as_deref(), options.install, &log_dir, options.stop)?;
    let peers_dir = crate::bench::regional::gptcache::locate(options.install)?;
    let labelled = sharegpt_pairs(&paths::repo_root().join("near-miss/data/semantic_pairs.jsonl"))?;
    let spec = WorkloadSpec {
        length: options.length,
        popular_pool: options.popular_pool,
        max_chars: options.max_prompt_chars,
        seed: 2026,
        pairs: labelled.clone(),
        pair_every: options.pair_every,
    };
    let workloads: Vec<Workload> =
        spec.build(&paths::sharegpt_json())?.into_iter().filter(|w| mixes.contains(&w.mix)).collect();
    for w in &workloads {
        let multi = w.conversations.iter().filter(|c| c.len() > 1).count();
        eprintln!(
            "{} mix: {} conversations ({multi} with two user turns), {:.1}% of first turns repeat an earlier one",
            w.mix.name(),
            w.conversations.len(),
            100.0 * w.repeat_share()
        );
    }
    eprintln!("CPU: {}", cpu_model());

    let names = [CACHE_OFF, "mesh", PEER_STACK];
    let mut results: Vec<Vec<MixResult>> = Vec::new();
    let mut ceiling = Agreement::default();
    for (s, name) in names.iter().enumerate() {
        eprintln!("\n== {name}: starting");
        let running = match s {
            0 | 1 => start_mesh(scratch.join(format!("mesh-{s}")), s == 0, options.threads)?,
            _ => {
                let slots = options.concurrency.iter().copied().max().unwrap_or(1);
                let stack = GptCacheStack::start(&llama, &peers_dir, options.threads, slots, scratch)?;
                eprintln!("   {} at {}", stack.label, stack.url);
                Running {
                    endpoint: Endpoint { base_url: stack.url.clone(), api_key: None, headers: Vec::new() },
                    fresh: Endpoint {
                        base_url: stack.server_url().to_owned(),
                        api_key: None,
                        headers: Vec::new(),
                    },
                    _mesh: None,
                    _stack: Some(stack),
                }
            }
        };
        let mut per_mix = Vec::new();
        for workload in &workloads {
            per_mix.push(run_mix(options, name, &running, workload)?);
            anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
        }
        if s == 0 {
            ceiling =
                paraphrase_ceiling(&running.fresh, &labelled, options.agreement_samples, options.max_tokens)?;
            eprintln!(
                "   fresh answers to both wordings of {} labelled paraphrases: {} equal, {} similar (the ceiling of hit agreement)",
                ceiling.sampled, ceiling.exact, ceiling.similar
            );
        }
        results.push(per_mix);
    }
    print_steps(&names, &workloads, &results, options);
    println!(
        "fresh answers to both wordings of {} labelled paraphrases: {:.2} equal, {:.2} similar: the most a semantic hit can agree with this model",
        ceiling.sampled,
        ceiling.exact_rate(),
        ceiling.similar_rate()
    );
    let rows = rows(&workloads, &results, options, &ceiling);
    Ok(Report { suite: "e2e".into(), machine: Machine::current(), rows })
}

/// The `make up` mesh, its pod on `threads` threads (as many as llama-server gets).
fn start_mesh(dir: PathBuf, cache_off: bool, threads: usize) -> anyhow::Result<Running> {
    let mesh = Mesh::start(MeshSpec { tls: true, pod_threads: Some(threads), ..MeshSpec::local(dir) })?;
    let edge = mesh.edge_url().expect("the mesh runs its edge");
    let key = Some(mesh.api_key().to_owned());
    let bypass = vec![("cache-control".to_owned(), "no-cache, no-store".to_owned())];
    let endpoint = Endpoint {
        base_url: edge.clone(),
        api_key: key.clone(),
        headers: if cache_off { bypass.clone() } else { Vec::new() },
    };
    let fresh = Endpoint { base_url: edge, api_key: key, headers: bypass };
    Ok(Running { endpoint, fresh, _mesh: Some(mesh), _stack: None })
}

fn run_mix(
    options: &E2eBenchOptions,
    name: &str,
    running: &Running,
    workload: &Workload,
) -> anyhow::Result<MixResult> {
    let asked = Mutex::new(HashSet::new());
    let mut generated = HashMap::new();
    let phase = |offset, load, until| Phase {
        endpoint: &running.endpoint,
        workload,
        offset,
        load,
        until,
        max_tokens: options.max_tokens,
        stop: options.stop,
    };
    let warm = phase(0, Load::Closed(WARMUP_CLIENTS), Until::Conversations(options.warmup)).run(&asked);
    learn_generated(&warm.turns, &mut generated);
    if let Some(error) = &warm.first_error {
        anyhow::bail!("{name}, warm-up: {error}");
    }
    let loads = steps(options);
    let stride = workload.conversations.len().saturating_sub(options.warmup) / loads.len();
    let mut runs = Vec::new();
    let mut natural_offset = options.warmup;
    for (i, load) in loads.into_iter().enumerate() {
        let (offset, until) = match workload.mix {
            Mix::Popular => {
                (options.warmup + i * stride, Until::Elapsed(Duration::from_secs(options.seconds)))
            }
            Mix::Natural => {
                let count = match load {
                    Load::Closed(clients) => clients * options.natural_per_client,
                    Load::Open(per_s) => (per_s * options.seconds as f64).round().max(1.0) as usize,
                };
                natural_offset += count;
                (natural_offset - count, Until::Conversations(count))
            }
        };
        let run = phase(offset, load, until).run(&asked);
        learn_generated(&run.turns, &mut generated);
        let figures = run.figures(&generated);
        eprintln!("   {} {load}: {}", workload.mix.name(), summary(&figures));
        if let Some(error) = &run.first_error {
            eprintln!("     first error: {error}");
        }
        runs.push(run);
    }
    let steps = runs.iter().map(|r| r.figures(&generated)).collect();
    let turns: Vec<&Turn> = runs.iter().flat_map(|r| &r.turns).collect();
    let agreement = audit(&running.fresh, &turns, options.agreement_samples, options.max_tokens)?;
    eprintln!(
        "   {} agreement of semantic hits: {} sampled, {} equal, {} similar",
        workload.mix.name(),
        agreement.sampled,
        agreement.exact,
        agreement.similar
    );
    Ok(MixResult { steps, agreement })
}

/// Every step of a mix, in order: the concurrency steps, then the arrival rates.
fn steps(options: &E2eBenchOptions) -> Vec<Load> {
    let closed = options.concurrency.iter().map(|&c| Load::Closed(c));
    closed.chain(options.rates.iter().map(|&r| Load::Open(r))).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A step's figures as table cells: clients, req/s, TTFT p50/p99, e2e p50/p99, TPOT, cached, tokens
/// avoided, shed, failed, answers by tier.
fn cells(f: &StepFigures) -> [String; 12] {
    [
        f.load.to_string(),
        format!("{:.2}", f.per_s),
        format!("{:.0} ms", ms(f.ttft_p50)),
        format!("{:.0} ms", ms(f.ttft_p99)),
        format!("{:.0} ms", ms(f.e2e_p50)),
        format!("{:.0} ms", ms(f.e2e_p99)),
        format!("{:.1} ms", ms(f.tpot)),
        format!("{:.1}%", 100.0 * f.cached),
        format!("{:.1}%", 100.0 * f.tokens_avoided),
        f.shed.to_string(),
        f.failed.to_string(),
        format!("{:?}", f.by_tier),
    ]
}

/// The columns of [`cells`].
const COLUMNS: [&str; 12] = [
    "load",
    "req/s",
    "TTFT p50",
    "TTFT p99",
    "e2e p50",
    "e2e p99",
    "TPOT",
    "cached",
    "tokens avoided",
    "shed",
    "failed",
    "by tier",
];

fn summary(f: &StepFigures) -> String {
    COLUMNS.iter().zip(cells(f)).map(|(c, v)| format!("{c} {v}")).collect::<Vec<_>>().join(", ")
}

fn print_steps(
    names: &[&str],
    workloads: &[Workload],
    results: &[Vec<MixResult>],
    options: &E2eBenchOptions,
) {
    println!(
        "\nmesh bench e2e: {} s per step, max_tokens {}, greedy; CPU {}",
        options.seconds,
        options.max_tokens,
        cpu_model()
    );
    println!("| mix | system | {} |", COLUMNS.join(" | "));
    println!("|---|---|{}", "---|".repeat(COLUMNS.len()));
    for (m, workload) in workloads.iter().enumerate() {
        for (s, name) in names.iter().enumerate() {
            for f in &results[s][m].steps {
                println!("| {} | {name} | {} |", workload.mix.name(), cells(f).join(" | "));
            }
        }
        for (s, name) in names.iter().enumerate() {
            let a = results[s][m].agreement;
            println!(
                "{} mix, {name}: {} semantic hits audited, {:.2} equal after normalisation, {:.2} similar (ROUGE-L >= {})",
                workload.mix.name(),
                a.sampled,
                a.exact_rate(),
                a.similar_rate(),
                crate::bench::e2e::agreement::SIMILAR
            );
        }
    }
}

/// The highest concurrency step whose TTFT p99 is within the target (0 when none is).
fn highest_holding(steps: &[StepFigures], target_ms: u64) -> f64 {
    steps
        .iter()
        .filter(|f| f.answered > 0 && ms(f.ttft_p99) <= target_ms as f64)
        .filter_map(|f| match f.load {
            Load::Closed(clients) => Some(clients),
            Load::Open(_) => None,
        })
        .max()
        .unwrap_or(0) as f64
}

/// The report's rows; `ceiling` is the agreement of fresh answers to two wordings of one question, the
/// limit of the hit-agreement rows.
fn rows(
    workloads: &[Workload],
    results: &[Vec<MixResult>],
    options: &E2eBenchOptions,
    ceiling: &Agreement,
) -> Vec<Row> {
    let at = options.concurrency.iter().copied().filter(|c| *c <= 32).max().unwrap_or(options.concurrency[0]);
    let mut rows = Vec::new();
    for (m, workload) in workloads.iter().enumerate() {
        for (s, peer) in [(0, CACHE_OFF), (2, PEER_STACK)] {
            let versus = Versus { mix: workload.mix, ours: &results[1][m], theirs: &results[s][m], peer };
            rows.extend(versus.step_rows(at, s == 0));
            rows.extend(versus.rate_rows(&options.rates));
            rows.push(versus.capacity_row(options.ttft_target_ms));
            // Without an audited semantic hit of ours there is nothing to compare (the table above
            // prints every system's count).
            if s == 2 && versus.ours.agreement.sampled > 0 {
                rows.extend(versus.agreement_rows(ceiling));
            }
        }
    }
    rows
}

/// The mesh against one other system on one mix: the rows of one comparison.
struct Versus<'a> {
    mix: Mix,
    /// The mesh's results.
    ours: &'a MixResult,
    /// The other system's results.
    theirs: &'a MixResult,
    /// The other system's name.
    peer: &'static str,
}

impl<'a> Versus<'a> {
    /// A row of this comparison.
    fn row(
        &self,
        metric: String,
        unit: &str,
        better: Better,
        ours: f64,
        peer_value: f64,
        goal: Option<f64>,
    ) -> Row {
        Row {
            metric,
            unit: unit.into(),
            better,
            ours,
            peer: self.peer.into(),
            peer_value,
            goal_ratio: goal,
            limit: None,
        }
    }

    /// Throughput, latencies and cache figures at `at` clients (or the first step, when `at` did not
    /// run); the popular mix asks twice the cache-off mesh's throughput (`against_cache_off`).
    fn step_rows(&self, at: usize, against_cache_off: bool) -> Vec<Row> {
        let step = |result: &'a MixResult| -> &'a StepFigures {
            result.steps.iter().find(|f| f.load == Load::Closed(at)).unwrap_or(&result.steps[0])
        };
        let (ours, theirs, mix) = (step(self.ours), step(self.theirs), self.mix.name());
        let rps_goal = if self.mix == Mix::Popular && against_cache_off { 2.0 } else { 1.0 };
        vec![
            self.row(
                format!("{mix}_requests_per_s_c{at}"),
                "req/s",
                Better::Higher,
                ours.per_s,
                theirs.per_s,
                Some(rps_goal),
            ),
            self.row(
                format!("{mix}_e2e_p99_c{at}"),
                "ms",
                Better::Lower,
                ms(ours.e2e_p99),
                ms(theirs.e2e_p99),
                Some(1.0),
            ),
            self.row(
                format!("{mix}_ttft_p99_c{at}"),
                "ms",
                Better::Lower,
                ms(ours.ttft_p99),
                ms(theirs.ttft_p99),
                None,
            ),
            self.row(format!("{mix}_tpot_c{at}"), "ms", Better::Lower, ms(ours.tpot), ms(theirs.tpot), None),
            self.row(
                format!("{mix}_answered_from_cache_c{at}"),
                "share",
                Better::Higher,
                ours.cached,
                theirs.cached,
                None,
            ),
            self.row(
                format!("{mix}_tokens_avoided_c{at}"),
                "share",
                Better::Higher,
                ours.tokens_avoided,
                theirs.tokens_avoided,
                None,
            ),
        ]
    }

    /// The e2e and TTFT p99 at each arrival rate both systems ran.
    fn rate_rows(&self, rates: &[f64]) -> Vec<Row> {
        let mut rows = Vec::new();
        for &rate in rates {
            let at_rate = |result: &'a MixResult| result.steps.iter().find(|f| f.load == Load::Open(rate));
            let (Some(ours), Some(theirs)) = (at_rate(self.ours), at_rate(self.theirs)) else { continue };
            let p99s = [("e2e", ours.e2e_p99, theirs.e2e_p99), ("ttft", ours.ttft_p99, theirs.ttft_p99)];
            for (what, ours, theirs) in p99s {
                let metric = format!("{}_{what}_p99_at_{rate}_per_s", self.mix.name());
                rows.push(self.row(metric, "ms", Better::Lower, ms(ours), ms(theirs), None));
            }
        }
        rows
    }

    /// The most clients each system served within the TTFT p99 target.
    fn capacity_row(&self, target: u64) -> Row {
        self.row(
            format!("{}_max_clients_ttft_p99_le_{target}ms", self.mix.name()),
            "clients",
            Better::Higher,
            highest_holding(&self.ours.steps, target),
            highest_holding(&self.theirs.steps, target),
            None,
        )
    }

    /// How often audited semantic hits agree with fresh answers (similar, and equal), limited by the
    /// `ceiling` when it was measured.
    fn agreement_rows(&self, ceiling: &Agreement) -> Vec<Row> {
        let (a, b, mix) = (self.ours.agreement, self.theirs.agreement, self.mix.name());
        let limit = |rate: f64| (ceiling.sampled > 0).then_some(rate);
        vec![
            Row {
                limit: limit(ceiling.similar_rate()),
                ..self.row(
                    format!("{mix}_hit_agreement_similar"),
                    "share",
                    Better::Higher,
                    a.similar_rate(),
                    b.similar_rate(),
                    Some(1.0),
                )
            },
            Row {
                limit: limit(ceiling.exact_rate()),
                ..self.row(
                    format!("{mix}_hit_agreement_equal"),
                    "share",
                    Better::Higher,
                    a.exact_rate(),
                    b.exact_rate(),
                    None,
                )
            },
        ]
    }
}
