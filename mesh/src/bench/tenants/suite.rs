//! The run of `mesh bench tenants`: one TLS mesh (one core node, the pod, one regional node), a victim
//! tenant and an attacker tenant, the victim measured alone and beside each attack.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;

use super::attacks::{self, Attack, Target};
use crate::bench::common::http_load::closed_loop_threads;
use crate::bench::common::load::LoadResult;
use crate::bench::common::report::{Better, Machine, Report, Row};
use crate::bench::common::scratch::run_kept;
use mesh_harness::client::ChatClient;
use mesh_harness::mesh::{Mesh, MeshSpec};

/// Questions the victim asked before and asks again.
const WARM_QUESTIONS: usize = 24;

/// What `mesh bench tenants` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct TenantsBenchOptions {
    /// Measured seconds of the victim's traffic, alone and under each attack.
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// The victim's clients asking questions it asked before.
    #[arg(long, default_value_t = 3)]
    pub hit_clients: usize,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
    /// Set (by a signal handler) to end the run early. From the command line: the
    /// process's [`crate::stop::flag`].
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// The victim's figures in one phase.
struct Phase {
    attack: Attack,
    /// Its repeated questions: answered, and how many of those from a cache.
    hits: LoadResult,
    cached: u64,
    /// Its new questions (one client, one token each).
    misses: LoadResult,
    /// What the attacker sent, and how much of it the mesh refused.
    attempts: u64,
    refused: u64,
}

impl Phase {
    fn hit_ratio(&self) -> f64 {
        self.cached as f64 / (self.hits.ops + self.hits.errors).max(1) as f64
    }
}

/// Runs the suite; every process it starts is stopped before it returns.
pub fn run(options: &TenantsBenchOptions) -> anyhow::Result<Report> {
    anyhow::ensure!(
        options.seconds > 0 && options.hit_clients > 0,
        "--seconds and --hit-clients must be positive"
    );
    run_kept(&options.dir, "tenants", |scratch| run_in(options, scratch))
}

fn question(text: &str, max_tokens: u32) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": text}]})
}

fn run_in(options: &TenantsBenchOptions, scratch: &Path) -> anyhow::Result<Report> {
    eprintln!(
        "starting a TLS mesh (1 core node, the pod, 1 regional node) with a victim and an attacker tenant"
    );
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        tls: true,
        other_tenants: vec![("attacker".into(), "sk-attacker".into())],
        ..MeshSpec::local(scratch.join("mesh"))
    })?;
    let victim = mesh.regional_client(0);
    let attacker = ChatClient::new(&mesh.regional_url(0), Some("sk-attacker"));
    let warm: Vec<String> = (0..WARM_QUESTIONS)
        .map(|i| question(&format!("Name one use of the number {}.", 100 + i), 16).to_string())
        .collect();
    for body in &warm {
        let reply = victim.chat_raw(body)?;
        anyhow::ensure!(reply.status == 200, "warming: {} {}", reply.status, reply.body);
    }
    let core_addr: std::net::SocketAddr = mesh.core_url(0).rsplit("//").next().unwrap_or_default().parse()?;
    let target = Target { client: &attacker, core_addr };
    let fresh = AtomicU64::new(0);
    let mut phases = Vec::new();
    for attack in Attack::ALL {
        anyhow::ensure!(!options.stop.load(Ordering::Relaxed), "interrupted");
        let stop_attack = AtomicBool::new(false);
        let phase = std::thread::scope(|scope| {
            let attacking = scope.spawn(|| attacks::run(attack, &target, &stop_attack));
            // The attack gets a moment to build up before the victim is measured.
            std::thread::sleep(Duration::from_secs(2));
            let seconds = Duration::from_secs(options.seconds);
            let cached = AtomicU64::new(0);
            let (hits, misses) = std::thread::scope(|inner| {
                let hits = inner.spawn(|| {
                    closed_loop_threads(options.hit_clients, seconds, options.stop, |i| {
                        let n = fresh.fetch_add(1, Ordering::Relaxed) as usize;
                        let reply = victim.chat_raw(&warm[(n + i) % warm.len()])?;
                        anyhow::ensure!(reply.status == 200, "status {}", reply.status);
                        if reply.header("x-cache").is_some_and(|c| c.starts_with("HIT")) {
                            cached.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(())
                    })
                });
                let misses = closed_loop_threads(1, seconds, options.stop, |_| {
                    let n = fresh.fetch_add(1, Ordering::Relaxed);
                    let reply =
                        victim.chat(&question(&format!("Is {n} a prime number? ({})", attack.name()), 1))?;
                    anyhow::ensure!(reply.status == 200, "status {}", reply.status);
                    Ok(())
                });
                (hits.join(), misses)
            });
            stop_attack.store(true, Ordering::Relaxed);
            let sent = attacking.join();
            (hits, misses, cached.load(Ordering::Relaxed), sent)
        });
        let (Ok(hits), misses, cached, Ok(sent)) = phase else {
            anyhow::bail!("a load thread panicked");
        };
        let phase = Phase {
            attack,
            hits,
            cached,
            misses,
            attempts: sent.attempts.load(Ordering::Relaxed),
            refused: sent.refused.load(Ordering::Relaxed),
        };
        eprintln!(
            "{}: victim hits {} (ratio {:.3}, p50 {:.2} ms, p99 {:.2} ms), misses {} (p50 {:.0} ms, p99 {:.0} ms); attacker sent {}, refused {}",
            attack.name(),
            phase.hits.ops,
            phase.hit_ratio(),
            phase.hits.percentile_ms(0.5),
            phase.hits.percentile_ms(0.99),
            phase.misses.ops,
            phase.misses.percentile_ms(0.5),
            phase.misses.percentile_ms(0.99),
            phase.attempts,
            phase.refused,
        );
        phases.push(phase);
    }
    Ok(Report { suite: "tenants".into(), machine: Machine::current(), rows: rows(&phases) })
}

fn rows(phases: &[Phase]) -> Vec<Row> {
    let Some((alone, attacked)) = phases.split_first() else { return Vec::new() };
    let peer = "the victim alone";
    let mut rows = Vec::new();
    for phase in attacked {
        let name = phase.attack.name();
        let row = |metric: &str, unit: &str, better, ours: f64, peer_value: f64, goal_ratio| Row {
            metric: format!("{name}_{metric}"),
            unit: unit.into(),
            better,
            ours,
            peer: peer.into(),
            peer_value,
            goal_ratio,
            limit: None,
        };
        rows.push(row(
            "victim_hit_ratio",
            "",
            Better::Higher,
            phase.hit_ratio(),
            alone.hit_ratio(),
            Some(0.9),
        ));
        let (p50, p99) = (phase.hits.percentile_ms(0.5), phase.hits.percentile_ms(0.99));
        rows.push(row(
            "victim_hit_p50_ms",
            "ms",
            Better::Lower,
            p50,
            alone.hits.percentile_ms(0.5),
            Some(1.1),
        ));
        rows.push(row(
            "victim_hit_p99_ms",
            "ms",
            Better::Lower,
            p99,
            alone.hits.percentile_ms(0.99),
            Some(1.1),
        ));
        let miss = phase.misses.percentile_ms(0.99);
        rows.push(row(
            "victim_miss_p99_ms",
            "ms",
            Better::Lower,
            miss,
            alone.misses.percentile_ms(0.99),
            Some(1.1),
        ));
    }
    rows
}
