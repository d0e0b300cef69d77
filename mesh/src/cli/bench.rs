//! `mesh bench <suite>`: each suite's command line is its options struct (`clap::Args`, declared once
//! beside the suite) and `--json`; each runs with the stop handlers installed and prints its table.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::bench::auto::suite::AutoBenchOptions;
use crate::bench::propagation::suite::PropagationOptions;
use crate::bench::scale::core_step::ScaleBenchOptions;
use crate::bench::semantic_index::suite::SemanticIndexBenchOptions;
use crate::bench::tenants::suite::TenantsBenchOptions;
use crate::bench::tls::suite::TlsBenchOptions;
use crate::bench::upstream::routing::RoutingBenchOptions;
use crate::bench::upstream::suite::UpstreamBenchOptions;
use crate::bench::{
    self, CoreBenchOptions, E2eBenchOptions, EdgeBenchOptions, PodBenchOptions, RegionalBenchOptions, Report,
};
use crate::stop;

/// The suites.
#[derive(Debug, Subcommand)]
pub enum BenchSuite {
    /// The core cluster against a three-member etcd 3.4, with a write+fsync loop as the floor.
    Core(SuiteArgs<CoreBenchOptions>),
    /// The inference pod against llama.cpp (llama-bench, llama-server) on the same GGUF and threads.
    Pod(SuiteArgs<PodBenchOptions>),
    /// The regional node against Redis 7 (exact hits) and GPTCache + faiss (semantic hits), and the
    /// time and bytes replication takes to repair a partition.
    Regional(SuiteArgs<RegionalBenchOptions>),
    /// What mutual TLS costs: exact hits at a regional node and misses through the edge, two meshes
    /// (with TLS and without) side by side.
    Tls(SuiteArgs<TlsBenchOptions>),
    /// The semantic tier's index (usearch HNSW) against an exact scan at 1k, 10k and 100k questions in
    /// one partition: lookup p50/p99, recall@1, memory per question.
    SemanticIndex(SuiteArgs<SemanticIndexBenchOptions>),
    /// What the tiers cost as the data grows; so far the core cluster against etcd filled to 10k and
    /// 100k entries (`--entries`): fill rate, put and linearizable-read p99, memory and disk bytes per
    /// entry, a follower's restart times on both, and the core's new-follower catch-up, at each count.
    Scale(SuiteArgs<ScaleBenchOptions>),
    /// What a hostile tenant does to another: the victim's hit ratio and latencies alone and beside a
    /// flood of random invalidations, of abandoned generations, of punctuation-heavy questions, and of
    /// connections without a certificate.
    Tenants(SuiteArgs<TenantsBenchOptions>),
    /// The whole mesh on ShareGPT traffic (natural and Zipf-popular mixes) against the mesh with
    /// caching off and GPTCache in front of llama-server: throughput, TTFT and end-to-end latency per
    /// concurrency step, answers from cache, tokens avoided, and the agreement of semantic hits.
    E2e(SuiteArgs<E2eBenchOptions>),
    /// The edge worker against a pass-through worker under the same workerd (latency of a hit and of a
    /// miss), and the hot-set scan in wasm against the same scan natively.
    Edge(SuiteArgs<EdgeBenchOptions>),
    /// How long each tier (edge, regional nodes, core nodes) takes to stop serving an answer after the
    /// core acknowledged its invalidation: one key, a whole tenant, a model-version bump.
    Propagation(SuiteArgs<PropagationOptions>),
    /// The mesh with caching off in front of `llama-server` against `llama-server` alone (the OpenAI
    /// backend adapter's cost): time to first token and output tokens per second.
    Upstream(SuiteArgs<UpstreamBenchOptions>),
    /// One model on the inference pod and `llama-server`: routing by predicted time against round
    /// robin, requests per second and end-to-end p99 at each concurrency step, caching off.
    Routing(SuiteArgs<RoutingBenchOptions>),
    /// `model: "auto"` (SmolLM2 first, Gemma 3 270M when unsure) against always-SmolLM2 and
    /// always-Gemma on labelled questions: the confidence bar learned on a calibration half, then
    /// accuracy and cost per question on a frozen test half.
    Auto(SuiteArgs<AutoBenchOptions>),
}

/// One suite's command line: its options, then where to write its figures as JSON.
#[derive(Debug, Args)]
pub struct SuiteArgs<T: Args> {
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// The suite's own options.
    #[command(flatten)]
    pub options: T,
}

impl BenchSuite {
    /// Runs the suite.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Self::Core(args) => args.report(bench::core::suite::run),
            Self::Pod(args) => args.report(bench::pod::suite::run),
            Self::Regional(args) => args.report(bench::regional::suite::run),
            Self::Tls(args) => args.report(bench::tls::suite::run),
            Self::SemanticIndex(args) => args.report(bench::semantic_index::suite::run),
            Self::Scale(args) => args.report(bench::scale::core_step::run),
            Self::Tenants(args) => args.report(bench::tenants::suite::run),
            Self::E2e(args) => args.report(bench::e2e::suite::run),
            Self::Edge(args) => args.report(bench::edge::suite::run),
            Self::Propagation(args) => printed(&args, bench::propagation::suite::run),
            Self::Upstream(args) => printed(&args, bench::upstream::suite::run),
            Self::Routing(args) => printed(&args, bench::upstream::routing::run),
            Self::Auto(args) => printed(&args, bench::auto::suite::run),
        }
    }
}

impl<T: Args> SuiteArgs<T> {
    /// Runs a suite with the stop handlers installed (a signal ends it early, and it still reports),
    /// prints its table, and writes its JSON where asked.
    fn report(&self, run: impl FnOnce(&T) -> anyhow::Result<Report>) -> anyhow::Result<()> {
        stop::install_handlers()?;
        let report = run(&self.options)?;
        print!("\n{}", report.table());
        println!("cpu: {}", crate::bench::common::report::cpu_model());
        if let Some(path) = &self.json {
            report.write_json(path)?;
            println!("\nwrote {}", path.display());
        }
        Ok(())
    }
}

/// Runs a suite that prints its own tables as it goes and has no stop check (so no stop handlers
/// either: `propagation`, `upstream`), and writes its figures as JSON where asked.
fn printed<T: Args>(
    args: &SuiteArgs<T>,
    run: impl FnOnce(&T) -> anyhow::Result<serde_json::Value>,
) -> anyhow::Result<()> {
    let figures = run(&args.options)?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures)? + "\n")?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}
