//! The model's dimensions, read from the GGUF metadata.

use candle_core::quantized::gguf_file;

use crate::InferenceError;

/// What the forward pass needs to know about a Llama model's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelShape {
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (fewer than query heads under grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the feed-forward block.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// The context the model was trained for, in tokens.
    pub context: usize,
    /// RMS norm epsilon.
    pub norm_eps: f32,
    /// Rotary embedding base frequency.
    pub rope_base: f32,
}

impl ModelShape {
    /// Reads the `llama.*` keys of a GGUF file.
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self, InferenceError> {
        let get = |key: &str| {
            content.metadata.get(key).ok_or_else(|| InferenceError::Metadata(format!("missing {key}")))
        };
        let int = |key: &str| -> Result<usize, InferenceError> {
            get(key)?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| InferenceError::Metadata(format!("{key}: {e}")))
        };
        let float = |key: &str| -> Result<f32, InferenceError> {
            get(key)?.to_f32().map_err(|e| InferenceError::Metadata(format!("{key}: {e}")))
        };
        let hidden = int("llama.embedding_length")?;
        let heads = int("llama.attention.head_count")?;
        let kv_heads = int("llama.attention.head_count_kv")?;
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || hidden % heads != 0 {
            return Err(InferenceError::Metadata(format!(
                "unsupported attention shape: hidden {hidden}, {heads} heads, {kv_heads} kv heads"
            )));
        }
        let ffn = int("llama.feed_forward_length")?;
        let vocab = content
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .map(|tokens| tokens.len())
            .ok_or_else(|| InferenceError::Metadata("missing tokenizer.ggml.tokens".into()))?;
        Ok(Self {
            layers: int("llama.block_count")?,
            hidden,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            ffn,
            vocab,
            context: int("llama.context_length")?,
            norm_eps: float("llama.attention.layer_norm_rms_epsilon")?,
            rope_base: float("llama.rope.freq_base").unwrap_or(10_000.0),
        })
    }

    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Width of the keys (or the values) of one token in one layer.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}
