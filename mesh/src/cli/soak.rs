//! `mesh soak`: the whole local mesh driven at a fixed write rate for a given time, with faults injected at
//! random (seeded), printing every process's memory, open files and data bytes and the core's collected
//! state (entries, dead entries, request ids, feed rows, snapshot bytes) once a period, then how flat they
//! stayed once settled. The run itself is [`mesh_harness::soak`].

use std::path::PathBuf;
use std::time::Duration;

use mesh_harness::soak::{self, Flatness, Peaks, SoakReport, SoakSpec};

use crate::bench::common::report::cpu_model;

/// How long the core remembers a request id (its `REQUEST_ID_RETENTION_MS`): the soak's bound on how many
/// a settled core may hold is this many seconds of writes.
const REQUEST_ID_RETENTION_S: u64 = 600;
/// How long the core keeps a change-feed row (its `FEED_RETENTION_MS`).
const FEED_RETENTION_S: u64 = 3600;
/// The soak counts as settled after this long, or half the run if that is shorter.
const SETTLE: Duration = Duration::from_secs(600);

/// `mesh soak`'s options.
#[derive(Clone, Debug, clap::Args)]
pub struct SoakArgs {
    /// Seconds the load runs.
    #[arg(long, default_value_t = 3600)]
    pub seconds: u64,
    /// Operations a second (puts, and key invalidations among them), all clients together.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Concurrent clients of the load.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Distinct keys written (the default makes nearly every put a new entry).
    #[arg(long, default_value_t = 1_000_000_000)]
    pub keys: u64,
    /// Time to live of each entry, in seconds.
    #[arg(long, default_value_t = 300)]
    pub entry_ttl_s: u64,
    /// One operation in this many is a key invalidation (0: none).
    #[arg(long, default_value_t = 100)]
    pub invalidate_one_in: u64,
    /// Seconds between two invalidations of the whole tenant (0: none).
    #[arg(long, default_value_t = 600)]
    pub tenant_invalidation_every_s: u64,
    /// Seconds between two faults (SIGKILL of the core leader or a follower, SIGKILL or SIGTERM of a
    /// regional node, a regional partition; 0: none).
    #[arg(long, default_value_t = 120)]
    pub fault_every_s: u64,
    /// Seconds between two samples of every process.
    #[arg(long, default_value_t = 60)]
    pub sample_every_s: u64,
    /// Seeds the load's keys and the faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the edge worker too (under `wrangler dev`).
    #[arg(long)]
    pub edge: bool,
    /// Where the mesh's data and logs go (emptied first, kept after).
    #[arg(long, env = "MESH_SOAK_DIR", default_value = ".cache/soak")]
    pub dir: PathBuf,
}

/// Runs the soak and prints its table and summary.
pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.seconds > 0 && args.sample_every_s > 0,
        "--seconds and --sample-every-s must be at least 1"
    );
    anyhow::ensure!(args.rate > 0 && args.clients > 0, "--rate and --clients must be at least 1");
    let every = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    let spec = SoakSpec {
        data_dir: args.dir.clone(),
        duration: Duration::from_secs(args.seconds),
        sample_every: Duration::from_secs(args.sample_every_s),
        ops_per_s: args.rate,
        clients: args.clients,
        keys: args.keys,
        entry_ttl_s: args.entry_ttl_s,
        invalidate_one_in: args.invalidate_one_in,
        tenant_invalidation_every: every(args.tenant_invalidation_every_s),
        fault_every: every(args.fault_every_s),
        seed: args.seed,
        edge: args.edge,
    };
    println!("mesh soak on {}: {} ops/s for {} s, seed {}", cpu_model(), args.rate, args.seconds, args.seed);
    let report = soak::run(&spec, &mut |line| println!("{line}"))?;
    let settled = SETTLE.min(spec.duration / 2);
    print!("{}", summary(&report, settled, args.rate));
    Ok(())
}

/// The figures a soak is judged by: the rate achieved, errors, faults, and how flat memory, data and the
/// collected state stayed from `settled` on.
pub fn summary(report: &SoakReport, settled: Duration, rate: u64) -> String {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let mut text = format!(
        "\nachieved {:.0} ops/s ({} puts, {} key and {} tenant invalidations, {} errors{}); {} faults\n",
        report.ops_per_s(),
        report.puts,
        report.invalidations,
        report.tenant_invalidations,
        report.errors,
        report.last_error.as_deref().map(|e| format!(", last: {e}")).unwrap_or_default(),
        report.faults.len(),
    );
    text.push_str(&format!("from minute {:.1} on (settled):\n", settled.as_secs_f64() / 60.0));
    for flat in report.flatness(settled) {
        text.push_str(&format!(
            "  {:<14} RSS {:.1}..{:.1} MiB (spread {:.1}%), data {:.1}..{:.1} MiB (spread {:.1}%)\n",
            flat.process,
            mib(flat.rss.0),
            mib(flat.rss.1),
            Flatness::spread_percent(flat.rss),
            mib(flat.data.0),
            mib(flat.data.1),
            Flatness::spread_percent(flat.data),
        ));
    }
    text.push_str("peaks in the first and second half of that time (a bounded process repeats its peak):\n");
    for peaks in report.peaks(settled) {
        text.push_str(&format!(
            "  {:<14} RSS {:.1} then {:.1} MiB ({:.2}x), data {:.1} then {:.1} MiB ({:.2}x)\n",
            peaks.process,
            mib(peaks.rss.0),
            mib(peaks.rss.1),
            Peaks::ratio(peaks.rss),
            mib(peaks.data.0),
            mib(peaks.data.1),
            Peaks::ratio(peaks.data),
        ));
    }
    let window = rate * REQUEST_ID_RETENTION_S;
    for (gauge, what) in
        [("mesh_core_request_ids", "request ids"), ("mesh_core_dead_entries", "dead entries")]
    {
        let most = report.max_core_gauge(gauge, settled).unwrap_or(0.0);
        text.push_str(&format!(
            "  most {what} on a core node: {most:.0} ({:.2} of one retention window, {window})\n",
            most / window as f64
        ));
    }
    // A feed row per invalidation, kept an hour (`FEED_RETENTION_MS`).
    let feed_window = (report.invalidations + report.tenant_invalidations) as f64
        / report.elapsed.as_secs_f64().max(1.0)
        * FEED_RETENTION_S as f64;
    let most_feed = report.max_core_gauge("mesh_core_feed_rows", settled).unwrap_or(0.0);
    text.push_str(&format!(
        "  most feed rows on a core node: {most_feed:.0} ({:.2} of one retention window at the run's invalidation rate, {feed_window:.0})\n",
        most_feed / feed_window.max(1.0)
    ));
    text
}
