//! Picks the next token from the logits: argmax, or seeded temperature / top-p sampling.

use std::hash::{BuildHasher, Hasher};

use candle_core::{Tensor, D};
use candle_transformers::generation::{LogitsProcessor, Sampling};

use super::request::SamplingParams;
use super::InferenceError;

/// The token picker of one generation.
pub enum Sampler {
    /// Temperature 0: always the most likely token, so the output is deterministic.
    Greedy,
    /// Sampling from the softmax at a temperature, optionally truncated to the top-p mass.
    Random(Box<LogitsProcessor>),
}

impl Sampler {
    /// The sampler the parameters ask for. Without a seed, a random one is drawn.
    pub fn new(params: &SamplingParams) -> Self {
        if params.temperature <= 0.0 {
            return Self::Greedy;
        }
        let temperature = f64::from(params.temperature);
        let top_p = f64::from(params.top_p);
        let sampling = if top_p <= 0.0 || top_p >= 1.0 {
            Sampling::All { temperature }
        } else {
            Sampling::TopP { p: top_p, temperature }
        };
        let seed = params.seed.unwrap_or_else(random_seed);
        Self::Random(Box::new(LogitsProcessor::from_sampling(seed, sampling)))
    }

    /// The next token, from logits of shape `[vocab]`.
    pub fn sample(&mut self, logits: &Tensor) -> Result<u32, InferenceError> {
        Ok(match self {
            Self::Greedy => logits.argmax(D::Minus1)?.to_scalar::<u32>()?,
            Self::Random(processor) => processor.sample(logits)?,
        })
    }
}

/// A seed from the process's random hasher keys and the clock (no extra dependency needed).
fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn logits() -> Tensor {
        Tensor::new(&[0.1f32, 3.0, 0.2, 2.9], &Device::Cpu).expect("tensor")
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(&SamplingParams::greedy(1));
        assert_eq!(s.sample(&logits()).expect("sample"), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let params =
            SamplingParams { temperature: 1.0, top_p: 0.9, seed: Some(7), ..SamplingParams::greedy(1) };
        let draw = || {
            let mut s = Sampler::new(&params);
            (0..20).map(|_| s.sample(&logits()).expect("sample")).collect::<Vec<_>>()
        };
        let first = draw();
        assert_eq!(first, draw());
        // top_p 0.9 keeps only the two likely tokens.
        assert!(first.iter().all(|&t| t == 1 || t == 3), "{first:?}");
    }
}
