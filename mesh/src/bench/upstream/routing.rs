//! `mesh bench routing`: routing by predicted time against round robin. One model on two backends of
//! unequal speed, both on the pod's GGUF: our inference pod (gRPC, continuous batching) and one
//! `llama-server` (one slot, so it answers one request at a time). The same closed-loop load, with
//! caching off (`Cache-Control: no-store, no-cache`: every request is generated) and prompts of its own
//! per request, is sent to a mesh whose core routes by predicted time and to one that takes the backends
//! in turn, at each concurrency step. Printed side by side: requests per second and end-to-end p50 and
//! p99, and the ratios (goal: at least 1.2x the requests per second with a lower p99).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

use crate::bench::common::http_load::closed_loop_threads;
use crate::bench::common::load::LoadResult;
use crate::bench::common::report::{cpu_model, Machine};
use crate::bench::common::scratch::run_kept;

/// The model both backends serve.
const MODEL: &str = "smollm2-135m-instruct";

/// What `mesh bench routing` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct RoutingBenchOptions {
    /// Concurrent clients, one step each, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    pub concurrency: Vec<usize>,
    /// Seconds of load per step and policy.
    #[arg(long, default_value_t = 40)]
    pub seconds: u64,
    /// Tokens generated per request.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: u32,
    /// llama-server's threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Directory of llama-server (default: where scripts/install-llama-cpp.sh builds).
    #[arg(long, env = "LLAMA_CPP_BIN_DIR")]
    pub llama_bin_dir: Option<std::path::PathBuf>,
    /// Where the run keeps its data and logs (removed after a successful run).
    #[arg(long, env = "MESH_BENCH_DIR", default_value = ".cache/bench")]
    pub dir: std::path::PathBuf,
}

/// Runs the suite: prints the table and returns the figures as JSON.
pub fn run(options: &RoutingBenchOptions) -> anyhow::Result<Value> {
    run_kept(&options.dir, "routing", |scratch| run_in(options, scratch))
}

fn run_in(options: &RoutingBenchOptions, dir: &Path) -> anyhow::Result<Value> {
    let server = super::start_llama_server(options.llama_bin_dir.as_deref(), options.threads, dir)?;
    let next_prompt = AtomicUsize::new(0);
    let mut rows = Vec::new();
    for policy in ["predicted-time", "round-robin"] {
        eprintln!("starting a mesh routing by {policy} over the pod and llama-server at {}", server.url());
        let mesh = Mesh::start(MeshSpec {
            core_nodes: 1,
            regional_nodes: 1,
            edge: false,
            openai_backends: vec![format!("{MODEL}={}/v1", server.url())],
            pod_beside_openai_backends: true,
            core_args: vec!["--backend-routing".into(), policy.into()],
            ..MeshSpec::local(dir.join(format!("mesh-{policy}")))
        })?;
        let client = mesh.regional_client(0);
        let no_cache = [("cache-control", "no-store, no-cache")];
        let ask = |i: usize| {
            json!({"model": MODEL, "temperature": 0, "max_tokens": options.max_tokens,
                   "messages": [{"role": "user", "content": format!("Write a short note ({i}) about the number {i}.")}]})
        };
        // Unmeasured: every backend answers a few, so routing has measured rates to predict with.
        for _ in 0..6 {
            client.chat_with_headers(&ask(next_prompt.fetch_add(1, Ordering::Relaxed)), &no_cache)?;
        }
        for &clients in &options.concurrency {
            let stop = AtomicBool::new(false);
            let result = closed_loop_threads(clients, Duration::from_secs(options.seconds), &stop, |_| {
                let reply =
                    client.chat_with_headers(&ask(next_prompt.fetch_add(1, Ordering::Relaxed)), &no_cache)?;
                anyhow::ensure!(reply.status == 200, "status {}: {}", reply.status, reply.body);
                Ok(())
            });
            eprintln!("{policy}, {}", result.summary());
            rows.push((policy, clients, result));
        }
    }
    drop(server);
    print_table(options, &rows);
    let figures: Vec<Value> = rows
        .iter()
        .map(|(policy, clients, r)| {
            json!({"policy": policy, "clients": clients, "requests_per_s": r.ops_per_s(),
                   "p50_ms": r.percentile_ms(0.5), "p99_ms": r.percentile_ms(0.99), "errors": r.errors})
        })
        .collect();
    Ok(
        json!({"max_tokens": options.max_tokens, "seconds": options.seconds, "threads": options.threads, "runs": figures}),
    )
}

fn print_table(options: &RoutingBenchOptions, rows: &[(&str, usize, LoadResult)]) {
    let machine = Machine::current();
    println!("\nmachine: {} ({} cores, {} GiB)", cpu_model(), machine.cores, machine.mem_gib);
    println!(
        "one model on two backends (the inference pod, llama-server -t {} with one slot), {} s per step, max_tokens {}, caching off",
        options.threads, options.seconds, options.max_tokens
    );
    println!("| routing | clients | requests/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|---|");
    for (policy, clients, r) in rows {
        println!(
            "| {policy} | {clients} | {:.2} | {:.0} | {:.0} | {} |",
            r.ops_per_s(),
            r.percentile_ms(0.5),
            r.percentile_ms(0.99),
            r.errors
        );
    }
    for &clients in &options.concurrency {
        let find =
            |policy: &str| rows.iter().find(|(p, c, _)| *p == policy && *c == clients).map(|(_, _, r)| r);
        if let (Some(predicted), Some(turns)) = (find("predicted-time"), find("round-robin")) {
            println!(
                "{clients} clients: predicted-time / round-robin: requests/s x{:.2}, p99 x{:.2} (goal: at least x1.2 requests/s, a lower p99)",
                predicted.ops_per_s() / turns.ops_per_s().max(1e-9),
                predicted.percentile_ms(0.99) / turns.percentile_ms(0.99).max(1e-9)
            );
        }
    }
}
