//! [`LlamaModel`]: one forward step over a batch of sequences and the paged KV cache.

use std::io::{Read, Seek};

use candle_core::quantized::gguf_file;
use candle_core::Device;

use super::batch::Batch;
use super::kv_pool::KvPool;
use super::layers::Weights;
use super::paged_attention::{paged_attention, AttentionRow, AttentionShape};
use super::rope::RopeTable;
use super::shape::ModelShape;
use crate::InferenceError;

/// A Llama model that computes steps over a [`KvPool`].
#[derive(Debug)]
pub struct LlamaModel {
    shape: ModelShape,
    weights: Weights,
    rope: RopeTable,
}

/// Where one row of the step sits.
#[derive(Debug, Clone, Copy)]
struct Row<'a> {
    position: usize,
    slot: usize,
    table: &'a [u32],
}

impl LlamaModel {
    /// Loads the model from a GGUF file.
    pub fn from_gguf<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
    ) -> Result<Self, InferenceError> {
        let shape = ModelShape::from_gguf(content)?;
        let weights = Weights::from_gguf(content, reader, &shape, &Device::Cpu)?;
        let rope = RopeTable::new(shape.head_dim, shape.rope_base, shape.context);
        Ok(Self { shape, weights, rope })
    }

    /// The model's dimensions.
    pub fn shape(&self) -> &ModelShape {
        &self.shape
    }

    /// Bytes of weights one decode step reads.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.weights.bytes_per_token
    }

    /// Computes one step: writes the KV of every token in `batch` into `kv` and returns the logits
    /// of the rows each sequence asked for, `[rows][vocab]`, in batch order.
    pub fn forward(&self, batch: &Batch<'_>, kv: &mut KvPool) -> Result<Vec<f32>, InferenceError> {
        let s = self.shape;
        let rows = self.rows(batch, kv)?;
        let n = rows.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let tokens = batch.sequences.iter().flat_map(|q| q.tokens.iter().copied());
        let mut x = Vec::with_capacity(n * s.hidden);
        for token in tokens {
            let token = token as usize;
            if token >= s.vocab {
                return Err(InferenceError::InvalidRequest(format!(
                    "token {token} is outside the vocabulary"
                )));
            }
            x.extend_from_slice(&self.weights.embedding[token * s.hidden..(token + 1) * s.hidden]);
        }

        let kvw = s.kv_width();
        let qkv_width = s.hidden + 2 * kvw;
        let attention = AttentionShape {
            geometry: kv.geometry(),
            group: s.group(),
            scale: 1.0 / (s.head_dim as f32).sqrt(),
        };
        let attention_rows: Vec<AttentionRow<'_>> =
            rows.iter().map(|r| AttentionRow { position: r.position, table: r.table }).collect();
        let mut normed = vec![0.0; n * s.hidden];
        let mut queries = vec![0.0; n * s.hidden];
        let mut attended = vec![0.0; n * s.hidden];
        let mut activated = vec![0.0; n * s.ffn];

        for (l, layer) in self.weights.layers.iter().enumerate() {
            rms_norm(&x, &layer.attention_norm, s.norm_eps, &mut normed);
            let mut qkv = layer.qkv.matmul(&normed, n);
            for (r, row) in rows.iter().enumerate() {
                let fused = &mut qkv[r * qkv_width..(r + 1) * qkv_width];
                let (q, kvs) = fused.split_at_mut(s.hidden);
                let (k, v) = kvs.split_at_mut(kvw);
                self.rope.apply(q, row.position);
                self.rope.apply(k, row.position);
                kv.write(l, row.slot, k, v);
                queries[r * s.hidden..(r + 1) * s.hidden].copy_from_slice(q);
            }
            paged_attention(kv.layer(l), attention, &attention_rows, &queries, &mut attended);
            add(&mut x, &layer.output.matmul(&attended, n));

            rms_norm(&x, &layer.ffn_norm, s.norm_eps, &mut normed);
            let gate_up = layer.gate_up.matmul(&normed, n);
            for (r, out) in activated.chunks_exact_mut(s.ffn).enumerate() {
                let (gate, up) = gate_up[r * 2 * s.ffn..(r + 1) * 2 * s.ffn].split_at(s.ffn);
                for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                    *o = g / (1.0 + (-g).exp()) * u;
                }
            }
            add(&mut x, &layer.down.matmul(&activated, n));
        }

        // Only the rows whose logits were asked for go through the output projection.
        let mut selected = Vec::with_capacity(batch.logit_rows() * s.hidden);
        let mut first = 0;
        for sequence in &batch.sequences {
            let len = sequence.tokens.len();
            for r in first + len - sequence.logits.min(len)..first + len {
                selected.extend_from_slice(&x[r * s.hidden..(r + 1) * s.hidden]);
            }
            first += len;
        }
        let picked = selected.len() / s.hidden;
        if picked == 0 {
            return Ok(Vec::new());
        }
        let mut final_norm = vec![0.0; selected.len()];
        rms_norm(&selected, &self.weights.norm, s.norm_eps, &mut final_norm);
        Ok(self.weights.output.matmul(&final_norm, picked))
    }

    /// Positions and KV slots of every row, checked against the tables and the context.
    fn rows<'a>(&self, batch: &Batch<'a>, kv: &KvPool) -> Result<Vec<Row<'a>>, InferenceError> {
        let block_size = kv.block_size();
        let mut rows = Vec::with_capacity(batch.tokens());
        for sequence in &batch.sequences {
            let end = sequence.start + sequence.tokens.len();
            if end > self.rope.positions() {
                return Err(InferenceError::PromptTooLong {
                    prompt_tokens: end,
                    context: self.rope.positions(),
                });
            }
            if sequence.table.len() * block_size < end {
                return Err(InferenceError::InvalidRequest(format!(
                    "block table covers {} positions, the step needs {end}",
                    sequence.table.len() * block_size
                )));
            }
            for position in sequence.start..end {
                let block = sequence.table[position / block_size] as usize;
                if block >= kv.blocks() {
                    return Err(InferenceError::InvalidRequest(format!("block {block} is outside the pool")));
                }
                rows.push(Row {
                    position,
                    slot: block * block_size + position % block_size,
                    table: sequence.table,
                });
            }
        }
        Ok(rows)
    }
}

/// RMS norm of every `weight.len()`-wide row of `x` into `out`.
fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len();
    for (row, out) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
        let scale = 1.0 / (mean_square + eps).sqrt();
        for ((o, &v), &w) in out.iter_mut().zip(row).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// `x += y`, element-wise.
fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
