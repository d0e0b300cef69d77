//! Causal grouped-query attention that reads keys and values through block tables.
//!
//! One work item is one (row, KV head): the row's `group` query heads that share that KV head
//! stream the sequence's positions once, a fixed tile at a time (keys, then values, gathered through
//! the block table into an `f32` tile), with an online softmax (as flash attention does): a running
//! maximum and sum per query head, and the output rescaled whenever the maximum grows, so no scores
//! the length of the context are kept. Within a tile, every key is read once for all the heads, and
//! each output element is accumulated in a register over the tile's positions. Items run on candle's
//! CPU thread pool, so attention and the matmuls share the same threads.

use std::cell::RefCell;
use std::sync::Mutex;

use half::f16;
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
        RefCell::new(Scratch {
            partial: Vec::new(),
            scores: Vec::new(),
            tile: Vec::new(),
            scales: [1.0; TILE],
            maxima: Vec::new(),
            sums: Vec::new(),
        })
    };
}

/// Buffers of one item's attention.
struct Scratch {
    /// One tile's dot products of the item's query heads, as eight lanes yet to be summed,
    /// `[group][TILE]`.
    partial: Vec<[f32; 8]>,
    /// One tile's scores, then its softmax weights, of the item's query heads, `[group][TILE]`.
    scores: Vec<f32>,
    /// One tile's keys, then, once its scores are done, its values, as `f32`, `[TILE][head_dim]`.
    tile: Vec<f32>,
    /// The int8 scale of each of the tile's vectors.
    scales: [f32; TILE],
    /// Each query head's largest score so far.
    maxima: Vec<f32>,
    /// Each query head's sum of `e^(score - maximum)` so far.
    sums: Vec<f32>,
}

/// Copies the vectors of `runs` (as [`segments`] gives them) from `tensor` into `tile`
/// (`[offset][hd]`, as `f32`) and, for int8, their scales into `scales`. Returns whether `tensor` is
/// int8, that is whether `scales` apply. The tile is the same whatever the block size.
#[inline(always)]
fn gather(
    tensor: &KvTensor,
    runs: impl Iterator<Item = (usize, usize, usize)>,
    hd: usize,
    tile: &mut [f32],
    scales: &mut [f32; TILE],
    widen: impl Fn(&[f16], &mut [f32]),
) -> bool {
    for (at, first, len) in runs {
        let (to, from) = (&mut tile[at * hd..(at + len) * hd], first * hd..(first + len) * hd);
        match tensor {
            KvTensor::F32(data) => to.copy_from_slice(&data[from]),
            KvTensor::F16(data) => widen(&data[from], to),
            KvTensor::Int8 { data, scales: s } => {
                for (t, &v) in to.iter_mut().zip(&data[from]) {
                    *t = f32::from(v);
                }
                scales[at..at + len].copy_from_slice(&s[first..first + len]);
            }
        }
    }
    matches!(tensor, KvTensor::Int8 { .. })
}

/// The per-item kernel's signature.
type Kernel = fn(&LayerKv, AttentionShape, AttentionRow<'_>, usize, &[f32], &mut [f32], &mut Scratch);

/// The widest kernel this CPU runs.
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
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
    #[target_feature(enable = "avx2,fma,f16c")]
    fn with_avx2(
        layer: &LayerKv,
        shape: AttentionShape,
        row: AttentionRow<'_>,
        head: usize,
        query: &[f32],
        out: &mut [f32],
        scratch: &mut Scratch,
    ) {
        use std::arch::x86_64::{_mm256_castps_si256, _mm256_cvtph_ps, _mm256_extract_epi32, _mm_set_epi16};
        // One `vcvtph2ps` per eight values, where `half`'s slice conversion calls a function. The
        // closure inherits `with_avx2`'s features, under which these intrinsics are safe, and the
        // compiler turns the lane-by-lane `set` and `extract`s into a plain load and store.
        let widen = |from: &[f16], to: &mut [f32]| {
            let ((from8, from_rest), (to8, to_rest)) = (from.as_chunks::<8>(), to.as_chunks_mut::<8>());
            for (h, f) in from8.iter().zip(to8) {
                let h = h.map(|x| x.to_bits() as i16);
                let v = _mm256_cvtph_ps(_mm_set_epi16(h[7], h[6], h[5], h[4], h[3], h[2], h[1], h[0]));
                let v = _mm256_castps_si256(v);
                *f = [
                    _mm256_extract_epi32::<0>(v),
                    _mm256_extract_epi32::<1>(v),
                    _mm256_extract_epi32::<2>(v),
                    _mm256_extract_epi32::<3>(v),
                    _mm256_extract_epi32::<4>(v),
                    _mm256_extract_epi32::<5>(v),
                    _mm256_extract_epi32::<6>(v),
                    _mm256_extract_epi32::<7>(v),
                ]
                .map(|bits| f32::from_bits(bits as u32));
            }
            from_rest.convert_to_f32_slice(to_rest);
        };
        attend::<true>(layer, shape, row, head, query, out, scratch, widen)
    }
    debug_assert!(
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c"),
        "attend_avx2 is only for CPUs with AVX2, FMA and F16C"
    );
    // SAFETY: `kernel()` hands out this function only after detecting AVX2, FMA and F16C at run time,
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
    let widen = |from: &[f16], to: &mut [f32]| from.convert_to_f32_slice(to);
    attend::<false>(layer, shape, row, head, query, out, scratch, widen)
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
/// against a smaller one is rescaled when the maximum grows. Within a tile the order of the
/// arithmetic depends on positions only, never on where the block table puts them; `FUSED` (the
/// AVX2 kernel) rounds each multiply-add once, so that kernel's last bits differ from the portable one's.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend<const FUSED: bool>(
    layer: &LayerKv,
    shape: AttentionShape,
    row: AttentionRow<'_>,
    head: usize,
    query: &[f32],
    out: &mut [f32],
    scratch: &mut Scratch,
    widen: impl Fn(&[f16], &mut [f32]) + Copy,
) {
    let Scratch { partial, scores, tile, scales, maxima, sums } = scratch;
    let g = shape.geometry;
    let (hd, group) = (g.head_dim, shape.group);
    let context = row.position + 1;
    partial.resize(group * TILE, [0.0; 8]);
    scores.resize(group * TILE, 0.0);
    tile.resize(TILE * hd, 0.0);
    maxima.clear();
    maxima.resize(group, f32::NEG_INFINITY);
    sums.clear();
    sums.resize(group, 0.0);
    out.fill(0.0);

    for tile_start in (0..context).step_by(TILE) {
        let tile_len = TILE.min(context - tile_start);
        let runs = || segments(g, row.table, head, tile_start, tile_len);

        let int8 = gather(&layer.keys, runs(), hd, tile, scales, widen);
        let mut j0 = 0;
        while j0 < group {
            // Runs of up to four heads, whose accumulators fit in registers.
            let heads = (group - j0).min(4);
            match heads {
                1 => partial_scores::<FUSED, 1>(query, j0, tile, tile_len, hd, partial),
                2 => partial_scores::<FUSED, 2>(query, j0, tile, tile_len, hd, partial),
                3 => partial_scores::<FUSED, 3>(query, j0, tile, tile_len, hd, partial),
                _ => partial_scores::<FUSED, 4>(query, j0, tile, tile_len, hd, partial),
            }
            j0 += heads;
        }
        let whole = hd / 8 * 8;
        for j in 0..group {
            let (partial, scores) = (&partial[j * TILE..][..tile_len], &mut scores[j * TILE..][..tile_len]);
            // Eight at a time: the compiler sums eight positions' lanes in one transpose.
            let ((partial8, partial_rest), (scores8, scores_rest)) =
                (partial.as_chunks::<8>(), scores.as_chunks_mut::<8>());
            for (s, lanes) in scores8.iter_mut().zip(partial8) {
                *s = lanes.each_ref().map(pairwise);
            }
            for (s, lanes) in scores_rest.iter_mut().zip(partial_rest) {
                *s = pairwise(lanes);
            }
            if whole < hd {
                let q = &query[j * hd + whole..(j + 1) * hd];
                for (p, s) in scores.iter_mut().enumerate() {
                    *s += q.iter().zip(&tile[p * hd + whole..(p + 1) * hd]).map(|(x, k)| x * k).sum::<f32>();
                }
            }
            if int8 {
                for (s, &k) in scores.iter_mut().zip(scales.iter()) {
                    *s *= k;
                }
            }
            for s in scores.iter_mut() {
                *s *= shape.scale;
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

        if gather(&layer.values, runs(), hd, tile, scales, widen) {
            // Int8: `weight * scale` multiplies the integers, as a scaled vector would.
            for j in 0..group {
                for (w, &s) in scores[j * TILE..j * TILE + tile_len].iter_mut().zip(scales.iter()) {
                    *w *= s;
                }
            }
        }
        for j in 0..group {
            let weights = &scores[j * TILE..j * TILE + tile_len];
            accumulate::<FUSED, 8>(&mut out[j * hd..(j + 1) * hd], weights, tile, hd);
        }
    }

    for (j, &sum) in sums.iter().enumerate() {
        let inverse = 1.0 / sum;
        for o in &mut out[j * hd..(j + 1) * hd] {
            *o *= inverse;
        }
    }
}

/// The eight-lane partial dot products of query heads `j0..j0 + G` with each of the tile's `len`
/// keys (their first `hd / 8 * 8` dimensions), into `partial[j][p]` (`[group][TILE]`): every key
/// chunk is read once for all `G` heads, whose lanes are independent chains. The lanes are summed
/// afterwards: summing them here leads the compiler to vectorise this loop badly.
#[inline(always)]
fn partial_scores<const FUSED: bool, const G: usize>(
    query: &[f32],
    j0: usize,
    keys: &[f32],
    len: usize,
    hd: usize,
    partial: &mut [[f32; 8]],
) {
    let q: [&[[f32; 8]]; G] = std::array::from_fn(|j| query[(j0 + j) * hd..(j0 + j + 1) * hd].as_chunks().0);
    for p in 0..len {
        let mut lanes = [[0.0f32; 8]; G];
        for (c, k) in keys[p * hd..(p + 1) * hd].as_chunks::<8>().0.iter().enumerate() {
            for j in 0..G {
                for i in 0..8 {
                    lanes[j][i] = mul_add::<FUSED>(q[j][c][i], k[i], lanes[j][i]);
                }
            }
        }
        for (j, lanes) in lanes.iter().enumerate() {
            partial[(j0 + j) * TILE + p] = *lanes;
        }
    }
}

/// `out += Σ_p weights[p] * values[p]` over the tile's positions, for one query head: `8 * C`
/// dimensions at a time, kept in registers across the tile (independent chains, one load and store of
/// `out` per tile). Each element adds the positions in order, so the split changes no bit.
#[inline(always)]
fn accumulate<const FUSED: bool, const C: usize>(
    out: &mut [f32],
    weights: &[f32],
    values: &[f32],
    hd: usize,
) {
    let mut d = 0;
    while d + 8 * C <= hd {
        accumulate_strip::<FUSED, C>(&mut out[d..d + 8 * C], weights, &values[d..], hd);
        d += 8 * C;
    }
    while d + 8 <= hd {
        accumulate_strip::<FUSED, 1>(&mut out[d..d + 8], weights, &values[d..], hd);
        d += 8;
    }
    for (e, o) in out.iter_mut().enumerate().skip(d) {
        for (p, &w) in weights.iter().enumerate() {
            *o = mul_add::<FUSED>(w, values[p * hd + e], *o);
        }
    }
}

/// [`accumulate`] for the `8 * C` elements of `out`, from the first `8 * C` of each `hd` values.
#[inline(always)]
fn accumulate_strip<const FUSED: bool, const C: usize>(
    out: &mut [f32],
    weights: &[f32],
    values: &[f32],
    hd: usize,
) {
    // Index loops over fixed sizes: the compiler unrolls them and keeps `acc` in registers.
    let mut acc = [[0.0f32; 8]; C];
    for (c, lanes) in acc.iter_mut().enumerate() {
        lanes.copy_from_slice(&out[8 * c..8 * c + 8]);
    }
    for (p, &w) in weights.iter().enumerate() {
        let v = &values[p * hd..p * hd + 8 * C];
        for c in 0..C {
            for i in 0..8 {
                acc[c][i] = mul_add::<FUSED>(w, v[8 * c + i], acc[c][i]);
            }
        }
    }
    for (c, lanes) in acc.iter().enumerate() {
        out[8 * c..8 * c + 8].copy_from_slice(lanes);
    }
}

/// `a * b + c`, rounded once (an FMA instruction) if `FUSED`, else twice.
#[inline(always)]
fn mul_add<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The sum of eight lanes, pairwise: `((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))`, the
/// order of horizontal adds.
#[inline(always)]
fn pairwise(x: &[f32; 8]) -> f32 {
    ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]))
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
#[path = "paged_attention_tests.rs"]
mod tests;
