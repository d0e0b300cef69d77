//! The output side of one sequence: sampling state, detokenizing, stop strings, events, timings.

use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::detokenizer::IncrementalDecoder;
use super::request::{FinishReason, GenerationSummary, SamplingParams, Timings};
use super::sampler::{Penalizer, Sampler};
use super::speculative::Speculator;
use super::stop::StopMatcher;
use super::tokenizer::ChatTokenizer;
use super::InferenceError;

/// What a queued generation sends back, in order: text pieces, then exactly one `Done` or `Failed`.
#[derive(Debug)]
pub enum GenerationEvent {
    /// More text.
    Text(String),
    /// The generation finished.
    Done(GenerationSummary),
    /// The generation failed; no more events follow.
    Failed(InferenceError),
}

/// What happened to a sequence after it took a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// It wants more tokens.
    Continue,
    /// It is done.
    Finished(FinishReason),
    /// Nobody is listening any more.
    Abandoned,
}

/// One running generation's state outside the KV cache.
pub struct Generation {
    /// How to sample and when to stop.
    pub params: SamplingParams,
    /// The token picker.
    pub sampler: Sampler,
    /// Penalties on tokens already seen, when the request set any.
    pub penalizer: Option<Penalizer>,
    /// Prompt-lookup drafting, when this request speculates.
    pub speculator: Option<Speculator>,
    /// Draft tokens appended to the sequence for the next step to verify.
    pub pending_drafts: Vec<u32>,
    /// Tokens in the templated prompt.
    pub prompt_len: usize,
    /// Tokens generated so far (the end-of-turn token counts).
    pub generated: u32,
    /// The request's span, so logs carry its fields.
    pub span: tracing::Span,
    /// When the request was queued.
    pub enqueued: Instant,
    /// When it was first scheduled.
    pub admitted: Option<Instant>,
    /// When its first token was sampled.
    pub first_token_at: Option<Instant>,
    events: UnboundedSender<GenerationEvent>,
    decoder: IncrementalDecoder,
    stops: StopMatcher,
}

impl Generation {
    /// A generation that has not started.
    pub fn new(
        params: SamplingParams,
        prompt: &[u32],
        speculator: Option<Speculator>,
        events: UnboundedSender<GenerationEvent>,
        span: tracing::Span,
        enqueued: Instant,
    ) -> Self {
        Self {
            sampler: Sampler::new(&params),
            penalizer: Penalizer::new(params.penalties, prompt),
            stops: StopMatcher::new(&params.stop),
            params,
            speculator,
            pending_drafts: Vec::new(),
            prompt_len: prompt.len(),
            generated: 0,
            span,
            enqueued,
            admitted: None,
            first_token_at: None,
            events,
            decoder: IncrementalDecoder::new(),
        }
    }

    /// True when the client has gone.
    pub fn is_abandoned(&self) -> bool {
        self.events.is_closed()
    }

    /// Tokens the sequence may still generate.
    pub fn remaining(&self) -> usize {
        self.params.max_tokens.saturating_sub(self.generated) as usize
    }

    /// The next token from one row of logits, after the penalties if any.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        match &self.penalizer {
            None => self.sampler.sample(logits),
            Some(penalizer) => {
                let mut penalized = logits.to_vec();
                penalizer.apply(&mut penalized);
                self.sampler.sample(&penalized)
            }
        }
    }

    /// Takes one generated token: streams its text and says whether the sequence goes on.
    /// `context_left` is how many more positions the context has after this token.
    pub fn take(&mut self, token: u32, tokenizer: &ChatTokenizer, context_left: usize) -> Progress {
        self.generated += 1;
        if let Some(penalizer) = &mut self.penalizer {
            penalizer.record(token);
        }
        let special = tokenizer.special_tokens();
        // The end of the turn, or the model opening a new turn (`<|im_start|>`) without closing its own:
        // nothing after it belongs to this answer.
        let ends_turn = token == special.im_end || token == special.end_of_text || token == special.im_start;
        if ends_turn && !self.params.ignore_eos {
            return Progress::Finished(FinishReason::Stop);
        }
        // Other special tokens (`<file_sep>`, ...) never reach the client.
        if !tokenizer.is_special(token) {
            let text = self.decoder.push(tokenizer.token_bytes(token));
            if !text.is_empty() {
                let scan = self.stops.push(&text);
                if !scan.emit.is_empty() && self.events.send(GenerationEvent::Text(scan.emit)).is_err() {
                    return Progress::Abandoned;
                }
                if scan.stopped {
                    return Progress::Finished(FinishReason::Stop);
                }
            }
        }
        if self.generated >= self.params.max_tokens || context_left == 0 {
            return Progress::Finished(FinishReason::Length);
        }
        Progress::Continue
    }

    /// Sends what stop-string matching held back, then the summary; returns the summary.
    pub fn finish(
        &mut self,
        reason: FinishReason,
        cached_prompt_tokens: usize,
    ) -> Result<GenerationSummary, InferenceError> {
        let tail = self.stops.finish();
        if !tail.is_empty() && self.events.send(GenerationEvent::Text(tail)).is_err() {
            return Err(InferenceError::Cancelled);
        }
        let end = Instant::now();
        let admitted = self.admitted.unwrap_or(end);
        let first = self.first_token_at.unwrap_or(end);
        let decode = end.saturating_duration_since(first);
        let after_first = self.generated.saturating_sub(1).max(1);
        let stats = self.speculator.as_ref().map(Speculator::stats).unwrap_or_default();
        let summary = GenerationSummary {
            finish_reason: reason,
            prompt_tokens: self.prompt_len as u32,
            completion_tokens: self.generated,
            timings: Timings {
                queue: admitted.saturating_duration_since(self.enqueued),
                prefill: first.saturating_duration_since(admitted),
                decode,
                ttft: first.saturating_duration_since(self.enqueued),
                tpot: decode / after_first,
            },
            cached_prompt_tokens: cached_prompt_tokens as u32,
            draft_tokens: u32::try_from(stats.drafted).unwrap_or(u32::MAX),
            accepted_draft_tokens: u32::try_from(stats.accepted).unwrap_or(u32::MAX),
        };
        let _ = self.events.send(GenerationEvent::Done(summary));
        Ok(summary)
    }

    /// Ends the generation with an error.
    pub fn fail(&self, error: InferenceError) {
        let _ = self.events.send(GenerationEvent::Failed(error));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::engine;

    #[test]
    fn a_new_turn_opened_by_the_model_ends_the_answer() {
        let tokenizer = engine().tokenizer();
        let (events, mut received) = tokio::sync::mpsc::unbounded_channel();
        let mut generation = Generation::new(
            SamplingParams::greedy(16),
            &[1, 2, 3, 4],
            None,
            events,
            tracing::Span::none(),
            Instant::now(),
        );
        let hello = tokenizer.encode_plain("Hello").expect("encode");
        for token in &hello {
            assert_eq!(generation.take(*token, tokenizer, 100), Progress::Continue);
        }
        let im_start = tokenizer.special_tokens().im_start;
        assert_eq!(generation.take(im_start, tokenizer, 100), Progress::Finished(FinishReason::Stop));
        let mut text = String::new();
        while let Ok(GenerationEvent::Text(t)) = received.try_recv() {
            text.push_str(&t);
        }
        assert_eq!(text, "Hello", "nothing of a second turn reaches the client");
    }

    #[test]
    fn ignore_eos_writes_past_the_end_of_the_turn_until_max_tokens() {
        let tokenizer = engine().tokenizer();
        let (events, _received) = tokio::sync::mpsc::unbounded_channel();
        let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(3) };
        let mut generation =
            Generation::new(params, &[1], None, events, tracing::Span::none(), Instant::now());
        let im_end = tokenizer.special_tokens().im_end;
        assert_eq!(generation.take(im_end, tokenizer, 100), Progress::Continue);
        assert_eq!(generation.take(im_end, tokenizer, 100), Progress::Continue);
        assert_eq!(generation.take(im_end, tokenizer, 100), Progress::Finished(FinishReason::Length));
    }
}
