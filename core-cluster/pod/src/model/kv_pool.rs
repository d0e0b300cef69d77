//! The physical KV cache: fixed-size blocks for every layer, addressed by slot.
//!
//! A slot is `block * block_size + offset`. Within one layer, a block stores each KV head's
//! `block_size` keys contiguously (`[block][kv_head][offset][head_dim]`), and the values the same
//! way, so attention for one head streams one contiguous run per block. Which sequence owns which
//! block is the block manager's business (`inference::kv`); the pool only stores.

use half::slice::HalfFloatSliceExt as _;

use super::shape::ModelShape;

/// How keys and values are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum KvPrecision {
    /// 32-bit floats: exact.
    #[default]
    F32,
    /// 16-bit floats, llama.cpp's default: half the memory. Measured on SmolLM2 (reference tests):
    /// a logit difference after prefill and a greedy agreement close to int8's, and no faster
    /// decode than f32 here (the widening costs what the smaller reads save).
    F16,
    /// 8-bit integers with one `f32` scale per token and head: a quarter of the memory.
    Int8,
}

/// One layer's keys or values.
#[derive(Debug)]
pub enum KvTensor {
    /// Exact values, `[block][kv_head][offset][head_dim]`.
    F32(Vec<f32>),
    /// Half precision, same layout.
    F16(Vec<half::f16>),
    /// Symmetric int8, same layout, with one scale per `[block][kv_head][offset]`.
    Int8 {
        /// The quantized values.
        data: Vec<i8>,
        /// `max |x| / 127` of each head vector.
        scales: Vec<f32>,
    },
}

impl KvTensor {
    fn new(precision: KvPrecision, elements: usize, vectors: usize) -> Self {
        match precision {
            KvPrecision::F32 => Self::F32(vec![0.0; elements]),
            KvPrecision::F16 => Self::F16(vec![half::f16::ZERO; elements]),
            KvPrecision::Int8 => Self::Int8 { data: vec![0; elements], scales: vec![0.0; vectors] },
        }
    }

    /// Stores one head vector at vector index `vector` (of `x.len()` elements).
    fn store(&mut self, vector: usize, x: &[f32]) {
        let width = x.len();
        match self {
            Self::F32(data) => data[vector * width..(vector + 1) * width].copy_from_slice(x),
            Self::F16(data) => data[vector * width..(vector + 1) * width].convert_from_f32_slice(x),
            Self::Int8 { data, scales } => {
                let max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
                let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                for (q, &v) in data[vector * width..(vector + 1) * width].iter_mut().zip(x) {
                    *q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
                }
                scales[vector] = scale;
            }
        }
    }

    /// Copies `len` vectors of `width` from vector index `src` to `dst`.
    fn copy_vectors(&mut self, src: usize, dst: usize, len: usize, width: usize) {
        match self {
            Self::F32(data) => data.copy_within(src * width..(src + len) * width, dst * width),
            Self::F16(data) => data.copy_within(src * width..(src + len) * width, dst * width),
            Self::Int8 { data, scales } => {
                data.copy_within(src * width..(src + len) * width, dst * width);
                scales.copy_within(src..src + len, dst);
            }
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Self::F32(data) => data.len() * 4,
            Self::F16(data) => data.len() * 2,
            Self::Int8 { data, scales } => data.len() + scales.len() * 4,
        }
    }
}

/// One layer's cache.
#[derive(Debug)]
pub struct LayerKv {
    /// The keys, after the rotary embedding.
    pub keys: KvTensor,
    /// The values.
    pub values: KvTensor,
}

/// Where things are in a layer's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    /// Tokens per block.
    pub block_size: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

impl KvGeometry {
    /// The vector index of (`block`, `head`, `offset`): multiply by `head_dim` for the element.
    pub fn vector(&self, block: usize, head: usize, offset: usize) -> usize {
        (block * self.kv_heads + head) * self.block_size + offset
    }
}

/// The KV blocks of every layer.
#[derive(Debug)]
pub struct KvPool {
    geometry: KvGeometry,
    blocks: usize,
    precision: KvPrecision,
    layers: Vec<LayerKv>,
}

impl KvPool {
    /// Allocates `blocks` blocks of `block_size` tokens for every layer of `shape`.
    pub fn new(shape: &ModelShape, blocks: usize, block_size: usize, precision: KvPrecision) -> Self {
        let geometry = KvGeometry { block_size, kv_heads: shape.kv_heads, head_dim: shape.head_dim };
        let vectors = blocks * block_size * shape.kv_heads;
        let elements = vectors * shape.head_dim;
        let layers = (0..shape.layers)
            .map(|_| LayerKv {
                keys: KvTensor::new(precision, elements, vectors),
                values: KvTensor::new(precision, elements, vectors),
            })
            .collect();
        Self { geometry, blocks, precision, layers }
    }

    /// Where things are in a layer.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Blocks per layer.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.geometry.block_size
    }

    /// How values are stored.
    pub fn precision(&self) -> KvPrecision {
        self.precision
    }

    /// One layer's cache, for attention.
    pub fn layer(&self, layer: usize) -> &LayerKv {
        &self.layers[layer]
    }

    /// Stores the keys and values of one token (all KV heads, `kv_heads * head_dim` each) at `slot`.
    pub fn write(&mut self, layer: usize, slot: usize, keys: &[f32], values: &[f32]) {
        let g = self.geometry;
        let (block, offset) = (slot / g.block_size, slot % g.block_size);
        let layer = &mut self.layers[layer];
        for head in 0..g.kv_heads {
            let vector = g.vector(block, head, offset);
            let range = head * g.head_dim..(head + 1) * g.head_dim;
            layer.keys.store(vector, &keys[range.clone()]);
            layer.values.store(vector, &values[range]);
        }
    }

    /// Copies block `src` onto block `dst` in every layer (copy-on-write of a shared block).
    pub fn copy_block(&mut self, src: usize, dst: usize) {
        let g = self.geometry;
        let per_block = g.kv_heads * g.block_size;
        for layer in &mut self.layers {
            layer.keys.copy_vectors(src * per_block, dst * per_block, per_block, g.head_dim);
            layer.values.copy_vectors(src * per_block, dst * per_block, per_block, g.head_dim);
        }
    }

    /// Memory held by the pool.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.keys.bytes() + l.values.bytes()).sum()
    }

    /// Bytes one token's KV takes across all layers.
    pub fn bytes_per_token(&self) -> usize {
        self.bytes() / (self.blocks * self.geometry.block_size).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> ModelShape {
        ModelShape {
            layers: 2,
            hidden: 8,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            ffn: 16,
            vocab: 10,
            context: 64,
            norm_eps: 1e-5,
            rope_base: 10_000.0,
        }
    }

    #[test]
    fn writes_land_in_their_block_and_copies_move_whole_blocks() {
        let mut pool = KvPool::new(&shape(), 4, 2, KvPrecision::F32);
        pool.write(1, 3, &[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]);
        let g = pool.geometry();
        let KvTensor::F32(keys) = &pool.layer(1).keys else { panic!("f32 pool") };
        let at = g.vector(1, 0, 1) * g.head_dim;
        assert_eq!(&keys[at..at + 4], &[1.0, 2.0, 3.0, 4.0]);
        pool.copy_block(1, 3);
        let KvTensor::F32(values) = &pool.layer(1).values else { panic!("f32 pool") };
        let at = g.vector(3, 0, 1) * g.head_dim;
        assert_eq!(&values[at..at + 4], &[5.0, 6.0, 7.0, 8.0]);
    }

    #[test]
    fn int8_keeps_values_within_half_a_step() {
        let mut pool = KvPool::new(&shape(), 2, 2, KvPrecision::Int8);
        let x = [0.5, -1.27, 0.01, 1.0];
        pool.write(0, 0, &x, &x);
        let KvTensor::Int8 { data, scales } = &pool.layer(0).keys else { panic!("int8 pool") };
        for (q, v) in data[..4].iter().zip(x) {
            assert!((f32::from(*q) * scales[0] - v).abs() <= scales[0] / 2.0 + 1e-6);
        }
        assert!(pool.bytes() * 2 <= KvPool::new(&shape(), 2, 2, KvPrecision::F32).bytes());
    }
}
