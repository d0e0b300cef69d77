//! `mesh bench edge`: the edge worker against a pass-through worker (`mesh/peers/passthrough-worker`)
//! under the same workerd, in one run: the latency of an edge hit, and of a request the edge passes on
//! (`Cache-Control: no-cache`, answered by the regional exact cache), against the pass-through worker
//! relaying the same request to the same regional node; and the time of one semantic scan of the hot set
//! in wasm for 1k, 5k and 20k entries, against the same int8 scan natively.
//!
//! The scan is timed from outside: the edge's tier-only `/v1/edge/bench/scan` builds a synthetic hot set
//! and runs Q lookups; (time with Q lookups - time with none) / Q is one lookup (workerd's clocks do not
//! move while a worker computes). The check of the core's signature on an answer (what the edge does for
//! every fill and hot entry) is timed the same way (`/v1/edge/bench/verify`), against the same check
//! natively.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};

use crate::bench::common::http_load::closed_loop_threads;
use crate::bench::common::load::LoadResult;
use crate::bench::common::report::{Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use mesh_harness::client::{agent, ChatClient};
use mesh_harness::mesh::{Mesh, MeshSpec};
use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// What `mesh bench edge` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct EdgeBenchOptions {
    /// Measured seconds of each latency phase.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent clients of the latency phases.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Hot-set sizes whose scan is timed (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,20000")]
    pub entries: Vec<usize>,
    /// Lookups per timed scan request.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early. From the command line: the
    /// process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// Runs the suite and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &EdgeBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.seconds > 0 && options.concurrency > 0 && options.queries > 0,
        "counts must be positive"
    );
    run_kept(&options.dir, "edge", |scratch| run_in(options, scratch))
}

fn run_in(options: &EdgeBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    eprintln!("starting a mesh: 1 core node, 1 pod, 1 regional node, the edge; and the pass-through worker");
    let mesh =
        Mesh::start(MeshSpec { core_nodes: 1, regional_nodes: 1, ..MeshSpec::local(scratch.join("mesh")) })?;
    let passthrough = start_passthrough(&mesh, scratch)?;
    let edge = mesh.edge_url().context("the edge runs")?;
    let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 48,
                      "messages": [{"role": "user", "content": "What is the capital of France?"}]});
    let regional = mesh.regional_client(0);
    anyhow::ensure!(regional.chat(&body)?.status == 200, "seeding the regional cache failed");
    let edge_client = ChatClient::new(&edge, Some(mesh.api_key()));
    for _ in 0..2 {
        edge_client.chat(&body)?;
    }

    let c = options.concurrency;
    let duration = Duration::from_secs(options.seconds);
    let text = body.to_string();
    let phase =
        |name: &str, url: &str, headers: &'static [(&'static str, &'static str)], want: &'static str| {
            eprintln!("{name}: {c} clients, {}s", options.seconds);
            let clients: Vec<ChatClient> =
                (0..c).map(|_| ChatClient::new(url, Some(mesh.api_key()))).collect();
            let result = closed_loop_threads(c, duration, options.stop, |i| {
                let reply = clients[i].chat_with_headers(&serde_json::from_str(&text)?, headers)?;
                anyhow::ensure!(
                    reply.status == 200 && reply.header("x-cache") == Some(want),
                    "{:?}",
                    reply.headers
                );
                Ok(())
            });
            eprintln!("  {}", result.summary());
            result
        };
    let peer = phase("pass-through worker -> regional hit", &passthrough.url, &[], "HIT-REGIONAL");
    let hit = phase("edge hit", &edge, &[], "HIT-EDGE");
    let miss = phase(
        "edge passing on (max-age=0) -> regional hit",
        &edge,
        &[("cache-control", "max-age=0")],
        "HIT-REGIONAL",
    );
    for (name, result) in [("pass-through", &peer), ("edge hit", &hit), ("edge miss", &miss)] {
        anyhow::ensure!(result.ops > 0, "{name}: nothing succeeded: {:?}", result.first_error);
    }
    anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");

    let mut scans = Vec::new();
    for &entries in &options.entries {
        let (wasm_us, dims) = wasm_scan_us(&edge, mesh.tier_secret(), entries, options.queries)?;
        let native_us = native_scan_us(entries, dims, options.queries);
        eprintln!("scan of {entries} entries: {wasm_us:.1} us in wasm, {native_us:.1} us natively");
        scans.push((entries, wasm_us, native_us));
    }
    let (wasm_verify_us, native_verify_us) = (
        wasm_verify_us(&edge, mesh.tier_secret(), VERIFIED_ANSWERS)?,
        crate::bench::common::signatures::sign_and_verify_us(2_000)?.1,
    );
    eprintln!(
        "answer signature check: {wasm_verify_us:.1} us in wasm, {native_verify_us:.1} us natively; a cold isolate's 20,000-entry hot set: {:.0} ms",
        wasm_verify_us * 20_000.0 / 1000.0
    );
    let mut rows = rows(&peer, &hit, &miss, &scans);
    rows.push(Row {
        metric: "answer_verify_us".into(),
        unit: "us".into(),
        better: Better::Lower,
        ours: wasm_verify_us,
        peer: "the same check, native x86-64".into(),
        peer_value: native_verify_us,
        goal_ratio: None,
        limit: None,
    });
    Ok(Report { suite: "edge".into(), machine: Machine::current(), rows })
}

/// Answers whose signatures are checked per timed request.
const VERIFIED_ANSWERS: usize = 2_000;

/// Microseconds of one signature check inside the edge worker (median of 5 differences).
fn wasm_verify_us(edge: &str, secret: &str, answers: usize) -> anyhow::Result<f64> {
    let client = agent(Duration::from_secs(120));
    let time = |check: u8| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut reply = client
            .get(format!("{edge}/v1/edge/bench/verify?answers={answers}&check={check}"))
            .header(shared::TIER_SECRET_HEADER, secret)
            .call()?;
        let body: Value = serde_json::from_reader(reply.body_mut().as_reader())?;
        let verified = if check == 1 { answers } else { 0 };
        anyhow::ensure!(body["verified"] == json!(verified), "verify route: {body}");
        Ok(started.elapsed())
    };
    median_difference_us(answers, || time(1), || time(0))
}

/// Microseconds per unit of work timed from outside the worker: after a warm-up, the median of 5
/// differences between a request doing `units` of it (`with`) and one doing none (`without`).
fn median_difference_us(
    units: usize,
    with: impl Fn() -> anyhow::Result<Duration>,
    without: impl Fn() -> anyhow::Result<Duration>,
) -> anyhow::Result<f64> {
    with()?;
    let mut diffs: Vec<f64> = (0..5)
        .map(|_| Ok((with()?.as_secs_f64() - without()?.as_secs_f64()) * 1e6 / units.max(1) as f64))
        .collect::<anyhow::Result<_>>()?;
    diffs.sort_by(f64::total_cmp);
    Ok(diffs[2].max(0.0))
}

struct Passthrough {
    url: String,
    _process: ManagedProcess,
}

fn start_passthrough(mesh: &Mesh, scratch: &Path) -> anyhow::Result<Passthrough> {
    let (port, inspector) = (free_port()?, free_port()?);
    let mut command = mesh_harness::wrangler::dev_command(port, inspector, &scratch.join("passthrough"))?;
    command
        .arg("--config")
        .arg(mesh_harness::paths::repo_root().join("mesh/peers/passthrough-worker/wrangler.toml"))
        .arg("--var")
        .arg(format!("UPSTREAM:{}", mesh.regional_url(0)));
    let mut process = ManagedProcess::spawn("passthrough", command, &scratch.join("logs"))?;
    let url = format!("http://127.0.0.1:{port}");
    process.wait_ready(&format!("{url}/healthz"), Duration::from_secs(120))?;
    Ok(Passthrough { url, _process: process })
}

/// Microseconds of one scan of `entries` hot entries inside the edge worker (median of 5 differences),
/// and the table's dimension.
fn wasm_scan_us(edge: &str, secret: &str, entries: usize, queries: usize) -> anyhow::Result<(f64, usize)> {
    let client = agent(Duration::from_secs(120));
    let dims = std::cell::Cell::new(0usize);
    let time = |q: usize| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut reply = client
            .get(format!("{edge}/v1/edge/bench/scan?entries={entries}&queries={q}"))
            .header(shared::TIER_SECRET_HEADER, secret)
            .call()?;
        let body: Value = serde_json::from_reader(reply.body_mut().as_reader())?;
        anyhow::ensure!(body["queries"] == json!(q), "scan route: {body}");
        dims.set(body["dims"].as_u64().unwrap_or(0) as usize);
        Ok(started.elapsed())
    };
    let us = median_difference_us(queries, || time(queries), || time(0))?;
    Ok((us, dims.get()))
}

/// Microseconds of the same int8 scan (dot products and norms over `entries` rows) natively.
fn native_scan_us(entries: usize, dims: usize, queries: usize) -> f64 {
    let rows: Vec<i8> = (0..entries * dims).map(|i| ((i * 2_654_435_761) >> 7) as u8 as i8).collect();
    let norms: Vec<f32> = rows
        .chunks_exact(dims)
        .map(|r| (r.iter().map(|&x| i32::from(x).pow(2)).sum::<i32>() as f32).sqrt())
        .collect();
    let query: Vec<i8> = (0..dims).map(|i| (i * 37) as u8 as i8).collect();
    let started = Instant::now();
    let mut found = 0usize;
    for _ in 0..queries {
        let qn = (query.iter().map(|&x| i32::from(x).pow(2)).sum::<i32>() as f32).sqrt();
        found += rows
            .chunks_exact(dims)
            .zip(&norms)
            .filter(|(r, n)| {
                let dot: i32 = r.iter().zip(&query).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
                dot as f32 / (*n * qn) >= 1.01
            })
            .count();
    }
    std::hint::black_box(found);
    started.elapsed().as_secs_f64() * 1e6 / queries as f64
}

fn rows(peer: &LoadResult, hit: &LoadResult, miss: &LoadResult, scans: &[(usize, f64, f64)]) -> Vec<Row> {
    let peer_name = "pass-through worker (same workerd) -> regional hit";
    let latency = |metric: &str, ours: f64, theirs: f64| Row {
        metric: metric.into(),
        unit: "ms".into(),
        better: Better::Lower,
        ours,
        peer: peer_name.into(),
        peer_value: theirs,
        goal_ratio: None,
        limit: None,
    };
    let mut rows = vec![
        latency("edge_hit_p50_ms", hit.percentile_ms(0.5), peer.percentile_ms(0.5)),
        latency("edge_hit_p99_ms", hit.percentile_ms(0.99), peer.percentile_ms(0.99)),
        latency("edge_miss_p50_ms", miss.percentile_ms(0.5), peer.percentile_ms(0.5)),
        latency("edge_miss_p99_ms", miss.percentile_ms(0.99), peer.percentile_ms(0.99)),
    ];
    eprintln!(
        "added latency of a miss at p50: {:+.2} ms; a hit saves {:.2} ms at p50",
        miss.percentile_ms(0.5) - peer.percentile_ms(0.5),
        peer.percentile_ms(0.5) - hit.percentile_ms(0.5)
    );
    for &(entries, wasm_us, native_us) in scans {
        rows.push(Row {
            metric: format!("semantic_scan_us_{entries}"),
            unit: "us".into(),
            better: Better::Lower,
            ours: wasm_us,
            peer: "the same int8 scan, native x86-64".into(),
            peer_value: native_us,
            goal_ratio: None,
            limit: None,
        });
    }
    rows
}
