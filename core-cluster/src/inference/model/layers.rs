//! The model's weights, loaded from GGUF.
//!
//! The query, key and value projections share their input, and so do the gate and up projections
//! of the feed-forward block; each trio or pair is fused into one quantized matrix (their rows
//! stacked), so a step runs one matmul where the reference runs three or two.

use std::io::{Read, Seek};

use candle_core::quantized::{ggml_file, gguf_file, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::shape::ModelShape;
use crate::inference::InferenceError;

/// One transformer block.
#[derive(Debug)]
pub struct Layer {
    /// Q, K and V projections, stacked: `[hidden + 2 * kv_width, hidden]`.
    pub qkv: QMatMul,
    /// Attention output projection.
    pub output: QMatMul,
    /// Gate and up projections, stacked: `[2 * ffn, hidden]`.
    pub gate_up: QMatMul,
    /// Down projection.
    pub down: QMatMul,
    /// RMS norm weights before attention.
    pub attention_norm: Vec<f32>,
    /// RMS norm weights before the feed-forward block.
    pub ffn_norm: Vec<f32>,
}

/// Every weight of the model.
#[derive(Debug)]
pub struct Weights {
    /// Token embeddings, dequantized, `[vocab][hidden]`.
    pub embedding: Vec<f32>,
    /// The transformer blocks.
    pub layers: Vec<Layer>,
    /// The final RMS norm.
    pub norm: Vec<f32>,
    /// The output projection to the vocabulary (the token embedding when the file ties them).
    pub output: QMatMul,
    /// Bytes of weights one decode step reads: every linear weight, the output projection, the norms.
    pub bytes_per_token: usize,
}

impl Weights {
    /// Loads the weights named as llama.cpp names them (`blk.N.attn_q.weight`, ...).
    pub fn from_gguf<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        shape: &ModelShape,
        device: &Device,
    ) -> Result<Self, InferenceError> {
        let mut bytes = 0usize;
        let mut tensor = |name: &str| -> Result<QTensor, InferenceError> {
            let t = content.tensor(reader, name, device)?;
            bytes += t.storage_size_in_bytes();
            Ok(t)
        };
        let embedding_q = tensor("token_embd.weight")?;
        let embedding = embedding_q.dequantize(device)?.flatten_all()?.to_vec1::<f32>()?;
        let norm = vector(tensor("output_norm.weight")?, device)?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => tensor("output.weight")?,
            // Tied: the embedding doubles as the output projection, read once per step as such.
            false => embedding_q,
        };
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let name = |suffix: &str| format!("blk.{i}.{suffix}.weight");
            let qkv = fuse(&[tensor(&name("attn_q"))?, tensor(&name("attn_k"))?, tensor(&name("attn_v"))?])?;
            let gate_up = fuse(&[tensor(&name("ffn_gate"))?, tensor(&name("ffn_up"))?])?;
            layers.push(Layer {
                qkv: QMatMul::from_qtensor(qkv)?,
                output: QMatMul::from_qtensor(tensor(&name("attn_output"))?)?,
                gate_up: QMatMul::from_qtensor(gate_up)?,
                down: QMatMul::from_qtensor(tensor(&name("ffn_down"))?)?,
                attention_norm: vector(tensor(&name("attn_norm"))?, device)?,
                ffn_norm: vector(tensor(&name("ffn_norm"))?, device)?,
            });
        }
        // The embedding table itself is only indexed (a row per token), not streamed.
        let embedding_table = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|info| info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size())
            .unwrap_or_default();
        let tied = !content.tensor_infos.contains_key("output.weight");
        let bytes_per_token = if tied { bytes } else { bytes - embedding_table };
        Ok(Self { embedding, layers, norm, output: QMatMul::from_qtensor(output)?, bytes_per_token })
    }
}

/// A 1-D weight (a norm) as plain floats.
fn vector(t: QTensor, device: &Device) -> Result<Vec<f32>, InferenceError> {
    Ok(t.dequantize(device)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Stacks the rows of same-typed quantized matrices that share their input width.
fn fuse(parts: &[QTensor]) -> Result<QTensor, InferenceError> {
    let first = parts.first().ok_or_else(|| InferenceError::Metadata("nothing to fuse".into()))?;
    let (dtype, (_, k)) = (first.dtype(), first.shape().dims2()?);
    let mut rows = 0;
    let mut data = Vec::new();
    for part in parts {
        let (n, pk) = part.shape().dims2()?;
        if part.dtype() != dtype || pk != k {
            return Err(InferenceError::Metadata(format!(
                "cannot fuse {:?} [{n}, {pk}] with {dtype:?} [_, {k}]",
                part.dtype()
            )));
        }
        rows += n;
        data.extend_from_slice(&part.data()?);
    }
    Ok(ggml_file::qtensor_from_ggml(dtype, &data, vec![rows, k], &Device::Cpu)?)
}

/// `x @ w^T` for `x` of `rows` rows, as plain floats.
pub fn matmul(w: &QMatMul, x: &[f32], rows: usize, device: &Device) -> Result<Vec<f32>, InferenceError> {
    let input = Tensor::from_slice(x, (rows, x.len() / rows.max(1)), device)?;
    Ok(w.forward(&input)?.flatten_all()?.to_vec1::<f32>()?)
}
