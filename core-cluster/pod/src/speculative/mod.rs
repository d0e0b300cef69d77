//! Prompt-lookup speculative decoding: draft tokens from earlier n-grams, verify them all in one pass.
//!
//! # Layout
//! - [`drafter`]: [`NgramDrafter`], the most recent earlier occurrence of the last n-gram, incrementally
//!   indexed.
//! - [`adaptive`]: [`DraftLength`], the draft length that follows the recent acceptance rate.
//! - [`verify`](mod@verify): [`verify()`] and [`Verdict`], exact for greedy and sampled decoding.
//! - [`stats`]: [`SpeculationStats`], drafted and accepted counts for metrics.
//! - [`speculator`]: [`Speculator`], the three above for one sequence.
//!
//! # One decode step
//! With `last` the newest token (sampled, not yet fed to the model) at position `pos`:
//! 1. `draft = speculator.propose(limit)`;
//! 2. run the model on `[last, draft..]` at positions `pos..=pos + draft.len()`, one logits row each;
//! 3. `verdict = speculator.verify(&mut sampler, &draft, &rows)`; emit `verdict.tokens`, whose last
//!    token is the new `last`;
//! 4. keep the KV entries of positions `pos..=pos + verdict.accepted` and drop the rest.
//!
//! Architecture Invariant: speculation never changes what is generated in distribution; under greedy
//! decoding it is token for token what plain decoding gives. A seeded sampled generation is reproducible,
//! but it draws differently from the same seed without speculation.

pub mod adaptive;
pub mod drafter;
pub mod speculator;
pub mod stats;
pub mod verify;

pub use adaptive::{AdaptiveConfig, DraftLength};
pub use drafter::NgramDrafter;
pub use speculator::{SpeculativeConfig, Speculator};
pub use stats::SpeculationStats;
pub use verify::{verify, Verdict};

#[cfg(test)]
mod tests;
