//! The inference pod's configuration.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use super::weights::WeightFormat;

/// The model name the pod serves unless told otherwise.
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m-instruct";

/// Everything [`run`](super::run) needs besides its listener and shutdown signal.
///
/// Deserializable from TOML or JSON; the secret is never read from there (it comes from the
/// environment or a file, see the `inference-pod` binary).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodConfig {
    /// Path of the GGUF model file (SmolLM2-135M-Instruct, Q4_1).
    pub model_path: PathBuf,
    /// The name requests must use in their `model` field.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// How the linear weights are held in memory (default: requantized to Q8_0 for speed).
    #[serde(default)]
    pub weights: WeightFormat,
    /// Most requests waiting for the model before new ones are refused with `RESOURCE_EXHAUSTED`.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// The shared secret every gRPC call must carry in `x-mesh-secret`.
    #[serde(skip)]
    pub tier_secret: TierSecret,
}

impl PodConfig {
    /// A configuration with the defaults for everything but the model file and the secret.
    pub fn new(model_path: impl Into<PathBuf>, tier_secret: TierSecret) -> Self {
        Self {
            model_path: model_path.into(),
            model_name: default_model_name(),
            weights: WeightFormat::default(),
            max_queue: default_max_queue(),
            tier_secret,
        }
    }

    /// Serves the model under `name` instead of [`DEFAULT_MODEL_NAME`].
    pub fn with_model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = name.into();
        self
    }

    /// Holds the weights in `format`.
    pub fn with_weights(mut self, format: WeightFormat) -> Self {
        self.weights = format;
        self
    }

    /// Sets the most requests that may wait in the queue.
    pub fn with_max_queue(mut self, max_queue: usize) -> Self {
        self.max_queue = max_queue;
        self
    }
}

fn default_model_name() -> String {
    DEFAULT_MODEL_NAME.to_owned()
}

fn default_max_queue() -> usize {
    64
}

/// The shared secret between tiers. Its `Debug` output is redacted so it cannot leak into logs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TierSecret(String);

impl TierSecret {
    /// Wraps a secret; surrounding whitespace (a file's trailing newline) is dropped.
    pub fn new(secret: impl AsRef<str>) -> Self {
        Self(secret.as_ref().trim().to_owned())
    }

    /// The secret's bytes, for comparison.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// True when no secret was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for TierSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TierSecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_redacted_and_trimmed() {
        let config = PodConfig::new("m.gguf", TierSecret::new("hunter2\n"));
        assert!(!format!("{config:?}").contains("hunter2"));
        assert_eq!(config.tier_secret.expose(), b"hunter2");
    }
}
