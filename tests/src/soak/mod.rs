//! A soak: a whole local mesh driven at a fixed write rate for a given time, with faults injected at
//! random (seeded), sampling every process's resources and the core's collected state as it goes. `mesh
//! soak` runs it for as long as asked and prints the table; a short seeded run is a test in `make test`.
//!
//! # Layout
//! - this file: [`SoakSpec`], [`run`] and the [`SoakReport`] with its flatness figures.
//! - `load`: the write load (puts and key invalidations at a fixed rate through the core client).
//! - `faults`: the faults injected, and how each is undone.
//! - `sample`: one row per process per period (resources, the core's and regional nodes' gauges).
//! - `resources`: what a process group holds, from `/proc` and the disk.

mod faults;
mod load;
mod resources;
mod sample;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::core::{invalidate, write_request, Invalidate};

pub use self::faults::Fault;
pub use self::load::{LoadCounters, LoadSpec};
pub use self::resources::{dir_bytes, rss_bytes, Resources};
pub use self::sample::{header, metric_value, row, Sample};
use crate::seeded::SeededRng;
use crate::{Mesh, MeshSpec};

/// What a soak runs.
#[derive(Clone, Debug)]
pub struct SoakSpec {
    /// The mesh's data and logs (emptied first).
    pub data_dir: PathBuf,
    /// How long the load runs.
    pub duration: Duration,
    /// Time between two samples of every process.
    pub sample_every: Duration,
    /// Operations a second (puts, and key invalidations among them).
    pub ops_per_s: u64,
    /// Concurrent clients of the load.
    pub clients: usize,
    /// Distinct keys written (a large number makes nearly every put a new entry).
    pub keys: u64,
    /// Time to live of each entry, in seconds.
    pub entry_ttl_s: u64,
    /// One operation in this many is a key invalidation (0: none).
    pub invalidate_one_in: u64,
    /// Time between two invalidations of the whole tenant (none when `None`).
    pub tenant_invalidation_every: Option<Duration>,
    /// Time between two faults (none when `None`).
    pub fault_every: Option<Duration>,
    /// Seeds the load's keys and the faults' kinds and targets.
    pub seed: u64,
    /// Whether the edge worker runs too.
    pub edge: bool,
}

/// What a soak did and saw.
#[derive(Debug)]
pub struct SoakReport {
    /// Every process, every period.
    pub samples: Vec<Sample>,
    /// Each fault, when it was injected.
    pub faults: Vec<(Duration, String)>,
    /// Time the load ran.
    pub elapsed: Duration,
    /// Puts acknowledged.
    pub puts: u64,
    /// Key invalidations acknowledged.
    pub invalidations: u64,
    /// Tenant invalidations acknowledged.
    pub tenant_invalidations: u64,
    /// Operations that failed.
    pub errors: u64,
    /// The last of those failures.
    pub last_error: Option<String>,
}

/// How much a process's memory and data moved once settled: the least and most seen after a time.
#[derive(Clone, Debug, PartialEq)]
pub struct Flatness {
    /// The process.
    pub process: String,
    /// Least and most resident memory, bytes.
    pub rss: (u64, u64),
    /// Least and most data-directory bytes.
    pub data: (u64, u64),
}

/// Whether a process's memory and data still grow once settled: the peaks of the first and second half
/// of the settled time. A bounded process shows the same peaks (a sawtooth of log segments, snapshots and
/// restarts included); one that grows shows a higher second peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Peaks {
    /// The process.
    pub process: String,
    /// Most resident memory in the first half and in the second, bytes.
    pub rss: (u64, u64),
    /// Most data-directory bytes in the first half and in the second.
    pub data: (u64, u64),
}

impl Peaks {
    /// `late / early` of a pair (1 when early is 0).
    pub fn ratio((early, late): (u64, u64)) -> f64 {
        if early == 0 {
            1.0
        } else {
            late as f64 / early as f64
        }
    }
}

impl Flatness {
    /// `(most - least) / least` of a pair, in percent (0 when least is 0).
    pub fn spread_percent((least, most): (u64, u64)) -> f64 {
        if least == 0 {
            0.0
        } else {
            (most - least) as f64 * 100.0 / least as f64
        }
    }
}

impl SoakReport {
    /// Acknowledged operations a second over the run.
    pub fn ops_per_s(&self) -> f64 {
        (self.puts + self.invalidations) as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// Each process's least and most memory and data, over the samples taken at or after `settled`.
    pub fn flatness(&self, settled: Duration) -> Vec<Flatness> {
        let mut all: Vec<Flatness> = Vec::new();
        for sample in self.samples.iter().filter(|s| s.at >= settled) {
            let r = sample.resources;
            match all.iter_mut().find(|f| f.process == sample.process) {
                Some(f) => {
                    f.rss = (f.rss.0.min(r.rss_bytes), f.rss.1.max(r.rss_bytes));
                    f.data = (f.data.0.min(r.data_bytes), f.data.1.max(r.data_bytes));
                }
                None => all.push(Flatness {
                    process: sample.process.clone(),
                    rss: (r.rss_bytes, r.rss_bytes),
                    data: (r.data_bytes, r.data_bytes),
                }),
            }
        }
        all
    }

    /// Each process's peaks in the first and second half of the time from `settled` to the last sample.
    pub fn peaks(&self, settled: Duration) -> Vec<Peaks> {
        let end = self.samples.iter().map(|s| s.at).max().unwrap_or_default();
        let middle = settled + end.saturating_sub(settled) / 2;
        let mut all: Vec<Peaks> = Vec::new();
        for sample in self.samples.iter().filter(|s| s.at >= settled) {
            let r = sample.resources;
            let peaks = match all.iter_mut().find(|p| p.process == sample.process) {
                Some(peaks) => peaks,
                None => {
                    all.push(Peaks { process: sample.process.clone(), rss: (0, 0), data: (0, 0) });
                    all.last_mut().expect("just pushed")
                }
            };
            if sample.at < middle {
                peaks.rss.0 = peaks.rss.0.max(r.rss_bytes);
                peaks.data.0 = peaks.data.0.max(r.data_bytes);
            } else {
                peaks.rss.1 = peaks.rss.1.max(r.rss_bytes);
                peaks.data.1 = peaks.data.1.max(r.data_bytes);
            }
        }
        all
    }

    /// The largest value of core gauge `name` any core node reported at or after `settled`.
    pub fn max_core_gauge(&self, name: &str, settled: Duration) -> Option<f64> {
        self.samples.iter().filter(|s| s.at >= settled).filter_map(|s| s.core_gauge(name)).reduce(f64::max)
    }

    /// The samples of the last period.
    pub fn last_samples(&self) -> impl Iterator<Item = &Sample> {
        let last = self.samples.last().map(|s| s.at);
        self.samples.iter().filter(move |s| Some(s.at) == last)
    }
}

/// Starts a mesh as `spec` says, drives it, and stops it; `out` gets the table's lines and the faults as
/// they happen.
pub fn run(spec: &SoakSpec, out: &mut dyn FnMut(&str)) -> anyhow::Result<SoakReport> {
    if spec.data_dir.exists() {
        std::fs::remove_dir_all(&spec.data_dir)?;
    }
    let mut mesh = Mesh::start(MeshSpec {
        edge: spec.edge,
        peer_fault_proxies: spec.fault_every.is_some(),
        ..MeshSpec::local(&spec.data_dir)
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let client = {
        let _entered = runtime.enter();
        mesh.core_client()?
    };
    let (model, model_version) = first_model(mesh.models())?;
    let load = LoadSpec {
        ops_per_s: spec.ops_per_s,
        clients: spec.clients,
        keys: spec.keys,
        entry_ttl_s: spec.entry_ttl_s,
        invalidate_one_in: spec.invalidate_one_in,
        tenant: mesh.tenant().to_owned(),
        model,
        model_version,
        seed: spec.seed,
    };
    let counters = Arc::new(LoadCounters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let driver = runtime.spawn(load::run(client.clone(), load, counters.clone(), stop.clone()));

    let mut rng = SeededRng::new(spec.seed);
    let mut report = SoakReport {
        samples: Vec::new(),
        faults: Vec::new(),
        elapsed: Duration::ZERO,
        puts: 0,
        invalidations: 0,
        tenant_invalidations: 0,
        errors: 0,
        last_error: None,
    };
    let start = Instant::now();
    let mut next_sample = spec.sample_every;
    let mut next_fault = spec.fault_every;
    let mut next_tenant_invalidation = spec.tenant_invalidation_every;
    let mut acknowledged_before = 0;
    out(&header());
    while start.elapsed() < spec.duration {
        let next = [Some(next_sample), next_fault, next_tenant_invalidation, Some(spec.duration)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(spec.duration);
        std::thread::sleep(next.saturating_sub(start.elapsed()));
        let now = start.elapsed();
        if now >= next_sample {
            let acknowledged = counters.acknowledged();
            let rate = (acknowledged - acknowledged_before) as f64 / spec.sample_every.as_secs_f64();
            acknowledged_before = acknowledged;
            out(&format!(
                "{:>7.1} load: {rate:.0} ops/s acknowledged, {} errors so far",
                now.as_secs_f64() / 60.0,
                counters.errors.load(Ordering::Relaxed)
            ));
            for sample in sample::sample(&mesh, now) {
                out(&row(&sample));
                report.samples.push(sample);
            }
            next_sample += spec.sample_every;
        }
        if let (Some(at), Some(every)) = (next_fault, spec.fault_every) {
            if now >= at {
                let done = Fault::pick(&mut rng).inject(&mut mesh, &mut rng)?;
                out(&format!("{:>7.1} fault: {done}", now.as_secs_f64() / 60.0));
                report.faults.push((now, done));
                next_fault = Some(start.elapsed() + every);
            }
        }
        if let (Some(at), Some(every)) = (next_tenant_invalidation, spec.tenant_invalidation_every) {
            if now >= at {
                let command = write_request::Command::Invalidate(Invalidate {
                    scope: Some(invalidate::Scope::Tenant(mesh.tenant().to_owned())),
                    key_tenant: String::new(),
                    refresh: false,
                });
                let request_id = format!("soak-{}-tenant-{}", spec.seed, report.tenant_invalidations);
                match runtime.block_on(client.write(&request_id, command)) {
                    Ok(_) => report.tenant_invalidations += 1,
                    Err(e) => out(&format!("tenant invalidation failed: {e}")),
                }
                next_tenant_invalidation = Some(at + every);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    report.elapsed = start.elapsed();
    runtime.block_on(driver)?;
    report.puts = counters.puts.load(Ordering::Relaxed);
    report.invalidations = counters.invalidations.load(Ordering::Relaxed);
    report.errors = counters.errors.load(Ordering::Relaxed);
    report.last_error = counters.last_error.lock().expect("last error").clone();
    Ok(report)
}

/// The first of `name@version,...`.
fn first_model(models: &str) -> anyhow::Result<(String, u64)> {
    let first = models.split(',').next().unwrap_or_default();
    let (name, version) =
        first.split_once('@').ok_or_else(|| anyhow::anyhow!("no model version in {models:?}"))?;
    Ok((name.trim().to_owned(), version.trim().parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, process: &str, rss: u64, data: u64) -> Sample {
        Sample {
            at: Duration::from_secs(at_s),
            process: process.into(),
            resources: Resources { rss_bytes: rss, open_files: 1, data_bytes: data },
            gauges: Vec::new(),
        }
    }

    #[test]
    fn flatness_counts_only_samples_after_settling_per_process() {
        let report = SoakReport {
            samples: vec![
                sample(0, "core-1", 10, 1),
                sample(60, "core-1", 100, 50),
                sample(60, "regional-1", 7, 7),
                sample(120, "core-1", 110, 40),
            ],
            faults: Vec::new(),
            elapsed: Duration::from_secs(120),
            puts: 240,
            invalidations: 0,
            tenant_invalidations: 0,
            errors: 0,
            last_error: None,
        };
        let flat = report.flatness(Duration::from_secs(60));
        assert_eq!(flat[0], Flatness { process: "core-1".into(), rss: (100, 110), data: (40, 50) });
        assert_eq!(flat[1].rss, (7, 7));
        assert_eq!(Flatness::spread_percent(flat[0].rss), 10.0);
        let peaks = report.peaks(Duration::from_secs(60));
        assert_eq!(peaks[0], Peaks { process: "core-1".into(), rss: (100, 110), data: (50, 40) });
        assert_eq!(Peaks::ratio(peaks[0].rss), 1.1);
        assert_eq!(report.ops_per_s(), 2.0);
        assert_eq!(report.last_samples().count(), 1);
    }

    #[test]
    fn the_first_model_and_its_version_are_read() {
        assert_eq!(first_model("smollm2@3,other@1").expect("parses"), ("smollm2".into(), 3));
        assert!(first_model("smollm2").is_err());
    }
}
