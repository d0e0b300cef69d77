//! What the pod suite asks of a text-generation server (our pod over gRPC, llama-server over HTTP): one
//! greedy chat generation, streamed, with the times its text arrived and the server's own counts. The
//! suite's phases are written once against this trait, so both systems get the same prompts, the same
//! limits and the same client-side timing.

use std::future::Future;
use std::time::{Duration, Instant};

/// One generation to run.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// Optional system message (the ChatML `system` turn).
    pub system: Option<String>,
    /// The user message.
    pub user: String,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Keep generating past the end-of-turn token (llama.cpp's `ignore_eos`, the pod's
    /// `Sampling.ignore_eos`), so both systems write the same number of tokens.
    pub ignore_eos: bool,
    /// Ask for prompt-lookup speculative decoding (the pod's `GenerateRequest.speculative`; llama-server
    /// decides per server, not per request, and ignores it). `Some(false)` by default: every phase but
    /// the speculative one compares the engines without speculation.
    pub speculative: Option<bool>,
    /// Stop reading (and drop the request) at this instant; what arrived before still counts.
    pub deadline: Option<Instant>,
}

impl Default for GenRequest {
    fn default() -> Self {
        Self {
            system: None,
            user: String::new(),
            max_tokens: 0,
            ignore_eos: false,
            speculative: Some(false),
            deadline: None,
        }
    }
}

/// What one generation did, as the client saw it and as the server reported it.
#[derive(Clone, Debug)]
pub struct Generation {
    /// When the request was sent.
    pub started: Instant,
    /// When each piece of text arrived (about one per token on both systems).
    pub arrivals: Vec<Instant>,
    /// When the response ended (or was dropped at the deadline).
    pub finished: Instant,
    /// True when the deadline cut the response short.
    pub cut: bool,
    /// Prompt tokens the server counted (0 when unknown).
    pub prompt_tokens: u32,
    /// Prompt tokens whose KV came from a cache rather than being computed.
    pub cached_prompt_tokens: u32,
    /// Tokens generated (0 when unknown, e.g. a cut response).
    pub completion_tokens: u32,
    /// The server's prefill time of the prompt tokens it computed.
    pub prefill: Duration,
    /// The server's own decode rate (tokens/s after the first), when it reports one.
    pub decode_tok_s: Option<f64>,
    /// Speculative decoding: draft tokens proposed.
    pub draft_tokens: u32,
    /// Speculative decoding: draft tokens accepted.
    pub accepted_draft_tokens: u32,
}

impl Generation {
    /// A generation that starts now and has received nothing yet.
    pub fn begin() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            arrivals: Vec::new(),
            finished: now,
            cut: false,
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
            completion_tokens: 0,
            prefill: Duration::ZERO,
            decode_tok_s: None,
            draft_tokens: 0,
            accepted_draft_tokens: 0,
        }
    }

    /// Time from sending to the end of the response.
    pub fn latency(&self) -> Duration {
        self.finished.saturating_duration_since(self.started)
    }

    /// Time from sending to the first piece of text (the whole latency when none came).
    pub fn ttft(&self) -> Duration {
        self.arrivals.first().unwrap_or(&self.finished).saturating_duration_since(self.started)
    }

    /// Prompt tokens computed per second of the server's prefill (cached tokens left out).
    pub fn prefill_tok_s(&self) -> f64 {
        let computed = self.prompt_tokens.saturating_sub(self.cached_prompt_tokens);
        per_second(f64::from(computed), self.prefill)
    }

    /// Tokens generated (the count of text pieces when the server gave no count).
    pub fn tokens(&self) -> f64 {
        if self.completion_tokens > 0 {
            f64::from(self.completion_tokens)
        } else {
            self.arrivals.len() as f64
        }
    }

    /// Tokens generated in `[from, to)`: each piece of text that arrived then counts as its share of
    /// [`Generation::tokens`].
    pub fn tokens_between(&self, from: Instant, to: Instant) -> f64 {
        if self.arrivals.is_empty() {
            return 0.0;
        }
        let inside = self.arrivals.iter().filter(|at| **at >= from && **at < to).count();
        self.tokens() * inside as f64 / self.arrivals.len() as f64
    }

    /// Decode rate: the server's own figure, else (tokens - 1) over the time between the first and the
    /// last piece of text as the client saw them.
    pub fn decode_rate(&self) -> f64 {
        if let Some(rate) = self.decode_tok_s.filter(|r| *r > 0.0) {
            return rate;
        }
        match (self.arrivals.first(), self.arrivals.last()) {
            (Some(first), Some(last)) if self.tokens() > 1.0 => {
                per_second(self.tokens() - 1.0, last.saturating_duration_since(*first))
            }
            _ => 0.0,
        }
    }

    /// Accepted over proposed draft tokens (0 when none were proposed).
    pub fn acceptance(&self) -> f64 {
        if self.draft_tokens == 0 {
            0.0
        } else {
            f64::from(self.accepted_draft_tokens) / f64::from(self.draft_tokens)
        }
    }
}

/// `count / elapsed` in units per second (0 when no time passed).
pub fn per_second(count: f64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        count / secs
    } else {
        0.0
    }
}

/// A server under test that runs one generation at a time per call (callers run calls concurrently).
pub trait GenTarget: Send + Sync + 'static {
    /// Runs `request` greedily to its end (or its deadline) and reports what happened.
    fn generate(&self, request: GenRequest) -> impl Future<Output = anyhow::Result<Generation>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(pieces: u32, tokens: u32) -> Generation {
        let mut g = Generation::begin();
        g.arrivals = (1..=pieces).map(|i| g.started + Duration::from_millis(u64::from(i) * 10)).collect();
        g.finished = g.started + Duration::from_millis(u64::from(pieces) * 10);
        g.completion_tokens = tokens;
        g
    }

    #[test]
    fn tokens_in_a_window_are_shares_of_the_count() {
        let g = generation(10, 20);
        let start = g.started;
        assert_eq!(g.tokens_between(start, start + Duration::from_millis(55)), 10.0);
        assert_eq!(g.tokens_between(start, start + Duration::from_secs(1)), 20.0);
        let cut = Generation { completion_tokens: 0, ..generation(4, 0) };
        assert_eq!(cut.tokens_between(start, start + Duration::from_secs(1)), 4.0);
    }

    #[test]
    fn decode_rate_prefers_the_servers_figure() {
        let g = generation(11, 11);
        assert!((g.decode_rate() - 100.0).abs() < 1e-6, "{}", g.decode_rate());
        let reported = Generation { decode_tok_s: Some(42.0), ..g };
        assert_eq!(reported.decode_rate(), 42.0);
    }

    #[test]
    fn prefill_leaves_cached_tokens_out() {
        let g = Generation {
            prompt_tokens: 600,
            cached_prompt_tokens: 100,
            prefill: Duration::from_secs(2),
            ..Generation::begin()
        };
        assert_eq!(g.prefill_tok_s(), 250.0);
        assert_eq!(Generation::begin().acceptance(), 0.0);
    }
}
