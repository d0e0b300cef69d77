//! The sampler's tests, and the chi-square check the speculative tests share.

use super::*;
use crate::rng::Rng;

/// Pearson's chi-square of `observed` counts against `expected` probabilities, with bins expected
/// to hold fewer than 5 draws pooled; returns the statistic and the 0.1% critical value.
pub(crate) fn chi_square(observed: &[u64], expected: &[f64]) -> (f64, f64) {
    let n: u64 = observed.iter().sum();
    let n = n as f64;
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (&o, &p) in observed.iter().zip(expected) {
        let e = p * n;
        if e < 5.0 {
            pooled_obs += o as f64;
            pooled_exp += e;
        } else {
            stat += (o as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if pooled_exp > 0.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1.0);
        bins += 1;
    }
    // Wilson-Hilferty: the chi-square quantile from the normal one (z = 3.09 at 0.1%).
    let df = bins.saturating_sub(1).max(1) as f64;
    let h = 2.0 / (9.0 * df);
    (stat, df * (1.0 - h + 3.09 * h.sqrt()).powi(3))
}

fn params(temperature: f32, top_k: u32, top_p: f32, seed: u64) -> SamplingParams {
    SamplingParams { temperature, top_k, top_p, seed: Some(seed), ..SamplingParams::greedy(1) }
}

fn softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let w: Vec<f64> = logits.iter().map(|&l| (f64::from(l) / temperature).exp()).collect();
    let sum: f64 = w.iter().sum();
    w.iter().map(|x| x / sum).collect()
}

/// Deterministic pseudo-random logits in about [-8, 8].
fn random_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.uniform_f32() * 16.0 - 8.0).collect()
}

const LOGITS: [f32; 4] = [0.1, 3.0, 0.2, 2.9];

#[test]
fn greedy_takes_the_argmax_lowest_index_on_ties_and_ignores_nan() {
    let mut s = Sampler::new(&SamplingParams::greedy(1));
    assert!(s.is_greedy());
    assert_eq!(s.sample(&LOGITS), 1);
    assert_eq!(s.sample(&[1.0, 5.0, f32::NAN, 5.0]), 1);
    assert_eq!(s.sample(&[f32::NAN, -1.0, f32::NAN]), 1);
    assert_eq!(s.sample(&[-0.0, 0.0]), 0);
    assert_eq!(s.distribution(&LOGITS), Distribution::point(1));
}

#[test]
fn degenerate_logits_do_not_panic() {
    for temperature in [0.0, 1.0] {
        for top_k in [0, 2] {
            for top_p in [1.0, 0.5] {
                let mut s = Sampler::new(&params(temperature, top_k, top_p, 1));
                assert_eq!(s.sample(&[f32::NAN; 3]), 0);
                assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]), 0);
                assert_eq!(s.sample(&[1.0, f32::INFINITY, f32::NAN, f32::INFINITY]), 1);
                assert_eq!(s.sample(&[]), 0);
                let token = s.sample(&[f32::NAN, 0.5, f32::NEG_INFINITY, 0.4]);
                assert!(token == 1 || token == 3, "{token}");
            }
        }
    }
}

#[test]
fn a_tiny_temperature_is_greedy() {
    let s = Sampler::new(&params(1e-45, 0, 1.0, 1));
    assert!(s.is_greedy());
    assert!(Sampler::new(&params(f32::NAN, 0, 1.0, 1)).is_greedy());
}

#[test]
fn seeded_sampling_is_reproducible() {
    let draw = |seed| {
        let mut s = Sampler::new(&params(1.0, 0, 0.9, seed));
        (0..40).map(|_| s.sample(&LOGITS)).collect::<Vec<_>>()
    };
    let first = draw(7);
    assert_eq!(first, draw(7));
    assert_ne!(first, draw(8));
    // top_p 0.9 keeps only the two likely tokens.
    assert!(first.iter().all(|&t| t == 1 || t == 3), "{first:?}");
}

#[test]
fn top_k_keeps_exactly_the_k_best() {
    let logits = random_logits(49_152, 3);
    let mut order: Vec<(u32, f32)> = logits.iter().enumerate().map(|(t, &l)| (t as u32, l)).collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    for k in [1u32, 2, 40, 1000] {
        let dist = Sampler::new(&params(1.0, k, 1.0, 1)).distribution(&logits);
        assert_eq!(dist.len(), k as usize);
        let mut kept: Vec<u32> = dist.iter().map(|(t, _)| t).collect();
        kept.sort_unstable();
        let mut best: Vec<u32> = order[..k as usize].iter().map(|&(t, _)| t).collect();
        best.sort_unstable();
        assert_eq!(kept, best, "k = {k}");
        let sum: f32 = dist.iter().map(|(_, p)| p).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{sum}");
    }
    // Ties at the boundary go to the lowest ids; k at or above the vocabulary keeps everything.
    let flat = Sampler::new(&params(1.0, 2, 1.0, 1)).distribution(&[1.0, 2.0, 1.0, 1.0]);
    assert_eq!(flat.iter().map(|(t, _)| t).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(Sampler::new(&params(1.0, 9, 1.0, 1)).distribution(&LOGITS).len(), 4);
}

#[test]
fn top_p_keeps_the_minimal_nucleus() {
    // Probabilities 0.5, 0.3, 0.15, 0.05.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    for (top_p, want) in [(0.45, vec![0]), (0.75, vec![0, 1]), (0.9, vec![0, 1, 2]), (0.99, vec![0, 1, 2, 3])]
    {
        for top_k in [0, 3, 4] {
            let dist = Sampler::new(&params(1.0, top_k, top_p, 1)).distribution(&logits);
            let kept: Vec<u32> = dist.iter().map(|(t, _)| t).collect();
            // Top-p applies to the renormalised top-k; here that changes no boundary.
            let cap = if top_k == 0 { want.len() } else { top_k as usize };
            let want: Vec<u32> = want.iter().copied().take(cap).collect();
            assert_eq!(kept, want, "top_p {top_p} top_k {top_k}");
        }
    }
    // Renormalised over the nucleus.
    let dist = Sampler::new(&params(1.0, 0, 0.75, 1)).distribution(&logits);
    assert!((dist.prob(0) - 0.625).abs() < 1e-6 && (dist.prob(1) - 0.375).abs() < 1e-6);
    assert_eq!(dist.prob(2), 0.0);
}

#[test]
fn top_p_on_a_large_vocabulary_matches_a_full_sort() {
    for (seed, temperature) in [(1, 1.0f32), (2, 0.3), (3, 2.0)] {
        let logits = random_logits(49_152, seed);
        let probs = softmax(&logits, f64::from(temperature));
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        for top_p in [0.05f32, 0.5, 0.9, 0.99, 0.9999] {
            let mut cumulative = 0.0;
            let want = order.iter().position(|&t| {
                cumulative += probs[t];
                cumulative >= f64::from(top_p)
            });
            let want = want.map_or(order.len(), |i| i + 1);
            let dist = Sampler::new(&params(temperature, 0, top_p, 1)).distribution(&logits);
            // Rounding may move the boundary by a token of negligible mass.
            assert!(dist.len().abs_diff(want) <= 1, "seed {seed} top_p {top_p}: {} vs {want}", dist.len());
            // Whatever its size, the nucleus is a best-first prefix, listed in token order.
            let kept: Vec<u32> = dist.iter().map(|(t, _)| t).collect();
            let mut head: Vec<u32> = order[..kept.len()].iter().map(|&t| t as u32).collect();
            head.sort_unstable();
            assert_eq!(kept, head, "seed {seed} top_p {top_p}");
        }
    }
}

#[test]
fn temperature_sharpens_or_flattens() {
    let top = |temperature| Sampler::new(&params(temperature, 0, 1.0, 1)).distribution(&LOGITS).prob(1);
    let (cold, warm, hot) = (top(0.5), top(1.0), top(2.0));
    assert!(cold > warm && warm > hot, "{cold} {warm} {hot}");
    let expected = softmax(&LOGITS, 1.0);
    assert!((f64::from(warm) - expected[1]).abs() < 1e-6);
}

#[test]
fn draws_follow_the_softmax() {
    let logits = [1.0f32, 0.0, 2.0, -1.0, 0.5, 1.5];
    for (temperature, top_k) in [(1.0f32, 0u32), (0.7, 0), (1.3, 4)] {
        let mut expected = softmax(&logits, f64::from(temperature));
        if top_k == 4 {
            // Tokens 3 and 1 (the two worst) are cut; renormalise the rest.
            expected[3] = 0.0;
            expected[1] = 0.0;
            let sum: f64 = expected.iter().sum();
            expected.iter_mut().for_each(|p| *p /= sum);
        }
        let mut s = Sampler::new(&params(temperature, top_k, 1.0, 11));
        let mut counts = [0u64; 6];
        for _ in 0..20_000 {
            counts[s.sample(&logits) as usize] += 1;
        }
        if top_k == 4 {
            assert_eq!(counts[3] + counts[1], 0);
        }
        let (stat, critical) = chi_square(&counts, &expected);
        assert!(stat < critical, "T {temperature}: chi2 {stat} >= {critical}, counts {counts:?}");
    }
}

#[test]
fn uniform_draws_are_in_the_unit_interval() {
    let mut s = Sampler::new(&params(1.0, 0, 1.0, 5));
    assert!((0..1000).all(|_| (0.0..1.0).contains(&s.uniform())));
}
