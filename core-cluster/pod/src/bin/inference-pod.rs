//! `inference-pod`: serves SmolLM2-135M-Instruct over gRPC to the core cluster.
//!
//! Only parses the command line, sets up tracing and calls [`inference_pod::run`].

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use inference_pod::config::{EngineConfig, DEFAULT_MODEL_NAME};
use inference_pod::model::KvPrecision;
use inference_pod::{run, PodConfig};

/// The inference pod: a quantized model behind a gRPC streaming API.
#[derive(Debug, Parser)]
#[command(name = "inference-pod", version)]
struct Args {
    /// Address to serve gRPC and HTTP (`/healthz`, `/metrics`) on.
    #[arg(long, env = "MESH_POD_LISTEN", default_value = "127.0.0.1:7400")]
    listen: SocketAddr,
    /// Path of the GGUF model file (SmolLM2-135M-Instruct, Q4_1).
    #[arg(long, env = "MESH_POD_MODEL_PATH")]
    model_path: PathBuf,
    /// Model name requests must use.
    #[arg(long, env = "MESH_POD_MODEL_NAME", default_value = DEFAULT_MODEL_NAME)]
    model_name: String,
    /// CPU threads for the model's kernels. candle's pool pins its threads and spins while it waits
    /// for them, which collapses throughput (10x here) when the cores are shared with other
    /// processes; raise it only on a host whose cores the pod has to itself.
    #[arg(long, env = "MESH_POD_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// Most requests waiting for the model before new ones are refused.
    #[arg(long, env = "MESH_POD_MAX_QUEUE", default_value_t = 64)]
    max_queue: usize,
    /// KV cache blocks (f32: about 46 KiB per token, so the default 2,048 blocks of 16 take 1.4 GiB).
    #[arg(long, env = "MESH_POD_KV_BLOCKS", default_value_t = 2048)]
    kv_blocks: usize,
    /// Tokens per KV block, the unit of prefix caching.
    #[arg(long, env = "MESH_POD_BLOCK_SIZE", default_value_t = 16)]
    block_size: usize,
    /// How the KV cache stores keys and values: `f32` (exact), `f16` (half the memory) or `int8`
    /// (a quarter).
    #[arg(long, env = "MESH_POD_KV_PRECISION", value_enum, default_value = "f32")]
    kv_precision: KvPrecision,
    /// Most sequences in one batched step.
    #[arg(long, env = "MESH_POD_MAX_RUNNING", default_value_t = 32)]
    max_running: usize,
    /// Token budget of one step; longer prompts are prefilled in chunks between decode steps.
    #[arg(long, env = "MESH_POD_MAX_BATCHED_TOKENS", default_value_t = 512)]
    max_batched_tokens: usize,
    /// Prompt-lookup speculative decoding for requests that do not say (`true` or `false`). Off by
    /// default: on a CPU where the matmuls are compute-bound, verifying drafts costs what it saves.
    #[arg(long, env = "MESH_POD_SPECULATIVE", default_value_t = false, action = clap::ArgAction::Set)]
    speculative: bool,
    /// This pod's identity: mutual TLS files, or the insecure development secret.
    #[command(flatten)]
    identity: daemon_runtime::IdentityArgs,
    /// TOML file with any of these settings, one key per flag (`--cache-bytes` is `cache_bytes`); the
    /// command line and the environment variables override it.
    #[arg(long, env = "MESH_POD_CONFIG")]
    config: Option<PathBuf>,
    /// Print the settings in effect as such a file, with each one's help, and exit.
    #[arg(long)]
    print_config: bool,
}

fn main() -> anyhow::Result<()> {
    let parsed = daemon_runtime::config_file::parse::<Args>()?;
    if let Some(printed) = parsed.print {
        print!("{printed}");
        return Ok(());
    }
    let args = parsed.settings;
    // candle sizes its pools from these variables (CANDLE_NUM_THREADS first); set both before any
    // thread exists, so an inherited CANDLE_NUM_THREADS cannot override --threads.
    std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", args.threads.to_string());
    daemon_runtime::logging::init("info");

    let credential = args.identity.load()?;
    let config = PodConfig::new(args.model_path, credential)
        .with_model_name(args.model_name)
        .with_max_queue(args.max_queue)
        .with_engine(EngineConfig {
            kv_blocks: args.kv_blocks.max(1),
            block_size: args.block_size.max(1),
            kv_precision: args.kv_precision,
            max_running: args.max_running.max(1),
            max_batched_tokens: args.max_batched_tokens.max(1),
            speculative: args.speculative,
        });

    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("inference-pod")
        .build()
        .context("starting the async runtime")?
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(args.listen)
                .await
                .with_context(|| format!("binding {}", args.listen))?;
            run(config, listener, daemon_runtime::shutdown::signal()).await
        })
}
