//! `mesh`: the local launcher. `mesh up` starts a complete mesh on this machine (3 core nodes, the
//! inference pod, 2 regional nodes, the edge under `wrangler dev`) in the foreground; Ctrl-C stops it.
//! `mesh bench core` measures the core cluster against etcd, `mesh bench pod` the inference pod against
//! llama.cpp, and `mesh bench regional` the regional node against Redis and GPTCache, side by side
//! (`shared/design/BENCHMARKS.md`); `mesh bench propagation` times invalidations through every tier.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mesh_harness::{Mesh, MeshSpec};
use mesh_tool::bench::e2e::workload::Mix;
use mesh_tool::bench::{
    self, CoreBenchOptions, E2eBenchOptions, EdgeBenchOptions, PodBenchOptions, RegionalBenchOptions, Report,
};
use mesh_tool::dashboard::{Dashboard, DashboardOptions, Target};

/// mimalloc rather than glibc's allocator: as a load generator, this process allocates and frees buffers for
/// every request it sends, for whichever system it measures; with glibc, malloc and free were about a sixth
/// of its CPU time in `mesh bench core`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "mesh", about = "Local launcher of the LLM cache mesh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a complete local mesh in the foreground.
    Up {
        /// Where the nodes keep their data and logs; reused across runs.
        #[arg(long, env = "MESH_DATA_DIR", default_value = ".cache/mesh")]
        data_dir: PathBuf,
        /// Port of the edge endpoint.
        #[arg(long, env = "MESH_EDGE_PORT", default_value_t = 8787)]
        edge_port: u16,
        /// First of the fixed ports of the other daemons (pod, core nodes +1.., regional nodes +11..);
        /// fixed so that a restarted mesh finds its Raft peers where its data says they are.
        #[arg(long, env = "MESH_BASE_PORT", default_value_t = 7100)]
        base_port: u16,
        /// The development tenant's API key.
        #[arg(long, env = "MESH_DEV_API_KEY", default_value = "sk-dev")]
        api_key: String,
        /// Number of regional nodes.
        #[arg(long, default_value_t = 2)]
        regional_nodes: usize,
        /// Run without TLS, every tier holding one shared secret (insecure development mode). By
        /// default every hop between daemons runs mutual TLS with certificates made at start.
        #[arg(long)]
        insecure: bool,
        /// Where the operator's dashboard is served (loopback).
        #[arg(long, env = "MESH_DASHBOARD_LISTEN", default_value = "127.0.0.1:7190")]
        dashboard: String,
    },
    /// Serve the operator's dashboard of a running mesh (by default the one `mesh up` started).
    Dashboard {
        /// Where the page is served.
        #[arg(long, default_value = "127.0.0.1:7190")]
        listen: String,
        /// The daemons whose `/metrics` it reads, as `name=url`, comma-separated (default: `mesh up`'s
        /// fixed ports from base 7100, over TLS).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "pod=https://127.0.0.1:7100,core-1=https://127.0.0.1:7101,core-2=https://127.0.0.1:7102,core-3=https://127.0.0.1:7103,regional-1=https://127.0.0.1:7111,regional-2=https://127.0.0.1:7112"
        )]
        targets: Vec<String>,
        /// The mesh's certificates (`ca.pem`, and `admin.pem`/`admin.key`, the identity presented).
        #[arg(long, default_value = ".cache/mesh/certs")]
        certs: PathBuf,
        /// Seconds between scrapes.
        #[arg(long, default_value_t = 2)]
        interval: u64,
    },
    /// Make a development CA and one certificate per node (mutual TLS between the tiers).
    Certs {
        /// Where `ca.pem`, `ca.key` and each node's `<name>.pem` and `<name>.key` go.
        #[arg(long, default_value = ".cache/mesh/certs")]
        dir: PathBuf,
        /// The nodes, as `name=role` (roles: edge, regional, core, pod, admin), comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "edge=edge,regional-1=regional,regional-2=regional,core-1=core,core-2=core,core-3=core,inference-pod=pod,admin=admin"
        )]
        nodes: Vec<String>,
    },
    /// Run a benchmark suite against its peer, side by side; prints a table.
    Bench {
        #[command(subcommand)]
        suite: BenchSuite,
    },
}

#[derive(Debug, Subcommand)]
enum BenchSuite {
    /// The core cluster against a three-member etcd 3.4, with a write+fsync loop as the floor.
    Core {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Measured seconds of each phase.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Concurrent clients of the put phases (comma-separated); the largest also drives the reads.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        clients: Vec<usize>,
        /// Bytes of each value (etcd) and of each completion's content (ours).
        #[arg(long, default_value_t = 1024)]
        value_bytes: usize,
        /// Rounds in which both systems run every phase, taking turns; each figure reported is the
        /// median over the rounds (this machine's speed drifts between minutes).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Where the run keeps cluster data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// The inference pod against llama.cpp (llama-bench, llama-server) on the same GGUF and threads.
    Pod {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// CPU threads of both systems.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Measured seconds of each concurrency phase.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Concurrent requests of the throughput phases (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "8,16,32")]
        concurrency: Vec<usize>,
        /// Most tokens of each request of the throughput phases (the same for both systems).
        #[arg(long, default_value_t = 64)]
        max_tokens: u32,
        /// Tokens of the single-stream decode.
        #[arg(long, default_value_t = 128)]
        decode_tokens: u32,
        /// Prompt tokens of the prefill test.
        #[arg(long, default_value_t = 512)]
        prefill_tokens: u32,
        /// Tokens of the shared system prompt of the cached/cold TTFT test.
        #[arg(long, default_value_t = 1024)]
        prefix_tokens: u32,
        /// Samples of the prefill and TTFT tests (distinct prompts), and llama-bench repetitions.
        #[arg(long, default_value_t = 3)]
        reps: u32,
        /// Longest ShareGPT first turn sent, in characters.
        #[arg(long, default_value_t = 1000)]
        max_prompt_chars: usize,
        /// Directory of llama-bench and llama-server (default: where scripts/install-llama-cpp.sh builds).
        #[arg(long, env = "LLAMA_CPP_BIN_DIR")]
        llama_bin_dir: Option<PathBuf>,
        /// Fail with the command to run instead of running scripts/install-llama-cpp.sh when llama.cpp is
        /// missing.
        #[arg(long)]
        no_install: bool,
        /// An extra argument for inference-pod (repeat for several).
        #[arg(long = "pod-arg", allow_hyphen_values = true)]
        pod_args: Vec<String>,
        /// Where the run keeps its logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// The regional node against Redis 7 (exact hits) and GPTCache + faiss (semantic hits), and the
    /// time and bytes replication takes to repair a partition.
    Regional {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Measured seconds of each exact-hit phase.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Concurrent clients of the exact-hit phases (ours and redis-benchmark's).
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Differing entries on one side of the healed partition.
        #[arg(long, default_value_t = 10_000)]
        entries: usize,
        /// Labelled pairs of the semantic phase (the first of near-miss/data/semantic_pairs.jsonl).
        #[arg(long, default_value_t = 60)]
        pairs: usize,
        /// Timed lookups per pair.
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Fail with the command to run instead of running scripts/install-regional-peers.sh when Redis or
        /// GPTCache is missing.
        #[arg(long)]
        no_install: bool,
        /// Where the run keeps its data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// What mutual TLS costs: exact hits at a regional node and misses through the edge, two meshes
    /// (with TLS and without) side by side.
    Tls {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Measured seconds of exact hits, per mesh.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Concurrent clients of the exact hits.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Misses through the edge, per mesh.
        #[arg(long, default_value_t = 40)]
        misses: usize,
        /// Where the run keeps its data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// The whole mesh on ShareGPT traffic (natural and Zipf-popular mixes) against the mesh with
    /// caching off and GPTCache in front of llama-server: throughput, TTFT and end-to-end latency per
    /// concurrency step, answers from cache, tokens avoided, and the agreement of semantic hits.
    E2e {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Measured seconds of each concurrency step.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// The concurrency steps (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
        concurrency: Vec<usize>,
        /// Arrival-rate steps after the concurrency steps, in conversations per second (comma-separated):
        /// conversations start at Poisson arrivals, however many are in flight (an open loop).
        #[arg(long, value_delimiter = ',')]
        rates: Vec<f64>,
        /// Most tokens of every answer.
        #[arg(long, default_value_t = 32)]
        max_tokens: u32,
        /// Conversations of each system's warm-up, per mix.
        #[arg(long, default_value_t = 64)]
        warmup: usize,
        /// Conversations of each mix's sequence.
        #[arg(long, default_value_t = 4000)]
        length: usize,
        /// Distinct first turns the popular mix draws from.
        #[arg(long, default_value_t = 1000)]
        popular_pool: usize,
        /// Conversations each client replays in a natural step (steps run back to back through the mix).
        #[arg(long, default_value_t = 6)]
        natural_per_client: usize,
        /// A labelled ShareGPT question and, 24 conversations later, its paraphrase or near miss are woven
        /// into the natural mix every this many conversations (0: none).
        #[arg(long, default_value_t = 10)]
        pair_every: usize,
        /// Longest user turn sent, in characters.
        #[arg(long, default_value_t = 600)]
        max_prompt_chars: usize,
        /// The TTFT p99 target; the report gives the highest step each system holds it at.
        #[arg(long, default_value_t = 5000)]
        ttft_target_ms: u64,
        /// Semantic hits audited against fresh answers, per system and mix.
        #[arg(long, default_value_t = 40)]
        agreement_samples: usize,
        /// CPU threads of llama-server and of the mesh's pod.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Which mixes (natural, popular; comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "natural,popular")]
        mixes: Vec<String>,
        /// A directory holding llama-server (default: scripts/install-llama-cpp.sh's).
        #[arg(long)]
        llama_bin_dir: Option<PathBuf>,
        /// Fail instead of building llama.cpp or installing GPTCache when they are missing.
        #[arg(long)]
        no_install: bool,
        /// Where the run keeps its data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// The edge worker against a pass-through worker under the same workerd (latency of a hit and of a
    /// miss), and the hot-set scan in wasm against the same scan natively.
    Edge {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Measured seconds of each latency phase.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Concurrent clients of the latency phases.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Hot-set sizes whose scan is timed (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1000,5000,20000")]
        entries: Vec<usize>,
        /// Lookups per timed scan request.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Where the run keeps its data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
    /// How long each tier (edge, regional nodes, core nodes) takes to stop serving an answer after the
    /// core acknowledged its invalidation: one key, a whole tenant, a model-version bump.
    Propagation {
        /// Also write the figures as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Keys invalidated one by one.
        #[arg(long, default_value_t = 100)]
        keys: usize,
        /// Tenant-wide invalidations.
        #[arg(long, default_value_t = 10)]
        tenant_rounds: usize,
        /// Model-version bumps.
        #[arg(long, default_value_t = 10)]
        model_rounds: usize,
        /// Where the run keeps its data and logs (removed after a successful run).
        #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
        dir: PathBuf,
    },
}

/// Set by SIGINT or SIGTERM: a benchmark stops at its next check and still reports.
static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

fn install_stop_handlers() -> anyhow::Result<()> {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&STOP))?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Up { data_dir, edge_port, base_port, api_key, regional_nodes, insecure, dashboard } => {
            let spec = MeshSpec {
                edge_port: Some(edge_port),
                base_port: Some(base_port),
                api_key,
                regional_nodes,
                tls: !insecure,
                ..MeshSpec::local(&data_dir)
            };
            up(spec, &data_dir, &dashboard)
        }
        Command::Dashboard { listen, targets, certs, interval } => {
            dashboard(listen, &targets, &certs, interval)
        }
        Command::Certs { dir, nodes } => certs(&dir, &nodes),
        Command::Bench { suite: BenchSuite::Core { json, seconds, clients, value_bytes, rounds, dir } } => {
            install_stop_handlers()?;
            let options = CoreBenchOptions { seconds, clients, value_bytes, rounds, dir, stop: &STOP };
            print_report(&bench::core::suite::run(&options)?, json)
        }
        Command::Bench {
            suite:
                BenchSuite::Pod {
                    json,
                    threads,
                    seconds,
                    concurrency,
                    max_tokens,
                    decode_tokens,
                    prefill_tokens,
                    prefix_tokens,
                    reps,
                    max_prompt_chars,
                    llama_bin_dir,
                    no_install,
                    pod_args,
                    dir,
                },
        } => {
            install_stop_handlers()?;
            let options = PodBenchOptions {
                threads,
                seconds,
                concurrency,
                max_tokens,
                decode_tokens,
                prefill_tokens,
                prefix_tokens,
                reps,
                max_prompt_chars,
                llama_bin_dir,
                install: !no_install,
                pod_args,
                dir,
                stop: &STOP,
            };
            print_report(&bench::pod::suite::run(&options)?, json)
        }
        Command::Bench {
            suite: BenchSuite::Regional { json, seconds, concurrency, entries, pairs, reps, no_install, dir },
        } => bench_regional(
            RegionalBenchOptions {
                seconds,
                concurrency,
                entries,
                pairs,
                reps,
                install: !no_install,
                dir,
                stop: &STOP,
            },
            json,
        ),
        Command::Bench { suite: BenchSuite::Tls { json, seconds, concurrency, misses, dir } } => {
            install_stop_handlers()?;
            let options =
                bench::tls::suite::TlsBenchOptions { seconds, concurrency, misses, dir, stop: &STOP };
            print_report(&bench::tls::suite::run(&options)?, json)
        }
        Command::Bench {
            suite: BenchSuite::Propagation { json, keys, tenant_rounds, model_rounds, dir },
        } => {
            let options =
                bench::propagation::suite::PropagationOptions { keys, tenant_rounds, model_rounds, dir };
            let figures = bench::propagation::suite::run(&options)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&figures)? + "\n")?;
                println!("\nwrote {}", path.display());
            }
            Ok(())
        }
        Command::Bench {
            suite:
                BenchSuite::E2e {
                    json,
                    seconds,
                    concurrency,
                    rates,
                    max_tokens,
                    warmup,
                    length,
                    popular_pool,
                    natural_per_client,
                    pair_every,
                    max_prompt_chars,
                    ttft_target_ms,
                    agreement_samples,
                    threads,
                    mixes,
                    llama_bin_dir,
                    no_install,
                    dir,
                },
        } => {
            install_stop_handlers()?;
            let mixes = mixes
                .iter()
                .map(|m| match m.as_str() {
                    "natural" => Ok(Mix::Natural),
                    "popular" => Ok(Mix::Popular),
                    other => anyhow::bail!("unknown mix {other:?} (natural, popular)"),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let options = E2eBenchOptions {
                seconds,
                concurrency,
                rates,
                max_tokens,
                warmup,
                length,
                popular_pool,
                natural_per_client,
                pair_every,
                max_prompt_chars,
                ttft_target_ms,
                agreement_samples,
                threads,
                mixes,
                llama_bin_dir,
                install: !no_install,
                dir,
                stop: &STOP,
            };
            print_report(&bench::e2e::suite::run(&options)?, json)
        }
        Command::Bench { suite: BenchSuite::Edge { json, seconds, concurrency, entries, queries, dir } } => {
            bench_edge(EdgeBenchOptions { seconds, concurrency, entries, queries, dir, stop: &STOP }, json)
        }
    }
}

/// Runs `mesh certs`: a development CA and each node's certificate and key.
fn certs(dir: &std::path::Path, nodes: &[String]) -> anyhow::Result<()> {
    let nodes = nodes
        .iter()
        .map(|node| {
            let (name, role) = anyhow::Context::context(node.split_once('='), "a node is name=role")?;
            let role = anyhow::Context::with_context(daemon_runtime::Role::parse(role), || {
                format!("{role:?} is not a mesh role")
            })?;
            Ok((name.trim().to_owned(), role))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (name, files) in mesh_harness::certs::write_mesh_certs(dir, &nodes)?.1 {
        println!(
            "{name}: --tls-ca {} --tls-cert {} --tls-key {}",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
    }
    Ok(())
}

/// Runs `mesh bench edge`.
fn bench_edge(options: EdgeBenchOptions, json: Option<PathBuf>) -> anyhow::Result<()> {
    install_stop_handlers()?;
    print_report(&bench::edge::suite::run(&options)?, json)
}

/// Runs `mesh bench regional`.
fn bench_regional(options: RegionalBenchOptions, json: Option<PathBuf>) -> anyhow::Result<()> {
    install_stop_handlers()?;
    print_report(&bench::regional::suite::run(&options)?, json)
}

/// Prints a suite's table and writes its JSON where asked.
fn print_report(report: &Report, json: Option<PathBuf>) -> anyhow::Result<()> {
    print!("\n{}", report.table());
    if let Some(path) = json {
        report.write_json(&path)?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

fn up(spec: MeshSpec, data_dir: &Path, dashboard_listen: &str) -> anyhow::Result<()> {
    install_stop_handlers()?;
    let started = Instant::now();
    let (api_key, regional_nodes) = (spec.api_key.clone(), spec.regional_nodes);
    println!("starting the mesh (data and logs in {})...", data_dir.display());
    let mesh = Mesh::start(spec)?;
    let endpoint = mesh.edge_url().unwrap_or_else(|| mesh.regional_url(0));
    println!(
        "\nmesh ready in {:.1}s: 3 core nodes (leader {}), 1 inference pod, {regional_nodes} regional nodes, edge under wrangler dev\n",
        started.elapsed().as_secs_f64(),
        mesh.leader_id().map_or_else(|| "unknown".into(), |id| id.to_string()),
    );
    println!("endpoint: {endpoint}/v1/chat/completions");
    println!("API key:  {api_key}");
    for i in 0..regional_nodes {
        let url = mesh.regional_url(i);
        println!("regional {}: {url}  (metrics: {url}/metrics)", i + 1);
    }
    if let Some(admin) = mesh.tls_files("admin") {
        println!("TLS:      mutual, CA {} (admin certificate {})", admin.ca.display(), admin.cert.display());
    } else {
        println!("TLS:      off (insecure development mode)");
    }
    println!("logs:     {}", mesh.log_dir().display());
    let dashboard = Dashboard::start(DashboardOptions::for_mesh(&mesh, dashboard_listen)?)?;
    println!("dashboard: {}\n", dashboard.url);
    println!("try it (run it twice: X-Cache goes from MISS to HIT-EDGE):\n");
    println!(
        "curl -si {endpoint}/v1/chat/completions -H 'Authorization: Bearer {api_key}' -H 'Content-Type: application/json' \\\n  \
         -d '{{\"model\":\"smollm2-135m-instruct\",\"temperature\":0,\"max_tokens\":48,\"messages\":[{{\"role\":\"user\",\"content\":\"What is the capital of France?\"}}]}}'\n"
    );
    println!("press Ctrl-C to stop every process");
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("\nstopping...");
    drop(dashboard);
    drop(mesh);
    println!("stopped");
    Ok(())
}

fn dashboard(listen: String, targets: &[String], certs: &Path, interval: u64) -> anyhow::Result<()> {
    install_stop_handlers()?;
    let targets = targets
        .iter()
        .map(|t| match t.split_once('=') {
            Some((name, url)) => Ok(Target { name: name.to_owned(), url: url.to_owned() }),
            None => anyhow::bail!("a target is name=url, not {t:?}"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut client_identity = None;
    if targets.iter().any(|t| t.url.starts_with("https://")) {
        mesh_harness::client::trust_mesh_ca(&std::fs::read(certs.join("ca.pem"))?);
        client_identity =
            Some((std::fs::read(certs.join("admin.pem"))?, std::fs::read(certs.join("admin.key"))?));
    }
    let options = DashboardOptions {
        interval: Duration::from_secs(interval.max(1)),
        ..DashboardOptions::new(targets, &listen, client_identity)
    };
    let dashboard = Dashboard::start(options)?;
    println!("dashboard: {} (Ctrl-C stops it)", dashboard.url);
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
