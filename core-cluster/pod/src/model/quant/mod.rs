//! Our quantized matmul: `y = x @ w^T` with `w` in GGUF's Q4_1 or Q8_0 blocks.
//!
//! candle's CPU matmul dots each activation row with each weight row separately and has no SIMD
//! path for Q4_1, which made it three quarters of a step. Here the activations are quantized to
//! 8 bits once per call ([`activations`]), the weights stay in the file's format ([`matrix`]),
//! and the kernel ([`kernel`]) unpacks a block of one output's weights once for a tile of eight
//! activation rows. Outputs are split across candle's thread pool in groups, so attention and
//! the matmuls share one set of threads.
//!
//! The result differs from `f32` arithmetic only by the activations' rounding to 8 bits, as in
//! llama.cpp's and candle's quantized matmuls. Weights of other types (`f16`, K-quants) are
//! requantized to Q8_0 at load.

pub mod activations;
pub mod kernel;
pub mod matrix;

use std::cell::RefCell;
use std::sync::{Mutex, PoisonError};

use activations::QuantizedRows;
use kernel::Kernels;
pub use matrix::{BlockFormat, QuantMatrix, QUAD};

/// Weights (and activations) per quantization block.
pub const BLOCK: usize = 32;

/// Outputs per unit of parallel work.
const GROUP_OUTPUTS: usize = 16;

/// Activation rows of one tile: the kernels and the activation layout share it.
pub const TILE_ROWS: usize = 8;

/// Fewest real rows for which the tile kernel (which always computes eight) beats the row kernel.
/// Outputs per group are a multiple of [`QUAD`] (and so of the tile kernel's two).
const TILE_ROWS_WORTH_A_TILE: usize = 5;

thread_local! {
    /// The quantized activations of the current call, reused across calls.
    static ROWS: RefCell<QuantizedRows> = RefCell::new(QuantizedRows::default());
}

impl QuantMatrix {
    /// `x @ w^T` for `rows` rows of `x` (`[rows][inputs]`), as `[rows][outputs]`.
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs(), "activations must be [rows][inputs]");
        if rows == 0 {
            return Vec::new();
        }
        ROWS.with(|quantized| {
            let mut quantized = quantized.borrow_mut();
            quantized.quantize(x, rows);
            self.matmul_quantized(&quantized, kernel::kernels())
        })
    }

    /// The matmul over already quantized rows with the given kernels.
    fn matmul_quantized(&self, x: &QuantizedRows, kernels: Kernels) -> Vec<f32> {
        let (rows, outputs, padded) = (x.rows(), self.outputs(), self.padded_outputs());
        // Each group of outputs writes its own run, `[row][GROUP_OUTPUTS]`.
        let run = rows * GROUP_OUTPUTS;
        let mut by_group = vec![0.0f32; padded.div_ceil(GROUP_OUTPUTS) * run];
        let groups: Vec<Mutex<&mut [f32]>> = by_group.chunks_mut(run).map(Mutex::new).collect();
        candle_core::utils::barrier_pool().execute_chunked(groups.len(), |range| {
            for group in range {
                // Each group has its own lock, never contended; a poisoned one still holds its run.
                let mut results = groups[group].lock().unwrap_or_else(PoisonError::into_inner);
                let first_output = group * GROUP_OUTPUTS;
                let group_outputs = GROUP_OUTPUTS.min(padded - first_output);
                for tile in 0..x.tiles() {
                    let first_row = tile * TILE_ROWS;
                    let tile_rows = TILE_ROWS.min(rows - first_row);
                    if tile_rows >= TILE_ROWS_WORTH_A_TILE {
                        for o in (0..group_outputs).step_by(2) {
                            let values = (kernels.pair)(self, x, tile, first_output + o);
                            for (i, pair) in (first_row..first_row + tile_rows).enumerate() {
                                results[pair * GROUP_OUTPUTS + o] = values[0][i];
                                results[pair * GROUP_OUTPUTS + o + 1] = values[1][i];
                            }
                        }
                    } else {
                        for row in first_row..first_row + tile_rows {
                            for o in (0..group_outputs).step_by(2 * QUAD) {
                                let at = row * GROUP_OUTPUTS + o;
                                if o + 2 * QUAD <= group_outputs {
                                    let [a, b] = (kernels.quad_pair)(self, x, row, first_output + o);
                                    results[at..at + QUAD].copy_from_slice(&a);
                                    results[at + QUAD..at + 2 * QUAD].copy_from_slice(&b);
                                } else {
                                    let values = (kernels.quad)(self, x, row, first_output + o);
                                    results[at..at + QUAD].copy_from_slice(&values);
                                }
                            }
                        }
                    }
                }
            }
        });
        drop(groups);
        let mut out = vec![0.0f32; rows * outputs];
        for (group, results) in by_group.chunks_exact(run).enumerate() {
            let first_output = group * GROUP_OUTPUTS;
            let width = GROUP_OUTPUTS.min(outputs.saturating_sub(first_output));
            for (row, values) in results.chunks_exact(GROUP_OUTPUTS).enumerate() {
                let at = row * outputs + first_output;
                out[at..at + width].copy_from_slice(&values[..width]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
