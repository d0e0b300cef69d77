//! The inner kernels: one weight output against a tile of [`TILE_ROWS`] quantized activation
//! rows, or against one row.
//!
//! The AVX2 build multiplies unsigned weights by signed activations with `vpmaddubsw` (Q4_1's
//! nibbles are unsigned already; Q8_0 moves the weight's sign onto the activation) and widens
//! with `vpmaddwd`. The tile kernel unpacks a block of the output's weights once for all eight
//! rows, folds the eight rows' integer dot products into one vector with three rounds of
//! `vphaddd`, and scales them by the eight rows' block scales in one multiply-add, so the
//! per-row cost of a block is a load and two multiplies. Q4_1's offset term, `Σ min · (d · Σq)`,
//! does not depend on the quants: one more multiply-add per block for the whole tile.

use super::activations::QuantizedRows;
use super::matrix::{BlockFormat, QuantMatrix};
use super::BLOCK;

/// Activation rows of one tile.
pub const TILE_ROWS: usize = 8;

/// The kernels for one CPU.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// `tile(w, x, t, o)[i] = Σ_k x[t * TILE_ROWS + i][k] · w[o][k]`.
    pub tile: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [f32; TILE_ROWS],
    /// `row(w, x, r, o) = Σ_k x[r][k] · w[o][k]`.
    pub row: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> f32,
}

/// The widest kernels this CPU runs.
pub fn kernels() -> Kernels {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return Kernels { tile: avx2::tile, row: avx2::row };
    }
    PORTABLE
}

/// The reference kernels, in plain integer arithmetic.
pub const PORTABLE: Kernels = Kernels { tile: portable_tile, row: portable_row };

fn portable_tile(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [f32; TILE_ROWS] {
    std::array::from_fn(|i| portable_row(w, x, tile * TILE_ROWS + i, output))
}

fn portable_row(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
    let lane = row % TILE_ROWS;
    let (quants, scales, sums) =
        (x.tile_quants(row / TILE_ROWS), x.tile_scales(row / TILE_ROWS), x.tile_sums(row / TILE_ROWS));
    let weights = w.output_quants(output).chunks_exact(w.format().quant_bytes());
    let mut total = 0.0;
    for (b, (block, &scale)) in weights.zip(w.scales(output)).enumerate() {
        let slot = b * TILE_ROWS + lane;
        let activations = &quants[slot * BLOCK..(slot + 1) * BLOCK];
        let dot: i32 = match w.format() {
            BlockFormat::Q4_1 => {
                let (low, high) = activations.split_at(BLOCK / 2);
                let pairs = block.iter().zip(low.iter().zip(high));
                pairs.map(|(&q, (&l, &h))| (q & 0x0F) as i32 * l as i32 + (q >> 4) as i32 * h as i32).sum()
            }
            BlockFormat::Q8_0 => {
                block.iter().zip(activations).map(|(&q, &a)| q as i8 as i32 * a as i32).sum()
            }
        };
        total += scale * scales[slot] * dot as f32;
        if w.format() == BlockFormat::Q4_1 {
            total += w.mins(output)[b] * sums[slot];
        }
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use bytemuck::{cast_slice, pod_read_unaligned};

    use super::{QuantizedRows, TILE_ROWS};
    use crate::inference::model::quant::matrix::{BlockFormat, QuantMatrix};
    use crate::inference::model::quant::BLOCK;

    /// The tile kernel for the matrix's format.
    pub fn tile(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [f32; TILE_ROWS] {
        // SAFETY: `kernels()` hands these out only after detecting AVX2 and FMA at run time, the
        // one requirement of a `target_feature` function.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => tile_avx2::<true>(w, x, tile, output),
                BlockFormat::Q8_0 => tile_avx2::<false>(w, x, tile, output),
            }
        }
    }

    /// The row kernel for the matrix's format.
    pub fn row(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
        // SAFETY: as in `tile`.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => row_avx2::<true>(w, x, row, output),
                BlockFormat::Q8_0 => row_avx2::<false>(w, x, row, output),
            }
        }
    }

    /// One block of weights as 32 unsigned bytes, and for Q8_0 the signs to move onto the
    /// activations.
    #[target_feature(enable = "avx2,fma")]
    fn weight_block<const NIBBLES: bool>(quants: &[u8]) -> (__m256i, __m256i) {
        if NIBBLES {
            let packed: __m128i = pod_read_unaligned(quants);
            let spread = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
            (_mm256_and_si256(spread, _mm256_set1_epi8(0x0F)), _mm256_setzero_si256())
        } else {
            let weights: __m256i = pod_read_unaligned(quants);
            (_mm256_sign_epi8(weights, weights), weights)
        }
    }

    /// Eight `i32` partial sums of one block's dot product of weights and activations.
    #[target_feature(enable = "avx2,fma")]
    fn block_dot<const NIBBLES: bool>(magnitudes: __m256i, signs: __m256i, activations: &[i8]) -> __m256i {
        let mut activations: __m256i = pod_read_unaligned(cast_slice(activations));
        if !NIBBLES {
            activations = _mm256_sign_epi8(activations, signs);
        }
        _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, activations), _mm256_set1_epi16(1))
    }

    #[target_feature(enable = "avx2,fma")]
    fn tile_avx2<const NIBBLES: bool>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        tile: usize,
        output: usize,
    ) -> [f32; TILE_ROWS] {
        let weights = w.output_quants(output).chunks_exact(w.format().quant_bytes());
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        let blocks =
            weights.zip(w.scales(output)).zip(activations.zip(x.tile_scales(tile).chunks_exact(TILE_ROWS)));
        let mut total = _mm256_setzero_ps();
        for ((quants, &scale), (rows, row_scales)) in blocks {
            let (magnitudes, signs) = weight_block::<NIBBLES>(quants);
            let dot = |r: usize| block_dot::<NIBBLES>(magnitudes, signs, &rows[r * BLOCK..(r + 1) * BLOCK]);
            let pairs = [
                _mm256_hadd_epi32(dot(0), dot(1)),
                _mm256_hadd_epi32(dot(2), dot(3)),
                _mm256_hadd_epi32(dot(4), dot(5)),
                _mm256_hadd_epi32(dot(6), dot(7)),
            ];
            // Each 128-bit half now holds rows 0-3 (and 4-7) summed over its half of the block.
            let (low, high) = (_mm256_hadd_epi32(pairs[0], pairs[1]), _mm256_hadd_epi32(pairs[2], pairs[3]));
            let sums = _mm256_add_epi32(
                _mm256_permute2x128_si256(low, high, 0x20),
                _mm256_permute2x128_si256(low, high, 0x31),
            );
            let row_scales: __m256 = pod_read_unaligned(cast_slice(row_scales));
            let scales = _mm256_mul_ps(_mm256_set1_ps(scale), row_scales);
            total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scales, total);
        }
        if NIBBLES {
            for (&min, sums) in w.mins(output).iter().zip(x.tile_sums(tile).chunks_exact(TILE_ROWS)) {
                let sums: __m256 = pod_read_unaligned(cast_slice(sums));
                total = _mm256_fmadd_ps(_mm256_set1_ps(min), sums, total);
            }
        }
        bytemuck::cast(total)
    }

    #[target_feature(enable = "avx2,fma")]
    fn row_avx2<const NIBBLES: bool>(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
        let (tile, lane) = (row / TILE_ROWS, row % TILE_ROWS);
        let weights = w.output_quants(output).chunks_exact(w.format().quant_bytes());
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        let blocks =
            weights.zip(w.scales(output)).zip(activations.zip(x.tile_scales(tile).chunks_exact(TILE_ROWS)));
        let mut total = _mm256_setzero_ps();
        for ((quants, &scale), (rows, row_scales)) in blocks {
            let (magnitudes, signs) = weight_block::<NIBBLES>(quants);
            let dot = block_dot::<NIBBLES>(magnitudes, signs, &rows[lane * BLOCK..(lane + 1) * BLOCK]);
            total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale * row_scales[lane]), total);
        }
        let mut sum = horizontal_sum(total);
        if NIBBLES {
            let sums = x.tile_sums(tile).chunks_exact(TILE_ROWS);
            sum += w.mins(output).iter().zip(sums).map(|(min, sums)| min * sums[lane]).sum::<f32>();
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    fn horizontal_sum(v: __m256) -> f32 {
        let halves = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)))
    }
}
