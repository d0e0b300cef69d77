//! The per-vocabulary loops of sampling, written so the compiler vectorises them: maximum, sum and a
//! polynomial `exp`.

/// Lanes of the vectorisable reductions.
const LANES: usize = 16;

/// The largest value, NaN ignored; `-inf` if there is none.
pub(super) fn max(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            // A comparison with NaN is false, so NaN never wins.
            *lane = if v > *lane { v } else { *lane };
        }
    }
    lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// The first token holding the largest logit, and that logit; NaN counts as `-inf`, so when nothing is
/// larger than `-inf` the answer is token 0. `None` if empty.
pub(super) fn argmax(logits: &[f32]) -> Option<(u32, f32)> {
    if logits.is_empty() {
        return None;
    }
    let best = max(logits);
    // Find the chunk first: a branch-free test per chunk vectorises, a plain `position` does not.
    let mut chunks = logits.chunks_exact(LANES);
    let tail = logits.len() - chunks.remainder().len();
    let from =
        chunks.position(|c| c.iter().fold(false, |hit, &l| hit | (l == best))).map_or(tail, |c| c * LANES);
    let token = logits[from..].iter().position(|&l| l == best).map_or(0, |i| from + i);
    Some((token as u32, best))
}

/// The sum, accumulated in `f64`.
pub(super) fn sum(values: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(v);
        }
    }
    lanes.iter().sum::<f64>() + rest.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// The softmax weight of every logit relative to the best one: `exp((logit - max) / temperature)`,
/// in `[0, 1]`, 0 for NaN and `-inf`.
pub(super) fn weights(logits: &[f32], max: f32, inv_temperature: f32) -> Vec<f32> {
    logits.iter().map(|&l| exp_neg((l - max) * inv_temperature)).collect()
}

/// `e^x` for `x <= 0`, within 2 ulp; exactly 1 at 0, and 0 below -87 (where `e^x` leaves the normal
/// range) and for NaN.
///
/// Cephes' `expf`: `x = n ln 2 + r` with `|r| <= ln 2 / 2`, a degree-7 polynomial for `e^r`, and `2^n`
/// built from its exponent bits. Unlike `f32::exp`, it vectorises (attention's softmax uses it too).
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer (to nearest) and leaves it in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let clamped = x.max(-87.0);
    let shifted = clamped * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // n is in -126..=0 here, so 2^n is a normal float: exponent bits n + 127.
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits()).wrapping_add(127);
    let two_n = f32::from_bits(n_bits << 23);
    if x >= -87.0 {
        e_r * two_n
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_within_two_ulp_of_exp() {
        let mut worst = 0.0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = f64::from(x).exp();
            let got = f64::from(exp_neg(x));
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 2.4e-7, "relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-0.0), 1.0);
        assert_eq!(exp_neg(-87.5), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_neg(f32::NAN), 0.0);
    }

    #[test]
    fn reductions_match_the_plain_loops() {
        let values: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1013) as f32 / 7.0 - 50.0).collect();
        for n in [0, 1, 15, 16, 17, 1000] {
            let v = &values[..n];
            let want_max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(v), want_max);
            let want_sum: f64 = v.iter().map(|&x| f64::from(x)).sum();
            assert!((sum(v) - want_sum).abs() < 1e-9, "{n}");
        }
        assert_eq!(max(&[f32::NAN, 1.0, f32::NAN]), 1.0);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), Some((0, f32::NEG_INFINITY)));
        assert_eq!(argmax(&[1.0, 3.0, 2.0, 3.0]), Some((1, 3.0)));
        assert_eq!(argmax(&[]), None);
    }
}
