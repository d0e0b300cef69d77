//! `mesh bench core`: the core cluster against etcd 3.4, both three members on loopback with fsync on,
//! driven side by side by the same load generator, with a plain write+fsync loop as the floor.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::bench::common::floor::write_fsync_floor;
use crate::bench::common::load::LoadResult;
use crate::bench::common::report::{cpu_model, Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use crate::bench::core::etcd::{EtcdCluster, EtcdTarget};
use crate::bench::core::kv_target::{drive, KvFigures, Workload};
use crate::bench::core::ours::CoreTarget;
use crate::bench::pod::gen_phases::median;
use mesh_harness::core_cluster::{CoreCluster, CoreClusterSpec};

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
#[derive(Clone, Debug, clap::Args)]
pub struct CoreBenchOptions {
    /// Measured seconds of each phase.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Concurrent clients of the put phases (comma-separated); the largest also drives the reads.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub clients: Vec<usize>,
    /// Bytes of each value (etcd) and of each completion's content (ours).
    #[arg(long, default_value_t = 1024)]
    pub value_bytes: usize,
    /// Rounds in which both systems run every phase, taking turns; each figure reported is the
    /// median over the rounds (this machine's speed drifts between minutes).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where the run keeps cluster data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early; every process is still stopped. From the command
    /// line: the process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// Runs the suite and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &CoreBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(options.seconds > 0, "--seconds must be at least 1");
    anyhow::ensure!(
        !options.clients.is_empty() && !options.clients.contains(&0),
        "--clients needs counts of at least 1"
    );
    anyhow::ensure!(options.rounds > 0, "--rounds must be at least 1");
    run_kept(&options.dir, "core", |scratch| run_in(options, scratch))
}

fn run_in(options: &CoreBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(options.seconds);
    let workload = |round, server_pids| Workload {
        duration,
        put_clients: options.clients.clone(),
        read_clients: options.clients.iter().copied().max().unwrap_or(GOAL_CLIENTS),
        stop: options.stop,
        round,
        server_pids,
    };
    // Two workers, like the runtime `CoreCluster` drives its clients on.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let log_dir = scratch.join("logs");

    eprintln!("CPU: {}", cpu_model());
    eprintln!("floor: write+fsync of {FLOOR_RECORD_BYTES} B records for {}s", options.seconds);
    let floor = write_fsync_floor(scratch, FLOOR_RECORD_BYTES, duration, options.stop)?;
    eprintln!("  {}", floor.summary());
    interrupted(options)?;

    let peer = etcd_version()?;
    eprintln!("{peer}: starting {MEMBERS} members");
    let etcd_cluster = EtcdCluster::start(MEMBERS, &scratch.join("etcd"), &log_dir)?;
    let etcd = Arc::new(runtime.block_on(async {
        let leader = etcd_cluster.leader_url(Duration::from_secs(20)).await?;
        EtcdTarget::connect(&leader, options.value_bytes).await
    })?);
    eprintln!("core: starting {MEMBERS} nodes");
    // Raft traffic goes straight between the nodes, as etcd's does (no fault proxy in the way).
    let spec =
        CoreClusterSpec { direct_peers: true, ..CoreClusterSpec::new(MEMBERS as u64, scratch.join("core")) };
    let cluster = CoreCluster::start_with(spec)?;
    let ours = Arc::new(CoreTarget::new(cluster.client()?, options.value_bytes));

    // Both clusters stay up for the whole run and take turns, the first to go alternating by round: a
    // machine whose speed drifts over minutes then slows both alike, and the medians say what held.
    let mut rounds = Vec::new();
    for round in 0..options.rounds {
        let turn = |system: System| -> anyhow::Result<KvFigures> {
            let figures = match system {
                System::Etcd => {
                    runtime.block_on(drive(Arc::clone(&etcd), &workload(round, etcd_cluster.pids())))?
                }
                // On the cluster's own client runtime, where the client's channels run (the same shape of
                // runtime as the one etcd's client runs on).
                System::Ours => {
                    cluster.block_on(drive(Arc::clone(&ours), &workload(round, cluster.pids())))?
                }
            };
            eprintln!("round {} of {}, {}:", round + 1, options.rounds, system.name(&peer));
            print_figures(&figures);
            interrupted(options)?;
            Ok(figures)
        };
        let (etcd_figures, our_figures) = if round % 2 == 0 {
            let e = turn(System::Etcd)?;
            (e, turn(System::Ours)?)
        } else {
            let o = turn(System::Ours)?;
            (turn(System::Etcd)?, o)
        };
        rounds.push((our_figures, etcd_figures));
    }
    print_round_ratios(&rounds);
    let ours = Summary::median(rounds.iter().map(|(o, _)| o));
    let etcd = Summary::median(rounds.iter().map(|(_, e)| e));
    Ok(Report { suite: "core".into(), machine: Machine::current(), rows: rows(&ours, &etcd, &floor, &peer) })
}

/// The two systems of a round.
#[derive(Clone, Copy)]
enum System {
    Etcd,
    Ours,
}

impl System {
    fn name(self, peer: &str) -> String {
        match self {
            System::Etcd => peer.to_owned(),
            System::Ours => "core".to_owned(),
        }
    }
}

/// One phase's figures: throughput and latency percentiles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PhaseFigures {
    clients: usize,
    ops_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl PhaseFigures {
    fn of(result: &LoadResult) -> Self {
        Self {
            clients: result.clients,
            ops_per_s: result.ops_per_s(),
            p50_ms: result.percentile_ms(0.5),
            p99_ms: result.percentile_ms(0.99),
        }
    }

    /// Each figure's median over `phases` (of one client count), taken figure by figure.
    fn median(phases: &[PhaseFigures]) -> Self {
        let of = |figure: fn(&PhaseFigures) -> f64| median(phases.iter().map(figure));
        Self {
            clients: phases.first().map_or(0, |p| p.clients),
            ops_per_s: of(|p| p.ops_per_s),
            p50_ms: of(|p| p.p50_ms),
            p99_ms: of(|p| p.p99_ms),
        }
    }
}

/// One system's figures over every round: the median of each.
#[derive(Clone, Debug, PartialEq)]
struct Summary {
    puts: Vec<PhaseFigures>,
    reads: PhaseFigures,
}

impl Summary {
    fn median<'a>(rounds: impl Iterator<Item = &'a KvFigures>) -> Self {
        let rounds: Vec<&KvFigures> = rounds.collect();
        let phases = rounds.first().map_or(0, |r| r.puts.len());
        let puts = (0..phases)
            .map(|i| {
                let phase: Vec<PhaseFigures> = rounds.iter().map(|r| PhaseFigures::of(&r.puts[i])).collect();
                PhaseFigures::median(&phase)
            })
            .collect();
        let reads: Vec<PhaseFigures> = rounds.iter().map(|r| PhaseFigures::of(&r.reads)).collect();
        Self { puts, reads: PhaseFigures::median(&reads) }
    }
}

/// Each round's throughput ratios (ours / etcd), so that the spread behind the medians shows.
fn print_round_ratios(rounds: &[(KvFigures, KvFigures)]) {
    for (i, (ours, etcd)) in rounds.iter().enumerate() {
        let mut ratios: Vec<String> = ours
            .puts
            .iter()
            .zip(&etcd.puts)
            .map(|(o, e)| format!("puts c{} {:.2}", o.clients, o.ops_per_s() / e.ops_per_s()))
            .collect();
        ratios.push(format!(
            "reads c{} {:.2}",
            ours.reads.clients,
            ours.reads.ops_per_s() / etcd.reads.ops_per_s()
        ));
        eprintln!("round {}: ours/etcd {}", i + 1, ratios.join(", "));
    }
}

fn interrupted(options: &CoreBenchOptions) -> anyhow::Result<()> {
    anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
    Ok(())
}

/// `etcd 3.4.23`, from the binary's `--version`.
pub(crate) fn etcd_version() -> anyhow::Result<String> {
    let output = Command::new(crate::bench::core::etcd::etcd_binary())
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
    for (puts, cpu) in figures.puts.iter().zip(&figures.put_cpu) {
        eprintln!("  puts  {}", puts.summary());
        if let Some(cpu) = cpu {
            eprintln!("        {}", cpu.summary());
        }
    }
    eprintln!("  reads {}", figures.reads.summary());
}

/// The compared rows (medians over the rounds): puts/s, p50 and p99 per client count (the floor as the
/// limit), then reads.
fn rows(ours: &Summary, etcd: &Summary, floor: &LoadResult, peer: &str) -> Vec<Row> {
    let row = |metric: String, unit: &str, better, ours: f64, peer_value: f64, goal, limit| Row {
        goal_ratio: goal,
        limit,
        ..Row::compared(metric, unit, better, ours, peer, peer_value)
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
            o.ops_per_s,
            e.ops_per_s,
            goal,
            Some(floor.ops_per_s()),
        ));
        for (name, q, ours_ms, etcd_ms) in
            [("p50", 0.5, o.p50_ms, e.p50_ms), ("p99", 0.99, o.p99_ms, e.p99_ms)]
        {
            rows.push(row(
                format!("put_{name}_ms_c{c}"),
                "ms",
                Better::Lower,
                ours_ms,
                etcd_ms,
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
        o.ops_per_s,
        e.ops_per_s,
        Some(GOAL_READS),
        None,
    ));
    for (name, ours_ms, etcd_ms) in [("p50", o.p50_ms, e.p50_ms), ("p99", o.p99_ms, e.p99_ms)] {
        rows.push(row(format!("lin_read_{name}_ms_c{c}"), "ms", Better::Lower, ours_ms, etcd_ms, None, None));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_median_is_taken_figure_by_figure() {
        let phase = |ops_per_s, p50_ms, p99_ms| PhaseFigures { clients: 64, ops_per_s, p50_ms, p99_ms };
        let median = PhaseFigures::median(&[
            phase(100.0, 9.0, 30.0),
            phase(300.0, 1.0, 10.0),
            phase(200.0, 5.0, 50.0),
        ]);
        assert_eq!(median, phase(200.0, 5.0, 30.0));
    }
}
