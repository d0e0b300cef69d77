//! Activations quantized to 8 bits per 32-element block, once per matmul.

use super::BLOCK;

/// `rows` rows of activations as signed 8-bit blocks: each block of 32 values keeps its scale
/// `d` (value ≈ `d * q`) and `d * Σq`, which the Q4_1 weights' offset term needs.
#[derive(Debug, Default)]
pub struct QuantizedRows {
    /// Blocks per row.
    pub blocks: usize,
    /// `[row][block][32]`.
    pub quants: Vec<i8>,
    /// `[row][block]`: the scale of each block.
    pub scales: Vec<f32>,
    /// `[row][block]`: `scale * Σ quants` of each block.
    pub sums: Vec<f32>,
}

impl QuantizedRows {
    /// Quantizes `x`, `rows` rows of a width that is a multiple of 32, reusing this buffer.
    pub fn quantize(&mut self, x: &[f32], rows: usize) {
        let width = x.len() / rows.max(1);
        debug_assert_eq!(width % BLOCK, 0, "activation width must be whole blocks");
        let total = x.len() / BLOCK;
        self.blocks = width / BLOCK;
        self.quants.resize(total * BLOCK, 0);
        self.scales.resize(total, 0.0);
        self.sums.resize(total, 0.0);
        let blocks = x.chunks_exact(BLOCK).zip(self.quants.chunks_exact_mut(BLOCK));
        for ((values, quants), (scale, sum)) in blocks.zip(self.scales.iter_mut().zip(&mut self.sums)) {
            let (d, total) = quantize_block(values, quants);
            *scale = d;
            *sum = d * total as f32;
        }
    }
}

/// Rounds one block to `[-127, 127]` around its largest magnitude; returns the scale and `Σq`.
pub fn quantize_block(values: &[f32], quants: &mut [i8]) -> (f32, i32) {
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = max / 127.0;
    let inverse = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut total = 0i32;
    for (q, &v) in quants.iter_mut().zip(values) {
        *q = (v * inverse).round() as i8;
        total += *q as i32;
    }
    (d, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut q = QuantizedRows::default();
        q.quantize(&x, 2);
        assert_eq!(q.blocks, 2);
        for (b, values) in x.chunks_exact(BLOCK).enumerate() {
            let d = q.scales[b];
            let mut sum = 0.0;
            for (i, &v) in values.iter().enumerate() {
                let back = d * q.quants[b * BLOCK + i] as f32;
                assert!((back - v).abs() <= d / 2.0 + 1e-6, "{back} vs {v}");
                sum += q.quants[b * BLOCK + i] as f32;
            }
            assert!((q.sums[b] - d * sum).abs() < 1e-4);
        }
    }

    #[test]
    fn a_zero_block_has_zero_scale_and_quants() {
        let mut q = QuantizedRows::default();
        q.quantize(&[0.0; 32], 1);
        assert_eq!(q.scales, vec![0.0]);
        assert!(q.quants.iter().all(|&v| v == 0));
    }
}
