//! The bytes of weights a decoder of a GGUF file reads per token, from the file's tensor table (read
//! with candle's GGUF reader, the one the pod loads the model with): each tensor's size follows from its
//! type and shape.
//!
//! One decode step reads every tensor once, except the token-embedding table, of which it reads one row.
//! When the model ties its output projection to that table (SmolLM2 does: there is no `output.weight`),
//! the table is read in full as the output projection, so the figure is all of the file's tensor bytes;
//! otherwise it is all of them minus the embedding table.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::Context as _;
use candle_core::quantized::gguf_file::{Content, TensorInfo};

/// The tensor bytes of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufWeights {
    /// Bytes of every tensor together.
    pub tensor_bytes: u64,
    /// Bytes of `token_embd.weight`.
    pub token_embd_bytes: u64,
    /// Whether a separate `output.weight` exists (otherwise the output is tied to the embedding).
    pub has_output: bool,
    /// Number of tensors.
    pub tensors: usize,
}

impl GgufWeights {
    /// Reads the tensor table of `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let content = Content::read(&mut BufReader::new(file))
            .with_context(|| format!("reading the GGUF header of {}", path.display()))?;
        let mut weights = Self {
            tensor_bytes: 0,
            token_embd_bytes: 0,
            has_output: content.tensor_infos.contains_key("output.weight"),
            tensors: content.tensor_infos.len(),
        };
        for (name, info) in &content.tensor_infos {
            let bytes = tensor_bytes(info);
            weights.tensor_bytes += bytes;
            if name == "token_embd.weight" {
                weights.token_embd_bytes = bytes;
            }
        }
        Ok(weights)
    }

    /// Bytes one decode step reads (see the module docs).
    pub fn bytes_per_token(&self) -> u64 {
        if self.has_output {
            self.tensor_bytes - self.token_embd_bytes
        } else {
            self.tensor_bytes
        }
    }
}

/// A tensor's size in the file: whole blocks of its type.
fn tensor_bytes(info: &TensorInfo) -> u64 {
    let dtype = info.ggml_dtype;
    (info.shape.elem_count().div_ceil(dtype.block_size()) * dtype.type_size()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_weights_are_read_whole_with_the_tied_embedding() {
        let path = mesh_harness::paths::smollm2_gguf();
        let weights = GgufWeights::read(&path).expect("the model installed by .ci/setup.sh models");
        let file_len = std::fs::metadata(&path).expect("metadata").len();
        // SmolLM2-135M: 30 layers of 9 tensors, the embedding and the final norm; the output is tied.
        assert_eq!(weights.tensors, 30 * 9 + 2, "{weights:?}");
        assert!(!weights.has_output);
        assert_eq!(weights.bytes_per_token(), weights.tensor_bytes);
        // The tensors are nearly the whole file (the rest is the header: vocabulary and merges).
        assert!(weights.tensor_bytes < file_len && weights.tensor_bytes > file_len * 8 / 10, "{weights:?}");
        assert!(weights.token_embd_bytes > 0 && weights.token_embd_bytes < weights.tensor_bytes);
        assert!(GgufWeights::read(Path::new("/nonexistent.gguf")).is_err());
    }
}
