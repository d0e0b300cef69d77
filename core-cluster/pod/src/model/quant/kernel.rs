//! The inner kernels: two weight outputs against a tile of [`TILE_ROWS`] quantized activation
//! rows, or a quad of four outputs against one row.
//!
//! The AVX2 build multiplies unsigned weights by signed activations with `vpmaddubsw` (Q4_1's
//! nibbles are unsigned already; Q8_0 moves the weight's sign onto the activation) and widens
//! with `vpmaddwd`. The tile kernel unpacks a block of an output's weights once for all eight
//! rows, folds the eight rows' integer dot products into one vector with two rounds of `vphaddd`
//! and a lane swap, and scales them by the eight rows' block scales in one multiply-add, so the
//! per-row cost of a block is a load and two multiplies. The row kernel folds four outputs'
//! dot products the same way. Weight scales stay `f16`, as in the file, and are widened with
//! F16C. Q4_1's offset term, `Σ min · (d · Σq)`, does not depend on the quants: one more
//! multiply-add per block, after the products.
//!
//! Architecture Invariant: both kernels compute a (row, output) pair with the same operations in
//! the same order (exact integer block sums, then per block one `f32` multiply-add by
//! `weight scale × row scale`, then the offsets), so a row's result does not depend on the rows
//! it is batched with; speculative verification relies on it.

use super::activations::QuantizedRows;
use super::matrix::{to_f32, BlockFormat, QuantMatrix, QUAD};
use super::{BLOCK, TILE_ROWS};

/// The kernels for one CPU. Outputs are whole quads (the matrix pads them), so `o + 1` and
/// `o..o + 4` exist.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// `pair(w, x, t, o)[j][i] = Σ_k x[t * TILE_ROWS + i][k] · w[o + j][k]`, `o` even.
    pub pair: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [[f32; TILE_ROWS]; 2],
    /// `quad(w, x, r, o)[j] = Σ_k x[r][k] · w[o + j][k]`, `o` a multiple of four.
    pub quad: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [f32; QUAD],
    /// `[quad(w, x, r, o), quad(w, x, r, o + 4)]`.
    pub quad_pair: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [[f32; QUAD]; 2],
}

/// The widest kernels this CPU runs.
pub fn kernels() -> Kernels {
    if has_avx2() {
        #[cfg(target_arch = "x86_64")]
        return Kernels { pair: avx2::pair, quad: avx2::quad, quad_pair: avx2::quad_pair };
    }
    PORTABLE
}

/// The instruction set [`kernels`] picks on this CPU, by name.
pub fn isa() -> &'static str {
    if has_avx2() {
        "avx2+fma+f16c"
    } else {
        "portable"
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The reference kernels, in plain integer and `f32` arithmetic.
pub const PORTABLE: Kernels =
    Kernels { pair: portable_pair, quad: portable_quad, quad_pair: portable_quad_pair };

fn portable_pair(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [[f32; TILE_ROWS]; 2] {
    std::array::from_fn(|j| std::array::from_fn(|i| portable_dot(w, x, tile * TILE_ROWS + i, output + j)))
}

fn portable_quad(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [f32; QUAD] {
    std::array::from_fn(|j| portable_dot(w, x, row, output + j))
}

fn portable_quad_pair(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [[f32; QUAD]; 2] {
    [portable_quad(w, x, row, output), portable_quad(w, x, row, output + QUAD)]
}

fn portable_dot(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
    let (tile, lane) = (row / TILE_ROWS, row % TILE_ROWS);
    let (quants, scales, sums) = (x.tile_quants(tile), x.tile_scales(tile), x.tile_sums(tile));
    let mut total = 0.0f32;
    for b in 0..w.blocks() {
        let block = w.quants(output, b);
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
        total += dot as f32 * (to_f32(w.scale(output, b)) * scales[slot]);
    }
    if w.format() == BlockFormat::Q4_1 {
        for b in 0..w.blocks() {
            total += to_f32(w.min(output, b)) * sums[b * TILE_ROWS + lane];
        }
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use bytemuck::{cast_slice, pod_read_unaligned};

    use super::{QuantizedRows, QUAD, TILE_ROWS};
    use crate::model::quant::matrix::{BlockFormat, QuantMatrix};
    use crate::model::quant::BLOCK;

    /// The two-output tile kernel for the matrix's format.
    pub fn pair(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [[f32; TILE_ROWS]; 2] {
        // SAFETY: `kernels()` hands these out only after detecting AVX2, FMA and F16C at run time,
        // the one requirement of a `target_feature` function.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => pair_avx2::<true>(w, x, tile, output),
                BlockFormat::Q8_0 => pair_avx2::<false>(w, x, tile, output),
            }
        }
    }

    /// The four-output row kernel for the matrix's format.
    pub fn quad(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [f32; QUAD] {
        // SAFETY: as in `pair`.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => quad_avx2::<true>(w, x, row, output),
                BlockFormat::Q8_0 => quad_avx2::<false>(w, x, row, output),
            }
        }
    }

    /// One block of weights as 32 unsigned bytes, and for Q8_0 the signs to move onto the
    /// activations.
    #[target_feature(enable = "avx2,fma,f16c")]
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
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_dot<const NIBBLES: bool>(magnitudes: __m256i, signs: __m256i, activations: &[i8]) -> __m256i {
        let mut activations: __m256i = pod_read_unaligned(cast_slice(activations));
        if !NIBBLES {
            activations = _mm256_sign_epi8(activations, signs);
        }
        _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, activations), _mm256_set1_epi16(1))
    }

    /// Folds four vectors of eight `i32` partial sums into their four totals.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fold_four(sums: [__m256i; 4]) -> __m128i {
        let folded =
            _mm256_hadd_epi32(_mm256_hadd_epi32(sums[0], sums[1]), _mm256_hadd_epi32(sums[2], sums[3]));
        _mm_add_epi32(_mm256_castsi256_si128(folded), _mm256_extracti128_si256(folded, 1))
    }

    /// Outputs `first_output` and `first_output + 1` against one tile. The two outputs share
    /// each activation load and keep two chains of multiply-adds in flight.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn pair_avx2<const NIBBLES: bool>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        tile: usize,
        first_output: usize,
    ) -> [[f32; TILE_ROWS]; 2] {
        let size = w.format().quant_bytes();
        let (quad, lane) = (first_output / QUAD, first_output % QUAD);
        let weights = w.quad_quants(quad);
        let scales = w.quad_scales(quad);
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        let mut totals = [_mm256_setzero_ps(); 2];
        for (b, (rows, row_scales)) in
            activations.zip(x.tile_scales(tile).chunks_exact(TILE_ROWS)).enumerate()
        {
            let at = (b * QUAD + lane) * size;
            let blocks = [
                weight_block::<NIBBLES>(&weights[at..at + size]),
                weight_block::<NIBBLES>(&weights[at + size..at + 2 * size]),
            ];
            // Rows two at a time: each pair's dot products folded at once with `vphaddd`.
            let mut pairs = [[_mm256_setzero_si256(); 4]; 2];
            for (p, two_rows) in rows.chunks_exact(2 * BLOCK).enumerate() {
                let (first, second) = two_rows.split_at(BLOCK);
                for (o, &(magnitudes, signs)) in blocks.iter().enumerate() {
                    let dots = (
                        block_dot::<NIBBLES>(magnitudes, signs, first),
                        block_dot::<NIBBLES>(magnitudes, signs, second),
                    );
                    pairs[o][p] = _mm256_hadd_epi32(dots.0, dots.1);
                }
            }
            let row_scales: __m256 = pod_read_unaligned(cast_slice(row_scales));
            for (o, (total, pairs)) in totals.iter_mut().zip(pairs).enumerate() {
                // Each 128-bit half now holds rows 0-3 (and 4-7) summed over its half of the block.
                let (low, high) =
                    (_mm256_hadd_epi32(pairs[0], pairs[1]), _mm256_hadd_epi32(pairs[2], pairs[3]));
                let sums = _mm256_add_epi32(
                    _mm256_permute2x128_si256(low, high, 0x20),
                    _mm256_permute2x128_si256(low, high, 0x31),
                );
                let scale = _mm256_mul_ps(broadcast_f16(scales[b * QUAD + lane + o]), row_scales);
                *total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, *total);
            }
        }
        if NIBBLES {
            let mins = w.quad_mins(quad);
            for (b, sums) in x.tile_sums(tile).chunks_exact(TILE_ROWS).enumerate() {
                let sums: __m256 = pod_read_unaligned(cast_slice(sums));
                for (o, total) in totals.iter_mut().enumerate() {
                    *total = _mm256_fmadd_ps(broadcast_f16(mins[b * QUAD + lane + o]), sums, *total);
                }
            }
        }
        totals.map(bytemuck::cast)
    }

    /// One row against the quad of outputs starting at `first_output`, computing for each output
    /// what `pair_avx2` computes for that row, bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quad_avx2<const NIBBLES: bool>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        row: usize,
        first_output: usize,
    ) -> [f32; QUAD] {
        let [values] = quads_avx2::<NIBBLES, 1>(w, x, row, first_output);
        values
    }

    /// `QUADS` consecutive quads against one row: independent chains, and more weight streams in
    /// flight, for the memory-bound decode.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quads_avx2<const NIBBLES: bool, const QUADS: usize>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        row: usize,
        first_output: usize,
    ) -> [[f32; QUAD]; QUADS] {
        let (tile, lane) = (row / TILE_ROWS, row % TILE_ROWS);
        let size = w.format().quant_bytes();
        let first_quad = first_output / QUAD;
        let weights: [&[u8]; QUADS] = std::array::from_fn(|q| w.quad_quants(first_quad + q));
        let scales: [&[u16]; QUADS] = std::array::from_fn(|q| w.quad_scales(first_quad + q));
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        let row_scales = x.tile_scales(tile).chunks_exact(TILE_ROWS);
        // Lane `o` of `totals[q]` is output `first_output + 4q + o`.
        let mut totals = [_mm_setzero_ps(); QUADS];
        for (b, (rows, row_scales)) in activations.zip(row_scales).enumerate() {
            let activations = &rows[lane * BLOCK..(lane + 1) * BLOCK];
            let row_scale = _mm_set1_ps(row_scales[lane]);
            for ((total, weights), scales) in totals.iter_mut().zip(&weights).zip(&scales) {
                let here = &weights[b * QUAD * size..(b + 1) * QUAD * size];
                prefetch(here.as_ptr().wrapping_add(QUADS * weights.len()));
                if b % 8 == 0 {
                    // Eight blocks' scales (and offsets) of a quad fill one line.
                    let ahead = QUADS * scales.len();
                    prefetch(scales[b * QUAD..].as_ptr().wrapping_add(ahead).cast());
                    if NIBBLES {
                        prefetch(w.quad_mins(first_quad)[b * QUAD..].as_ptr().wrapping_add(ahead).cast());
                    }
                }
                let mut dots = [_mm256_setzero_si256(); QUAD];
                let blocks = here.chunks_exact(size);
                for (dot, block) in dots.iter_mut().zip(blocks) {
                    let (magnitudes, signs) = weight_block::<NIBBLES>(block);
                    *dot = block_dot::<NIBBLES>(magnitudes, signs, activations);
                }
                let scale = _mm_mul_ps(f16_quad(&scales[b * QUAD..(b + 1) * QUAD]), row_scale);
                *total = _mm_fmadd_ps(_mm_cvtepi32_ps(fold_four(dots)), scale, *total);
            }
        }
        if NIBBLES {
            let mins: [&[u16]; QUADS] = std::array::from_fn(|q| w.quad_mins(first_quad + q));
            let sums = x.tile_sums(tile).chunks_exact(TILE_ROWS);
            for (b, sums) in sums.enumerate() {
                let sum = _mm_set1_ps(sums[lane]);
                for (total, mins) in totals.iter_mut().zip(&mins) {
                    *total = _mm_fmadd_ps(f16_quad(&mins[b * QUAD..(b + 1) * QUAD]), sum, *total);
                }
            }
        }
        totals.map(bytemuck::cast)
    }

    /// Two quads against one row.
    pub fn quad_pair(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [[f32; QUAD]; 2] {
        // SAFETY: as in `pair`.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => quads_avx2::<true, 2>(w, x, row, output),
                BlockFormat::Q8_0 => quads_avx2::<false, 2>(w, x, row, output),
            }
        }
    }

    /// Asks for the cache line at `at` ahead of its use. The row kernels call it one call ahead
    /// of their weight streams (the next quads lie right after), which the hardware prefetcher
    /// alone does not keep up with. A prefetch never faults, so `at` may be past the matrix.
    #[inline(always)]
    fn prefetch(at: *const u8) {
        // SAFETY: `prefetch` is only a hint: it reads nothing and cannot fault on any address.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast());
        }
    }

    /// Four `f16`s (bits) as four `f32` lanes, with one load.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_quad(bits: &[u16]) -> __m128 {
        let packed: u64 = pod_read_unaligned(cast_slice(bits));
        _mm_cvtph_ps(_mm_cvtsi64_si128(packed as i64))
    }

    /// An `f16` (bits) in all eight lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn broadcast_f16(bits: u16) -> __m256 {
        _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
    }
}
