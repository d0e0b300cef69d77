//! `mesh bench tls`: what mutual TLS costs the mesh. Two meshes run side by side on the same machine,
//! identical but for TLS (one core node, one pod, one regional node, the edge): exact hits at the
//! regional node from `--concurrency` clients on persistent connections, the two meshes taking turns
//! in short rounds so that neither gets the quieter moments; then misses through the edge (a question
//! never asked, one generated token), alternating between the meshes.
//!
//! The TLS mesh also signs answers at the core and checks them at the regional nodes (peers' answers)
//! and the edge (fills and the hot set). Those checks run where answers enter a tier, not on its hits;
//! what one costs is measured in process: signing and verifying a 1 KiB answer, against the TLS mesh's
//! own exact-hit p50 (goal: a check under 5% of a hit).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bench::common::http_load::closed_loop_threads;
use crate::bench::common::load::{percentile, LoadResult};
use crate::bench::common::report::{Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use mesh_harness::client::ChatClient;
use mesh_harness::mesh::{Mesh, MeshSpec};

/// Rounds each mesh's exact-hit time is split into.
const ROUNDS: u32 = 4;

/// What `mesh bench tls` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct TlsBenchOptions {
    /// Measured seconds of exact hits, per mesh.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Concurrent clients of the exact hits.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Misses through the edge, per mesh.
    #[arg(long, default_value_t = 40)]
    pub misses: usize,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early. From the command line: the
    /// process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// Answers signed and verified to time each.
const SIGNATURE_ROUNDS: u32 = 2_000;

/// One mesh's figures.
struct Figures {
    hits: LoadResult,
    misses: Vec<Duration>,
}

/// Runs the suite; every process it starts is stopped before it returns.
pub fn run(options: &TlsBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.seconds > 0 && options.concurrency > 0,
        "--seconds and --concurrency must be positive"
    );
    run_kept(&options.dir, "tls", |scratch| run_in(options, scratch))
}

fn run_in(options: &TlsBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    let spec = |name: &str, tls: bool| MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        tls,
        ..MeshSpec::local(scratch.join(name))
    };
    eprintln!("starting two meshes (1 core node, 1 pod, 1 regional node, the edge): without TLS and with");
    let plain = Mesh::start(spec("plain", false))?;
    let tls = Mesh::start(spec("tls", true))?;
    let meshes = [&plain, &tls];

    let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 48,
                      "messages": [{"role": "user", "content": "What is the capital of France?"}]});
    for mesh in meshes {
        let first = mesh.regional_client(0).chat(&body)?;
        anyhow::ensure!(first.status == 200, "seeding: {} {}", first.status, first.body);
    }
    let text = body.to_string();
    let c = options.concurrency;
    let round = Duration::from_secs(options.seconds).div_f64(f64::from(ROUNDS));
    let clients: Vec<Vec<ChatClient>> =
        meshes.iter().map(|mesh| (0..c).map(|_| mesh.regional_client(0)).collect()).collect();
    let mut hits: Vec<Vec<LoadResult>> = vec![Vec::new(), Vec::new()];
    for r in 0..ROUNDS {
        for (m, mesh_clients) in clients.iter().enumerate() {
            let result = closed_loop_threads(c, round, options.stop, |i| {
                let reply = mesh_clients[i].chat_raw(&text)?;
                anyhow::ensure!(
                    reply.header("x-cache") == Some("HIT-REGIONAL"),
                    "not a hit: {}",
                    reply.status
                );
                Ok(())
            });
            eprintln!("round {}, {}: {}", r + 1, ["plain", "TLS"][m], result.summary());
            anyhow::ensure!(result.ops > 0, "no exact hit succeeded: {:?}", result.first_error);
            hits[m].push(result);
        }
        anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
    }

    let mut misses: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let edges: Vec<ChatClient> = meshes.iter().map(|mesh| mesh.client()).collect();
    let salt = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() % 1_000_000;
    for i in 0..options.misses {
        for (m, edge) in edges.iter().enumerate() {
            let question = format!("Is {} an even number? (ask {salt}-{m})", 1000 + i);
            let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 1,
                              "messages": [{"role": "user", "content": question}]});
            let started = Instant::now();
            let reply = edge.chat(&body)?;
            let took = started.elapsed();
            anyhow::ensure!(reply.status == 200, "a miss through the edge: {} {}", reply.status, reply.body);
            anyhow::ensure!(
                reply.header("x-cache") == Some("MISS"),
                "not a miss: {:?}",
                reply.header("x-cache")
            );
            misses[m].push(took);
        }
    }
    let [plain_hits, tls_hits] = [merge(&hits[0]), merge(&hits[1])];
    let figures = |m: usize, hits: LoadResult| {
        let mut misses = misses[m].clone();
        misses.sort_unstable();
        Figures { hits, misses }
    };
    let (plain, tls) = (figures(0, plain_hits), figures(1, tls_hits));
    let (sign_us, verify_us) = crate::bench::common::signatures::sign_and_verify_us(SIGNATURE_ROUNDS)?;
    eprintln!("answer signatures (1 KiB answer): sign {sign_us:.1} us, verify {verify_us:.1} us");
    let mut rows = rows(options, &tls, &plain);
    let hit_p50_us = tls.hits.percentile_ms(0.5) * 1000.0;
    for (metric, value) in [("answer_sign_us", sign_us), ("answer_verify_us", verify_us)] {
        rows.push(Row {
            metric: metric.into(),
            unit: "us".into(),
            better: Better::Lower,
            ours: value,
            peer: "an exact hit at the TLS regional node (p50)".into(),
            peer_value: hit_p50_us,
            goal_ratio: Some(0.05),
            limit: None,
        });
    }
    Ok(Report { suite: "tls".into(), machine: Machine::current(), rows })
}

/// The rounds of one mesh as one run.
fn merge(rounds: &[LoadResult]) -> LoadResult {
    let mut all = LoadResult {
        clients: rounds.first().map_or(0, |r| r.clients),
        ops: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for round in rounds {
        all.ops += round.ops;
        all.errors += round.errors;
        all.elapsed += round.elapsed;
        all.latencies.extend(&round.latencies);
        all.first_error = all.first_error.take().or_else(|| round.first_error.clone());
    }
    all.latencies.sort_unstable();
    all
}

fn rows(options: &TlsBenchOptions, tls: &Figures, plain: &Figures) -> Vec<Row> {
    let peer = "the same mesh without TLS";
    let row = |metric: String, unit: &str, better, ours: f64, peer_value: f64, goal_ratio| Row {
        goal_ratio,
        ..Row::compared(metric, unit, better, ours, peer, peer_value)
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let c = options.concurrency;
    vec![
        // The goal: TLS costs under 10% of the hit rate.
        row(
            format!("exact_hits_per_s_c{c}"),
            "hits/s",
            Better::Higher,
            tls.hits.ops_per_s(),
            plain.hits.ops_per_s(),
            Some(0.9),
        ),
        row(
            format!("exact_hit_p50_ms_c{c}"),
            "ms",
            Better::Lower,
            tls.hits.percentile_ms(0.5),
            plain.hits.percentile_ms(0.5),
            None,
        ),
        row(
            format!("exact_hit_p99_ms_c{c}"),
            "ms",
            Better::Lower,
            tls.hits.percentile_ms(0.99),
            plain.hits.percentile_ms(0.99),
            None,
        ),
        row(
            "edge_miss_p50_ms".into(),
            "ms",
            Better::Lower,
            ms(percentile(&tls.misses, 0.5)),
            ms(percentile(&plain.misses, 0.5)),
            None,
        ),
        row(
            "edge_miss_p99_ms".into(),
            "ms",
            Better::Lower,
            ms(percentile(&tls.misses, 0.99)),
            ms(percentile(&plain.misses, 0.99)),
            None,
        ),
    ]
}
