//! Causal grouped-query attention that reads keys and values through block tables.
//!
//! One work item is one (row, KV head): the row's `group` query heads that share that KV head
//! stream the sequence's keys once, block by block, then its values once. Items run on candle's
//! CPU thread pool, so attention and the matmuls share the same threads.

use std::cell::RefCell;
use std::sync::Mutex;

use half::slice::HalfFloatSliceExt as _;

use super::kv_pool::{KvGeometry, KvTensor, LayerKv};

/// What one row attends to: positions `0..=position` of the sequence whose blocks are `table`.
#[derive(Debug, Clone, Copy)]
pub struct AttentionRow<'a> {
    /// The row's own position in its sequence.
    pub position: usize,
    /// The sequence's block table.
    pub table: &'a [u32],
}

/// The attention's fixed sizes.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    /// Where the KV lives.
    pub geometry: KvGeometry,
    /// Query heads per KV head.
    pub group: usize,
    /// `1 / sqrt(head_dim)`.
    pub scale: f32,
}

/// Computes attention for every row: `queries` and `out` are `[rows][heads * head_dim]`.
pub fn paged_attention(
    layer: &LayerKv,
    shape: AttentionShape,
    rows: &[AttentionRow<'_>],
    queries: &[f32],
    out: &mut [f32],
) {
    let width = shape.group * shape.geometry.head_dim;
    let items = rows.len() * shape.geometry.kv_heads;
    // Each item owns one `width` run of `out`; the locks are never contended.
    let outputs: Vec<Mutex<&mut [f32]>> = out.chunks_mut(width).map(Mutex::new).collect();
    let kernel = kernel();
    candle_core::utils::barrier_pool().execute_chunked(items, |range| {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            for item in range {
                let row = rows[item / shape.geometry.kv_heads];
                let head = item % shape.geometry.kv_heads;
                let query = &queries[item * width..(item + 1) * width];
                let Ok(mut output) = outputs[item].lock() else { continue };
                kernel(layer, shape, row, head, query, &mut output, &mut scratch);
            }
        })
    });
}

thread_local! {
    /// The per-item buffers, reused across items.
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { scores: Vec::new(), block: Vec::new() }) };
}

/// Buffers of one item's attention.
struct Scratch {
    /// Scores of the item's query heads, `[group][context]`.
    scores: Vec<f32>,
    /// One block of an `f16` cache widened to `f32`, `[offset][head_dim]`.
    block: Vec<f32>,
}

impl Scratch {
    /// The `len` vectors from vector `first` of `tensor` as `f32`s, or `None` for int8.
    #[inline(always)]
    fn run<'a>(
        block: &'a mut Vec<f32>,
        tensor: &'a KvTensor,
        first: usize,
        len: usize,
        hd: usize,
    ) -> Option<&'a [f32]> {
        let range = first * hd..(first + len) * hd;
        match tensor {
            KvTensor::F32(data) => Some(&data[range]),
            KvTensor::F16(data) => {
                block.resize(len * hd, 0.0);
                data[range].convert_to_f32_slice(block);
                Some(block)
            }
            KvTensor::Int8 { .. } => None,
        }
    }
}

/// The per-item kernel's signature.
type Kernel = fn(&LayerKv, AttentionShape, AttentionRow<'_>, usize, &[f32], &mut [f32], &mut Scratch);

/// The widest kernel this CPU runs.
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return attend_avx2;
    }
    attend_portable
}

#[cfg(target_arch = "x86_64")]
fn attend_avx2(
    layer: &LayerKv,
    shape: AttentionShape,
    row: AttentionRow<'_>,
    head: usize,
    query: &[f32],
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    #[target_feature(enable = "avx2,fma")]
    fn with_avx2(
        layer: &LayerKv,
        shape: AttentionShape,
        row: AttentionRow<'_>,
        head: usize,
        query: &[f32],
        out: &mut [f32],
        scratch: &mut Scratch,
    ) {
        attend(layer, shape, row, head, query, out, scratch)
    }
    // SAFETY: `kernel()` hands out this function only after detecting AVX2 and FMA at run time,
    // which is the one requirement of a `target_feature` function.
    #[allow(unsafe_code)]
    unsafe {
        with_avx2(layer, shape, row, head, query, out, scratch)
    }
}

fn attend_portable(
    layer: &LayerKv,
    shape: AttentionShape,
    row: AttentionRow<'_>,
    head: usize,
    query: &[f32],
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    attend(layer, shape, row, head, query, out, scratch)
}

/// Attention of `group` query heads over one KV head: scores, softmax, weighted values.
#[inline(always)]
fn attend(
    layer: &LayerKv,
    shape: AttentionShape,
    row: AttentionRow<'_>,
    head: usize,
    query: &[f32],
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    let Scratch { scores, block: widened } = scratch;
    let g = shape.geometry;
    let (hd, bs, group) = (g.head_dim, g.block_size, shape.group);
    let context = row.position + 1;
    scores.clear();
    scores.resize(group * context, 0.0);

    for (index, &block) in row.table.iter().enumerate() {
        let start = index * bs;
        if start >= context {
            break;
        }
        let len = bs.min(context - start);
        let first = g.vector(block as usize, head, 0);
        let run = Scratch::run(widened, &layer.keys, first, len, hd);
        for offset in 0..len {
            let vector = first + offset;
            for j in 0..group {
                let q = &query[j * hd..(j + 1) * hd];
                let score = match (run, &layer.keys) {
                    (Some(keys), _) => dot(q, &keys[offset * hd..(offset + 1) * hd]),
                    (None, KvTensor::Int8 { data, scales }) => {
                        dot_i8(q, &data[vector * hd..(vector + 1) * hd]) * scales[vector]
                    }
                    (None, _) => unreachable!("only int8 has no f32 run"),
                };
                scores[j * context + start + offset] = score * shape.scale;
            }
        }
    }
    for j in 0..group {
        softmax(&mut scores[j * context..(j + 1) * context]);
    }

    out.fill(0.0);
    for (index, &block) in row.table.iter().enumerate() {
        let start = index * bs;
        if start >= context {
            break;
        }
        let len = bs.min(context - start);
        let first = g.vector(block as usize, head, 0);
        let run = Scratch::run(widened, &layer.values, first, len, hd);
        for offset in 0..len {
            let vector = first + offset;
            for j in 0..group {
                let weight = scores[j * context + start + offset];
                let o = &mut out[j * hd..(j + 1) * hd];
                match (run, &layer.values) {
                    (Some(values), _) => axpy(o, weight, &values[offset * hd..(offset + 1) * hd]),
                    (None, KvTensor::Int8 { data, scales }) => {
                        axpy_i8(o, weight * scales[vector], &data[vector * hd..(vector + 1) * hd])
                    }
                    (None, _) => unreachable!("only int8 has no f32 run"),
                }
            }
        }
    }
}

/// Dot product with eight independent lanes, so the compiler keeps it in vector registers.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f32 =
        a.chunks_exact(8).remainder().iter().zip(b.chunks_exact(8).remainder()).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

#[inline(always)]
fn dot_i8(a: &[f32], b: &[i8]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            lanes[i] += x[i] * f32::from(y[i]);
        }
    }
    let tail: f32 = a
        .chunks_exact(8)
        .remainder()
        .iter()
        .zip(b.chunks_exact(8).remainder())
        .map(|(x, y)| x * f32::from(*y))
        .sum();
    lanes.iter().sum::<f32>() + tail
}

#[inline(always)]
fn axpy(out: &mut [f32], weight: f32, x: &[f32]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o += weight * v;
    }
}

#[inline(always)]
fn axpy_i8(out: &mut [f32], weight: f32, x: &[i8]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o += weight * f32::from(*v);
    }
}

/// In-place softmax, stable against large scores, with the sampler's polynomial `exp` (which vectorises;
/// `f32::exp` is a libm call per score, and at a long context the scores are most of attention's work
/// besides the dot products).
#[inline(always)]
fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in x.iter_mut() {
        *v = crate::sampler::math::exp_neg(*v - max);
    }
    // Eight independent partial sums, so the additions vectorise too.
    let mut lanes = [0.0f32; 8];
    for chunk in x.chunks_exact(8) {
        for i in 0..8 {
            lanes[i] += chunk[i];
        }
    }
    let sum = lanes.iter().sum::<f32>() + x.chunks_exact(8).remainder().iter().sum::<f32>();
    let inverse = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inverse;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kv_pool::{KvPool, KvPrecision};
    use crate::model::shape::ModelShape;

    fn shape() -> ModelShape {
        ModelShape {
            layers: 1,
            hidden: 16,
            heads: 4,
            kv_heads: 2,
            head_dim: 4,
            ffn: 8,
            vocab: 8,
            context: 64,
            norm_eps: 1e-5,
            rope_base: 10_000.0,
        }
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// Plain attention over contiguous keys and values, `[position][kv_heads * head_dim]`.
    fn reference(
        s: &ModelShape,
        keys: &[Vec<f32>],
        vals: &[Vec<f32>],
        query: &[f32],
        pos: usize,
    ) -> Vec<f32> {
        let hd = s.head_dim;
        let mut out = vec![0.0; s.heads * hd];
        for h in 0..s.heads {
            let kv = h / s.group();
            let q = &query[h * hd..(h + 1) * hd];
            let mut scores: Vec<f32> = (0..=pos)
                .map(|t| {
                    q.iter().zip(&keys[t][kv * hd..(kv + 1) * hd]).map(|(a, b)| a * b).sum::<f32>() * 0.5
                })
                .collect();
            softmax(&mut scores);
            for (t, w) in scores.iter().enumerate() {
                for d in 0..hd {
                    out[h * hd + d] += w * vals[t][kv * hd + d];
                }
            }
        }
        out
    }

    fn run(precision: KvPrecision, tolerance: f32) {
        let s = shape();
        let block_size = 4;
        let mut pool = KvPool::new(&s, 8, block_size, precision);
        // Scattered, out-of-order blocks: the table decides where each position lives.
        let table = [5u32, 2, 7, 0];
        let len = 13;
        let keys: Vec<Vec<f32>> = (0..len).map(|t| values(t as u64, s.kv_width())).collect();
        let vals: Vec<Vec<f32>> = (0..len).map(|t| values(100 + t as u64, s.kv_width())).collect();
        for t in 0..len {
            let slot = table[t / block_size] as usize * block_size + t % block_size;
            pool.write(0, slot, &keys[t], &vals[t]);
        }
        let positions = [0usize, 3, 4, 12];
        let queries: Vec<f32> = positions.iter().flat_map(|&p| values(1000 + p as u64, s.hidden)).collect();
        let rows: Vec<AttentionRow<'_>> =
            positions.iter().map(|&p| AttentionRow { position: p, table: &table }).collect();
        let mut out = vec![0.0; positions.len() * s.hidden];
        let attention = AttentionShape { geometry: pool.geometry(), group: s.group(), scale: 0.5 };
        paged_attention(pool.layer(0), attention, &rows, &queries, &mut out);
        for (i, &p) in positions.iter().enumerate() {
            let expected = reference(&s, &keys, &vals, &queries[i * s.hidden..(i + 1) * s.hidden], p);
            for (a, b) in out[i * s.hidden..(i + 1) * s.hidden].iter().zip(&expected) {
                assert!((a - b).abs() <= tolerance, "row {i}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn matches_plain_attention_through_a_scattered_block_table() {
        run(KvPrecision::F32, 1e-5);
    }

    #[test]
    fn f16_kv_stays_close_to_plain_attention() {
        run(KvPrecision::F16, 2e-3);
    }

    #[test]
    fn int8_kv_stays_close_to_plain_attention() {
        run(KvPrecision::Int8, 2e-2);
    }
}
