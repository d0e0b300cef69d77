//! `mesh bench regional`: the regional node against the peers a user would otherwise pick, side by side in
//! one run: exact hits against Redis 7 (`redis-benchmark` GET of a value the size of our hit response, at
//! the same concurrency; a near-empty route of the same daemon is the floor), semantic hits against
//! GPTCache with faiss and the same MiniLM model (latency including the embedding, and hit precision and
//! recall on the same labelled pairs at the same cosine threshold), and replication: the time and bytes
//! anti-entropy takes to repair a partition with N differing entries, against one direct push of the same
//! records over the same gRPC.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use shared::completion::CachedCompletion;

use crate::bench::common::http_load::closed_loop_threads;
use crate::bench::common::load::{percentile, LoadResult};
use crate::bench::common::report::{Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use crate::bench::regional::gptcache::{self, Decision};
use crate::bench::regional::redis::{self, RedisFigures};
use crate::bench::regional::replica_load;
use mesh_harness::client::{agent, ChatClient};
use mesh_harness::mesh::{Mesh, MeshSpec};
use mesh_harness::paths;

/// The cosine threshold both semantic caches decide at (every content class of ours).
const COSINE: f32 = 0.92;
/// The model every request names.
const MODEL: &str = "smollm2-135m-instruct";

/// What `mesh bench regional` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct RegionalBenchOptions {
    /// Measured seconds of each exact-hit phase.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Concurrent clients of the exact-hit phases (ours and redis-benchmark's).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Differing entries on one side of the healed partition.
    #[arg(long, default_value_t = 10_000)]
    pub entries: usize,
    /// Labelled pairs of the semantic phase (the first of near-miss/data/semantic_pairs.jsonl).
    #[arg(long, default_value_t = 60)]
    pub pairs: usize,
    /// Timed lookups per pair.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Fail with the command to run instead of running scripts/install-regional-peers.sh when Redis or
    /// GPTCache is missing.
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

/// Runs the suite and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &RegionalBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.seconds > 0 && options.concurrency > 0,
        "--seconds and --concurrency must be positive"
    );
    run_kept(&options.dir, "regional", |scratch| run_in(options, scratch))
}

fn run_in(options: &RegionalBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    let peers_dir = gptcache::locate(options.install)?;
    let threshold = COSINE.to_string();
    let regional_args = ["volatile", "default", "stable"]
        .iter()
        .flat_map(|class| [format!("--semantic-threshold-{class}"), threshold.clone()])
        .collect();
    eprintln!("starting a mesh: 1 core node, 1 pod, 2 regional nodes");
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 2,
        edge: false,
        peer_fault_proxies: true,
        anti_entropy_ms: Some(1000),
        regional_args,
        ..MeshSpec::local(scratch.join("mesh"))
    })?;
    let log_dir = scratch.join("logs");
    std::fs::create_dir_all(&log_dir)?;

    let exact = exact_phase(&mesh, options, &log_dir)?;
    interrupted(options)?;
    let semantic = semantic_phase(&mesh, options, &peers_dir, scratch)?;
    interrupted(options)?;
    let replication = replication_phase(&mesh, options)?;
    let peers = Peers { redis: redis::version()?, gptcache: gptcache::version(&peers_dir) };
    Ok(Report {
        suite: "regional".into(),
        machine: Machine::current(),
        rows: rows(options, &exact, &semantic, &replication, &peers),
    })
}

fn interrupted(options: &RegionalBenchOptions) -> anyhow::Result<()> {
    anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
    Ok(())
}

struct Peers {
    redis: String,
    gptcache: String,
}

struct ExactFigures {
    ours: LoadResult,
    floor: LoadResult,
    redis: RedisFigures,
    value_bytes: usize,
}

fn question(text: &str, system: Option<&str>, max_tokens: u32) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": text}));
    json!({"model": MODEL, "temperature": 0, "max_tokens": max_tokens, "messages": messages})
}

fn exact_phase(
    mesh: &Mesh,
    options: &RegionalBenchOptions,
    log_dir: &std::path::Path,
) -> anyhow::Result<ExactFigures> {
    let body = question("What is the capital of France?", None, 48);
    let first = mesh.regional_client(0).chat(&body)?;
    anyhow::ensure!(first.status == 200, "seeding the exact phase: {} {}", first.status, first.body);
    let hit = mesh.regional_client(0).chat(&body)?;
    anyhow::ensure!(hit.header("x-cache") == Some("HIT-REGIONAL"), "not a hit: {:?}", hit.headers);
    let value_bytes = hit.body.len();
    let duration = Duration::from_secs(options.seconds);
    let c = options.concurrency;

    eprintln!("floor: GET /healthz of the same daemon, {c} clients, {}s", options.seconds);
    let health = format!("{}/healthz", mesh.regional_url(0));
    let agents: Vec<ureq::Agent> = (0..c).map(|_| agent(Duration::from_secs(10))).collect();
    let floor = closed_loop_threads(c, duration, options.stop, |i| {
        let reply = agents[i].get(&health).call()?;
        anyhow::ensure!(reply.status() == 200, "status {}", reply.status());
        reply.into_body().read_to_vec()?;
        Ok(())
    });
    eprintln!("  {}", floor.summary());

    eprintln!("ours: exact hits of a {value_bytes} B answer, {c} clients, {}s", options.seconds);
    let clients: Vec<ChatClient> = (0..c).map(|_| mesh.regional_client(0)).collect();
    let text = body.to_string();
    let ours = closed_loop_threads(c, duration, options.stop, |i| {
        let reply = clients[i].chat_raw(&text)?;
        anyhow::ensure!(reply.status == 200 && reply.header("x-cache") == Some("HIT-REGIONAL"), "not a hit");
        Ok(())
    });
    eprintln!("  {}", ours.summary());
    anyhow::ensure!(ours.ops > 0, "no exact hit succeeded: {:?}", ours.first_error);

    let requests = ((ours.ops_per_s() * options.seconds as f64 * 4.0) as u64).max(100_000);
    eprintln!(
        "{}: redis-benchmark GET of {value_bytes} B, {c} clients, {requests} requests",
        redis::version()?
    );
    let redis = redis::benchmark(value_bytes, c, requests, log_dir)?;
    eprintln!("  {:.0} GET/s, p50 {:.3} ms, p99 {:.3} ms", redis.rps, redis.p50_ms, redis.p99_ms);
    Ok(ExactFigures { ours, floor, redis, value_bytes })
}

struct SemanticFigures {
    ours_ms: Vec<Duration>,
    ours: Vec<Decision>,
    peer_ms: Vec<Duration>,
    peer: Vec<Decision>,
}

fn semantic_phase(
    mesh: &Mesh,
    options: &RegionalBenchOptions,
    peers_dir: &std::path::Path,
    scratch: &Path,
) -> anyhow::Result<SemanticFigures> {
    let source = paths::repo_root().join("near-miss/data/semantic_pairs.jsonl");
    let text = std::fs::read_to_string(&source).with_context(|| format!("reading {}", source.display()))?;
    let pairs: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(options.pairs)
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let pairs_file = scratch.join("pairs.jsonl");
    let mut file = std::fs::File::create(&pairs_file)?;
    for pair in &pairs {
        writeln!(file, "{pair}")?;
    }
    drop(file);

    eprintln!("ours: {} labelled pairs, {} timed lookups each, cosine {COSINE}", pairs.len(), options.reps);
    let client = mesh.regional_client(0);
    let (mut ours_ms, mut ours) = (Vec::new(), Vec::new());
    for pair in &pairs {
        // A context of its own per pair, so that pairs never answer each other (GPTCache gets a fresh cache).
        let system = format!("Benchmark pair {}.", pair["id"]);
        let a = pair["a"].as_str().unwrap_or_default();
        let b = pair["b"].as_str().unwrap_or_default();
        let seeded = client.chat(&question(a, Some(&system), 4))?;
        anyhow::ensure!(seeded.status == 200, "seeding pair {}: {}", pair["id"], seeded.body);
        let mut hit = false;
        for _ in 0..options.reps {
            let reply = client.chat_only_if_cached(&question(b, Some(&system), 4))?;
            if reply.header("x-cache") == Some("HIT-REGIONAL-SEMANTIC") {
                hit = true;
                ours_ms.push(reply.elapsed);
            }
        }
        ours.push(Decision { label: pair["label"].as_str().unwrap_or_default().to_owned(), hit });
    }
    ours_ms.sort_unstable();
    eprintln!(
        "  {} of {} pairs hit; hit p50 {:.1} ms",
        ours.iter().filter(|d| d.hit).count(),
        ours.len(),
        ms(percentile(&ours_ms, 0.5))
    );

    eprintln!("{}: the same pairs", gptcache::version(peers_dir));
    let gpt_dir = scratch.join("gptcache");
    std::fs::create_dir_all(&gpt_dir)?;
    let peer = gptcache::run(peers_dir, &pairs_file, COSINE, options.reps, &gpt_dir)?;
    let mut peer_ms: Vec<Duration> =
        peer.hit_ms.iter().map(|&m| Duration::from_secs_f64(m / 1000.0)).collect();
    peer_ms.sort_unstable();
    eprintln!(
        "  {} of {} pairs hit; hit p50 {:.1} ms",
        peer.decisions.iter().filter(|d| d.hit).count(),
        peer.decisions.len(),
        ms(percentile(&peer_ms, 0.5))
    );
    Ok(SemanticFigures { ours_ms, ours, peer_ms, peer: peer.decisions })
}

struct ReplicationFigures {
    converge: Duration,
    bytes: f64,
    push: replica_load::Pushed,
}

fn replication_phase(mesh: &Mesh, options: &RegionalBenchOptions) -> anyhow::Result<ReplicationFigures> {
    let n = options.entries;
    eprintln!("replication: node 2 cut off; {n} entries loaded into node 1; heal");
    mesh.partition_regional(1)?;
    let now = now_ms();
    let entries: Vec<CachedCompletion> = (0..n)
        .map(|i| {
            let content = format!("Answer number {i}: {}", "lorem ipsum ".repeat(20));
            CachedCompletion {
                key: format!("v1:bench-replication-{i:08}"),
                tenant: "dev".into(),
                model: MODEL.into(),
                model_version: 1,
                etag: CachedCompletion::etag_of(&content, "stop"),
                content,
                finish_reason: "stop".into(),
                prompt_tokens: 12,
                completion_tokens: 60,
                created_ms: now,
                ttl_s: 0,
                question: None,
                signature: String::new(),
                tags: Vec::new(),
            }
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let push = runtime.block_on(replica_load::push(
        &mesh.regional_peer_url(0),
        mesh.tier_secret(),
        "bench-loader",
        entries,
    ))?;
    eprintln!("  direct push: {:.2} s, {} bytes", push.elapsed.as_secs_f64(), push.bytes);
    let sent = |m: &Mesh| -> anyhow::Result<f64> {
        Ok(metric(m, 0, "mesh_regional_replication_sent_bytes_total")?
            + metric(m, 1, "mesh_regional_replication_sent_bytes_total")?)
    };
    let before = sent(mesh)?;
    let healed = Instant::now();
    mesh.heal_regional(1)?;
    let deadline = healed + Duration::from_secs(600);
    loop {
        let (a, b) = (mesh.replication_status(0)?, mesh.replication_status(1)?);
        if a["root"] == b["root"] && b["records"].as_u64().unwrap_or(0) >= n as u64 {
            break;
        }
        if Instant::now() > deadline || options.stop.load(Ordering::Relaxed) {
            bail!("no convergence: {a} / {b}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let converge = healed.elapsed();
    let bytes = sent(mesh)? - before;
    eprintln!("  converged in {:.2} s, {bytes:.0} bytes sent by both nodes", converge.as_secs_f64());
    Ok(ReplicationFigures { converge, bytes, push })
}

fn metric(mesh: &Mesh, index: usize, name: &str) -> anyhow::Result<f64> {
    let text = agent(Duration::from_secs(5))
        .get(format!("{}/metrics", mesh.regional_url(index)))
        .call()?
        .into_body()
        .read_to_string()?;
    let line = text.lines().find(|l| l.starts_with(name)).with_context(|| format!("no {name}"))?;
    Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Precision and recall of hit decisions ("hit" labels are the positives).
fn precision_recall(decisions: &[Decision]) -> (f64, f64) {
    let tp = decisions.iter().filter(|d| d.hit && d.label == "hit").count() as f64;
    let fp = decisions.iter().filter(|d| d.hit && d.label != "hit").count() as f64;
    let positives = decisions.iter().filter(|d| d.label == "hit").count() as f64;
    let precision = if tp + fp > 0.0 { tp / (tp + fp) } else { 0.0 };
    let recall = if positives > 0.0 { tp / positives } else { 0.0 };
    (precision, recall)
}

fn rows(
    options: &RegionalBenchOptions,
    exact: &ExactFigures,
    semantic: &SemanticFigures,
    replication: &ReplicationFigures,
    peers: &Peers,
) -> Vec<Row> {
    let row = |metric: String, unit: &str, better, ours: f64, peer: &str, peer_value: f64, limit| Row {
        limit,
        ..Row::compared(metric, unit, better, ours, peer, peer_value)
    };
    let c = options.concurrency;
    let redis = format!("{} ({} B values)", peers.redis, exact.value_bytes);
    let (ours_p, ours_r) = precision_recall(&semantic.ours);
    let (peer_p, peer_r) = precision_recall(&semantic.peer);
    let n = options.entries;
    vec![
        row(
            format!("exact_hits_per_s_c{c}"),
            "hits/s",
            Better::Higher,
            exact.ours.ops_per_s(),
            &redis,
            exact.redis.rps,
            Some(exact.floor.ops_per_s()),
        ),
        row(
            format!("exact_hit_p50_ms_c{c}"),
            "ms",
            Better::Lower,
            exact.ours.percentile_ms(0.5),
            &redis,
            exact.redis.p50_ms,
            Some(exact.floor.percentile_ms(0.5)),
        ),
        row(
            format!("exact_hit_p99_ms_c{c}"),
            "ms",
            Better::Lower,
            exact.ours.percentile_ms(0.99),
            &redis,
            exact.redis.p99_ms,
            Some(exact.floor.percentile_ms(0.99)),
        ),
        row(
            "semantic_hit_p50_ms".into(),
            "ms",
            Better::Lower,
            ms(percentile(&semantic.ours_ms, 0.5)),
            &peers.gptcache,
            ms(percentile(&semantic.peer_ms, 0.5)),
            None,
        ),
        row(
            "semantic_hit_p99_ms".into(),
            "ms",
            Better::Lower,
            ms(percentile(&semantic.ours_ms, 0.99)),
            &peers.gptcache,
            ms(percentile(&semantic.peer_ms, 0.99)),
            None,
        ),
        row(
            format!("semantic_precision_{}pairs", semantic.ours.len()),
            "",
            Better::Higher,
            ours_p,
            &peers.gptcache,
            peer_p,
            None,
        ),
        row(
            format!("semantic_recall_{}pairs", semantic.ours.len()),
            "",
            Better::Higher,
            ours_r,
            &peers.gptcache,
            peer_r,
            None,
        ),
        row(
            format!("replication_converge_s_{n}"),
            "s",
            Better::Lower,
            replication.converge.as_secs_f64(),
            "one direct gRPC push",
            replication.push.elapsed.as_secs_f64(),
            None,
        ),
        row(
            format!("replication_bytes_{n}"),
            "MB",
            Better::Lower,
            replication.bytes / 1e6,
            "one direct gRPC push",
            replication.push.bytes as f64 / 1e6,
            None,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_recall_count_hit_labels_as_positives() {
        let d = |label: &str, hit| Decision { label: label.into(), hit };
        let decisions = [d("hit", true), d("hit", false), d("miss", true), d("miss", false), d("hit", true)];
        let (precision, recall) = precision_recall(&decisions);
        assert!((precision - 2.0 / 3.0).abs() < 1e-9);
        assert!((recall - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(precision_recall(&[d("miss", false)]), (0.0, 0.0));
    }
}
