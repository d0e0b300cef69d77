//! The rotary position embedding, as Llama applies it: head dimensions `(2i, 2i+1)` are rotated
//! by `position * base^(-2i / head_dim)`.

/// Cosines and sines for every position up to the context length.
#[derive(Debug, Clone)]
pub struct RopeTable {
    /// `[position][i]`, `head_dim / 2` values per position.
    cos: Vec<f32>,
    /// Same layout as `cos`.
    sin: Vec<f32>,
    /// Half a head's width.
    half: usize,
}

impl RopeTable {
    /// Precomputes the table in `f32`, the same arithmetic candle's reference model uses.
    pub fn new(head_dim: usize, base: f32, positions: usize) -> Self {
        let half = head_dim / 2;
        let theta: Vec<f32> =
            (0..head_dim).step_by(2).map(|i| 1.0 / base.powf(i as f32 / head_dim as f32)).collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for position in 0..positions {
            for &t in &theta {
                let angle = position as f32 * t;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Self { cos, sin, half }
    }

    /// Positions the table covers.
    pub fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Rotates every head in `heads` (a whole number of heads, `2 * half` wide each) in place.
    pub fn apply(&self, heads: &mut [f32], position: usize) {
        let cos = &self.cos[position * self.half..(position + 1) * self.half];
        let sin = &self.sin[position * self.half..(position + 1) * self.half];
        for head in heads.chunks_exact_mut(2 * self.half) {
            for (pair, (&c, &s)) in head.chunks_exact_mut(2).zip(cos.iter().zip(sin)) {
                let (x0, x1) = (pair[0], pair[1]);
                pair[0] = x0 * c - x1 * s;
                pair[1] = x0 * s + x1 * c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_the_identity_and_rotation_keeps_the_norm() {
        let table = RopeTable::new(4, 10_000.0, 8);
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        table.apply(&mut x, 0);
        assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
        table.apply(&mut x, 5);
        let norm: f32 = x.iter().map(|v| v * v).sum();
        assert!((norm - 30.0).abs() < 1e-4, "{norm}");
        assert_ne!(x, vec![1.0, 2.0, 3.0, 4.0]);
    }
}
