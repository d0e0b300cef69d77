//! Activations quantized to 8 bits per 32-element block, once per matmul.

use std::sync::{Mutex, PoisonError};

use super::BLOCK;
use super::TILE_ROWS;

/// Rows of activations as signed 8-bit blocks: each block of 32 values keeps its scale `d`
/// (value ≈ `d * q`) and `d * Σq`, which the Q4_1 weights' offset term needs.
///
/// Rows are stored in tiles of [`TILE_ROWS`], block-major inside a tile (`[tile][block][row]`),
/// so the kernel reads one block of all a tile's rows, and their scales, as one run. The last
/// tile is padded with zero rows.
#[derive(Debug, Default)]
pub struct QuantizedRows {
    /// Blocks per row.
    blocks: usize,
    /// Rows quantized (without the padding).
    rows: usize,
    /// `[tile][block][row][32]`.
    quants: Vec<i8>,
    /// `[tile][block][row]`: the scale of each block.
    scales: Vec<f32>,
    /// `[tile][block][row]`: `scale * Σ quants` of each block.
    sums: Vec<f32>,
}

impl QuantizedRows {
    /// Quantizes `x`, `rows` rows of a width that is a multiple of 32, reusing this buffer. Tiles
    /// are quantized in parallel on candle's pool when there are several.
    pub fn quantize(&mut self, x: &[f32], rows: usize) {
        let width = x.len() / rows.max(1);
        debug_assert_eq!(width % BLOCK, 0, "activation width must be whole blocks");
        self.blocks = width / BLOCK;
        self.rows = rows;
        // Every slot of a real row is overwritten below; the padding rows are zeroed by their tile.
        let slots = self.tiles() * self.blocks * TILE_ROWS;
        self.quants.resize(slots * BLOCK, 0);
        self.scales.resize(slots, 0.0);
        self.sums.resize(slots, 0.0);
        let tile_slots = self.blocks * TILE_ROWS;
        let tiles = self.quants.chunks_mut(tile_slots * BLOCK).zip(self.scales.chunks_mut(tile_slots));
        let tiles: Vec<_> = tiles.zip(self.sums.chunks_mut(tile_slots)).map(Mutex::new).collect();
        let tile_values = x.chunks(TILE_ROWS * width);
        let quantize_tile = |tile: usize, values: &[f32]| {
            // Each tile has its own lock, never contended; a poisoned one still holds its slices.
            let mut guard = tiles[tile].lock().unwrap_or_else(PoisonError::into_inner);
            let ((quants, scales), sums) = &mut *guard;
            quantize_tile(values, width, quants, scales, sums);
        };
        if tiles.len() > 1 {
            let tile_values: Vec<&[f32]> = tile_values.collect();
            candle_core::utils::barrier_pool().execute_chunked(tiles.len(), |range| {
                range.for_each(|tile| quantize_tile(tile, tile_values[tile]));
            });
        } else {
            tile_values.enumerate().for_each(|(tile, values)| quantize_tile(tile, values));
        }
    }

    /// Rows quantized.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Tiles of [`TILE_ROWS`] rows, the last one padded.
    pub fn tiles(&self) -> usize {
        self.rows.div_ceil(TILE_ROWS)
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Tile `tile`'s quants, `[block][row][32]`.
    #[inline(always)]
    pub fn tile_quants(&self, tile: usize) -> &[i8] {
        let size = self.blocks * TILE_ROWS * BLOCK;
        &self.quants[tile * size..(tile + 1) * size]
    }

    /// Tile `tile`'s block scales, `[block][row]`.
    #[inline(always)]
    pub fn tile_scales(&self, tile: usize) -> &[f32] {
        let size = self.blocks * TILE_ROWS;
        &self.scales[tile * size..(tile + 1) * size]
    }

    /// Tile `tile`'s block sums (`scale * Σq`), `[block][row]`.
    #[inline(always)]
    pub fn tile_sums(&self, tile: usize) -> &[f32] {
        let size = self.blocks * TILE_ROWS;
        &self.sums[tile * size..(tile + 1) * size]
    }

    /// Row `row`'s value at `input`, dequantized (for tests and the reference kernel).
    pub fn value(&self, row: usize, input: usize) -> f32 {
        let slot = ((row / TILE_ROWS) * self.blocks + input / BLOCK) * TILE_ROWS + row % TILE_ROWS;
        self.scales[slot] * self.quants[slot * BLOCK + input % BLOCK] as f32
    }
}

/// Quantizes one tile's rows (`values`, up to [`TILE_ROWS`] rows of `width`) into its
/// `[block][row]` slots, zeroing the slots of missing rows.
fn quantize_tile(values: &[f32], width: usize, quants: &mut [i8], scales: &mut [f32], sums: &mut [f32]) {
    let rows = values.len() / width;
    for (r, row) in values.chunks_exact(width).enumerate() {
        for (b, block) in row.chunks_exact(BLOCK).enumerate() {
            let slot = b * TILE_ROWS + r;
            let (d, total) = quantize_block(block, &mut quants[slot * BLOCK..(slot + 1) * BLOCK]);
            scales[slot] = d;
            sums[slot] = d * total as f32;
        }
    }
    for b in 0..width / BLOCK {
        for slot in b * TILE_ROWS + rows..(b + 1) * TILE_ROWS {
            quants[slot * BLOCK..(slot + 1) * BLOCK].fill(0);
            scales[slot] = 0.0;
            sums[slot] = 0.0;
        }
    }
}

/// Rounds one block to `[-127, 127]` around its largest magnitude; returns the scale and `Σq`.
///
/// Halves round away from zero, as with llama.cpp's `roundf`, written as a truncating cast of
/// `v ± 0.5` because `f32::round` is a libm call on the x86-64 baseline (values a hair under a
/// half may round up). Quants are clamped to ±127 (a subnormal scale's inverse overflows), and a
/// NaN becomes 0.
pub fn quantize_block(values: &[f32], quants: &mut [i8]) -> (f32, i32) {
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = max / 127.0;
    let inverse = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut total = 0i32;
    for (q, &v) in quants.iter_mut().zip(values) {
        let scaled = v * inverse;
        *q = (scaled + 0.5f32.copysign(scaled)).clamp(-127.0, 127.0) as i8;
        total += *q as i32;
    }
    (d, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_within_half_a_step_and_padding_is_zero() {
        let rows = TILE_ROWS + 3;
        let x: Vec<f32> = (0..rows * 64).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut q = QuantizedRows::default();
        q.quantize(&x, rows);
        assert_eq!((q.blocks(), q.rows(), q.tiles()), (2, rows, 2));
        for (i, &v) in x.iter().enumerate() {
            let (row, input) = (i / 64, i % 64);
            let slot = ((row / TILE_ROWS) * 2 + input / BLOCK) * TILE_ROWS + row % TILE_ROWS;
            let d = q.scales[slot];
            assert!((q.value(row, input) - v).abs() <= d / 2.0 + 1e-6, "{} vs {v}", q.value(row, input));
            let total: i32 = q.quants[slot * BLOCK..(slot + 1) * BLOCK].iter().map(|&v| v as i32).sum();
            assert!((q.sums[slot] - d * total as f32).abs() < 1e-4);
        }
        for row in rows..2 * TILE_ROWS {
            assert!((0..64).all(|input| q.value(row, input) == 0.0), "padding row {row}");
        }
    }

    #[test]
    fn a_zero_block_has_zero_scale_and_quants() {
        let mut q = QuantizedRows::default();
        q.quantize(&[0.0; 32], 1);
        assert!(q.scales.iter().all(|&d| d == 0.0));
        assert!(q.quants.iter().all(|&v| v == 0));
    }
}
