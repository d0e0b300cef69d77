//! End-to-end checks with a synthetic model: speculative decoding generates what plain decoding does
//! (token for token under greedy, in distribution under sampling).

use super::*;
use crate::request::SamplingParams;
use crate::sampler::tests::chi_square;
use crate::sampler::Sampler;

/// A deterministic stand-in for the model: logits in [0, `spread`) from a hash of the last `context`
/// tokens (all of them when `context` is `usize::MAX`).
#[derive(Debug, Clone, Copy)]
struct Model {
    /// Vocabulary size.
    vocab: usize,
    /// How many trailing tokens the logits depend on.
    context: usize,
    /// Width of the logits' range: the larger, the more peaked the distributions.
    spread: f32,
}

impl Model {
    fn logits(&self, history: &[u32]) -> Vec<f32> {
        let from = history.len().saturating_sub(self.context);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &t in &history[from..] {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
        }
        (0..self.vocab as u64)
            .map(|t| {
                let mut x = (h ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x ^= x >> 31;
                (x % 1000) as f32 / 1000.0 * self.spread
            })
            .collect()
    }

    /// The rows `verify` needs: after `history`, then after each draft prefix.
    fn rows(&self, history: &[u32], draft: &[u32]) -> Vec<Vec<f32>> {
        let mut context = history.to_vec();
        let mut rows = vec![self.logits(&context)];
        for &d in draft {
            context.push(d);
            rows.push(self.logits(&context));
        }
        rows
    }
}

fn plain(model: Model, params: &SamplingParams, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut sampler = Sampler::new(params);
    let mut history = prompt.to_vec();
    for _ in 0..n {
        let token = sampler.sample(&model.logits(&history));
        history.push(token);
    }
    history.split_off(prompt.len())
}

fn speculative(
    model: Model,
    params: &SamplingParams,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, SpeculationStats) {
    let mut sampler = Sampler::new(params);
    let mut spec = Speculator::new(&SpeculativeConfig::default(), prompt);
    let first = sampler.sample(&model.logits(prompt));
    spec.push(first);
    let mut out = vec![first];
    while out.len() < n {
        let draft = spec.propose(n - out.len() - 1);
        let rows = model.rows(spec.tokens(), &draft);
        let verdict = spec.verify(&mut sampler, &draft, &rows);
        assert_eq!(verdict.tokens.len(), verdict.accepted + 1);
        assert_eq!(verdict.tokens[..verdict.accepted], draft[..verdict.accepted]);
        out.extend(&verdict.tokens);
    }
    assert_eq!(out.len(), n);
    (out, spec.stats())
}

#[test]
fn greedy_speculation_matches_plain_greedy_token_for_token() {
    let greedy = SamplingParams::greedy(1);
    // A model that looks at 2 tokens falls into cycles (drafts mostly right); one that looks at the
    // whole history does not (drafts mostly wrong).
    let cases = [
        (Model { vocab: 64, context: 2, spread: 4.0 }, 0.8..=1.0),
        (Model { vocab: 8, context: usize::MAX, spread: 4.0 }, 0.0..=0.5),
    ];
    for (model, rates) in cases {
        let mut stats = SpeculationStats::default();
        for seed in 0..5u32 {
            let prompt: Vec<u32> = (0..40).map(|i| (i * 7 + seed * 13) % 8).collect();
            let want = plain(model, &greedy, &prompt, 300);
            let (got, s) = speculative(model, &greedy, &prompt, 300);
            assert_eq!(got, want, "seed {seed}, {model:?}");
            stats.add(&s);
        }
        assert!(stats.drafted > 50, "{stats:?}");
        assert!(rates.contains(&stats.acceptance_rate()), "{model:?}: {stats:?}");
    }
}

#[test]
fn seeded_sampled_speculation_is_reproducible() {
    let model = Model { vocab: 16, context: 2, spread: 8.0 };
    let params = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed: Some(seed),
        ..SamplingParams::greedy(1)
    };
    let prompt: Vec<u32> = (0..30).map(|i| i % 5).collect();
    let (first, stats) = speculative(model, &params(5), &prompt, 200);
    assert_eq!(speculative(model, &params(5), &prompt, 200).0, first);
    assert_ne!(speculative(model, &params(6), &prompt, 200).0, first);
    assert!(stats.accepted > 0 && stats.accepted < stats.drafted, "{stats:?}");
}

/// Drafts the first tokens of a run of sampling: the likeliest ones (mostly accepted), the least likely
/// (mostly rejected), or the n-gram drafter's.
#[derive(Debug, Clone, Copy)]
enum Drafts {
    Likely,
    Unlikely,
    Ngram,
}

/// The first three tokens of one sampled generation with speculation, from a prompt.
fn speculative_prefix(
    model: Model,
    params: &SamplingParams,
    prompt: &[u32],
    drafts: Drafts,
) -> (Vec<u32>, Verdict) {
    let mut sampler = Sampler::new(params);
    let mut history = prompt.to_vec();
    let draft: Vec<u32> = match drafts {
        Drafts::Ngram => {
            let mut drafter = NgramDrafter::new(1, 3);
            drafter.extend(prompt);
            drafter.draft(3)
        }
        Drafts::Likely | Drafts::Unlikely => {
            let mut context = history.clone();
            (0..3)
                .map(|_| {
                    let logits = model.logits(&context);
                    let pick = |cmp: fn(&f32, &f32) -> bool| {
                        (0..logits.len())
                            .fold(0, |best, t| if cmp(&logits[t], &logits[best]) { t } else { best })
                    };
                    let token = if matches!(drafts, Drafts::Likely) {
                        pick(|a, b| a > b)
                    } else {
                        pick(|a, b| a < b)
                    };
                    context.push(token as u32);
                    token as u32
                })
                .collect()
        }
    };
    let verdict = verify(&mut sampler, &draft, &model.rows(&history, &draft));
    history.extend(&verdict.tokens);
    // Fewer than three: carry on plainly with the same sampler.
    while history.len() < prompt.len() + 3 {
        let token = sampler.sample(&model.logits(&history));
        history.push(token);
    }
    history.truncate(prompt.len() + 3);
    (history.split_off(prompt.len()), verdict)
}

/// The exact probability of every 3-token continuation under plain sampling.
fn exact_prefix_probabilities(model: Model, params: &SamplingParams, prompt: &[u32]) -> Vec<f64> {
    let sampler = Sampler::new(params);
    let v = model.vocab;
    let mut probs = vec![0.0; v * v * v];
    for (bin, p) in probs.iter_mut().enumerate() {
        let tokens = [(bin / (v * v)) as u32, ((bin / v) % v) as u32, (bin % v) as u32];
        let mut history = prompt.to_vec();
        *p = 1.0;
        for t in tokens {
            *p *= f64::from(sampler.distribution(&model.logits(&history)).prob(t));
            history.push(t);
        }
    }
    probs
}

#[test]
fn sampled_speculation_has_the_distribution_of_plain_sampling() {
    let model = Model { vocab: 6, context: usize::MAX, spread: 12.0 };
    // The n-gram drafter finds "0 1 2" after the trailing "0 1 2" and proposes "3 0 1".
    let prompt = [0, 1, 2, 3, 0, 1, 2];
    let runs = 20_000u64;
    let settings = [(1.0f32, 0u32, 1.0f32), (0.8, 4, 0.9), (1.5, 0, 0.8)];
    for (temperature, top_k, top_p) in settings {
        let params_for = |seed| SamplingParams {
            temperature,
            top_k,
            top_p,
            seed: Some(seed),
            ..SamplingParams::greedy(3)
        };
        let expected = exact_prefix_probabilities(model, &params_for(0), &prompt);
        let bin = |tokens: &[u32]| tokens.iter().fold(0, |b, &t| b * model.vocab + t as usize);

        let mut counts = vec![0u64; expected.len()];
        for seed in 0..runs {
            counts[bin(&plain(model, &params_for(seed), &prompt, 3))] += 1;
        }
        let (stat, critical) = chi_square(&counts, &expected);
        assert!(stat < critical, "plain T {temperature}: chi2 {stat} >= {critical}");

        for drafts in [Drafts::Likely, Drafts::Unlikely, Drafts::Ngram] {
            let mut counts = vec![0u64; expected.len()];
            let mut first_accepted = 0u64;
            for seed in 0..runs {
                let (tokens, verdict) = speculative_prefix(model, &params_for(seed), &prompt, drafts);
                counts[bin(&tokens)] += 1;
                first_accepted += u64::from(verdict.accepted > 0);
            }
            let (stat, critical) = chi_square(&counts, &expected);
            let case = format!("{drafts:?} T {temperature} k {top_k} p {top_p}");
            assert!(stat < critical, "{case}: chi2 {stat} >= {critical}");
            // Drafts right at the first token in a third to a half of the runs, and drafts almost never right.
            let rate = first_accepted as f64 / runs as f64;
            let rates = match drafts {
                Drafts::Likely => 0.3..=0.95,
                Drafts::Unlikely => 0.0..=0.01,
                Drafts::Ngram => 0.0..=1.0,
            };
            assert!(rates.contains(&rate), "{case}: first draft accepted in {rate} of the runs");
        }
    }
}
