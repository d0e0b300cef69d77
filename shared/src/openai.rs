//! OpenAI chat-completions wire types, as clients send and receive them.
//!
//! Requests are parsed leniently where OpenAI is lenient (content as a string or as text parts, `stop` as
//! a string or a list) and strictly on types: a wrong type is a 400, never a silent default.

use serde::{Deserialize, Serialize};

use crate::RequestError;

/// `POST /v1/chat/completions` request body. Fields this mesh does not model are ignored, except the
/// ones that would change the answer, which are rejected by [`crate::normalize`].
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChatCompletionRequest {
    /// Model name, e.g. `smollm2-135m-instruct`.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Upper bound on generated tokens (legacy name).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Upper bound on generated tokens (current name; wins over `max_tokens`).
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// Sampling temperature, 0 to 2; 0 means greedy. OpenAI's default is 1.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1].
    #[serde(default)]
    pub top_p: Option<f32>,
    /// Seed for reproducible sampling.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop sequences: a string or up to four strings.
    #[serde(default)]
    pub stop: Option<StopSequences>,
    /// Number of choices, 1 to [`crate::normalize::MAX_CHOICES`].
    #[serde(default)]
    pub n: Option<u32>,
    /// Presence penalty, -2 to 2.
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    /// Frequency penalty, -2 to 2.
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    /// Return the log-probability of every generated token.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// With `logprobs`, how many of the most likely tokens to list at each position, 0 to
    /// [`crate::normalize::MAX_TOP_LOGPROBS`].
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Logit bias is not served; a non-empty map is rejected.
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// Tools are not served; a non-empty list is rejected.
    #[serde(default)]
    pub tools: Option<Vec<serde_json::Value>>,
    /// Only `{"type": "text"}` is served.
    #[serde(default)]
    pub response_format: Option<serde_json::Value>,
    /// End-user id; does not change the answer.
    #[serde(default)]
    pub user: Option<String>,
    /// vLLM's repetition penalty (1 is none).
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    /// Options of a streamed answer (only with `stream: true`).
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
}

/// `stop`: one string or a list of strings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum StopSequences {
    /// A single stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

/// One message of the conversation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (`developer` is read as `system`).
    pub role: String,
    /// Text, or a list of text parts; null is allowed for assistant turns.
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Participant name; does not change the answer of this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Message content: a string or OpenAI's list of typed parts.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Typed parts; only `text` parts are served.
    Parts(Vec<ContentPart>),
}

/// One typed content part.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ContentPart {
    /// Part type; only `text` is served.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// `stream_options` of a streamed request.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct StreamOptions {
    /// Whether a last chunk, with no choices, carries the token counts.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// How an answer goes to the client. It never changes the answer, so it is never part of a cache key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// One JSON `chat.completion`.
    #[default]
    Whole,
    /// Server-sent `chat.completion.chunk` events.
    Stream {
        /// Whether a last chunk, with no choices, carries the token counts (`stream_options.include_usage`).
        usage: bool,
    },
}

impl Delivery {
    /// Whether the answer is streamed.
    pub fn is_stream(self) -> bool {
        matches!(self, Self::Stream { .. })
    }

    /// Whether a streamed answer ends with a usage chunk.
    pub fn streams_usage(self) -> bool {
        matches!(self, Self::Stream { usage: true })
    }
}

/// Token counts of one completion.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the rendered prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Their sum.
    pub total_tokens: u32,
}

/// A non-streamed chat completion (`object: "chat.completion"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ChatCompletion {
    /// Completion id (`chatcmpl-...`).
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds when the answer was generated.
    pub created: i64,
    /// The model that generated it.
    pub model: String,
    /// The answers (one).
    pub choices: Vec<Choice>,
    /// Token counts.
    pub usage: Usage,
}

/// One answer of a [`ChatCompletion`].
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Choice {
    /// Position among the choices.
    pub index: u32,
    /// The assistant message.
    pub message: AssistantMessage,
    /// `stop` or `length`.
    pub finish_reason: String,
    /// The generated tokens' log-probabilities, when the request asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
}

/// The log-probabilities of one choice's tokens (`choices[].logprobs`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChoiceLogprobs {
    /// One entry per generated token, in order.
    pub content: Vec<TokenLogprob>,
}

/// One generated token and how likely the model found it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (lossy when the token is part of a multi-byte character).
    pub token: String,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The token's exact bytes.
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position, most likely first (`top_logprobs` of them).
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of the most likely tokens at a position.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The token's exact bytes.
    pub bytes: Vec<u8>,
}

/// The assistant's message in a completion.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: String,
    /// The generated text.
    pub content: String,
}

/// One server-sent event of a streamed completion (`object: "chat.completion.chunk"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ChatCompletionChunk {
    /// Completion id, the same in every chunk.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    /// Unix seconds.
    pub created: i64,
    /// The model.
    pub model: String,
    /// One choice's delta; none in the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// The token counts, in the last chunk of a stream that asked for them (`stream_options`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The delta of one choice in a chunk.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct ChunkChoice {
    /// Position among the choices.
    pub index: u32,
    /// What this chunk adds.
    pub delta: Delta,
    /// Set on the choice's last chunk only.
    pub finish_reason: Option<String>,
    /// The log-probabilities of the tokens this chunk adds, when the request asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
}

/// Text added by one chunk.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Delta {
    /// `assistant` on the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The next piece of text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

impl ChatCompletionChunk {
    /// A chunk with one choice, the first.
    pub fn new(id: &str, created: i64, model: &str, delta: Delta, finish_reason: Option<&str>) -> Self {
        let choice =
            ChunkChoice { index: 0, delta, finish_reason: finish_reason.map(str::to_owned), logprobs: None };
        Self::of_choice(id, created, model, choice)
    }

    /// A chunk with one choice.
    pub fn of_choice(id: &str, created: i64, model: &str, choice: ChunkChoice) -> Self {
        Self {
            id: id.to_owned(),
            object: "chat.completion.chunk".to_owned(),
            created,
            model: model.to_owned(),
            choices: vec![choice],
            usage: None,
        }
    }

    /// The chunk that ends a stream asking for usage: no choices, the token counts.
    pub fn usage(id: &str, created: i64, model: &str, usage: Usage) -> Self {
        Self {
            id: id.to_owned(),
            object: "chat.completion.chunk".to_owned(),
            created,
            model: model.to_owned(),
            choices: Vec::new(),
            usage: Some(usage),
        }
    }

    /// The chunk framed as one server-sent event: `data: {json}\n\n`.
    pub fn to_sse(&self) -> String {
        format!("data: {}\n\n", serde_json::to_string(self).unwrap_or_default())
    }
}

/// The event that ends every stream.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

/// Refuses a request body declared as anything but JSON (`application/json`, or a `+json` type), as
/// OpenAI's API answers 400 to a JSON body sent as `text/plain`. A request with no `Content-Type` is read
/// as JSON.
pub fn check_json_content_type(content_type: Option<&str>) -> Result<(), RequestError> {
    let Some(declared) = content_type else { return Ok(()) };
    let media = declared.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media == "application/json" || (media.starts_with("application/") && media.ends_with("+json")) {
        return Ok(());
    }
    Err(RequestError::invalid(format!(
        "the request body must be JSON, sent with `Content-Type: application/json` (got {:?})",
        declared.chars().take(64).collect::<String>()
    )))
}

/// Parses a request body, with a 413 above `limit` bytes and a 400 naming the problem otherwise.
pub fn parse_chat_request(body: &[u8], limit: usize) -> Result<ChatCompletionRequest, RequestError> {
    if body.len() > limit {
        return Err(RequestError::too_large(limit));
    }
    serde_json::from_slice(body).map_err(|e| RequestError::invalid(format!("invalid request body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_string_and_part_content_and_stop_forms() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},
            {"role":"assistant","content":null},{"role":"user","content":"yo"}],"stop":"x","stream":true}"#;
        let req = parse_chat_request(body, 1 << 20).expect("valid");
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.stop, Some(StopSequences::One("x".into())));
        assert_eq!(req.stream, Some(true));
    }

    #[test]
    fn only_a_json_content_type_or_none_is_read() {
        for ok in [
            None,
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("application/merge+json"),
        ] {
            assert!(check_json_content_type(ok).is_ok(), "{ok:?}");
        }
        for refused in
            ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""]
        {
            assert_eq!(check_json_content_type(Some(refused)).map_err(|e| e.status), Err(400), "{refused}");
        }
    }

    #[test]
    fn rejects_wrong_types_malformed_json_and_oversized_bodies() {
        let wrong = parse_chat_request(br#"{"model":"m","messages":"hi"}"#, 1 << 20).expect_err("wrong type");
        assert_eq!(wrong.status, 400);
        assert!(
            wrong.message.contains("messages") || wrong.message.contains("invalid type"),
            "{}",
            wrong.message
        );
        assert_eq!(parse_chat_request(b"{not json", 1 << 20).map_err(|e| e.status), Err(400));
        assert_eq!(parse_chat_request(br#"{"messages":[]}"#, 1 << 20).map_err(|e| e.status), Err(400));
        assert_eq!(parse_chat_request(&[b' '; 100], 10).map_err(|e| e.status), Err(413));
    }

    #[test]
    fn chunks_frame_as_server_sent_events() {
        let delta = Delta { role: None, content: Some("Hi".into()) };
        let sse = ChatCompletionChunk::new("chatcmpl-1", 7, "m", delta, None).to_sse();
        assert!(sse.starts_with("data: {") && sse.ends_with("}\n\n"));
        assert!(sse.contains(r#""content":"Hi""#) && !sse.contains("role"));
    }
}
