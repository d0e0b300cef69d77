//! The inner kernel: one weight output against up to [`TILE_ROWS`] quantized activation rows.
//!
//! Per block the kernel unpacks the output's weights once and reuses them for every row; the
//! rows' blocks stay in L1 while the caller walks the outputs. The AVX2 build multiplies unsigned
//! weights by signed activations with `vpmaddubsw` (Q4_1's nibbles are unsigned already; Q8_0
//! moves the weight's sign onto the activation), widens with `vpmaddwd`, and accumulates each
//! row in eight `f32` lanes scaled by the two blocks' scales. Q4_1's offset term,
//! `Σ min · (d · Σq)`, does not depend on the quants and is a short dot product per row.

use super::activations::QuantizedRows;
use super::matrix::{BlockFormat, QuantMatrix};
use super::BLOCK;

/// Most activation rows one kernel call handles.
pub const TILE_ROWS: usize = 8;

/// Writes `out[r] = Σ_k x[first_row + r][k] · w[output][k]` for `r < rows`.
pub type Kernel = fn(&QuantMatrix, &QuantizedRows, usize, usize, usize, &mut [f32; TILE_ROWS]);

/// The widest kernel this CPU runs.
pub fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return avx2::tile;
    }
    portable_tile
}

/// The reference kernel, in plain integer arithmetic.
pub fn portable_tile(
    w: &QuantMatrix,
    x: &QuantizedRows,
    first_row: usize,
    rows: usize,
    output: usize,
    out: &mut [f32; TILE_ROWS],
) {
    let blocks = w.blocks();
    let scales = w.scales(output);
    for (r, result) in out.iter_mut().enumerate().take(rows) {
        let row = (first_row + r) * blocks;
        let mut total = 0.0;
        for (b, &scale) in scales.iter().enumerate() {
            let activations = &x.quants[(row + b) * BLOCK..(row + b + 1) * BLOCK];
            let quants = w.quants(output, b);
            let dot: i32 = match w.format() {
                BlockFormat::Q4_1 => {
                    let (low, high) = activations.split_at(BLOCK / 2);
                    let nibbles = quants.iter().zip(low.iter().zip(high));
                    nibbles
                        .map(|(&q, (&l, &h))| (q & 0x0F) as i32 * l as i32 + (q >> 4) as i32 * h as i32)
                        .sum()
                }
                BlockFormat::Q8_0 => {
                    quants.iter().zip(activations).map(|(&q, &a)| q as i8 as i32 * a as i32).sum()
                }
            };
            total += scale * x.scales[row + b] * dot as f32;
        }
        *result = total + offset(w, x, first_row + r, output);
    }
}

/// Q4_1's offset term for one row and output: `Σ_block min · (d · Σq)`; zero for Q8_0.
#[inline(always)]
fn offset(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
    if w.format() != BlockFormat::Q4_1 {
        return 0.0;
    }
    let sums = &x.sums[row * w.blocks()..(row + 1) * w.blocks()];
    w.mins(output).iter().zip(sums).map(|(m, s)| m * s).sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use bytemuck::pod_read_unaligned;

    use super::{offset, QuantizedRows, TILE_ROWS};
    use crate::inference::model::quant::matrix::{BlockFormat, QuantMatrix};
    use crate::inference::model::quant::BLOCK;

    /// Picks the instance for `rows` rows and format.
    pub fn tile(
        w: &QuantMatrix,
        x: &QuantizedRows,
        first: usize,
        rows: usize,
        output: usize,
        out: &mut [f32; TILE_ROWS],
    ) {
        let instance: fn(&QuantMatrix, &QuantizedRows, usize, usize, &mut [f32; TILE_ROWS]) =
            match (w.format(), rows) {
                (BlockFormat::Q4_1, 1) => rows_q4::<1>,
                (BlockFormat::Q4_1, 2) => rows_q4::<2>,
                (BlockFormat::Q4_1, 3) => rows_q4::<3>,
                (BlockFormat::Q4_1, 4) => rows_q4::<4>,
                (BlockFormat::Q4_1, 5) => rows_q4::<5>,
                (BlockFormat::Q4_1, 6) => rows_q4::<6>,
                (BlockFormat::Q4_1, 7) => rows_q4::<7>,
                (BlockFormat::Q4_1, _) => rows_q4::<8>,
                (BlockFormat::Q8_0, 1) => rows_q8::<1>,
                (BlockFormat::Q8_0, 2) => rows_q8::<2>,
                (BlockFormat::Q8_0, 3) => rows_q8::<3>,
                (BlockFormat::Q8_0, 4) => rows_q8::<4>,
                (BlockFormat::Q8_0, 5) => rows_q8::<5>,
                (BlockFormat::Q8_0, 6) => rows_q8::<6>,
                (BlockFormat::Q8_0, 7) => rows_q8::<7>,
                (BlockFormat::Q8_0, _) => rows_q8::<8>,
            };
        instance(w, x, first, output, out)
    }

    fn rows_q4<const R: usize>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        first: usize,
        output: usize,
        out: &mut [f32; TILE_ROWS],
    ) {
        // SAFETY: `kernel()` hands out `tile` only after detecting AVX2 and FMA at run time, the one
        // requirement of a `target_feature` function.
        #[allow(unsafe_code)]
        unsafe {
            rows_avx2::<R, true>(w, x, first, output, out)
        }
    }

    fn rows_q8<const R: usize>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        first: usize,
        output: usize,
        out: &mut [f32; TILE_ROWS],
    ) {
        // SAFETY: as in `rows_q4`.
        #[allow(unsafe_code)]
        unsafe {
            rows_avx2::<R, false>(w, x, first, output, out)
        }
    }

    /// `R` rows against one output; `NIBBLES` picks Q4_1 over Q8_0.
    #[target_feature(enable = "avx2,fma")]
    fn rows_avx2<const R: usize, const NIBBLES: bool>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        first: usize,
        output: usize,
        out: &mut [f32; TILE_ROWS],
    ) {
        let blocks = w.blocks();
        let scales = w.scales(output);
        let row_quants = &x.quants[first * blocks * BLOCK..(first + R) * blocks * BLOCK];
        let row_scales = &x.scales[first * blocks..(first + R) * blocks];
        let ones = _mm256_set1_epi16(1);
        let low_nibbles = _mm256_set1_epi8(0x0F);
        let mut sums = [_mm256_setzero_ps(); R];
        for (b, &scale) in scales.iter().enumerate() {
            let quants = w.quants(output, b);
            let (magnitudes, signs) = if NIBBLES {
                let packed: __m128i = pod_read_unaligned(quants);
                let spread = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
                (_mm256_and_si256(spread, low_nibbles), None)
            } else {
                let weights: __m256i = pod_read_unaligned(quants);
                (_mm256_sign_epi8(weights, weights), Some(weights))
            };
            for (r, sum) in sums.iter_mut().enumerate() {
                let at = (r * blocks + b) * BLOCK;
                let mut activations: __m256i =
                    pod_read_unaligned(bytemuck::cast_slice(&row_quants[at..at + BLOCK]));
                if let Some(signs) = signs {
                    activations = _mm256_sign_epi8(activations, signs);
                }
                let pairs = _mm256_maddubs_epi16(magnitudes, activations);
                let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                let scale = _mm256_set1_ps(scale * row_scales[r * blocks + b]);
                *sum = _mm256_fmadd_ps(dot, scale, *sum);
            }
        }
        for (r, sum) in sums.iter().enumerate() {
            out[r] = horizontal_sum(*sum) + offset(w, x, first + r, output);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    fn horizontal_sum(v: __m256) -> f32 {
        let halves = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)))
    }
}
