//! Request normalization: the canonical form of a chat request, which is both what the model generates
//! from and what the cache key is derived from. Because the inference pod generates from exactly this form,
//! two requests with the same normal form always get the same answer, and the key can safely ignore every
//! difference that normalization removes.
//!
//! # Rules
//! - Roles: trimmed and lowercased; `developer` is read as `system`; anything but system, user and
//!   assistant is rejected. The order of messages is kept: it is the conversation.
//! - Content: text parts are joined with `\n`; CRLF and CR become LF; trailing spaces and tabs are removed
//!   from every line; leading and trailing blank space of the whole message is removed. Whitespace inside a
//!   line is kept (indentation in code changes answers). `name` is dropped (the chat template ignores it).
//! - Parameters: OpenAI's defaults are filled in (temperature 1, top_p 1, max_tokens from the tier's
//!   limits). With temperature 0 decoding is greedy, so `top_p` and `seed` cannot change the answer and are
//!   reset to their defaults. A temperature below [`GREEDY_BELOW`] is greedy too (dividing logits by it
//!   overflows, and the answer is the greedy one anyway). Stop sequences are a set: sorted,
//!   deduplicated, empty ones dropped; each is at most [`MAX_STOP_BYTES`] long.
//! - `stream`, `stream_options` and `user` do not change the answer and are not part of the normal form's
//!   key; `stream_options` without `stream: true` is a 400, as at OpenAI.
//! - Penalties (`frequency_penalty`, `presence_penalty`, vLLM's `repetition_penalty`) are checked against
//!   their ranges and join the key only when set, so the keys of requests without them do not change.
//! - `n` and `logprobs`/`top_logprobs` are checked and kept. With greedy decoding every choice is the
//!   one greedy answer, so `n` joins the key only for sampled requests (where each choice is drawn on its
//!   own); `logprobs` joins it when asked for. See [`Sampling::generated_choices`].
//! - Parameters this mesh cannot honour (logit bias, tools, non-text response formats) are rejected with
//!   a 400 rather than silently ignored.

use serde::{Deserialize, Serialize};

use crate::model_spec::ModelApi;
use crate::models::{ModelRef, ModelTable};
use crate::openai::{ChatCompletionRequest, Delivery, MessageContent, StopSequences};
use crate::RequestError;

/// A message role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// Instructions for the assistant.
    System,
    /// The user's turn.
    User,
    /// An earlier answer.
    Assistant,
}

impl ChatRole {
    /// The role a client's role name stands for (`developer` is a system message), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "system" | "developer" => Some(ChatRole::System),
            "user" => Some(ChatRole::User),
            "assistant" => Some(ChatRole::Assistant),
            _ => None,
        }
    }

    /// The role's name as the chat template writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
        }
    }
}

/// One normalized message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: ChatRole,
    /// Normalized text.
    pub content: String,
}

/// Sampling parameters that can change the answer, with defaults filled in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Upper bound on generated tokens.
    pub max_tokens: u32,
    /// 0 for greedy decoding, up to 2.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 when greedy.
    pub top_p: f32,
    /// Sampling seed; `None` when greedy.
    pub seed: Option<u64>,
    /// Stop sequences, sorted and deduplicated.
    pub stop: Vec<String>,
    /// Penalties on tokens already seen; none by default.
    #[serde(default, skip_serializing_if = "Penalties::is_none")]
    pub penalties: Penalties,
    /// Choices asked for (`n`), 1 to [`MAX_CHOICES`].
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub n: u32,
    /// `Some(k)` when the log-probability of every generated token is asked for, with the `k` most likely
    /// tokens at each position (`top_logprobs`, 0 to [`MAX_TOP_LOGPROBS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Penalties on repeating tokens, as OpenAI (`frequency_penalty`, `presence_penalty`) and vLLM
/// (`repetition_penalty`) define them. They change the answer, so they are part of the key when set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Penalties {
    /// Subtracted from a token's logit once per time it was generated so far, in [-2, 2].
    pub frequency: f32,
    /// Subtracted from a token's logit once it was generated at all, in [-2, 2].
    pub presence: f32,
    /// Divides the positive logits (multiplies the negative ones) of every token of the prompt and of the
    /// answer so far, in (0, 2]; 1 is none.
    pub repetition: f32,
}

impl Default for Penalties {
    fn default() -> Self {
        Self { frequency: 0.0, presence: 0.0, repetition: 1.0 }
    }
}

impl Penalties {
    /// Whether no penalty is set.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

impl Sampling {
    /// Greedy decoding of at most `max_tokens` tokens: no seed, no stop sequences, no penalties.
    pub fn greedy(max_tokens: u32) -> Self {
        Self {
            max_tokens,
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
            stop: Vec::new(),
            penalties: Penalties::default(),
            n: 1,
            logprobs: None,
        }
    }

    /// Whether decoding is greedy (deterministic).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// How many answers must be generated: `n` for sampled decoding, where each choice is drawn on its
    /// own, but one for greedy decoding, whose choices are all the one greedy answer (so a cached greedy
    /// answer serves any `n`).
    pub fn generated_choices(&self) -> u32 {
        if self.is_greedy() {
            1
        } else {
            self.n
        }
    }

    /// How many choices each generated answer is rendered as: `n` for greedy decoding (every choice is
    /// the one answer), else 1.
    pub fn copies(&self) -> u32 {
        self.n / self.generated_choices()
    }

    /// Whether a cache can hold the answer: it keeps one text per key, without log-probabilities.
    pub fn cache_can_hold(&self) -> bool {
        self.logprobs.is_none() && self.generated_choices() == 1
    }
}

/// A request in canonical form.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizedRequest {
    /// The served model it resolved to.
    pub model: ModelRef,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Sampling parameters.
    pub sampling: Sampling,
    /// JSON or server-sent events (not part of the key).
    pub delivery: Delivery,
    /// The API it came through: a chat, or a text completion whose one user message is the prompt
    /// ([`crate::text_completion`]); part of the key.
    pub api: ModelApi,
    /// Whether a text completion's answer is rendered after its prompt (not part of the key).
    pub echo: bool,
    /// The request's cache tags ([`crate::cache_tags`]), sorted; part of the key when there are any.
    pub tags: Vec<String>,
}

/// Limits a tier applies while normalizing.
#[derive(Clone, Debug)]
pub struct Limits {
    /// `max_tokens` when the request gives none.
    pub default_max_tokens: u32,
    /// Largest `max_tokens` accepted.
    pub max_tokens_limit: u32,
    /// Largest number of messages accepted.
    pub max_messages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { default_max_tokens: 256, max_tokens_limit: 4096, max_messages: 256 }
    }
}

/// Maximum number of stop sequences (OpenAI's limit).
pub const MAX_STOP_SEQUENCES: usize = 4;
/// Longest stop sequence accepted, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: u32 = 8;
/// Most alternatives per position (`top_logprobs`), OpenAI's limit.
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Temperatures below this decode greedily.
pub const GREEDY_BELOW: f32 = 1e-5;

/// Normalizes a parsed chat request against the served models.
pub fn normalize(
    request: &ChatCompletionRequest,
    models: &ModelTable,
    limits: &Limits,
) -> Result<NormalizedRequest, RequestError> {
    normalize_api(request, models, limits, ModelApi::Chat)
}

/// Normalizes a request that came through `api` (a text completion arrives here as a chat request of
/// one user message); a model the registry does not list `api` for is a 400.
pub(crate) fn normalize_api(
    request: &ChatCompletionRequest,
    models: &ModelTable,
    limits: &Limits,
    api: ModelApi,
) -> Result<NormalizedRequest, RequestError> {
    let model = models.resolve(&request.model)?.clone();
    if !models.serves(&model.name, api) {
        let other = match api {
            ModelApi::Chat => "/v1/completions",
            ModelApi::Completions => "/v1/chat/completions",
        };
        return Err(RequestError::invalid_param(
            "model",
            format!("model `{}` does not serve the {} API; use {other}", model.name, api.as_str()),
        ));
    }
    reject_unsupported(request)?;
    if request.messages.is_empty() {
        return Err(RequestError::invalid_param("messages", "`messages` must contain at least one message"));
    }
    if request.messages.len() > limits.max_messages {
        return Err(RequestError::invalid_param(
            "messages",
            format!("at most {} messages are accepted", limits.max_messages),
        ));
    }
    let messages = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = parse_role(&m.role, i)?;
            Ok(Message { role, content: normalize_content(role, m.content.as_ref(), i)? })
        })
        .collect::<Result<Vec<_>, RequestError>>()?;
    if !messages.iter().any(|m| m.role == ChatRole::User) {
        return Err(RequestError::invalid_param("messages", "`messages` must contain a user message"));
    }
    Ok(NormalizedRequest {
        model,
        messages,
        sampling: normalize_sampling(request, limits)?,
        delivery: delivery(request)?,
        api,
        echo: false,
        tags: Vec::new(),
    })
}

/// How the answer goes back: `stream_options` only makes sense for a stream, as OpenAI's API insists.
fn delivery(request: &ChatCompletionRequest) -> Result<Delivery, RequestError> {
    let usage = request.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
    match (request.stream.unwrap_or(false), &request.stream_options) {
        (true, _) => Ok(Delivery::Stream { usage }),
        (false, None) => Ok(Delivery::Whole),
        (false, Some(_)) => Err(RequestError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        )),
    }
}

fn reject_unsupported(request: &ChatCompletionRequest) -> Result<(), RequestError> {
    if request.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
        return Err(RequestError::invalid_param("logit_bias", "`logit_bias` is not supported"));
    }
    if request.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(RequestError::invalid_param("tools", "tools are not supported by this mesh's models"));
    }
    if let Some(format) = &request.response_format {
        if format.get("type").and_then(|t| t.as_str()) != Some("text") {
            return Err(RequestError::invalid_param(
                "response_format",
                "only `{\"type\": \"text\"}` is supported",
            ));
        }
    }
    Ok(())
}

fn parse_role(role: &str, index: usize) -> Result<ChatRole, RequestError> {
    ChatRole::from_name(role).ok_or_else(|| {
        RequestError::invalid_param(
            &format!("messages[{index}].role"),
            format!("unsupported role {:?}; use system, user or assistant", role.trim().to_ascii_lowercase()),
        )
    })
}

/// A message's text. Content may be missing or null only in an assistant turn (one that called tools, in
/// OpenAI's API); a system or user message without it is refused, as OpenAI refuses it.
fn normalize_content(
    role: ChatRole,
    content: Option<&MessageContent>,
    index: usize,
) -> Result<String, RequestError> {
    let raw = match content {
        None if role == ChatRole::Assistant => String::new(),
        None => {
            return Err(RequestError::invalid_param(
                &format!("messages[{index}].content"),
                format!("a {} message needs `content` (a string or a list of text parts)", role.as_str()),
            ))
        }
        Some(MessageContent::Text(text)) => text.clone(),
        Some(MessageContent::Parts(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part.kind.as_str(), &part.text) {
                    ("text", Some(text)) => texts.push(text.as_str()),
                    _ => {
                        return Err(RequestError::invalid_param(
                            &format!("messages[{index}].content"),
                            format!("only text content parts are supported (got {:?})", part.kind),
                        ))
                    }
                }
            }
            texts.join("\n")
        }
    };
    Ok(normalize_text(&raw))
}

/// Applies the whitespace rules to one message's text.
pub fn normalize_text(raw: &str) -> String {
    let unified = raw.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = unified.split('\n').map(|line| line.trim_end_matches([' ', '\t'])).collect();
    lines.join("\n").trim().to_owned()
}

fn normalize_sampling(request: &ChatCompletionRequest, limits: &Limits) -> Result<Sampling, RequestError> {
    let temperature = request.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(RequestError::invalid_param("temperature", "`temperature` must be between 0 and 2"));
    }
    let top_p = request.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(RequestError::invalid_param("top_p", "`top_p` must be in (0, 1]"));
    }
    let max_tokens =
        request.max_completion_tokens.or(request.max_tokens).unwrap_or(limits.default_max_tokens);
    if max_tokens == 0 || max_tokens > limits.max_tokens_limit {
        return Err(RequestError::invalid_param(
            "max_tokens",
            format!("`max_tokens` must be between 1 and {}", limits.max_tokens_limit),
        ));
    }
    let mut stop = match &request.stop {
        None => Vec::new(),
        Some(StopSequences::One(s)) => vec![s.clone()],
        Some(StopSequences::Many(list)) => list.clone(),
    };
    stop.retain(|s| !s.is_empty());
    stop.sort();
    stop.dedup();
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(RequestError::invalid_param(
            "stop",
            format!("at most {MAX_STOP_SEQUENCES} stop sequences are accepted"),
        ));
    }
    if stop.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(RequestError::invalid_param(
            "stop",
            format!("stop sequences are at most {MAX_STOP_BYTES} bytes"),
        ));
    }
    let penalties = normalize_penalties(request)?;
    let n = request.n.unwrap_or(1);
    if !(1..=MAX_CHOICES).contains(&n) {
        return Err(RequestError::invalid_param("n", format!("`n` must be between 1 and {MAX_CHOICES}")));
    }
    let logprobs = normalize_logprobs(request)?;
    // -0.0, 0.0 and vanishing temperatures all decode greedily; make the key agree.
    let temperature = if temperature < GREEDY_BELOW { 0.0 } else { temperature };
    let greedy = temperature == 0.0;
    Ok(Sampling {
        max_tokens,
        temperature,
        top_p: if greedy { 1.0 } else { top_p },
        seed: if greedy { None } else { request.seed },
        stop,
        penalties,
        n,
        logprobs,
    })
}

/// `logprobs` and `top_logprobs`, as OpenAI checks them: `top_logprobs` needs `logprobs: true`.
fn normalize_logprobs(request: &ChatCompletionRequest) -> Result<Option<u32>, RequestError> {
    match (request.logprobs.unwrap_or(false), request.top_logprobs) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(RequestError::invalid_param(
            "top_logprobs",
            "`top_logprobs` is only allowed when `logprobs` is true",
        )),
        (true, top) => {
            let top = top.unwrap_or(0);
            if top > MAX_TOP_LOGPROBS {
                return Err(RequestError::invalid_param(
                    "top_logprobs",
                    format!("`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}"),
                ));
            }
            Ok(Some(top))
        }
    }
}

/// The penalties, checked against OpenAI's ranges (vLLM's for `repetition_penalty`); -0.0 reads as 0.
fn normalize_penalties(request: &ChatCompletionRequest) -> Result<Penalties, RequestError> {
    let mut penalties = Penalties::default();
    for (param, value, slot) in [
        ("frequency_penalty", request.frequency_penalty, &mut penalties.frequency),
        ("presence_penalty", request.presence_penalty, &mut penalties.presence),
    ] {
        let value = value.unwrap_or(0.0);
        if !(-2.0..=2.0).contains(&value) {
            return Err(RequestError::invalid_param(param, format!("`{param}` must be between -2 and 2")));
        }
        *slot = value + 0.0;
    }
    let repetition = request.repetition_penalty.unwrap_or(1.0);
    if !(repetition > 0.0 && repetition <= 2.0) {
        return Err(RequestError::invalid_param(
            "repetition_penalty",
            "`repetition_penalty` must be in (0, 2]",
        ));
    }
    penalties.repetition = repetition;
    Ok(penalties)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::parse_chat_request;

    fn models() -> ModelTable {
        ModelTable::parse("smollm2-135m-instruct@1").expect("table")
    }

    pub(crate) fn norm(json: &str) -> Result<NormalizedRequest, RequestError> {
        let request = parse_chat_request(json.as_bytes(), 1 << 20)?;
        normalize(&request, &models(), &Limits::default())
    }

    #[test]
    fn whitespace_rules() {
        assert_eq!(normalize_text("  hello  \r\n  world\t \r\n\n"), "hello\n  world");
        assert_eq!(normalize_text("a\rb"), "a\nb");
        assert_eq!(normalize_text("x  y"), "x  y");
    }

    #[test]
    fn fills_defaults_and_canonicalizes_greedy_parameters() {
        let r = norm(r#"{"model":"SmolLM2-135M-Instruct","messages":[{"role":" User ","content":"hi"}],"temperature":0,"top_p":0.5,"seed":9}"#)
            .expect("valid");
        assert_eq!(r.model.name, "smollm2-135m-instruct");
        assert_eq!(r.messages, vec![Message { role: ChatRole::User, content: "hi".into() }]);
        assert_eq!(r.sampling, Sampling::greedy(256));
        let sampled = norm(r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"}],"top_p":0.5,"seed":9}"#)
            .expect("valid");
        assert_eq!(
            (sampled.sampling.temperature, sampled.sampling.top_p, sampled.sampling.seed),
            (1.0, 0.5, Some(9))
        );
    }

    #[test]
    fn a_user_or_system_message_without_content_is_refused_and_an_assistant_one_is_not() {
        for message in [r#"{"role":"user","content":null}"#, r#"{"role":"system"}"#] {
            let body = format!(r#"{{"model":"smollm2-135m-instruct","messages":[{message}]}}"#);
            let error = norm(&body).expect_err("refused");
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some("messages[0].content")),
                "{message}"
            );
        }
        let tool_turn = r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null},{"role":"user","content":"and?"}]}"#;
        assert!(norm(tool_turn).is_ok());
    }

    #[test]
    fn vanishing_temperatures_are_greedy_and_long_stops_are_refused() {
        let tiny = norm(r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"}],"temperature":1e-40,"seed":3}"#)
            .expect("valid");
        assert_eq!((tiny.sampling.temperature, tiny.sampling.seed), (0.0, None));
        let long = format!(
            r#"{{"model":"smollm2-135m-instruct","messages":[{{"role":"user","content":"hi"}}],"stop":["{}"]}}"#,
            "s".repeat(MAX_STOP_BYTES + 1)
        );
        assert_eq!(norm(&long).map(|_| ()).map_err(|e| e.status), Err(400));
    }

    #[test]
    fn choices_and_logprobs_are_kept_and_greedy_choices_generate_once() {
        let base = r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}]"#;
        let greedy = norm(&format!(r#"{base},"temperature":0,"n":3}}"#)).expect("valid");
        assert_eq!((greedy.sampling.n, greedy.sampling.generated_choices()), (3, 1));
        assert!(greedy.sampling.cache_can_hold(), "every greedy choice is the one cached answer");
        let sampled = norm(&format!(r#"{base},"n":3}}"#)).expect("valid");
        assert_eq!(sampled.sampling.generated_choices(), 3);
        assert!(!sampled.sampling.cache_can_hold());
        let top =
            norm(&format!(r#"{base},"temperature":0,"logprobs":true,"top_logprobs":5}}"#)).expect("valid");
        assert_eq!(top.sampling.logprobs, Some(5));
        assert!(!top.sampling.cache_can_hold(), "the cache keeps no log-probabilities");
        let plain = norm(&format!(r#"{base},"logprobs":false}}"#)).expect("valid");
        assert_eq!((plain.sampling.logprobs, plain.sampling.n), (None, 1));
    }

    #[test]
    fn stop_sequences_are_a_set() {
        let r = norm(r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"}],"stop":["b","a","b",""]}"#)
            .expect("valid");
        assert_eq!(r.sampling.stop, vec!["a".to_owned(), "b".to_owned()]);
    }

    #[test]
    fn stream_options_choose_the_delivery_but_not_the_key() {
        let base = r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}]"#;
        let whole = norm(&format!("{base}}}")).expect("valid");
        let stream = norm(&format!(r#"{base},"stream":true}}"#)).expect("valid");
        let usage = norm(&format!(r#"{base},"stream":true,"stream_options":{{"include_usage":true}}}}"#))
            .expect("valid");
        assert_eq!(whole.delivery, Delivery::Whole);
        assert_eq!(stream.delivery, Delivery::Stream { usage: false });
        assert_eq!(usage.delivery, Delivery::Stream { usage: true });
        assert_eq!((&whole.messages, &whole.sampling), (&usage.messages, &usage.sampling));
    }

    #[test]
    fn rejects_what_cannot_be_honoured() {
        let cases = [
            (r#"{"model":"smollm2-135m-instruct","messages":[]}"#, 400),
            (r#"{"model":"smollm2-135m-instruct","messages":[{"role":"system","content":"x"}]}"#, 400),
            (r#"{"model":"smollm2-135m-instruct","messages":[{"role":"wizard","content":"x"}]}"#, 400),
            (r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"n":0}"#, 400),
            (r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"n":9}"#, 400),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"temperature":3}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"top_p":0}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"max_tokens":100000}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"tools":[{}]}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"frequency_penalty":2.5}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"repetition_penalty":0}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}}"#,
                400,
            ),
            (
                r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}"#,
                400,
            ),
            (r#"{"model":"gpt-4","messages":[{"role":"user","content":"x"}]}"#, 404),
        ];
        for (json, status) in cases {
            assert_eq!(norm(json).map(|_| ()).map_err(|e| e.status), Err(status), "{json}");
        }
    }
}
