//! The core step of `mesh bench scale`: both clusters (ours, etcd 3.4; three members each, fsync on,
//! on loopback) are filled to each entry count in turn with 1 KiB values under cache-key-shaped keys, and
//! at each count the run measures, for both: the fill rate, put p50/p99 and linearizable-read p99 at
//! `--clients`, resident memory per entry (summed over the members, above what they held empty) and
//! disk bytes per entry (every member's data directory), and a follower's restart after a clean stop
//! and after SIGKILL (until it has applied what the leader had applied before the stop). For the core it
//! also times a fresh follower's catch-up after it joins as a learner (from the leader's snapshot where
//! it has one, else its log).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_harness::core_cluster::{CoreCluster, CoreClusterSpec};
use mesh_harness::soak::{dir_bytes, rss_bytes};

use crate::bench::common::load::closed_loop;
use crate::bench::common::report::{cpu_model, Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use crate::bench::core::etcd::{EtcdCluster, EtcdTarget};
use crate::bench::core::kv_target::{bench_key, put_phase, KvTarget};
use crate::bench::core::ours::CoreTarget;

/// Members of each cluster.
const MEMBERS: u64 = 3;
/// How long a restarted or new follower may take to catch up before the run fails.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(600);

/// What `mesh bench scale` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct ScaleBenchOptions {
    /// Entry counts to fill both clusters to, in turn (comma-separated, ascending); 1000000 works
    /// given the time (about an hour on 2 cores).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub entries: Vec<usize>,
    /// Bytes of each value (etcd) and of each completion's content (ours).
    #[arg(long, default_value_t = 1024)]
    pub value_bytes: usize,
    /// Concurrent clients of the fill and of the measured phases.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Measured seconds of the put and read phases at each count.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Where the run keeps cluster data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early; every process is still stopped.
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// Runs the core step and returns its report; every process it starts is stopped before it returns.
pub fn run(options: &ScaleBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(options.seconds > 0 && options.clients > 0, "--seconds and --clients must be at least 1");
    anyhow::ensure!(
        !options.entries.is_empty() && options.entries.windows(2).all(|w| w[0] < w[1]),
        "--entries needs ascending counts"
    );
    run_kept(&options.dir, "scale", |scratch| run_in(options, scratch))
}

/// One system's figures at one entry count.
#[derive(Clone, Debug)]
struct StepFigures {
    entries: usize,
    fill_puts_per_s: f64,
    put_p50_ms: f64,
    put_p99_ms: f64,
    read_p99_ms: f64,
    rss_per_entry: f64,
    disk_per_entry: f64,
}

impl StepFigures {
    fn line(&self, name: &str) -> String {
        format!(
            "{name} at {} entries: fill {:.0} puts/s; puts p50 {:.2} ms, p99 {:.2} ms; linearizable reads p99 {:.2} ms; {:.0} B of memory and {:.0} B of disk an entry (3 members)",
            self.entries, self.fill_puts_per_s, self.put_p50_ms, self.put_p99_ms, self.read_p99_ms, self.rss_per_entry, self.disk_per_entry
        )
    }
}

/// What a system under the step is: a key-value target, its processes and its data directories.
struct System<T> {
    target: Arc<T>,
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
    /// Resident bytes of the members before the fill.
    empty_rss: u64,
    /// Entries written so far (fill and measured puts).
    stored: usize,
    /// Fill keys written so far (the reads pick among them).
    filled: usize,
}

fn run_in(options: &ScaleBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    eprintln!("CPU: {}", cpu_model());
    let peer = crate::bench::core::suite::etcd_version()?;
    let log_dir = scratch.join("logs");
    let etcd_runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    eprintln!("{peer}: starting {MEMBERS} members");
    let mut etcd_cluster = EtcdCluster::start(MEMBERS as usize, &scratch.join("etcd"), &log_dir)?;
    let etcd_target = etcd_runtime.block_on(async {
        let leader = etcd_cluster.leader_url(Duration::from_secs(20)).await?;
        EtcdTarget::connect(&leader, options.value_bytes).await
    })?;
    let etcd_dirs = (1..=MEMBERS).map(|i| scratch.join("etcd").join(format!("etcd{i}"))).collect();
    let mut etcd = System::new(etcd_target, etcd_cluster.pids(), etcd_dirs);

    eprintln!("core: starting {MEMBERS} nodes");
    let spec = CoreClusterSpec { direct_peers: true, ..CoreClusterSpec::new(MEMBERS, scratch.join("core")) };
    let mut cluster = CoreCluster::start_with(spec)?;
    let core_dirs = cluster.ids().iter().filter_map(|&id| cluster.data_dir(id)).collect();
    let core_target = CoreTarget::new(cluster.client()?, options.value_bytes);
    let mut ours = System::new(core_target, cluster.pids(), core_dirs);

    let mut rows = Vec::new();
    // Each count's new follower gets an id of its own.
    for (new_id, &entries) in (MEMBERS + 1..).zip(&options.entries) {
        let etcd_step = etcd.step(&etcd_runtime, entries, options)?;
        eprintln!("{}", etcd_step.line(&peer));
        let our_step = ours.step(cluster.runtime(), entries, options)?;
        eprintln!("{}", our_step.line("core"));
        rows.extend(step_rows(&our_step, &etcd_step, &peer));
        // A follower's restart on each, and the core's new follower.
        let (clean, killed, install) = restarts(&mut cluster, new_id)?;
        let etcd_clean = etcd_cluster.restart_follower(&etcd_runtime, false)?;
        let etcd_killed = etcd_cluster.restart_follower(&etcd_runtime, true)?;
        etcd.pids = etcd_cluster.pids();
        eprintln!(
            "{peer} at {entries} entries: a follower caught up {:.2} s after a clean restart, {:.2} s after SIGKILL",
            etcd_clean.as_secs_f64(),
            etcd_killed.as_secs_f64()
        );
        rows.extend(restart_rows(entries, (clean, killed), (etcd_clean, etcd_killed), &peer));
        eprintln!(
            "core at {entries} entries: a follower caught up {:.2} s after a clean restart, {:.2} s after SIGKILL; a new follower {:.2} s after it joined (from the leader's snapshot where it has one, else its log)",
            clean.as_secs_f64(),
            killed.as_secs_f64(),
            install.as_secs_f64()
        );
        // The restarted follower has a new process id.
        ours.pids = cluster.pids();
    }
    Ok(Report { suite: "scale".into(), machine: Machine::current(), rows })
}

impl<T: KvTarget> System<T> {
    fn new(target: T, pids: Vec<u32>, dirs: Vec<PathBuf>) -> Self {
        let empty_rss = pids.iter().filter_map(|&pid| rss_bytes(pid)).sum();
        Self { target: Arc::new(target), pids, dirs, empty_rss, stored: 0, filled: 0 }
    }

    /// Fills to `entries` fill keys, then measures the step, on `runtime` (where the client's
    /// channels run).
    fn step(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        entries: usize,
        options: &ScaleBenchOptions,
    ) -> anyhow::Result<StepFigures> {
        let stop = options.stop;
        let (from, target) = (self.filled, Arc::clone(&self.target));
        let took = runtime.block_on(fill(target, from, entries, options.clients, stop))?;
        anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
        self.stored += entries - from;
        self.filled = entries;
        let duration = Duration::from_secs(options.seconds);
        let phase = format!("scale{entries}/put");
        let puts = runtime.block_on(put_phase(&self.target, &phase, options.clients, duration, stop));
        anyhow::ensure!(puts.ops > 0, "no put succeeded at {entries} entries: {:?}", puts.first_error);
        self.stored += puts.ops as usize;
        let target = Arc::clone(&self.target);
        let filled = self.filled;
        let reads = runtime.block_on(closed_loop(options.clients, duration, stop, move |client, seq| {
            let target = Arc::clone(&target);
            // Spread over every filled key, old and new.
            let index = (client as u64 * 7_919 + seq * 104_729) % filled as u64;
            let key = fill_key(index as usize);
            async move {
                match target.read(key).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(anyhow::anyhow!("a filled key is missing")),
                    Err(e) => Err(e),
                }
            }
        }));
        anyhow::ensure!(reads.errors == 0, "reads at {entries} entries: {:?}", reads.first_error);
        let rss: u64 = self.pids.iter().filter_map(|&pid| rss_bytes(pid)).sum();
        let by_directory = disk_by_directory(&self.dirs);
        let disk: u64 = by_directory.iter().map(|(_, bytes)| bytes).sum();
        let per_entry = |bytes: u64| bytes as f64 / self.stored as f64;
        let shown: Vec<String> =
            by_directory.iter().map(|(name, bytes)| format!("{name} {:.0}", per_entry(*bytes))).collect();
        eprintln!("  disk at {entries} entries, bytes an entry by directory: {}", shown.join(", "));
        Ok(StepFigures {
            entries,
            fill_puts_per_s: (entries - from) as f64 / took.as_secs_f64().max(1e-9),
            put_p50_ms: puts.percentile_ms(0.5),
            put_p99_ms: puts.percentile_ms(0.99),
            read_p99_ms: reads.percentile_ms(0.99),
            rss_per_entry: rss.saturating_sub(self.empty_rss) as f64 / self.stored as f64,
            disk_per_entry: per_entry(disk),
        })
    }
}

/// The bytes under each entry of the members' data directories `dirs` (whose layouts match), summed
/// over the members by name, largest first: where the disk goes.
fn disk_by_directory(dirs: &[PathBuf]) -> Vec<(String, u64)> {
    let mut sizes = std::collections::BTreeMap::<String, u64>::new();
    for dir in dirs {
        for item in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let bytes = match item.file_type() {
                Ok(kind) if kind.is_dir() => dir_bytes(&item.path()),
                _ => item.metadata().map_or(0, |m| m.len()),
            };
            *sizes.entry(item.file_name().to_string_lossy().into_owned()).or_default() += bytes;
        }
    }
    let mut sizes: Vec<_> = sizes.into_iter().collect();
    sizes.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    sizes
}

/// The key of fill entry `index` (the same on both systems).
fn fill_key(index: usize) -> String {
    bench_key("scale/fill", 0, index as u64)
}

/// Writes fill entries `from..to` over `clients` concurrent writers (each put retried up to three
/// times); how long that took.
async fn fill<T: KvTarget>(
    target: Arc<T>,
    from: usize,
    to: usize,
    clients: usize,
    stop: &'static AtomicBool,
) -> anyhow::Result<Duration> {
    let next = Arc::new(AtomicUsize::new(from));
    let started = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (target, next) = (Arc::clone(&target), Arc::clone(&next));
        writers.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= to || stop.load(Ordering::Relaxed) {
                    return anyhow::Ok(());
                }
                let mut tries = 0;
                while let Err(error) = target.put(fill_key(index)).await {
                    tries += 1;
                    anyhow::ensure!(tries < 3, "fill entry {index}: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    while let Some(writer) = writers.join_next().await {
        writer??;
    }
    Ok(started.elapsed())
}

/// Times a follower's catch-up after a clean restart and after SIGKILL, then a new node `new_id`'s as
/// a learner (removed again after).
fn restarts(cluster: &mut CoreCluster, new_id: u64) -> anyhow::Result<(Duration, Duration, Duration)> {
    let leader = cluster.wait_leader(Duration::from_secs(30))?;
    let follower = cluster.ids().into_iter().find(|&id| id != leader && id <= MEMBERS).expect("a follower");
    let goal = applied(cluster, leader);
    cluster.stop_node(follower, Duration::from_secs(30));
    let started = Instant::now();
    cluster.start_node(follower)?;
    caught_up(cluster, follower, goal)?;
    let clean = started.elapsed();
    let goal = applied(cluster, leader);
    cluster.kill(follower);
    let started = Instant::now();
    cluster.start_node(follower)?;
    caught_up(cluster, follower, goal)?;
    let killed = started.elapsed();

    cluster.add_node(new_id)?;
    let client = cluster.client()?;
    let addr = cluster.proxy_addr(new_id);
    let started = Instant::now();
    let goal = applied(cluster, leader);
    cluster.block_on(client.add_learner(new_id, &addr))?;
    caught_up(cluster, new_id, goal)?;
    let install = started.elapsed();
    cluster.block_on(client.change_membership((1..=MEMBERS).collect(), vec![new_id]))?;
    cluster.kill(new_id);
    Ok((clean, killed, install))
}

/// What node `id` has applied.
fn applied(cluster: &CoreCluster, id: u64) -> u64 {
    cluster.health(id).map_or(0, |health| health.last_applied)
}

/// Waits until node `id` knows a leader and has applied at least `goal`.
fn caught_up(cluster: &CoreCluster, id: u64, goal: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if cluster.health(id).is_some_and(|health| health.last_applied >= goal && health.leader.is_some()) {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < CATCH_UP_WITHIN,
            "node {id} did not catch up:\n{}",
            cluster.log_tail(id)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The restart rows of one count: seconds until a follower caught up after a clean restart and after
/// SIGKILL, ours and the peer's.
fn restart_rows(
    entries: usize,
    ours: (Duration, Duration),
    theirs: (Duration, Duration),
    peer: &str,
) -> Vec<Row> {
    let seconds = |metric: &str, our: Duration, their: Duration| {
        Row::compared(
            format!("{metric}_{entries}"),
            "s",
            Better::Lower,
            our.as_secs_f64(),
            peer,
            their.as_secs_f64(),
        )
    };
    vec![seconds("restart_clean_s", ours.0, theirs.0), seconds("restart_sigkill_s", ours.1, theirs.1)]
}

/// The compared rows of one count.
fn step_rows(ours: &StepFigures, etcd: &StepFigures, peer: &str) -> Vec<Row> {
    let at = |metric: &str, unit: &str, better, our: f64, their: f64| {
        Row::compared(format!("{metric}_{}", ours.entries), unit, better, our, peer, their)
    };
    vec![
        at("fill_puts_per_s", "ops/s", Better::Higher, ours.fill_puts_per_s, etcd.fill_puts_per_s),
        at("put_p99_ms", "ms", Better::Lower, ours.put_p99_ms, etcd.put_p99_ms),
        at("read_p99_ms", "ms", Better::Lower, ours.read_p99_ms, etcd.read_p99_ms),
        at("rss_bytes_per_entry", "B", Better::Lower, ours.rss_per_entry, etcd.rss_per_entry),
        at("disk_bytes_per_entry", "B", Better::Lower, ours.disk_per_entry, etcd.disk_per_entry),
    ]
}
