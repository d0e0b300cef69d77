//! The inference pod's configuration.

use std::path::PathBuf;

use daemon_runtime::TierIdentity;
use serde::Deserialize;

use super::model::KvPrecision;
use super::speculative::SpeculativeConfig;
use super::step_loop::LoopConfig;

/// The model name the pod serves unless told otherwise.
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m-instruct";

/// Everything [`run`](super::run) needs besides its listener and shutdown signal.
///
/// The secret comes from the environment or a file (see the `inference-pod` binary).
#[derive(Debug, Clone)]
pub struct PodConfig {
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
        }
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
