//! The output side of one sequence: sampling state, detokenizing, stop strings, log-probabilities,
//! events, timings. A request of several choices runs one [`Generation`] per choice, sharing one event
//! channel and a [`Family`] that knows when the last choice is done.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::detokenizer::IncrementalDecoder;
use super::request::{FinishReason, GenerationSummary, SamplingParams, Timings};
use super::sampler::logprobs::{self, Scored};
use super::sampler::{Penalizer, Sampler};
use super::speculative::Speculator;
use super::stop::StopMatcher;
use super::tokenizer::ChatTokenizer;
use super::InferenceError;

/// What a queued generation sends back, in order: pieces of text (of every choice, interleaved), a
/// `ChoiceDone` per choice when there are several, then exactly one `Done` or `Failed`.
#[derive(Debug)]
pub enum GenerationEvent {
    /// More text of one choice.
    Piece(Piece),
    /// One choice of several finished.
    ChoiceDone {
        /// Which.
        choice: u32,
        /// Why it ended.
        finish_reason: FinishReason,
        /// Tokens it generated.
        completion_tokens: u32,
    },
    /// The generation finished (every choice of it).
    Done(GenerationSummary),
    /// The generation failed; no more events follow.
    Failed(InferenceError),
}

/// Text of one choice, with the log-probabilities of the tokens it completes when they were asked for.
/// A piece may carry tokens and no text: a token inside a character, or text a stop string holds back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Piece {
    /// The choice it belongs to.
    pub choice: u32,
    /// The text.
    pub text: String,
    /// One entry per token, in order.
    pub logprobs: Vec<LoggedToken>,
}

/// A generated token's log-probability and the most likely tokens at its position, with their bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedToken {
    /// The token's bytes.
    pub bytes: Vec<u8>,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The most likely tokens' bytes and log-probabilities, most likely first.
    pub top: Vec<(Vec<u8>, f32)>,
}

/// What the choices of one request share: how many still generate, and what the finished ones made.
#[derive(Debug)]
struct Family {
    /// Choices not finished yet.
    left: u32,
    /// Tokens the finished choices generated.
    completion_tokens: u32,
    /// Why choice 0 ended (the request's finish reason, as for one choice).
    first_reason: Option<FinishReason>,
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
    /// Which choice of the request this is.
    pub choice: u32,
    /// A request of several choices before its first token: the other choices fork from it then.
    pub unforked: bool,
    events: UnboundedSender<GenerationEvent>,
    decoder: IncrementalDecoder,
    stops: StopMatcher,
    /// Shared by the choices of a request of several.
    family: Option<Arc<Mutex<Family>>>,
    /// The last sampled token's scores, when log-probabilities are asked for.
    last_scored: Option<Scored>,
    /// Log-probabilities of tokens whose text has not gone out yet.
    logged: Vec<LoggedToken>,
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
        let n = params.n.max(1);
        let family = (n > 1)
            .then(|| Arc::new(Mutex::new(Family { left: n, completion_tokens: 0, first_reason: None })));
        Self {
            sampler: Sampler::new(&params),
            penalizer: Penalizer::new(params.penalties, prompt),
            stops: StopMatcher::new(&params.stop),
            choice: 0,
            unforked: n > 1,
            family,
            last_scored: None,
            logged: Vec::new(),
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

    /// Choice `choice` of the same request, before any token: its own sampler (a seeded request draws
    /// it with `seed + choice`), stop matching and detokenizer, the same events and family.
    pub fn fork(&self, choice: u32) -> Self {
        let mut params = self.params.clone();
        params.seed = params.seed.map(|seed| seed.wrapping_add(u64::from(choice)));
        Self {
            sampler: Sampler::new(&params),
            penalizer: self.penalizer.clone(),
            stops: StopMatcher::new(&params.stop),
            params,
            speculator: None,
            pending_drafts: Vec::new(),
            prompt_len: self.prompt_len,
            generated: 0,
            span: self.span.clone(),
            enqueued: self.enqueued,
            admitted: self.admitted,
            first_token_at: None,
            choice,
            unforked: false,
            events: self.events.clone(),
            decoder: IncrementalDecoder::new(),
            family: self.family.clone(),
            last_scored: None,
            logged: Vec::new(),
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

    /// The next token from one row of logits, after the penalties if any (scored, when
    /// log-probabilities are asked for, on the same penalized row).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let penalized;
        let row = match &self.penalizer {
            None => logits,
            Some(penalizer) => {
                let mut row = logits.to_vec();
                penalizer.apply(&mut row);
                penalized = row;
                &penalized
            }
        };
        let token = self.sampler.sample(row);
        if let Some(top) = self.params.logprobs {
            self.last_scored = Some(logprobs::score(row, token, top as usize));
        }
        token
    }

    /// Takes one generated token: streams its text and says whether the sequence goes on.
    /// `context_left` is how many more positions the context has after this token.
    pub fn take(&mut self, token: u32, tokenizer: &ChatTokenizer, context_left: usize) -> Progress {
        self.generated += 1;
        if let Some(penalizer) = &mut self.penalizer {
            penalizer.record(token);
        }
        // Only tokens whose text the client gets are reported (not the end of the turn).
        let scored = self.last_scored.take().filter(|s| s.token == token && !tokenizer.is_special(token));
        let special = tokenizer.special_tokens();
        // The end of the turn, or the model opening a new turn (`<|im_start|>`) without closing its own:
        // nothing after it belongs to this answer.
        let ends_turn = token == special.im_end || token == special.end_of_text || token == special.im_start;
        if ends_turn && !self.params.ignore_eos {
            return Progress::Finished(FinishReason::Stop);
        }
        // Other special tokens (`<file_sep>`, ...) never reach the client.
        if !tokenizer.is_special(token) {
            if let Some(scored) = scored {
                self.logged.push(LoggedToken {
                    bytes: tokenizer.token_bytes(token).to_vec(),
                    logprob: scored.logprob,
                    top: scored.top.iter().map(|&(t, l)| (tokenizer.token_bytes(t).to_vec(), l)).collect(),
                });
            }
            let text = self.decoder.push(tokenizer.token_bytes(token));
            if !text.is_empty() {
                let scan = self.stops.push(&text);
                if !scan.emit.is_empty() && !self.send_piece(scan.emit) {
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

    /// Sends `text` with the log-probabilities logged so far; false when nobody listens any more.
    fn send_piece(&mut self, text: String) -> bool {
        let piece = Piece { choice: self.choice, text, logprobs: std::mem::take(&mut self.logged) };
        self.events.send(GenerationEvent::Piece(piece)).is_ok()
    }

    /// Sends what stop-string matching held back, then the summary; returns the summary. A choice of
    /// several sends its `ChoiceDone`, and the last of them the request's summary (its finish reason is
    /// choice 0's, its tokens every choice's); the others return `None`.
    pub fn finish(
        &mut self,
        reason: FinishReason,
        cached_prompt_tokens: usize,
    ) -> Result<Option<GenerationSummary>, InferenceError> {
        let tail = self.stops.finish();
        if (!tail.is_empty() || !self.logged.is_empty()) && !self.send_piece(tail) {
            return Err(InferenceError::Cancelled);
        }
        let end = Instant::now();
        let admitted = self.admitted.unwrap_or(end);
        let first = self.first_token_at.unwrap_or(end);
        let decode = end.saturating_duration_since(first);
        let after_first = self.generated.saturating_sub(1).max(1);
        let stats = self.speculator.as_ref().map(Speculator::stats).unwrap_or_default();
        let (finish_reason, completion_tokens) = match &self.family {
            None => (reason, self.generated),
            Some(family) => {
                let done = GenerationEvent::ChoiceDone {
                    choice: self.choice,
                    finish_reason: reason,
                    completion_tokens: self.generated,
                };
                if self.events.send(done).is_err() {
                    return Err(InferenceError::Cancelled);
                }
                let mut family = family.lock().unwrap_or_else(PoisonError::into_inner);
                family.left = family.left.saturating_sub(1);
                family.completion_tokens += self.generated;
                if self.choice == 0 {
                    family.first_reason = Some(reason);
                }
                if family.left > 0 {
                    return Ok(None);
                }
                (family.first_reason.unwrap_or(reason), family.completion_tokens)
            }
        };
        let summary = GenerationSummary {
            finish_reason,
            prompt_tokens: self.prompt_len as u32,
            completion_tokens,
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
        Ok(Some(summary))
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
        while let Ok(GenerationEvent::Piece(piece)) = received.try_recv() {
            text.push_str(&piece.text);
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
