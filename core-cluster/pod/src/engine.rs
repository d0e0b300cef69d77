//! The loaded model: our Llama forward pass ([`LlamaModel`]) and its tokenizer.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file;

use super::model::LlamaModel;
use super::tokenizer::ChatTokenizer;
use super::InferenceError;

/// The model and its tokenizer, shared by the step loop and the request handlers.
pub struct Engine {
    /// The forward pass.
    model: LlamaModel,
    /// The tokenizer from the same GGUF file.
    tokenizer: Arc<ChatTokenizer>,
}

impl Engine {
    /// Loads a GGUF model (Llama architecture) and its tokenizer onto the CPU, the linear weights
    /// in the file's own block format.
    pub fn load(path: &Path) -> Result<Self, InferenceError> {
        let io_error = |source| InferenceError::ModelFile { path: path.display().to_string(), source };
        let mut file = File::open(path).map_err(io_error)?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| e.with_path(path))?;
        let tokenizer = Arc::new(ChatTokenizer::from_gguf(&content)?);
        let model = LlamaModel::from_gguf(&content, &mut file)?;
        Ok(Self { model, tokenizer })
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Arc<ChatTokenizer> {
        &self.tokenizer
    }

    /// The forward pass.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// The usable context window (prompt plus generated tokens), in tokens.
    pub fn context_len(&self) -> usize {
        self.model.shape().context
    }
}
