//! Causal grouped-query attention that reads keys and values through block tables.
//!
//! One work item is one (row, KV head): the row's `group` query heads that share that KV head
//! stream the sequence's positions once, a fixed tile at a time (keys, then values, read through the
//! block table), with an online softmax (as flash attention does): a running maximum and sum per query
//! head, and the output rescaled whenever the maximum grows, so no scores the length of the context are
//! kept. Items run
//! on candle's CPU thread pool, so attention and the matmuls share the same threads.

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
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { scores: Vec::new(), block: Vec::new(), maxima: Vec::new(), sums: Vec::new() })
    };
}

/// Buffers of one item's attention.
struct Scratch {
    /// One tile's scores, then its softmax weights, of the item's query heads, `[group][TILE]`.
    scores: Vec<f32>,
    /// One run of an `f16` cache widened to `f32`, `[offset][head_dim]`: a tile's keys, then, once its
    /// scores are done, its values.
    block: Vec<f32>,
    /// Each query head's largest score so far.
    maxima: Vec<f32>,
    /// Each query head's sum of `e^(score - maximum)` so far.
    sums: Vec<f32>,
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

/// Positions per step of the online softmax. Fixed, not the KV block size, so the order of the
/// arithmetic (and with it every rounding) is the same whatever the paging: a sequence gets the same
/// answer from a pod with small blocks as from one with large blocks, and after preemption.
const TILE: usize = 32;

/// The runs of consecutive KV vectors that hold positions `start..start + len` of a sequence with block
/// table `table`, for KV head `head`: `(offset in the tile, first vector, vectors)`, in order.
fn segments(
    g: KvGeometry,
    table: &[u32],
    head: usize,
    start: usize,
    len: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let bs = g.block_size;
    let mut position = start;
    std::iter::from_fn(move || {
        if position >= start + len {
            return None;
        }
        let (index, offset) = (position / bs, position % bs);
        let run = (bs - offset).min(start + len - position);
        let segment = (position - start, g.vector(table[index] as usize, head, offset), run);
        position += run;
        Some(segment)
    })
}

/// Attention of `group` query heads over one KV head, [`TILE`] positions at a time with an online
/// softmax: each tile's weights are taken against the running maximum, and what was accumulated
/// against a smaller one is rescaled when the maximum grows.
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
    let Scratch { scores, block: widened, maxima, sums } = scratch;
    let g = shape.geometry;
    let (hd, group) = (g.head_dim, shape.group);
    let context = row.position + 1;
    scores.resize(group * TILE, 0.0);
    maxima.clear();
    maxima.resize(group, f32::NEG_INFINITY);
    sums.clear();
    sums.resize(group, 0.0);
    out.fill(0.0);

    for tile_start in (0..context).step_by(TILE) {
        let tile_len = TILE.min(context - tile_start);

        for (at, first, len) in segments(g, row.table, head, tile_start, tile_len) {
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
                    scores[j * TILE + at + offset] = score * shape.scale;
                }
            }
        }

        for j in 0..group {
            let weights = &mut scores[j * TILE..j * TILE + tile_len];
            // Still scores here; weights after the `exp_neg` below.
            let maximum = maxima[j].max(largest(weights));
            // The output and sum so far are relative to the old maximum; before the first tile they
            // are zero, and an unchanged maximum would scale them by exactly 1.
            if tile_start > 0 && maximum > maxima[j] {
                let c = crate::sampler::math::exp_neg(maxima[j] - maximum);
                sums[j] *= c;
                for o in &mut out[j * hd..(j + 1) * hd] {
                    *o *= c;
                }
            }
            maxima[j] = maximum;
            // `maximum` bounds the tile's scores, so `score - maximum <= 0`, `exp_neg`'s domain.
            // Unlike `f32::exp`, a libm call per score, `exp_neg` vectorises.
            for w in weights.iter_mut() {
                *w = crate::sampler::math::exp_neg(*w - maximum);
            }
            sums[j] += total(weights);
        }

        for (at, first, len) in segments(g, row.table, head, tile_start, tile_len) {
            let run = Scratch::run(widened, &layer.values, first, len, hd);
            for offset in 0..len {
                let vector = first + offset;
                for j in 0..group {
                    let weight = scores[j * TILE + at + offset];
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

    for (j, &sum) in sums.iter().enumerate() {
        let inverse = 1.0 / sum;
        for o in &mut out[j * hd..(j + 1) * hd] {
            *o *= inverse;
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

/// The largest value, `-inf` if none, NaN ignored. A comparison per lane vectorises; a chain of
/// `f32::max` does not.
#[inline(always)]
fn largest(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    for chunk in x.chunks_exact(8) {
        for i in 0..8 {
            lanes[i] = if chunk[i] > lanes[i] { chunk[i] } else { lanes[i] };
        }
    }
    lanes
        .iter()
        .chain(x.chunks_exact(8).remainder())
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// The sum, with eight independent partial sums so the additions vectorise.
#[inline(always)]
fn total(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for chunk in x.chunks_exact(8) {
        for i in 0..8 {
            lanes[i] += chunk[i];
        }
    }
    lanes.iter().sum::<f32>() + x.chunks_exact(8).remainder().iter().sum::<f32>()
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

    /// Plain softmax, stable against large scores.
    fn softmax(x: &mut [f32]) {
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        for v in x.iter_mut() {
            *v = (*v - max).exp();
        }
        let sum: f32 = x.iter().sum();
        for v in x.iter_mut() {
            *v /= sum;
        }
    }

    /// The score of query head `q` with key head `kv` at one position: the dot product times `scale`.
    fn score(s: &ModelShape, q: &[f32], key: &[f32], kv: usize, scale: f32) -> f32 {
        let hd = s.head_dim;
        q.iter().zip(&key[kv * hd..(kv + 1) * hd]).map(|(a, b)| a * b).sum::<f32>() * scale
    }

    /// Plain attention over contiguous keys and values, `[position][kv_heads * head_dim]`.
    fn reference(
        s: &ModelShape,
        keys: &[Vec<f32>],
        vals: &[Vec<f32>],
        query: &[f32],
        pos: usize,
        scale: f32,
    ) -> Vec<f32> {
        let hd = s.head_dim;
        let mut out = vec![0.0; s.heads * hd];
        for h in 0..s.heads {
            let kv = h / s.group();
            let q = &query[h * hd..(h + 1) * hd];
            let mut scores: Vec<f32> = (0..=pos).map(|t| score(s, q, &keys[t], kv, scale)).collect();
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
            let expected = reference(&s, &keys, &vals, &queries[i * s.hidden..(i + 1) * s.hidden], p, 0.5);
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

    /// Many blocks and scores in the hundreds: the running maximum grows from tile to tile, and
    /// `e^score` would overflow, so only a correct rescaling of the accumulated output matches. Returns
    /// the output.
    fn run_long(precision: KvPrecision, block_size: usize) -> Vec<f32> {
        let s = ModelShape { hidden: 128, heads: 8, kv_heads: 2, head_dim: 16, context: 256, ..shape() };
        let (len, scale) = (215usize, 0.25);
        let blocks = len.div_ceil(block_size) + 6;
        // Every block once, out of order (7 is prime to the number of blocks, unless it divides it).
        let blocks = if blocks % 7 == 0 { blocks + 1 } else { blocks };
        let table: Vec<u32> = (0..len.div_ceil(block_size)).map(|i| ((i * 7 + 3) % blocks) as u32).collect();
        let mut pool = KvPool::new(&s, blocks, block_size, precision);
        // Multiples of 1/64 (keys, values) and integers (queries): f16 holds them exactly and every dot product
        // is exact in any order, so the only differences left are the softmax's. The keys grow with the
        // position, so later blocks tend to hold larger scores.
        let grid = |v: Vec<f32>, factor: f32| -> Vec<f32> {
            v.into_iter().map(|x| (x * factor * 64.0).round() / 64.0).collect()
        };
        let keys: Vec<Vec<f32>> =
            (0..len).map(|t| grid(values(t as u64, s.kv_width()), 1.0 + t as f32 / 64.0)).collect();
        let vals: Vec<Vec<f32>> = (0..len).map(|t| grid(values(500 + t as u64, s.kv_width()), 1.0)).collect();
        for t in 0..len {
            let slot = table[t / block_size] as usize * block_size + t % block_size;
            pool.write(0, slot, &keys[t], &vals[t]);
        }
        let positions = [0usize, 15, 16, 100, 214];
        let queries: Vec<f32> = positions
            .iter()
            .flat_map(|&p| values(3000 + p as u64, s.hidden))
            .map(|x| (x * 40.0).round())
            .collect();

        // The premise, on the longest row's first head: its tile maxima rise again and again, and
        // pass 88.7, where `e^x` leaves f32.
        let q = &queries[(positions.len() - 1) * s.hidden..][..s.head_dim];
        let tile_max = |b: usize| {
            (b * TILE..((b + 1) * TILE).min(len))
                .map(|t| score(&s, q, &keys[t], 0, scale))
                .fold(f32::NEG_INFINITY, f32::max)
        };
        let maxima: Vec<f32> = (0..len.div_ceil(TILE)).map(tile_max).collect();
        let rises = (1..maxima.len()).filter(|&b| maxima[..b].iter().all(|&m| maxima[b] > m)).count();
        assert!(rises >= 3, "the maximum rose {rises} times: {maxima:?}");
        assert!(maxima.iter().any(|&m| m > 88.7), "{maxima:?}");

        let rows: Vec<AttentionRow<'_>> =
            positions.iter().map(|&p| AttentionRow { position: p, table: &table }).collect();
        let mut out = vec![0.0; positions.len() * s.hidden];
        let attention = AttentionShape { geometry: pool.geometry(), group: s.group(), scale };
        paged_attention(pool.layer(0), attention, &rows, &queries, &mut out);
        for (i, &p) in positions.iter().enumerate() {
            let expected = reference(&s, &keys, &vals, &queries[i * s.hidden..(i + 1) * s.hidden], p, scale);
            for (a, b) in out[i * s.hidden..(i + 1) * s.hidden].iter().zip(&expected) {
                assert!((a - b).abs() <= 1e-5, "row {i}: {a} vs {b}");
            }
        }
        out
    }

    #[test]
    fn online_softmax_matches_plain_attention_over_many_blocks_of_large_scores() {
        run_long(KvPrecision::F32, 16);
    }

    #[test]
    fn online_softmax_over_f16_blocks_matches_plain_attention() {
        run_long(KvPrecision::F16, 16);
    }

    #[test]
    fn the_block_size_does_not_change_a_single_bit() {
        let sixteen = run_long(KvPrecision::F32, 16);
        for block_size in [4, 8, 32, 48] {
            assert!(run_long(KvPrecision::F32, block_size) == sixteen, "block size {block_size}");
        }
    }
}
