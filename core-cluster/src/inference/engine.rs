//! The loaded model: our Llama forward pass ([`LlamaModel`]) and its tokenizer.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use candle_core::Device;

use super::model::LlamaModel;
use super::tokenizer::ChatTokenizer;
use super::weights::{requantize_q4_1, WeightFormat};
use super::InferenceError;

/// The model and its tokenizer, shared by the step loop and the request handlers.
pub struct Engine {
    /// The forward pass.
    model: LlamaModel,
    /// The tokenizer from the same GGUF file.
    tokenizer: Arc<ChatTokenizer>,
}

impl Engine {
    /// Loads a GGUF model (Llama architecture) and its tokenizer onto the CPU, holding the linear
    /// weights in `format`.
    pub fn load(path: &Path, format: WeightFormat) -> Result<Self, InferenceError> {
        let io_error = |source| InferenceError::ModelFile { path: path.display().to_string(), source };
        let mut file = File::open(path).map_err(io_error)?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| e.with_path(path))?;
        let tokenizer = Arc::new(ChatTokenizer::from_gguf(&content)?);
        let model = match format {
            WeightFormat::AsStored => load_model(&content, &mut file)?,
            WeightFormat::Q8_0 => {
                let (content, mut image) = requantize_q4_1(&content, &mut file, &Device::Cpu)?;
                load_model(&content, &mut image)?
            }
        };
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

fn load_model<R: Read + Seek>(
    content: &gguf_file::Content,
    reader: &mut R,
) -> Result<LlamaModel, InferenceError> {
    LlamaModel::from_gguf(content, reader)
}
