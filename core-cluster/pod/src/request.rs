//! The domain types of a generation: what is asked, how it ended, how long it took.

use std::time::Duration;

pub use shared::normalize::Penalties;

pub use super::scheduler::Priority;
use super::InferenceError;

/// Most stop strings one request may carry.
pub const MAX_STOP_STRINGS: usize = 16;
/// Longest stop string, in bytes.
pub const MAX_STOP_LEN: usize = 256;
/// Most choices one request may ask for.
pub const MAX_CHOICES: u32 = 16;
/// Most alternatives listed per position with log-probabilities.
pub const MAX_TOP_LOGPROBS: u32 = 20;

pub use shared::normalize::ChatRole;

/// Parses a normalized role name (`"system"`, `"user"`, `"assistant"`), exactly as the core sends it.
pub fn parse_role(role: &str) -> Result<ChatRole, InferenceError> {
    [ChatRole::System, ChatRole::User, ChatRole::Assistant]
        .into_iter()
        .find(|known| known.as_str() == role)
        .ok_or_else(|| InferenceError::InvalidRequest(format!("unknown role {role:?}")))
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: ChatRole,
    /// What was written.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: ChatRole, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
    }
}

/// How to pick tokens and when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Most tokens to generate (the end-of-turn token counts as one).
    pub max_tokens: u32,
    /// 0 means greedy (argmax) decoding; otherwise the softmax temperature, at most 2.
    pub temperature: f32,
    /// Nucleus sampling mass in (0, 1]; 0 means 1 (no truncation).
    pub top_p: f32,
    /// Keep only the `top_k` most likely tokens before top-p; 0 means no truncation.
    pub top_k: u32,
    /// Seed of the sampler's random generator; a random one when absent.
    pub seed: Option<u64>,
    /// Generation stops before the first occurrence of any of these; the text excludes it.
    pub stop: Vec<String>,
    /// Penalties on tokens already seen (none by default). A request with penalties does not speculate.
    pub penalties: Penalties,
    /// Keep generating past the end of the turn until `max_tokens` (for benchmarks).
    pub ignore_eos: bool,
    /// Choices to generate from the one prompt (its KV shared copy-on-write); a seeded request draws
    /// choice `i` with `seed + i`. A request of several choices does not speculate.
    pub n: u32,
    /// `Some(k)`: send every generated token's log-probability with the `k` most likely tokens at its
    /// position. A request with log-probabilities does not speculate.
    pub logprobs: Option<u32>,
}

impl SamplingParams {
    /// Greedy decoding of at most `max_tokens` tokens, no stop strings.
    pub fn greedy(max_tokens: u32) -> Self {
        Self {
            max_tokens,
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            stop: Vec::new(),
            penalties: Penalties::default(),
            ignore_eos: false,
            n: 1,
            logprobs: None,
        }
    }

    /// Checks the parameters against the model's context window.
    pub fn validate(&self, context: usize) -> Result<(), InferenceError> {
        let invalid = |m: String| Err(InferenceError::InvalidRequest(m));
        if self.max_tokens == 0 || self.max_tokens as usize > context {
            return invalid(format!("max_tokens must be in 1..={context}, got {}", self.max_tokens));
        }
        if !(0.0..=2.0).contains(&self.temperature) {
            return invalid(format!("temperature must be in 0..=2, got {}", self.temperature));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return invalid(format!("top_p must be in 0..=1, got {}", self.top_p));
        }
        let Penalties { frequency, presence, repetition } = self.penalties;
        if !((-2.0..=2.0).contains(&frequency) && (-2.0..=2.0).contains(&presence)) {
            return invalid(format!(
                "frequency and presence penalties must be in -2..=2, got {frequency}, {presence}"
            ));
        }
        if !(repetition > 0.0 && repetition <= 2.0) {
            return invalid(format!("repetition_penalty must be in (0, 2], got {repetition}"));
        }
        if !(1..=MAX_CHOICES).contains(&self.n) {
            return invalid(format!("n must be in 1..={MAX_CHOICES}, got {}", self.n));
        }
        if self.logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
            return invalid(format!("top_logprobs must be in 0..={MAX_TOP_LOGPROBS}"));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return invalid(format!("at most {MAX_STOP_STRINGS} stop strings, got {}", self.stop.len()));
        }
        if self.stop.iter().any(|s| s.is_empty() || s.len() > MAX_STOP_LEN) {
            return invalid(format!("stop strings must be 1..={MAX_STOP_LEN} bytes"));
        }
        Ok(())
    }
}

/// A chat completion, or a text completion's raw prompt, to run.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// The caller's id for the request, for logs.
    pub request_id: String,
    /// The tenant the request belongs to: it salts the prefix cache, so tenants never share KV.
    pub tenant: String,
    /// The model asked for; must be the one the pod serves (case-insensitive).
    pub model: String,
    /// The conversation so far; for a raw prompt, the one user message holding it.
    pub messages: Vec<ChatMessage>,
    /// A text completion: the one user message is the prompt, continued as it is, with no chat template
    /// around it.
    pub raw_prompt: bool,
    /// How to sample and when to stop.
    pub sampling: SamplingParams,
    /// Interactive or batch.
    pub priority: Priority,
    /// Prompt-lookup speculative decoding; `None` means the pod's default.
    pub speculative: Option<bool>,
}

impl GenerationRequest {
    /// Checks everything that does not need the tokenizer.
    pub fn validate(&self, served_model: &str, context: usize) -> Result<(), InferenceError> {
        if !self.model.eq_ignore_ascii_case(served_model) {
            return Err(InferenceError::UnknownModel {
                requested: self.model.clone(),
                served: served_model.to_owned(),
            });
        }
        if self.messages.is_empty() {
            return Err(InferenceError::InvalidRequest("no messages".into()));
        }
        if self.raw_prompt && !matches!(self.messages.as_slice(), [only] if only.role == ChatRole::User) {
            return Err(InferenceError::InvalidRequest(format!(
                "a raw prompt is exactly one user message, got {} message(s)",
                self.messages.len()
            )));
        }
        self.sampling.validate(context)
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End of turn, end of text, or a stop string.
    Stop,
    /// `max_tokens` reached, or the context window is full.
    Length,
}

impl FinishReason {
    /// The OpenAI name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// Where a request's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Waiting in the queue for the model.
    pub queue: Duration,
    /// Processing the prompt and picking the first token.
    pub prefill: Duration,
    /// Generating every token after the first.
    pub decode: Duration,
    /// From arrival in the queue to the first generated token.
    pub ttft: Duration,
    /// Mean time per generated token after the first.
    pub tpot: Duration,
}

/// How a finished generation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationSummary {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens in the templated prompt.
    pub prompt_tokens: u32,
    /// Tokens generated (the end-of-turn token included).
    pub completion_tokens: u32,
    /// Where the time went.
    pub timings: Timings,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_prompt_tokens: u32,
    /// Speculative decoding: draft tokens proposed.
    pub draft_tokens: u32,
    /// Speculative decoding: draft tokens accepted.
    pub accepted_draft_tokens: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> GenerationRequest {
        GenerationRequest {
            request_id: "r".into(),
            tenant: "t".into(),
            model: "m".into(),
            messages: vec![ChatMessage::new(ChatRole::User, "hi")],
            raw_prompt: false,
            sampling: SamplingParams::greedy(8),
            priority: Priority::Interactive,
            speculative: None,
        }
    }

    #[test]
    fn validation_rejects_bad_input() {
        assert!(request().validate("m", 100).is_ok());
        assert!(matches!(request().validate("other", 100), Err(InferenceError::UnknownModel { .. })));
        let mut r = request();
        r.messages.clear();
        assert!(r.validate("m", 100).is_err());
        for max_tokens in [0, 101] {
            let mut r = request();
            r.sampling.max_tokens = max_tokens;
            assert!(r.validate("m", 100).is_err(), "{max_tokens}");
        }
        let mut r = request();
        r.sampling.temperature = f32::NAN;
        assert!(r.validate("m", 100).is_err());
        let mut r = request();
        r.sampling.top_p = 1.5;
        assert!(r.validate("m", 100).is_err());
        let mut r = request();
        r.sampling.stop = vec![String::new()];
        assert!(r.validate("m", 100).is_err());
        assert!(parse_role("tool").is_err());
        assert_eq!(parse_role("assistant").ok(), Some(ChatRole::Assistant));

        // A raw prompt is one user message, nothing else.
        let raw = GenerationRequest { raw_prompt: true, ..request() };
        assert!(raw.validate("m", 100).is_ok());
        let two = vec![ChatMessage::new(ChatRole::User, "a"), ChatMessage::new(ChatRole::User, "b")];
        let system = vec![ChatMessage::new(ChatRole::System, "a")];
        for messages in [two, system, Vec::new()] {
            let r = GenerationRequest { messages: messages.clone(), ..raw.clone() };
            assert!(matches!(r.validate("m", 100), Err(InferenceError::InvalidRequest(_))), "{messages:?}");
        }
    }
}
