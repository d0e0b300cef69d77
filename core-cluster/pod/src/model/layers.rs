//! The model's weights, loaded from GGUF.
//!
//! The query, key and value projections share their input, and so do the gate and up projections
//! of the feed-forward block; each trio or pair is fused into one quantized matrix (their rows
//! stacked), so a step runs one matmul where the reference runs three or two. The linear weights
//! stay in the file's block format (Q4_1 and Q8_0 for SmolLM2) and run on our own kernel.

use std::io::{Read, Seek};

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;

use super::quant::QuantMatrix;
use super::shape::ModelShape;
use crate::InferenceError;

/// One transformer block.
#[derive(Debug)]
pub struct Layer {
    /// Q, K and V projections, stacked: `[hidden + 2 * kv_width, hidden]`.
    pub qkv: QuantMatrix,
    /// Attention output projection.
    pub output: QuantMatrix,
    /// Gate and up projections, stacked: `[2 * ffn, hidden]`.
    pub gate_up: QuantMatrix,
    /// Down projection.
    pub down: QuantMatrix,
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
    pub output: QuantMatrix,
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
        let mut tensor = |name: &str| content.tensor(reader, name, device);
        let matrix = |t: QTensor| QuantMatrix::from_qtensor(&t);
        let embedding_q = tensor("token_embd.weight")?;
        let embedding = embedding_q.dequantize(device)?.flatten_all()?.to_vec1::<f32>()?;
        let norm = vector(tensor("output_norm.weight")?, device)?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => matrix(tensor("output.weight")?)?,
            // Tied: the embedding doubles as the output projection.
            false => matrix(embedding_q)?,
        };
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let mut named = |suffix: &str| matrix(tensor(&format!("blk.{i}.{suffix}.weight"))?);
            let qkv = QuantMatrix::stack(vec![named("attn_q")?, named("attn_k")?, named("attn_v")?])?;
            let gate_up = QuantMatrix::stack(vec![named("ffn_gate")?, named("ffn_up")?])?;
            let (output, down) = (named("attn_output")?, named("ffn_down")?);
            let mut norm_weights =
                |suffix: &str| vector(tensor(&format!("blk.{i}.{suffix}.weight"))?, device);
            layers.push(Layer {
                qkv,
                output,
                gate_up,
                down,
                attention_norm: norm_weights("attn_norm")?,
                ffn_norm: norm_weights("ffn_norm")?,
            });
        }
        // A decode step streams every linear weight and the output projection once; the embedding
        // table is only indexed, a row per token.
        let norms = (norm.len()
            + layers.iter().map(|l| l.attention_norm.len() + l.ffn_norm.len()).sum::<usize>())
            * 4;
        let linear: usize = layers
            .iter()
            .map(|l| l.qkv.bytes() + l.output.bytes() + l.gate_up.bytes() + l.down.bytes())
            .sum();
        let bytes_per_token = linear + output.bytes() + norms;
        let weights = Self { embedding, layers, norm, output, bytes_per_token };
        weights.check(shape)?;
        Ok(weights)
    }

    /// Refuses weights whose sizes disagree with the model's metadata, which would otherwise
    /// surface as a panic in the middle of a step.
    fn check(&self, s: &ModelShape) -> Result<(), InferenceError> {
        let wrong = |what: &str, got: String, want: String| {
            Err(InferenceError::Metadata(format!("{what} is {got}, the metadata implies {want}")))
        };
        let matrix = |what: &str, m: &QuantMatrix, outputs: usize, inputs: usize| {
            if (m.outputs(), m.inputs()) != (outputs, inputs) {
                return wrong(
                    what,
                    format!("[{}, {}]", m.outputs(), m.inputs()),
                    format!("[{outputs}, {inputs}]"),
                );
            }
            Ok(())
        };
        let vector = |what: &str, v: &[f32], len: usize| match v.len() == len {
            true => Ok(()),
            false => wrong(what, format!("{} long", v.len()), format!("{len}")),
        };
        vector("the token embedding", &self.embedding, s.vocab * s.hidden)?;
        vector("the output norm", &self.norm, s.hidden)?;
        matrix("the output projection", &self.output, s.vocab, s.hidden)?;
        for (i, layer) in self.layers.iter().enumerate() {
            matrix(&format!("block {i}'s Q/K/V"), &layer.qkv, s.hidden + 2 * s.kv_width(), s.hidden)?;
            matrix(&format!("block {i}'s attention output"), &layer.output, s.hidden, s.hidden)?;
            matrix(&format!("block {i}'s gate/up"), &layer.gate_up, 2 * s.ffn, s.hidden)?;
            matrix(&format!("block {i}'s down projection"), &layer.down, s.hidden, s.ffn)?;
            vector(&format!("block {i}'s attention norm"), &layer.attention_norm, s.hidden)?;
            vector(&format!("block {i}'s feed-forward norm"), &layer.ffn_norm, s.hidden)?;
        }
        Ok(())
    }
}

/// A 1-D weight (a norm) as plain floats.
fn vector(t: QTensor, device: &Device) -> Result<Vec<f32>, InferenceError> {
    Ok(t.dequantize(device)?.flatten_all()?.to_vec1::<f32>()?)
}
