//! A cached chat completion: what the core commits, what the regional and edge tiers keep, and how it is
//! rendered back to a client as a JSON completion or as a server-sent event stream.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hex;
use crate::model_spec::ModelApi;
use crate::normalize::NormalizedRequest;
use crate::openai::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice, Delivery,
    Delta, TokenLogprob, Usage, SSE_DONE,
};
use crate::text_completion::{text_completion_id, TextCompletion};

/// One cached answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedCompletion {
    /// The versioned cache key ([`crate::cache_key::CacheKey`]).
    pub key: String,
    /// Tenant that owns the entry.
    pub tenant: String,
    /// Model name.
    pub model: String,
    /// Model version the answer was generated with.
    pub model_version: u64,
    /// The generated text.
    pub content: String,
    /// `stop` or `length`.
    pub finish_reason: String,
    /// Prompt tokens of the original generation.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
    /// Strong ETag of the answer (quoted).
    pub etag: String,
    /// Unix milliseconds when it was committed.
    pub created_ms: i64,
    /// Time to live in seconds from `created_ms`; 0 means no expiry.
    pub ttl_s: u64,
    /// The question this answers in its semantic partition, when the tier that stored it knew it (the
    /// regional node attaches it; the hot set needs it for the edge's semantic tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<AnsweredQuestion>,
    /// The core's Ed25519 signature over the answer's signed fields, as hex
    /// ([`crate::answer_signature`]); empty when the core that made it signs nothing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    /// The cache tags of the requests it answers ([`crate::cache_tags`]), sorted: an invalidation of
    /// any of them (by its tenant) refuses it at every tier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The last user turn an entry answers, within its partition ([`crate::cache_key::SemanticQuery`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnsweredQuestion {
    /// The semantic partition (tenant, model, version, sampling and context fingerprint).
    pub partition: String,
    /// The question's text.
    pub text: String,
}

impl CachedCompletion {
    /// This entry, naming the question of `query` when it names none yet and carries no signature (the
    /// core's signature covers the question it named, or that it named none).
    pub fn answering(mut self, query: Option<crate::cache_key::SemanticQuery<'_>>) -> Self {
        if self.question.is_none() && self.signature.is_empty() {
            self.question =
                query.map(|q| AnsweredQuestion { partition: q.partition, text: q.question.to_owned() });
        }
        self
    }

    /// The strong ETag (quoted) of an answer's content and finish reason.
    pub fn etag_of(content: &str, finish_reason: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update((content.len() as u64).to_be_bytes());
        hasher.update(content.as_bytes());
        hasher.update(finish_reason.as_bytes());
        format!("\"{}\"", &hex::encode(&hasher.finalize())[..32])
    }

    /// Whether the entry has expired at `now_ms` (Unix milliseconds).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        expired(self.created_ms, self.ttl_s, now_ms)
    }

    /// Seconds left to live at `now_ms` (`None` when it never expires).
    pub fn remaining_ttl_s(&self, now_ms: i64) -> Option<u64> {
        (self.ttl_s != 0).then(|| {
            let end = self.created_ms.saturating_add((self.ttl_s as i64).saturating_mul(1000));
            (end.saturating_sub(now_ms).max(0) / 1000) as u64
        })
    }

    /// The OpenAI completion id of this entry (stable across hits).
    pub fn completion_id(&self) -> String {
        crate::cache_key::CacheKey::parse(&self.key)
            .map_or_else(|| format!("chatcmpl-{}", self.etag.trim_matches('"')), |k| k.completion_id())
    }

    /// Approximate bytes the entry takes in memory, for byte-bounded caches.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.key.len()
            + self.tenant.len()
            + self.model.len()
            + self.content.len()
            + self.finish_reason.len()
            + self.etag.len()
            + self.question.as_ref().map_or(0, |q| q.partition.len() + q.text.len())
            + self.signature.len()
            + self.tags.iter().map(|t| t.len() + std::mem::size_of::<String>()).sum::<usize>()
    }

    /// The entry as a non-streamed chat completion of `copies` choices (a greedy request's `n`: every
    /// choice is this answer).
    pub fn to_response(&self, copies: u32) -> ChatCompletion {
        let choices = (0..copies.max(1))
            .map(|index| Choice {
                index,
                message: AssistantMessage { role: "assistant".to_owned(), content: self.content.clone() },
                finish_reason: self.finish_reason.clone(),
                logprobs: None,
            })
            .collect();
        ChatCompletion {
            id: self.completion_id(),
            object: "chat.completion".to_owned(),
            created: self.created_ms / 1000,
            model: self.model.clone(),
            choices,
            usage: self.usage(copies),
        }
    }

    /// The token counts of `copies` choices of this answer (each choice's tokens count, as at OpenAI).
    pub fn usage(&self, copies: u32) -> Usage {
        let completion_tokens = self.completion_tokens.saturating_mul(copies.max(1));
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens,
            total_tokens: self.prompt_tokens.saturating_add(completion_tokens),
        }
    }

    /// The entry as the body of the answer `rendering` asks for (JSON, or the complete SSE stream).
    pub fn render(&self, rendering: Rendering<'_>) -> String {
        match (rendering.api, rendering.delivery) {
            (ModelApi::Chat, Delivery::Whole) => {
                serde_json::to_string(&self.to_response(rendering.copies)).unwrap_or_default()
            }
            (ModelApi::Chat, Delivery::Stream { usage }) => self.to_sse(usage, rendering.copies),
            (ModelApi::Completions, Delivery::Whole) => {
                let text = format!("{}{}", rendering.echo.unwrap_or_default(), self.content);
                let id = text_completion_id(&self.completion_id());
                let mut whole = TextCompletion::of_text(
                    &id,
                    self.created_ms / 1000,
                    &self.model,
                    text,
                    Some(&self.finish_reason),
                );
                whole.usage = Some(self.usage(1));
                serde_json::to_string(&whole).unwrap_or_default()
            }
            (ModelApi::Completions, Delivery::Stream { usage }) => {
                let id = text_completion_id(&self.completion_id());
                let head = StreamHead { api: ModelApi::Completions, echo: rendering.echo, ..self.head(&id) };
                let mut out = head.role_chunk(0);
                out.push_str(&head.content_chunk(0, &self.content, None));
                out.push_str(&head.finish_chunk(0, &self.finish_reason));
                if usage {
                    out.push_str(&head.usage_chunk(self.usage(1)));
                }
                out.push_str(SSE_DONE);
                out
            }
        }
    }

    fn head<'a>(&'a self, id: &'a str) -> StreamHead<'a> {
        StreamHead {
            id,
            created: self.created_ms / 1000,
            model: &self.model,
            api: ModelApi::Chat,
            echo: None,
        }
    }

    /// The entry as a complete SSE stream of `copies` choices: for each choice a role chunk, the content
    /// and the finish chunk; then the usage chunk when `usage`; `[DONE]`.
    pub fn to_sse(&self, usage: bool, copies: u32) -> String {
        let id = self.completion_id();
        let head = self.head(&id);
        let mut out = String::new();
        for index in 0..copies.max(1) {
            out.push_str(&head.role_chunk(index));
            out.push_str(&head.content_chunk(index, &self.content, None));
            out.push_str(&head.finish_chunk(index, &self.finish_reason));
        }
        if usage {
            out.push_str(&head.usage_chunk(self.usage(copies)));
        }
        out.push_str(SSE_DONE);
        out
    }
}

/// How an answer is written for the request that asked: the API's shape, the prompt a text completion
/// echoes, JSON or a stream, and how many copies of the one answer (a greedy request's `n`).
#[derive(Clone, Copy, Debug)]
pub struct Rendering<'a> {
    /// Chat or text completion.
    pub api: ModelApi,
    /// The prompt written before a text completion's answer (`echo`).
    pub echo: Option<&'a str>,
    /// JSON or server-sent events.
    pub delivery: Delivery,
    /// Choices rendered from the one answer.
    pub copies: u32,
}

impl NormalizedRequest {
    /// How this request's answer is written.
    pub fn rendering(&self) -> Rendering<'_> {
        let echo = (self.echo && self.api == ModelApi::Completions)
            .then(|| self.messages.first().map(|m| m.content.as_str()))
            .flatten();
        Rendering { api: self.api, echo, delivery: self.delivery, copies: self.sampling.copies() }
    }
}

impl Rendering<'_> {
    /// The body's content type.
    pub fn content_type(&self) -> &'static str {
        if self.delivery.is_stream() {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    /// The completion id for a chat completion id (`cmpl-` for a text completion).
    pub fn completion_id(&self, chat_id: &str) -> String {
        match self.api {
            ModelApi::Chat => chat_id.to_owned(),
            ModelApi::Completions => text_completion_id(chat_id),
        }
    }
}

/// What every chunk of one stream shares; renders the chunks a tier emits while relaying generation.
#[derive(Clone, Copy, Debug)]
pub struct StreamHead<'a> {
    /// Completion id.
    pub id: &'a str,
    /// Unix seconds.
    pub created: i64,
    /// Model name.
    pub model: &'a str,
    /// The API whose chunks these are.
    pub api: ModelApi,
    /// The prompt a text completion's stream starts with (`echo`).
    pub echo: Option<&'a str>,
}

impl<'a> StreamHead<'a> {
    /// The head of a chat completion stream.
    pub fn chat(id: &'a str, created: i64, model: &'a str) -> Self {
        Self { id, created, model, api: ModelApi::Chat, echo: None }
    }

    /// The head of the stream `rendering` asks for.
    pub fn rendered(id: &'a str, created: i64, model: &'a str, rendering: Rendering<'a>) -> Self {
        Self { id, created, model, api: rendering.api, echo: rendering.echo }
    }

    /// What opens choice `index`: a chat chunk announcing the assistant role; for a text completion,
    /// the echoed prompt (nothing without `echo`).
    pub fn role_chunk(&self, index: u32) -> String {
        if self.api == ModelApi::Completions {
            return self.echo.map(|prompt| self.content_chunk(index, prompt, None)).unwrap_or_default();
        }
        let delta = Delta { role: Some("assistant".into()), content: None };
        self.chunk(ChunkChoice { index, delta, finish_reason: None, logprobs: None })
    }

    /// A chunk carrying the next piece of choice `index`'s text, with its tokens' log-probabilities
    /// when the request asked for them.
    pub fn content_chunk(&self, index: u32, text: &str, logprobs: Option<&[TokenLogprob]>) -> String {
        if self.api == ModelApi::Completions {
            return self.text_chunk(index, text, None);
        }
        let delta = Delta { role: None, content: Some(text.to_owned()) };
        let logprobs = logprobs.map(|content| ChoiceLogprobs { content: content.to_vec() });
        self.chunk(ChunkChoice { index, delta, finish_reason: None, logprobs })
    }

    /// The chunk that ends choice `index`'s text.
    pub fn finish_chunk(&self, index: u32, finish_reason: &str) -> String {
        if self.api == ModelApi::Completions {
            return self.text_chunk(index, "", Some(finish_reason));
        }
        let finish_reason = Some(finish_reason.to_owned());
        self.chunk(ChunkChoice { index, delta: Delta::default(), finish_reason, logprobs: None })
    }

    /// The chunk with the token counts, after the finish chunks, when the client asked for usage.
    pub fn usage_chunk(&self, usage: Usage) -> String {
        if self.api == ModelApi::Completions {
            return TextCompletion::usage_chunk(self.id, self.created, self.model, usage).to_sse();
        }
        ChatCompletionChunk::usage(self.id, self.created, self.model, usage).to_sse()
    }

    fn text_chunk(&self, index: u32, text: &str, finish_reason: Option<&str>) -> String {
        let mut chunk =
            TextCompletion::of_text(self.id, self.created, self.model, text.to_owned(), finish_reason);
        chunk.choices[0].index = index;
        chunk.to_sse()
    }

    fn chunk(&self, choice: ChunkChoice) -> String {
        ChatCompletionChunk::of_choice(self.id, self.created, self.model, choice).to_sse()
    }
}

/// Whether an entry created at `created_ms` to live `ttl_s` seconds (0: forever) has expired at `now_ms`.
pub fn expired(created_ms: i64, ttl_s: u64, now_ms: i64) -> bool {
    ttl_s != 0 && now_ms >= created_ms.saturating_add((ttl_s as i64).saturating_mul(1000))
}

/// An example entry for tests (feature `test-support`, and this crate's own tests).
#[cfg(any(test, feature = "test-support"))]
impl CachedCompletion {
    /// An entry under `key` answering `content`: tenant `dev`, model `m` at version 1, finished with
    /// `stop`, one prompt and one completion token, its ETag derived, created at 0 and never expiring.
    /// Tests name only what they depend on: `CachedCompletion { tenant: "acme".into(),
    /// ..CachedCompletion::example("k", "an answer") }`.
    pub fn example(key: impl Into<String>, content: impl Into<String>) -> Self {
        let content = content.into();
        Self {
            key: key.into(),
            tenant: "dev".into(),
            model: "m".into(),
            model_version: 1,
            etag: Self::etag_of(&content, "stop"),
            content,
            finish_reason: "stop".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
            created_ms: 0,
            ttl_s: 0,
            question: None,
            signature: String::new(),
            tags: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> CachedCompletion {
        let content = "Paris is the capital of France.".to_owned();
        CachedCompletion {
            prompt_tokens: 10,
            completion_tokens: 7,
            created_ms: 1_000_000,
            ttl_s: 60,
            ..CachedCompletion::example(format!("v1:{}", "ab".repeat(32)), content)
        }
    }

    #[test]
    fn expiry_and_etag() {
        let e = entry();
        assert!(!e.is_expired(1_000_000 + 59_999));
        assert!(e.is_expired(1_000_000 + 60_000));
        assert_eq!(e.remaining_ttl_s(1_000_000 + 30_000), Some(30));
        assert!(!CachedCompletion { ttl_s: 0, ..e.clone() }.is_expired(i64::MAX));
        assert!(e.etag.starts_with('"') && e.etag.ends_with('"') && e.etag.len() == 34);
        assert_ne!(e.etag, CachedCompletion::etag_of(&e.content, "length"));
    }

    #[test]
    fn renders_completion_and_stream_with_the_same_text() {
        let e = entry();
        let response = e.to_response(1);
        assert_eq!(response.choices[0].message.content, e.content);
        assert_eq!(response.usage.total_tokens, 17);
        assert_eq!(response.id, "chatcmpl-abababababababababababab");
        let three = e.to_response(3);
        assert_eq!(three.choices.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(three.choices.iter().all(|c| c.message.content == e.content));
        assert_eq!((three.usage.completion_tokens, three.usage.total_tokens), (21, 31));
        let copies: Vec<u32> = e
            .to_sse(false, 2)
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str::<ChatCompletionChunk>(data).expect("chunk"))
            .filter_map(|c| c.choices.first().and_then(|c| c.finish_reason.is_some().then_some(c.index)))
            .collect();
        assert_eq!(copies, [0, 1], "each copy ends with its own finish chunk");
        for usage in [false, true] {
            let sse = e.to_sse(usage, 1);
            assert!(sse.ends_with(SSE_DONE));
            let chunks: Vec<ChatCompletionChunk> = sse
                .split("\n\n")
                .filter_map(|event| event.strip_prefix("data: "))
                .filter(|data| *data != "[DONE]")
                .map(|data| serde_json::from_str(data).expect("chunk"))
                .collect();
            let text: String =
                chunks.iter().flat_map(|c| &c.choices).filter_map(|c| c.delta.content.clone()).collect();
            assert_eq!(text, e.content);
            // With usage, one last chunk without choices carries the counts; no other chunk has any.
            let counted: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
            assert_eq!(counted, if usage { vec![e.usage(1)] } else { vec![] });
            assert_eq!(chunks.last().is_some_and(|c| c.choices.is_empty()), usage);
        }
    }
}
