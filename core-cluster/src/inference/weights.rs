//! How the model's weights are held in memory.
//!
//! candle 0.11 has SIMD (AVX2) dot products for Q4_0, Q8_0 and the K-quants but only a scalar loop
//! for Q4_1, the format SmolLM2's GGUF ships. Requantizing the Q4_1 tensors to Q8_0 once at load
//! time keeps the weights quantized (8-bit, about 1.7x the memory of Q4_1) and exact to within
//! Q8_0's rounding of the Q4_1 grid, and makes prefill and decode several times faster.

use std::io::{Cursor, Read, Seek};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use serde::Deserialize;

use super::InferenceError;

/// The in-memory format of the quantized linear weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WeightFormat {
    /// As stored in the file (Q4_1 for SmolLM2): least memory, slowest on x86.
    AsStored,
    /// Q4_1 tensors requantized to Q8_0 at load time; everything else as stored.
    #[default]
    #[value(name = "q8_0")]
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// Returns a GGUF image whose Q4_1 tensors are requantized to Q8_0, for `ModelWeights::from_gguf`.
pub fn requantize_q4_1<R: Read + Seek>(
    content: &gguf_file::Content,
    reader: &mut R,
    device: &Device,
) -> Result<(gguf_file::Content, Cursor<Vec<u8>>), InferenceError> {
    let mut tensors = Vec::with_capacity(content.tensor_infos.len());
    for name in content.tensor_infos.keys() {
        let tensor = content.tensor(reader, name, device)?;
        let tensor = if tensor.dtype() == GgmlDType::Q4_1 {
            QTensor::quantize(&tensor.dequantize(device)?, GgmlDType::Q8_0)?
        } else {
            tensor
        };
        tensors.push((name.as_str(), tensor));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> =
        content.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut image = Cursor::new(Vec::new());
    gguf_file::write(&mut image, &metadata, &tensor_refs)?;
    drop(tensors);
    image.set_position(0);
    let requantized = gguf_file::Content::read(&mut image)?;
    Ok((requantized, image))
}
