//! Our quantized matmul: `y = x @ w^T` with `w` in GGUF's Q4_1 or Q8_0 blocks.
//!
//! candle's CPU matmul dots each activation row with each weight row separately and has no SIMD
//! path for Q4_1, which made it three quarters of a step. Here the activations are quantized to
//! 8 bits once per call ([`activations`]), the weights stay in the file's format ([`matrix`]),
//! and the kernel ([`kernel`]) unpacks a block of one output's weights once for up to eight
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
use kernel::{Kernel, TILE_ROWS};
pub use matrix::{BlockFormat, QuantMatrix};

/// Weights (and activations) per quantization block.
pub const BLOCK: usize = 32;

/// Outputs per unit of parallel work.
const GROUP_OUTPUTS: usize = 16;

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
            self.matmul_quantized(&quantized, rows, kernel::kernel())
        })
    }

    /// The matmul over already quantized rows with the given kernel.
    fn matmul_quantized(&self, x: &QuantizedRows, rows: usize, kernel: Kernel) -> Vec<f32> {
        let outputs = self.outputs();
        // Each group writes its outputs' columns, `[output][row]`, into its own run.
        let mut by_output = vec![0.0f32; outputs * rows];
        let groups: Vec<Mutex<&mut [f32]>> =
            by_output.chunks_mut(GROUP_OUTPUTS * rows).map(Mutex::new).collect();
        candle_core::utils::barrier_pool().execute_chunked(groups.len(), |range| {
            let mut tile = [0.0f32; TILE_ROWS];
            for group in range {
                let Ok(mut column) = groups[group].lock() else { continue };
                let first_output = group * GROUP_OUTPUTS;
                let group_outputs = GROUP_OUTPUTS.min(outputs - first_output);
                for first_row in (0..rows).step_by(TILE_ROWS) {
                    let tile_rows = TILE_ROWS.min(rows - first_row);
                    for o in 0..group_outputs {
                        kernel(self, x, first_row, tile_rows, first_output + o, &mut tile);
                        column[o * rows + first_row..o * rows + first_row + tile_rows]
                            .copy_from_slice(&tile[..tile_rows]);
                    }
                }
            }
        });
        drop(groups);
        if rows == 1 {
            return by_output;
        }
        let mut out = vec![0.0f32; rows * outputs];
        for (o, column) in by_output.chunks_exact(rows).enumerate() {
            for (r, &value) in column.iter().enumerate() {
                out[r * outputs + o] = value;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
