//! `mesh bench propagation`: how long each tier of a full local mesh takes to obey an invalidation of a
//! key, a cache tag, a tenant and a model version, measured by the harness's
//! [`mesh_harness::propagation`].

use std::path::{Path, PathBuf};

use mesh_harness::propagation::{keys, model_version, tag, tenant, Tiers};
use mesh_harness::Mesh;
use serde_json::{json, Value};

use crate::bench::common::scratch::run_kept;

/// What `mesh bench propagation` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct PropagationOptions {
    /// Keys invalidated one by one.
    #[arg(long, default_value_t = 100)]
    pub keys: usize,
    /// Cache-tag invalidations, each of 2 answers.
    #[arg(long, default_value_t = 20)]
    pub tag_rounds: usize,
    /// Tenant-wide invalidations.
    #[arg(long, default_value_t = 10)]
    pub tenant_rounds: usize,
    /// Model-version bumps.
    #[arg(long, default_value_t = 10)]
    pub model_rounds: usize,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: PathBuf,
}

/// The loopback goal for every tier's p99 (CDN purges complete worldwide in about 150 ms).
pub const GOAL_P99_MS: f64 = 150.0;

/// Runs the suite on a full local mesh (3 core nodes, 2 regional nodes, the edge): prints a table per
/// scope and returns the figures as JSON.
pub fn run(options: &PropagationOptions) -> anyhow::Result<Value> {
    run_kept(&options.dir, "propagation", |scratch| run_in(options, scratch))
}

fn run_in(options: &PropagationOptions, dir: &Path) -> anyhow::Result<Value> {
    eprintln!("starting a mesh: 3 core nodes, 1 pod, 2 regional nodes, the edge");
    let mesh = Mesh::start(mesh_harness::MeshSpec::local(dir.join("mesh")))?;
    let tiers = Tiers::of(&mesh, "dev")?;
    let label = format!("run {}", std::process::id());
    let scopes = [
        keys(&tiers, &mesh.regional_client(0), options.keys, &label)?,
        tag(&tiers, &mesh.regional_client(0), options.tag_rounds, 2, &label)?.0,
        tenant(&mesh, &tiers, options.tenant_rounds, 3, &label)?,
        model_version(&mesh, &tiers, options.model_rounds, &label)?,
    ];
    let machine = crate::bench::common::report::Machine::current();
    println!(
        "\nmachine: {} cores, {} GiB; goal: every tier's p99 under {GOAL_P99_MS} ms",
        machine.cores, machine.mem_gib
    );
    let mut json_scopes = Vec::new();
    for scope in &scopes {
        print!("{}", scope.table());
        println!(
            "  every tier refused within {:.1} ms at p99: {}",
            scope.worst_p99(),
            if scope.worst_p99() < GOAL_P99_MS { "goal met" } else { "goal missed" }
        );
        let tiers: Vec<Value> = scope
            .summary()
            .into_iter()
            .map(|(tier, samples, p50, p99)| json!({"tier": tier, "samples": samples, "p50_ms": p50, "p99_ms": p99}))
            .collect();
        json_scopes.push(json!({"scope": scope.scope, "tiers": tiers, "worst_p99_ms": scope.worst_p99()}));
    }
    Ok(json!({"suite": "propagation", "machine": machine, "goal_p99_ms": GOAL_P99_MS, "scopes": json_scopes}))
}
