//! The inference pod's configuration: its settings as flags, environment variables and a file
//! ([`PodArgs`]), and what [`run`](super::run) takes ([`PodConfig`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use daemon_runtime::{IdentityArgs, TierIdentity};
use serde::Deserialize;

use super::model::KvPrecision;
use super::openai_http::{ApiKey, ApiKeyError};
use super::speculative::SpeculativeConfig;
use super::step_loop::LoopConfig;

/// The model name the pod serves unless told otherwise.
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m-instruct";

/// Everything [`run`](super::run) needs besides its listener and shutdown signal.
///
/// The secret comes from the environment or a file (see the `inference-pod` binary), the OpenAI API's
/// key from a file ([`PodArgs::openai_api_key_file`]).
#[derive(Debug, Clone)]
pub struct PodConfig {
    /// Where `/livez` and `/readyz` are also served in plain HTTP, if anywhere.
    pub probe_listen: Option<SocketAddr>,
    /// Path of the GGUF model file (SmolLM2-135M-Instruct, Q4_1).
    pub model_path: PathBuf,
    /// The name requests must use in their `model` field.
    pub model_name: String,
    /// Most requests waiting for the model before new ones are refused with `RESOURCE_EXHAUSTED`.
    pub max_queue: usize,
    /// The KV cache and the batching limits.
    pub engine: EngineConfig,
    /// The pod's identity: what it serves TLS with and how it recognises the core.
    pub identity: TierIdentity,
    /// The key callers of the OpenAI API (`/v1/*`) must present; `None` leaves those routes open.
    pub openai_api_key: Option<ApiKey>,
}

impl PodConfig {
    /// A configuration with the defaults for everything but the model file and the secret.
    pub fn new(model_path: impl Into<PathBuf>, identity: TierIdentity) -> Self {
        Self {
            model_path: model_path.into(),
            model_name: default_model_name(),
            max_queue: default_max_queue(),
            engine: EngineConfig::default(),
            identity,
            openai_api_key: None,
            probe_listen: None,
        }
    }

    /// Also serves the probes alone, in plain HTTP, on `addr`.
    pub fn with_probe_listen(mut self, addr: Option<SocketAddr>) -> Self {
        self.probe_listen = addr;
        self
    }

    /// Serves the model under `name` instead of [`DEFAULT_MODEL_NAME`].
    pub fn with_model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = name.into();
        self
    }

    /// Sizes the KV cache and the batches.
    pub fn with_engine(mut self, engine: EngineConfig) -> Self {
        self.engine = engine;
        self
    }

    /// Sets the most requests that may wait in the queue.
    pub fn with_max_queue(mut self, max_queue: usize) -> Self {
        self.max_queue = max_queue;
        self
    }

    /// Requires `key` on every OpenAI API request.
    pub fn with_openai_api_key(mut self, key: ApiKey) -> Self {
        self.openai_api_key = Some(key);
        self
    }
}

/// The KV cache and the batching limits.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// KV cache blocks (f32: about 46 KiB per token for SmolLM2-135M, so 2,048 blocks of 16 tokens
    /// take 1.4 GiB; f16 takes half, int8 a quarter).
    pub kv_blocks: usize,
    /// Tokens per KV block (the unit of prefix caching).
    pub block_size: usize,
    /// How keys and values are stored.
    pub kv_precision: KvPrecision,
    /// Most sequences in one step.
    pub max_running: usize,
    /// Most tokens in one step; a longer prompt is prefilled in chunks between decode steps.
    pub max_batched_tokens: usize,
    /// Whether requests that do not say use prompt-lookup speculative decoding. It measured 1.8x
    /// to 2.4x on an input-grounded task (`mesh bench pod`), but it is off by default until it is
    /// measured on ordinary traffic and under concurrency, where drafts are rarely accepted and
    /// verification rows take room from other sequences.
    pub speculative: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            kv_blocks: 2048,
            block_size: 16,
            kv_precision: KvPrecision::F32,
            max_running: 32,
            max_batched_tokens: 512,
            speculative: false,
        }
    }
}

impl EngineConfig {
    /// The step loop's configuration, with `max_waiting` requests allowed to wait.
    pub fn loop_config(&self, max_waiting: usize) -> LoopConfig {
        LoopConfig {
            kv_blocks: self.kv_blocks,
            block_size: self.block_size,
            kv_precision: self.kv_precision,
            max_running: self.max_running,
            max_batched_tokens: self.max_batched_tokens,
            max_waiting: max_waiting.max(1),
            speculative_by_default: self.speculative,
            speculative: SpeculativeConfig::default(),
        }
    }
}

fn default_model_name() -> String {
    DEFAULT_MODEL_NAME.to_owned()
}

fn default_max_queue() -> usize {
    64
}

/// The inference pod: a quantized model behind a gRPC streaming API.
#[derive(Debug, Parser)]
#[command(name = "inference-pod", version)]
pub struct PodArgs {
    /// Address to serve gRPC and HTTP (the OpenAI API under `/v1`, `/healthz`, `/metrics`) on.
    #[arg(long, env = "MESH_POD_LISTEN", default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Also serve `/livez` and `/readyz` alone, in plain HTTP, on this address: for probers that cannot
    /// present a mesh certificate (kubelet, a load balancer's health check). Unset: only on `--listen`.
    #[arg(long, env = "MESH_POD_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,
    /// Path of the GGUF model file (SmolLM2-135M-Instruct, Q4_1).
    #[arg(long, env = "MESH_POD_MODEL_PATH")]
    pub model_path: PathBuf,
    /// Model name requests must use.
    #[arg(long, env = "MESH_POD_MODEL_NAME", default_value = DEFAULT_MODEL_NAME)]
    pub model_name: String,
    /// CPU threads for the model's kernels. candle's pool pins its threads and spins while it waits
    /// for them, which collapses throughput (10x here) when the cores are shared with other
    /// processes; raise it only on a host whose cores the pod has to itself.
    #[arg(long, env = "MESH_POD_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Most requests waiting for the model before new ones are refused.
    #[arg(long, env = "MESH_POD_MAX_QUEUE", default_value_t = 64)]
    pub max_queue: usize,
    /// KV cache blocks (f32: about 46 KiB per token, so the default 2,048 blocks of 16 take 1.4 GiB).
    #[arg(long, env = "MESH_POD_KV_BLOCKS", default_value_t = 2048)]
    pub kv_blocks: usize,
    /// Tokens per KV block, the unit of prefix caching.
    #[arg(long, env = "MESH_POD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// How the KV cache stores keys and values: `f32` (exact), `f16` (half the memory) or `int8`
    /// (a quarter).
    #[arg(long, env = "MESH_POD_KV_PRECISION", value_enum, default_value = "f32")]
    pub kv_precision: KvPrecision,
    /// Most sequences in one batched step.
    #[arg(long, env = "MESH_POD_MAX_RUNNING", default_value_t = 32)]
    pub max_running: usize,
    /// Token budget of one step; longer prompts are prefilled in chunks between decode steps.
    #[arg(long, env = "MESH_POD_MAX_BATCHED_TOKENS", default_value_t = 512)]
    pub max_batched_tokens: usize,
    /// Prompt-lookup speculative decoding for requests that do not say (`true` or `false`). Off by
    /// default: on a CPU where the matmuls are compute-bound, verifying drafts costs what it saves.
    #[arg(long, env = "MESH_POD_SPECULATIVE", default_value_t = false, action = clap::ArgAction::Set)]
    pub speculative: bool,
    /// File holding the key callers of the OpenAI API must send as `Authorization: Bearer <key>`.
    /// Without it `/v1/*` is open to anyone who can reach the port (as on loopback in development).
    #[arg(long, env = "MESH_POD_OPENAI_API_KEY_FILE")]
    pub openai_api_key_file: Option<PathBuf>,
    /// This pod's identity: mutual TLS files, or the insecure development secret.
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// How log lines are written to standard error: `text` (human-readable) or `json` (one object a line,
    /// with the spans' fields such as `trace_id`, for log shippers).
    #[arg(long, env = "MESH_POD_LOG_FORMAT", value_enum, default_value_t = daemon_runtime::logging::LogFormat::Text)]
    pub log_format: daemon_runtime::logging::LogFormat,
    /// Export the spans of every request to this OpenTelemetry collector over OTLP/HTTP (JSON encoding),
    /// for example `http://127.0.0.1:4318`, as service `mesh-pod`; unset, nothing is exported.
    #[arg(long, env = "MESH_POD_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// TOML file with any of these settings, one key per flag (`--cache-bytes` is `cache_bytes`); the
    /// command line and the environment variables override it.
    #[arg(long, env = "MESH_POD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the settings in effect as such a file, with each one's help, and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl PodArgs {
    /// The pod's configuration from its settings and the identity they name. Fails if the OpenAI
    /// API's key file is named but cannot be read or is empty.
    pub fn pod_config(&self, identity: TierIdentity) -> Result<PodConfig, ApiKeyError> {
        let config = PodConfig::new(self.model_path.clone(), identity)
            .with_model_name(self.model_name.clone())
            .with_max_queue(self.max_queue)
            .with_probe_listen(self.probe_listen)
            .with_engine(EngineConfig {
                kv_blocks: self.kv_blocks.max(1),
                block_size: self.block_size.max(1),
                kv_precision: self.kv_precision,
                max_running: self.max_running.max(1),
                max_batched_tokens: self.max_batched_tokens.max(1),
                speculative: self.speculative,
            });
        Ok(match &self.openai_api_key_file {
            Some(file) => config.with_openai_api_key(ApiKey::from_file(file)?),
            None => config,
        })
    }
}
