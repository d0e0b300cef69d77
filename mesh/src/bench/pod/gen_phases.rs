//! The phases each system of the pod suite goes through, written once against [`GenTarget`]: a warm-up,
//! single-stream decode, prefill of a 512-token prompt, time to first token behind a cold and a cached
//! 1,024-token system prompt, the input-grounded task, and output tokens/s at each concurrency.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::bench::common::throughput::{concurrent, Phase, Throughput};
use crate::bench::pod::gen_target::{GenRequest, GenTarget, Generation};
use crate::bench::pod::prompts::{Prompts, LONG_WRITING, PREFIX_QUESTIONS};

/// How hard and how long to drive each system.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Tokens of the single-stream decode (greedy; llama.cpp also ignores the end of turn).
    pub decode_tokens: u32,
    /// Concurrency levels of the throughput phases.
    pub concurrency: Vec<usize>,
    /// Most tokens of each request of the throughput phases.
    pub max_tokens: u32,
    /// The measured window of each throughput phase.
    pub window: Duration,
    /// Set to end the run early.
    pub stop: &'static AtomicBool,
}

/// What one system did in every phase.
#[derive(Clone, Debug)]
pub struct SideFigures {
    /// The single-stream decode.
    pub decode: Generation,
    /// One generation of one token per prefill prompt.
    pub prefill: Vec<Generation>,
    /// One-token answers behind each system prompt seen for the first time.
    pub cold: Vec<Generation>,
    /// One-token answers behind the same system prompts, asked again with another question.
    pub cached: Vec<Generation>,
    /// One result per concurrency level.
    pub throughput: Vec<Throughput>,
    /// Single-stream decode behind a long context (the first TTFT system prompt, already cached).
    pub long_decode: Generation,
}

impl SideFigures {
    /// Median prefill tokens/s.
    pub fn prefill_tok_s(&self) -> f64 {
        median(self.prefill.iter().map(Generation::prefill_tok_s))
    }

    /// Median time to the first token behind a cold system prompt, in ms.
    pub fn ttft_cold_ms(&self) -> f64 {
        median(self.cold.iter().map(|g| g.latency().as_secs_f64() * 1000.0))
    }

    /// Median time to the first token behind a cached system prompt, in ms.
    pub fn ttft_cached_ms(&self) -> f64 {
        median(self.cached.iter().map(|g| g.latency().as_secs_f64() * 1000.0))
    }
}

/// Runs every phase against `target` with `prompts`; `name` labels the progress lines.
pub async fn measure<T: GenTarget>(
    name: &str,
    target: &Arc<T>,
    prompts: &Prompts,
    plan: &Plan,
) -> anyhow::Result<SideFigures> {
    // Pages the weights in and fills whatever the server sets up on its first request.
    one(target, None, "Say hello.", 8).await?;
    interrupted(plan)?;

    let decode = target
        .generate(GenRequest {
            user: LONG_WRITING.into(),
            max_tokens: plan.decode_tokens,
            ignore_eos: true,
            ..GenRequest::default()
        })
        .await?;
    eprintln!(
        "  {name} decode: {:.1} tok/s single stream ({} tokens)",
        decode.decode_rate(),
        decode.tokens()
    );
    interrupted(plan)?;

    let mut prefill = Vec::new();
    for prompt in &prompts.prefill {
        prefill.push(one(target, None, prompt, 1).await?);
        interrupted(plan)?;
    }
    let tokens = prefill.first().map_or(0, |g| g.prompt_tokens);
    let mut cold = Vec::new();
    let mut cached = Vec::new();
    for prefix in &prompts.prefixes {
        cold.push(one(target, Some(prefix), PREFIX_QUESTIONS[0], 1).await?);
        cached.push(one(target, Some(prefix), PREFIX_QUESTIONS[1], 1).await?);
        interrupted(plan)?;
    }
    // Decode speed with the attention over a long context: behind the first system prompt, whose KV
    // both systems hold by now, so the figure is the decode alone.
    let long_decode = target
        .generate(GenRequest {
            system: prompts.prefixes.first().cloned(),
            user: LONG_WRITING.into(),
            max_tokens: plan.decode_tokens,
            ignore_eos: true,
            ..GenRequest::default()
        })
        .await?;
    let mut figures = SideFigures { decode, prefill, cold, cached, throughput: Vec::new(), long_decode };
    eprintln!("  {name} prefill: {:.1} tok/s ({tokens}-token prompt)", figures.prefill_tok_s());
    eprintln!(
        "  {name} decode behind a {}-token context: {:.1} tok/s",
        figures.long_decode.prompt_tokens,
        figures.long_decode.decode_rate()
    );
    let cached_tokens = figures.cached.first().map_or(0, |g| g.cached_prompt_tokens);
    eprintln!(
        "  {name} TTFT: cold {:.0} ms, cached prefix {:.0} ms ({cached_tokens} prompt tokens from cache)",
        figures.ttft_cold_ms(),
        figures.ttft_cached_ms()
    );

    let turns = Arc::new(prompts.turns.clone());
    for (index, &clients) in plan.concurrency.iter().enumerate() {
        // Each phase starts at a fixed offset of the turns, the same for every system whatever it
        // managed in the phases before (phases get disjoint slices while they are not exhausted).
        let first_prompt = index * turns.len() / plan.concurrency.len().max(1);
        let phase = Phase { clients, first_prompt, max_tokens: plan.max_tokens, window: plan.window };
        let result = concurrent(Arc::clone(target), Arc::clone(&turns), &phase, plan.stop).await;
        interrupted(plan)?;
        eprintln!(
            "  {name} {clients} concurrent: {:.1} output tok/s ({} done, {} cut at the window's end, {} errors), \
             TTFT p50 {:.0} ms p99 {:.0} ms",
            result.output_tok_s,
            result.completed,
            result.cut,
            result.errors,
            result.ttft_p50.as_secs_f64() * 1000.0,
            result.ttft_p99.as_secs_f64() * 1000.0
        );
        if let Some(error) = &result.first_error {
            eprintln!(
                "  warning: {name} at {clients} concurrent: {} requests failed; first: {error}",
                result.errors
            );
        }
        anyhow::ensure!(
            result.completed + result.cut > 0,
            "{name}: no request succeeded at {clients} concurrent: {}",
            result.first_error.as_deref().unwrap_or("")
        );
        figures.throughput.push(result);
    }
    Ok(figures)
}

/// The input-grounded task (copy the code, renaming a variable), with `speculative` as asked.
pub async fn grounded<T: GenTarget>(
    name: &str,
    target: &Arc<T>,
    prompts: &Prompts,
    speculative: Option<bool>,
) -> anyhow::Result<Generation> {
    let generation = target
        .generate(GenRequest {
            user: prompts.grounded.clone(),
            max_tokens: prompts.grounded_max_tokens,
            speculative,
            ..GenRequest::default()
        })
        .await?;
    eprintln!(
        "  {name} grounded task: {:.1} tok/s ({} tokens, {} of {} draft tokens accepted)",
        generation.decode_rate(),
        generation.tokens(),
        generation.accepted_draft_tokens,
        generation.draft_tokens
    );
    Ok(generation)
}

/// One request without a deadline.
async fn one<T: GenTarget>(
    target: &Arc<T>,
    system: Option<&str>,
    user: &str,
    max_tokens: u32,
) -> anyhow::Result<Generation> {
    let request = GenRequest {
        system: system.map(str::to_owned),
        user: user.to_owned(),
        max_tokens,
        ..GenRequest::default()
    };
    target.generate(request).await
}

fn interrupted(plan: &Plan) -> anyhow::Result<()> {
    anyhow::ensure!(!plan.stop.load(Ordering::Relaxed), "interrupted");
    Ok(())
}

/// The median of some figures (0 when there are none).
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(median(std::iter::empty()), 0.0);
    }
}
