//! The inner kernels: one weight output against a tile of [`TILE_ROWS`] quantized activation
//! rows, or against one row.
//!
//! The AVX2 build multiplies unsigned weights by signed activations with `vpmaddubsw` (Q4_1's
//! nibbles are unsigned already; Q8_0 moves the weight's sign onto the activation) and widens
//! with `vpmaddwd`. The tile kernel unpacks a block of the output's weights once for all eight
//! rows, folds the eight rows' integer dot products into one vector with three rounds of
//! `vphaddd`, and scales them by the eight rows' block scales in one multiply-add, so the
//! per-row cost of a block is a load and two multiplies. Weight scales stay `f16`, as in the
//! file, and are widened with F16C. Q4_1's offset term, `Σ min · (d · Σq)`,
//! does not depend on the quants: one more multiply-add per block for the whole tile.

use super::activations::QuantizedRows;
use super::matrix::{to_f32, BlockFormat, QuantMatrix};
use super::BLOCK;

/// Activation rows of one tile.
pub const TILE_ROWS: usize = 8;

/// The kernels for one CPU.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// `tile(w, x, t, o)[i] = Σ_k x[t * TILE_ROWS + i][k] · w[o][k]`.
    pub tile: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [f32; TILE_ROWS],
    /// The tile against outputs `o` and `o + 1`: `[tile(w, x, t, o), tile(w, x, t, o + 1)]`.
    pub pair: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [[f32; TILE_ROWS]; 2],
    /// `row(w, x, r, o) = Σ_k x[r][k] · w[o][k]`.
    pub row: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> f32,
    /// The row against outputs `o..o + 4`: one weight block of each of four outputs per step, and
    /// their four dot products folded and scaled together.
    pub row_quad: fn(&QuantMatrix, &QuantizedRows, usize, usize) -> [f32; 4],
}

/// The widest kernels this CPU runs.
pub fn kernels() -> Kernels {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        return Kernels { tile: avx2::tile, pair: avx2::pair, row: avx2::row, row_quad: avx2::row_quad };
    }
    PORTABLE
}

/// The reference kernels, in plain integer arithmetic.
pub const PORTABLE: Kernels =
    Kernels { tile: portable_tile, pair: portable_pair, row: portable_row, row_quad: portable_row_quad };

fn portable_tile(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [f32; TILE_ROWS] {
    std::array::from_fn(|i| portable_row(w, x, tile * TILE_ROWS + i, output))
}

fn portable_pair(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [[f32; TILE_ROWS]; 2] {
    [portable_tile(w, x, tile, output), portable_tile(w, x, tile, output + 1)]
}

fn portable_row_quad(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [f32; 4] {
    std::array::from_fn(|o| portable_row(w, x, row, output + o))
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
        total += to_f32(scale) * scales[slot] * dot as f32;
        if w.format() == BlockFormat::Q4_1 {
            total += to_f32(w.mins(output)[b]) * sums[slot];
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
        // SAFETY: `kernels()` hands these out only after detecting AVX2, FMA and F16C at run time, the
        // one requirement of a `target_feature` function.
        #[allow(unsafe_code)]
        unsafe {
            let [values] = match w.format() {
                BlockFormat::Q4_1 => tile_avx2::<true, 1>(w, x, tile, output),
                BlockFormat::Q8_0 => tile_avx2::<false, 1>(w, x, tile, output),
            };
            values
        }
    }

    /// The two-output tile kernel for the matrix's format.
    pub fn pair(w: &QuantMatrix, x: &QuantizedRows, tile: usize, output: usize) -> [[f32; TILE_ROWS]; 2] {
        // SAFETY: as in `tile`.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => tile_avx2::<true, 2>(w, x, tile, output),
                BlockFormat::Q8_0 => tile_avx2::<false, 2>(w, x, tile, output),
            }
        }
    }

    /// The row kernel for the matrix's format.
    pub fn row(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> f32 {
        // SAFETY: as in `tile`.
        #[allow(unsafe_code)]
        unsafe {
            let [value] = match w.format() {
                BlockFormat::Q4_1 => row_avx2::<true, 1>(w, x, row, output),
                BlockFormat::Q8_0 => row_avx2::<false, 1>(w, x, row, output),
            };
            value
        }
    }

    /// The four-output row kernel for the matrix's format.
    pub fn row_quad(w: &QuantMatrix, x: &QuantizedRows, row: usize, output: usize) -> [f32; 4] {
        // SAFETY: as in `tile`.
        #[allow(unsafe_code)]
        unsafe {
            match w.format() {
                BlockFormat::Q4_1 => row_avx2::<true, 4>(w, x, row, output),
                BlockFormat::Q8_0 => row_avx2::<false, 4>(w, x, row, output),
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

    /// `OUTPUTS` consecutive outputs against one tile. Two outputs share each activation load
    /// and keep two independent chains of multiply-adds in flight.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn tile_avx2<const NIBBLES: bool, const OUTPUTS: usize>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        tile: usize,
        first_output: usize,
    ) -> [[f32; TILE_ROWS]; OUTPUTS] {
        let size = w.format().quant_bytes();
        let weights: [&[u8]; OUTPUTS] = std::array::from_fn(|o| w.output_quants(first_output + o));
        let scales: [&[u16]; OUTPUTS] = std::array::from_fn(|o| w.scales(first_output + o));
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        let mut totals = [_mm256_setzero_ps(); OUTPUTS];
        for (b, (rows, row_scales)) in
            activations.zip(x.tile_scales(tile).chunks_exact(TILE_ROWS)).enumerate()
        {
            let blocks: [(__m256i, __m256i); OUTPUTS] =
                std::array::from_fn(|o| weight_block::<NIBBLES>(&weights[o][b * size..(b + 1) * size]));
            // Rows two at a time: each pair's dot products folded at once with `vphaddd`.
            let mut pairs = [[_mm256_setzero_si256(); 4]; OUTPUTS];
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
            for ((total, pairs), scale) in totals.iter_mut().zip(pairs).zip(scales) {
                // Each 128-bit half now holds rows 0-3 (and 4-7) summed over its half of the block.
                let (low, high) =
                    (_mm256_hadd_epi32(pairs[0], pairs[1]), _mm256_hadd_epi32(pairs[2], pairs[3]));
                let sums = _mm256_add_epi32(
                    _mm256_permute2x128_si256(low, high, 0x20),
                    _mm256_permute2x128_si256(low, high, 0x31),
                );
                let scales = _mm256_mul_ps(broadcast_f16(scale[b]), row_scales);
                *total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scales, *total);
            }
        }
        if NIBBLES {
            for (o, total) in totals.iter_mut().enumerate() {
                for (&min, sums) in
                    w.mins(first_output + o).iter().zip(x.tile_sums(tile).chunks_exact(TILE_ROWS))
                {
                    let sums: __m256 = pod_read_unaligned(cast_slice(sums));
                    *total = _mm256_fmadd_ps(broadcast_f16(min), sums, *total);
                }
            }
        }
        totals.map(bytemuck::cast)
    }

    /// One row against `OUTPUTS` (1 or 4) consecutive outputs, computing bit for bit what the
    /// tile kernel computes for that row: each block's integer dot product exactly, then one
    /// `f32` multiply-add by `weight scale × row scale`, blocks in order, then the offsets. A
    /// row's logits therefore do not depend on what it is batched with.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn row_avx2<const NIBBLES: bool, const OUTPUTS: usize>(
        w: &QuantMatrix,
        x: &QuantizedRows,
        row: usize,
        first_output: usize,
    ) -> [f32; OUTPUTS] {
        let (tile, lane) = (row / TILE_ROWS, row % TILE_ROWS);
        let size = w.format().quant_bytes();
        let weights: [&[u8]; OUTPUTS] = std::array::from_fn(|o| w.output_quants(first_output + o));
        let scales: [&[u16]; OUTPUTS] = std::array::from_fn(|o| w.scales(first_output + o));
        let activations = x.tile_quants(tile).chunks_exact(TILE_ROWS * BLOCK);
        // Lane `o` of `total` is output `o`; lanes past `OUTPUTS` stay zero.
        let mut total = _mm_setzero_ps();
        for (b, (rows, row_scales)) in
            activations.zip(x.tile_scales(tile).chunks_exact(TILE_ROWS)).enumerate()
        {
            let activations = &rows[lane * BLOCK..(lane + 1) * BLOCK];
            let dots: [__m256i; 4] = std::array::from_fn(|o| {
                if o >= OUTPUTS {
                    return _mm256_setzero_si256();
                }
                let (magnitudes, signs) = weight_block::<NIBBLES>(&weights[o][b * size..(b + 1) * size]);
                block_dot::<NIBBLES>(magnitudes, signs, activations)
            });
            let folded =
                _mm256_hadd_epi32(_mm256_hadd_epi32(dots[0], dots[1]), _mm256_hadd_epi32(dots[2], dots[3]));
            let sums = _mm_add_epi32(_mm256_castsi256_si128(folded), _mm256_extracti128_si256(folded, 1));
            let weight_scales =
                f16_lanes(std::array::from_fn(|o| if o < OUTPUTS { scales[o][b] } else { 0 }));
            let scale = _mm_mul_ps(weight_scales, _mm_set1_ps(row_scales[lane]));
            total = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), scale, total);
        }
        if NIBBLES {
            let mins: [&[u16]; OUTPUTS] = std::array::from_fn(|o| w.mins(first_output + o));
            for (b, row_sums) in x.tile_sums(tile).chunks_exact(TILE_ROWS).enumerate() {
                let mins = f16_lanes(std::array::from_fn(|o| if o < OUTPUTS { mins[o][b] } else { 0 }));
                total = _mm_fmadd_ps(mins, _mm_set1_ps(row_sums[lane]), total);
            }
        }
        let lanes: [f32; 4] = bytemuck::cast(total);
        std::array::from_fn(|o| lanes[o])
    }

    /// Four `f16`s (bits) as four `f32` lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_lanes(bits: [u16; 4]) -> __m128 {
        _mm_cvtph_ps(_mm_set_epi16(
            0,
            0,
            0,
            0,
            bits[3] as i16,
            bits[2] as i16,
            bits[1] as i16,
            bits[0] as i16,
        ))
    }

    /// An `f16` (bits) in all eight lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn broadcast_f16(bits: u16) -> __m256 {
        _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
    }
}
