//! `mesh bench core`: the core cluster against etcd 3.4, both three members on loopback with fsync on,
//! driven side by side by the same load generator, with a plain write+fsync loop as the floor.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::core::CoreTarget;
use super::etcd::{EtcdCluster, EtcdTarget};
use super::floor::write_fsync_floor;
use super::kv_target::{drive, KvFigures, Workload};
use super::load::LoadResult;
use super::report::{Better, Machine, Report, Row};
use super::scratch::ScratchDir;
use crate::core_cluster::{CoreCluster, CoreClusterSpec};

/// Bytes of each record of the write+fsync floor.
const FLOOR_RECORD_BYTES: usize = 1024;
/// Members of each cluster.
const MEMBERS: usize = 3;
/// The put client count whose throughput and p99 have goal ratios.
const GOAL_CLIENTS: usize = 64;

/// Goal ratios (ours / etcd): puts/s at [`GOAL_CLIENTS`] and at one client, put p99 at [`GOAL_CLIENTS`]
/// (lower is better), linearizable reads/s.
const GOAL_PUTS_MANY: f64 = 1.2;
const GOAL_PUTS_ONE: f64 = 1.0;
const GOAL_PUT_P99_MANY: f64 = 1.0;
const GOAL_READS: f64 = 1.0;

/// What `mesh bench core` runs.
#[derive(Clone, Debug)]
pub struct CoreBenchOptions {
    /// Measured seconds of each phase.
    pub seconds: u64,
    /// Client counts of the put phases; the largest also drives the read phase.
    pub clients: Vec<usize>,
    /// Bytes of each value (etcd) or completion content (ours).
    pub value_bytes: usize,
    /// Parent of the run's scratch directory (cluster data, logs, the fsync file).
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early; every process is still stopped.
    pub stop: &'static AtomicBool,
}

/// Runs the suite and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &CoreBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(options.seconds > 0, "--seconds must be at least 1");
    anyhow::ensure!(
        !options.clients.is_empty() && !options.clients.contains(&0),
        "--clients needs counts of at least 1"
    );
    let mut scratch = ScratchDir::create(&options.dir, "core")?;
    let result = run_in(options, &scratch);
    if result.is_err() {
        scratch.keep();
        eprintln!("logs of the failed run kept in {}", scratch.path().display());
    }
    result
}

fn run_in(options: &CoreBenchOptions, scratch: &ScratchDir) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(options.seconds);
    let workload = Workload {
        duration,
        put_clients: options.clients.clone(),
        read_clients: options.clients.iter().copied().max().unwrap_or(GOAL_CLIENTS),
        stop: options.stop,
    };
    // Two workers, like the runtime `CoreCluster` drives its clients on.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let log_dir = scratch.path().join("logs");

    eprintln!("floor: write+fsync of {FLOOR_RECORD_BYTES} B records for {}s", options.seconds);
    let floor = write_fsync_floor(scratch.path(), FLOOR_RECORD_BYTES, duration, options.stop)?;
    eprintln!("  {}", floor.summary());
    interrupted(options)?;

    let peer = etcd_version()?;
    eprintln!("{peer}: starting {MEMBERS} members");
    let etcd = {
        let cluster = EtcdCluster::start(MEMBERS, &scratch.path().join("etcd"), &log_dir)?;
        runtime.block_on(async {
            let leader = cluster.leader_url(Duration::from_secs(20)).await?;
            let target = EtcdTarget::connect(&leader, options.value_bytes).await?;
            drive(Arc::new(target), &workload).await
        })?
    };
    print_figures(&etcd);
    interrupted(options)?;

    eprintln!("core: starting {MEMBERS} nodes");
    let ours = {
        // Raft traffic goes straight between the nodes, as etcd's does (no fault proxy in the way).
        let spec = CoreClusterSpec {
            direct_peers: true,
            ..CoreClusterSpec::new(MEMBERS as u64, scratch.path().join("core"))
        };
        let cluster = CoreCluster::start_with(spec)?;
        let target = CoreTarget::new(cluster.client()?, options.value_bytes);
        // On the cluster's own client runtime, where the client's channels run (the same shape of runtime
        // as the one etcd's client ran on).
        cluster.block_on(drive(Arc::new(target), &workload))?
    };
    print_figures(&ours);

    Ok(Report { suite: "core".into(), machine: Machine::current(), rows: rows(&ours, &etcd, &floor, &peer) })
}

fn interrupted(options: &CoreBenchOptions) -> anyhow::Result<()> {
    anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
    Ok(())
}

/// `etcd 3.4.23`, from the binary's `--version`.
fn etcd_version() -> anyhow::Result<String> {
    let output = Command::new(super::etcd::etcd_binary())
        .arg("--version")
        .output()
        .context("running etcd --version (install the Debian package etcd-server: .ci/setup.sh apt)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("etcd Version:"))
        .map_or_else(|| "unknown".to_owned(), |v| v.trim().to_owned());
    Ok(format!("etcd {version}"))
}

fn print_figures(figures: &KvFigures) {
    for puts in &figures.puts {
        eprintln!("  puts  {}", puts.summary());
    }
    eprintln!("  reads {}", figures.reads.summary());
}

/// The compared rows: puts/s, p50 and p99 per client count (the floor as the limit), then reads.
fn rows(ours: &KvFigures, etcd: &KvFigures, floor: &LoadResult, peer: &str) -> Vec<Row> {
    let row = |metric: String, unit: &str, better, ours: f64, peer_value: f64, goal, limit| Row {
        metric,
        unit: unit.into(),
        better,
        ours,
        peer: peer.into(),
        peer_value,
        goal_ratio: goal,
        limit,
    };
    let mut rows = Vec::new();
    for (o, e) in ours.puts.iter().zip(&etcd.puts) {
        let c = o.clients;
        let goal = match c {
            GOAL_CLIENTS => Some(GOAL_PUTS_MANY),
            1 => Some(GOAL_PUTS_ONE),
            _ => None,
        };
        rows.push(row(
            format!("puts_per_s_c{c}"),
            "puts/s",
            Better::Higher,
            o.ops_per_s(),
            e.ops_per_s(),
            goal,
            Some(floor.ops_per_s()),
        ));
        for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
            rows.push(row(
                format!("put_{name}_ms_c{c}"),
                "ms",
                Better::Lower,
                o.percentile_ms(q),
                e.percentile_ms(q),
                (c == GOAL_CLIENTS && name == "p99").then_some(GOAL_PUT_P99_MANY),
                Some(floor.percentile_ms(q)),
            ));
        }
    }
    let (o, e) = (&ours.reads, &etcd.reads);
    let c = o.clients;
    rows.push(row(
        format!("lin_reads_per_s_c{c}"),
        "reads/s",
        Better::Higher,
        o.ops_per_s(),
        e.ops_per_s(),
        Some(GOAL_READS),
        None,
    ));
    for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
        rows.push(row(
            format!("lin_read_{name}_ms_c{c}"),
            "ms",
            Better::Lower,
            o.percentile_ms(q),
            e.percentile_ms(q),
            None,
            None,
        ));
    }
    rows
}
