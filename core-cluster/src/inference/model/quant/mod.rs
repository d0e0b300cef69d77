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
//! llama.cpp's and candle's quantized matmuls.

pub mod activations;
pub mod kernel;
pub mod matrix;

use std::cell::RefCell;
use std::sync::Mutex;

use activations::QuantizedRows;
use kernel::{Kernels, TILE_ROWS};
pub use matrix::{BlockFormat, QuantMatrix};

/// Weights (and activations) per quantization block.
pub const BLOCK: usize = 32;

/// Outputs per unit of parallel work.
const GROUP_OUTPUTS: usize = 16;

/// Fewest real rows for which the tile kernel (which always computes eight) beats the row kernel.
const TILE_ROWS_WORTH_A_TILE: usize = 5;

thread_local! {
    /// The quantized activations of the current call, reused across calls.
    static ROWS: RefCell<QuantizedRows> = RefCell::new(QuantizedRows::default());
}

impl QuantMatrix {
    /// `x @ w^T` for `rows` rows of `x` (`[rows][inputs]`), as `[rows][outputs]`.
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inputs(), "activations must be [rows][inputs]");
        ROWS.with(|quantized| {
            let mut quantized = quantized.borrow_mut();
            quantized.quantize(x, rows);
            self.matmul_quantized(&quantized, kernel::kernels())
        })
    }

    /// The matmul over already quantized rows with the given kernels.
    fn matmul_quantized(&self, x: &QuantizedRows, kernels: Kernels) -> Vec<f32> {
        let (rows, outputs) = (x.rows(), self.outputs());
        // Each group of outputs writes its own run, `[row][GROUP_OUTPUTS]`.
        let run = rows * GROUP_OUTPUTS;
        let mut by_group = vec![0.0f32; outputs.div_ceil(GROUP_OUTPUTS) * run];
        let groups: Vec<Mutex<&mut [f32]>> = by_group.chunks_mut(run).map(Mutex::new).collect();
        candle_core::utils::barrier_pool().execute_chunked(groups.len(), |range| {
            for group in range {
                let Ok(mut results) = groups[group].lock() else { continue };
                let first_output = group * GROUP_OUTPUTS;
                for tile in 0..x.tiles() {
                    let first_row = tile * TILE_ROWS;
                    let tile_rows = TILE_ROWS.min(rows - first_row);
                    let group_outputs = GROUP_OUTPUTS.min(outputs - first_output);
                    if tile_rows >= TILE_ROWS_WORTH_A_TILE {
                        let mut store = |o: usize, values: [f32; TILE_ROWS]| {
                            for (i, value) in values.into_iter().take(tile_rows).enumerate() {
                                results[(first_row + i) * GROUP_OUTPUTS + o] = value;
                            }
                        };
                        for o in (0..group_outputs).step_by(2) {
                            if o + 1 < group_outputs {
                                let [a, b] = (kernels.pair)(self, x, tile, first_output + o);
                                store(o, a);
                                store(o + 1, b);
                            } else {
                                store(o, (kernels.tile)(self, x, tile, first_output + o));
                            }
                        }
                    } else {
                        for row in first_row..first_row + tile_rows {
                            let results = &mut results[row * GROUP_OUTPUTS..(row + 1) * GROUP_OUTPUTS];
                            for o in (0..group_outputs).step_by(4) {
                                if o + 4 <= group_outputs {
                                    let values = (kernels.row_quad)(self, x, row, first_output + o);
                                    results[o..o + 4].copy_from_slice(&values);
                                } else {
                                    for (o, result) in
                                        results.iter_mut().enumerate().take(group_outputs).skip(o)
                                    {
                                        *result = (kernels.row)(self, x, row, first_output + o);
                                    }
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
            let width = GROUP_OUTPUTS.min(outputs - first_output);
            for (row, values) in results.chunks_exact(GROUP_OUTPUTS).enumerate() {
                out[row * outputs + first_output..row * outputs + first_output + width]
                    .copy_from_slice(&values[..width]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
