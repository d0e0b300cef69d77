//! OpenAI's text-completion API (`POST /v1/completions`): a prompt continued as text, the API base
//! models are made for.
//!
//! A text completion is normalized into the same form as a chat request: one user message holding the
//! prompt exactly as sent (no whitespace rule applies: a trailing space changes the continuation), with
//! [`ModelApi::Completions`] as its API. So it is keyed (the API is part of the key), cached,
//! coalesced, invalidated and generated as chat is; the pod continues the prompt without a chat
//! template, and only the answer's rendering differs ([`TextCompletion`]). `echo` puts the prompt
//! before the answer when it is rendered and never changes what is cached.
//!
//! Served: `prompt` (one string, or a list of one), `max_tokens` (16 when absent, as at OpenAI),
//! `temperature`, `top_p`, `seed`, `stop`, the penalties, `echo`, `stream` and `stream_options`.
//! Refused with a 400 rather than ignored: several prompts, token-id prompts, `n` or `best_of` above 1,
//! `logprobs`, `suffix` and `logit_bias`. Text completions are answered from exact keys only: a
//! continuation depends on every character of its prompt, so paraphrases never share an answer.

use serde::{Deserialize, Serialize};

use crate::model_spec::ModelApi;
use crate::models::ModelTable;
use crate::normalize::{normalize_api, Limits, NormalizedRequest};
use crate::openai::{
    ChatCompletionRequest, ChatMessage, MessageContent, StopSequences, StreamOptions, Usage,
};
use crate::RequestError;

/// `max_tokens` of a text completion that gives none (OpenAI's default for this API).
pub const DEFAULT_COMPLETION_MAX_TOKENS: u32 = 16;

/// `POST /v1/completions` request body.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CompletionRequest {
    /// Model name.
    pub model: String,
    /// The text to continue.
    #[serde(default)]
    pub prompt: Option<Prompt>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Options of a streamed answer.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Upper bound on generated tokens ([`DEFAULT_COMPLETION_MAX_TOKENS`] when absent).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature, 0 to 2.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass.
    #[serde(default)]
    pub top_p: Option<f32>,
    /// Seed for reproducible sampling.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop sequences.
    #[serde(default)]
    pub stop: Option<StopSequences>,
    /// Put the prompt before the answer.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Choices; only 1 is served.
    #[serde(default)]
    pub n: Option<u32>,
    /// Server-side candidates; only 1 is served.
    #[serde(default)]
    pub best_of: Option<u32>,
    /// Log-probabilities of the top tokens; not served on this API.
    #[serde(default)]
    pub logprobs: Option<u32>,
    /// Text after the completion (insertion); not served.
    #[serde(default)]
    pub suffix: Option<String>,
    /// Presence penalty, -2 to 2.
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    /// Frequency penalty, -2 to 2.
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    /// vLLM's repetition penalty (1 is none).
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    /// Logit bias is not served; a non-empty map is rejected.
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// End-user id; does not change the answer.
    #[serde(default)]
    pub user: Option<String>,
}

/// `prompt`: OpenAI accepts text, a list of texts, token ids, or lists of token ids.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Prompt {
    /// One prompt.
    Text(String),
    /// Several prompts (one is served).
    Texts(Vec<String>),
    /// Token ids (not served: ids depend on the backend's tokenizer).
    Tokens(Vec<u32>),
    /// Several prompts as token ids (not served).
    TokenLists(Vec<Vec<u32>>),
}

/// Parses a request body, with a 413 above `limit` bytes and a 400 naming the problem otherwise.
pub fn parse_completion_request(body: &[u8], limit: usize) -> Result<CompletionRequest, RequestError> {
    if body.len() > limit {
        return Err(RequestError::too_large(limit));
    }
    serde_json::from_slice(body).map_err(|e| RequestError::invalid(format!("invalid request body: {e}")))
}

/// Normalizes a text completion against the served models (see the module's rules).
pub fn normalize_completion(
    request: &CompletionRequest,
    models: &ModelTable,
    limits: &Limits,
) -> Result<NormalizedRequest, RequestError> {
    let prompt = one_prompt(request.prompt.as_ref())?;
    let refused = |param: &str, what: &str| {
        Err(RequestError::invalid_param(param, format!("{what} is not supported on /v1/completions")))
    };
    if request.n.is_some_and(|n| n != 1) {
        return refused("n", "`n` other than 1");
    }
    if request.best_of.is_some_and(|n| n != 1) {
        return refused("best_of", "`best_of` other than 1");
    }
    if request.logprobs.is_some() {
        return refused("logprobs", "`logprobs`");
    }
    if request.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return refused("suffix", "`suffix`");
    }
    let as_chat = ChatCompletionRequest {
        model: request.model.clone(),
        messages: vec![ChatMessage {
            role: "user".to_owned(),
            content: Some(MessageContent::Text(prompt.to_owned())),
            name: None,
        }],
        stream: request.stream,
        stream_options: request.stream_options.clone(),
        max_tokens: Some(request.max_tokens.unwrap_or(DEFAULT_COMPLETION_MAX_TOKENS)),
        temperature: request.temperature,
        top_p: request.top_p,
        seed: request.seed,
        stop: request.stop.clone(),
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        repetition_penalty: request.repetition_penalty,
        logit_bias: request.logit_bias.clone(),
        ..Default::default()
    };
    let mut normalized = normalize_api(&as_chat, models, limits, ModelApi::Completions)?;
    // The prompt as sent: whitespace at its ends is part of what the model continues.
    normalized.messages[0].content = prompt.to_owned();
    normalized.echo = request.echo.unwrap_or(false);
    Ok(normalized)
}

fn one_prompt(prompt: Option<&Prompt>) -> Result<&str, RequestError> {
    let text = match prompt {
        None => return Err(RequestError::invalid_param("prompt", "`prompt` is required")),
        Some(Prompt::Text(text)) => text.as_str(),
        Some(Prompt::Texts(texts)) if texts.len() == 1 => texts[0].as_str(),
        Some(Prompt::Texts(_) | Prompt::TokenLists(_)) => {
            return Err(RequestError::invalid_param(
                "prompt",
                "one prompt per request is supported; send each prompt in a request of its own",
            ))
        }
        Some(Prompt::Tokens(_)) => {
            return Err(RequestError::invalid_param(
                "prompt",
                "token-id prompts are not supported (ids depend on the backend's tokenizer); send text",
            ))
        }
    };
    if text.is_empty() {
        return Err(RequestError::invalid_param("prompt", "`prompt` must not be empty"));
    }
    Ok(text)
}

/// A text completion, whole (`usage` set, every `finish_reason` set) or as one streamed chunk.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct TextCompletion {
    /// Completion id (`cmpl-...`).
    pub id: String,
    /// Always `text_completion`.
    pub object: String,
    /// Unix seconds when the answer was generated.
    pub created: i64,
    /// The model that generated it.
    pub model: String,
    /// The answer (one choice; none in a stream's usage chunk).
    pub choices: Vec<TextChoice>,
    /// Token counts: in a whole answer, and in the last chunk of a stream that asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One choice of a [`TextCompletion`].
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct TextChoice {
    /// The generated text (after the prompt when `echo`), or the next piece of it in a chunk.
    pub text: String,
    /// Position among the choices.
    pub index: u32,
    /// Always null: log-probabilities are not served on this API.
    pub logprobs: Option<serde_json::Value>,
    /// `stop` or `length`; null in a stream's chunks until the last.
    pub finish_reason: Option<String>,
}

/// The `object` of every text completion and chunk.
pub const TEXT_COMPLETION_OBJECT: &str = "text_completion";

impl TextCompletion {
    /// A completion or chunk with one choice.
    pub fn of_text(id: &str, created: i64, model: &str, text: String, finish_reason: Option<&str>) -> Self {
        let choice =
            TextChoice { text, index: 0, logprobs: None, finish_reason: finish_reason.map(str::to_owned) };
        Self {
            id: id.to_owned(),
            object: TEXT_COMPLETION_OBJECT.to_owned(),
            created,
            model: model.to_owned(),
            choices: vec![choice],
            usage: None,
        }
    }

    /// The chunk ending a stream that asked for usage: no choices, the token counts.
    pub fn usage_chunk(id: &str, created: i64, model: &str, usage: Usage) -> Self {
        Self {
            choices: Vec::new(),
            usage: Some(usage),
            ..Self::of_text(id, created, model, String::new(), None)
        }
    }

    /// The completion framed as one server-sent event.
    pub fn to_sse(&self) -> String {
        format!("data: {}\n\n", serde_json::to_string(self).unwrap_or_default())
    }
}

/// The id of a text completion whose chat completion id is `chat_id` (`chatcmpl-X` becomes `cmpl-X`).
pub fn text_completion_id(chat_id: &str) -> String {
    format!("cmpl-{}", chat_id.strip_prefix("chatcmpl-").unwrap_or(chat_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_key::{CacheKey, SemanticQuery};
    use crate::model_spec::ModelSpec;
    use crate::normalize::normalize;
    use crate::openai::parse_chat_request;

    fn table() -> ModelTable {
        let both = ModelSpec { apis: vec![ModelApi::Chat, ModelApi::Completions], ..Default::default() };
        let text_only = ModelSpec { apis: vec![ModelApi::Completions], ..Default::default() };
        ModelTable::parse("m@1,base@2,chat@1")
            .expect("table")
            .with_spec("m", both)
            .with_spec("base", text_only)
    }

    fn text(json: &str) -> Result<NormalizedRequest, RequestError> {
        normalize_completion(
            &parse_completion_request(json.as_bytes(), 1 << 20)?,
            &table(),
            &Limits::default(),
        )
    }

    #[test]
    fn a_prompt_is_kept_verbatim_and_keyed_apart_from_the_same_chat_question() {
        let request = text(r#"{"model":"m","prompt":"Q: 2+2?\nA: ","temperature":0}"#).expect("valid");
        assert_eq!(request.messages[0].content, "Q: 2+2?\nA: ");
        assert_eq!((request.api, request.sampling.max_tokens), (ModelApi::Completions, 16));
        let trimmed = text(r#"{"model":"m","prompt":["Q: 2+2?\nA:"],"temperature":0}"#).expect("valid");
        assert_ne!(CacheKey::derive("t", &request), CacheKey::derive("t", &trimmed), "trailing space counts");
        let chat = parse_chat_request(
            br#"{"model":"m","messages":[{"role":"user","content":"Q: 2+2?\nA: "}],"temperature":0,"max_tokens":16}"#,
            1 << 20,
        )
        .expect("json");
        let chat = normalize(&chat, &table(), &Limits::default()).expect("valid");
        assert_ne!(CacheKey::derive("t", &chat), CacheKey::derive("t", &request));
        assert!(SemanticQuery::derive("t", &request).is_none(), "exact hits only");
        // Echo and streaming change the rendering, never the key.
        let echoed =
            text(r#"{"model":"m","prompt":"Q: 2+2?\nA: ","temperature":0,"echo":true,"stream":true}"#)
                .expect("valid");
        assert!(echoed.echo);
        assert_eq!(CacheKey::derive("t", &echoed), CacheKey::derive("t", &request));
    }

    #[test]
    fn what_the_api_does_not_serve_is_refused_by_name() {
        for (body, param) in [
            (r#"{"model":"m"}"#, "prompt"),
            (r#"{"model":"m","prompt":""}"#, "prompt"),
            (r#"{"model":"m","prompt":["a","b"]}"#, "prompt"),
            (r#"{"model":"m","prompt":[1,2,3]}"#, "prompt"),
            (r#"{"model":"m","prompt":"a","n":2}"#, "n"),
            (r#"{"model":"m","prompt":"a","best_of":3}"#, "best_of"),
            (r#"{"model":"m","prompt":"a","logprobs":2}"#, "logprobs"),
            (r#"{"model":"m","prompt":"a","suffix":"b"}"#, "suffix"),
            (r#"{"model":"chat","prompt":"a"}"#, "model"),
        ] {
            let error = text(body).expect_err(body);
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some(param)),
                "{body}: {}",
                error.message
            );
        }
        assert_eq!(text(r#"{"model":"m","prompt":7}"#).map_err(|e| e.status).err(), Some(400));
        assert_eq!(text(r#"{"model":"nope","prompt":"a"}"#).map_err(|e| e.status).err(), Some(404));
    }

    #[test]
    fn a_completion_only_model_refuses_chat_clearly() {
        let chat =
            parse_chat_request(br#"{"model":"base","messages":[{"role":"user","content":"hi"}]}"#, 1 << 20)
                .expect("json");
        let error = normalize(&chat, &table(), &Limits::default()).expect_err("text only");
        assert_eq!((error.status, error.param.as_deref()), (400, Some("model")));
        assert!(error.message.contains("/v1/completions"), "{}", error.message);
        assert!(text(r#"{"model":"base","prompt":"Once"}"#).is_ok());
    }

    #[test]
    fn chunks_and_ids_have_the_text_completion_shape() {
        let chunk = TextCompletion::of_text("cmpl-1", 7, "m", " Paris".into(), None).to_sse();
        assert!(chunk.contains(r#""object":"text_completion""#) && chunk.contains(r#""text":" Paris""#));
        assert!(chunk.contains(r#""logprobs":null"#) && chunk.contains(r#""finish_reason":null"#));
        assert!(!chunk.contains("usage"));
        assert_eq!(text_completion_id("chatcmpl-abc"), "cmpl-abc");
    }
}
