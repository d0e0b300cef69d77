//! The versioned cache key.
//!
//! `v1:` followed by the hex SHA-256 of an unambiguous, length-prefixed encoding of
//! (tenant, model name, model version, normalized messages, sampling parameters). The key version prefix
//! changes whenever this encoding or the normalization rules change, so old entries can never be read as
//! new ones.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::hex;
use crate::model_spec::ModelApi;
use crate::normalize::{ChatRole, Message, NormalizedRequest};

/// Version of the key derivation; part of every key.
pub const KEY_VERSION: &str = "v1";

/// What a semantic lookup compares: the last user turn, within a partition that holds everything
/// else the answer depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemanticQuery<'a> {
    /// `p1:` and the hex SHA-256 of (tenant, model, model version, sampling, and the context
    /// fingerprint: the system prompt, tools and every turn before the last), so that "how old is
    /// he?" in one conversation never answers the same words in another.
    pub partition: String,
    /// The last user turn, the text that is embedded and verified.
    pub question: &'a str,
}

/// Longest question, in bytes, that a semantic tier compares; a longer one is answered by exact
/// hits only. The embedding sees at most 256 tokens (about 1,000 characters), so two long
/// questions that share their start embed alike whatever follows, and the verifier's word
/// alignment grows faster than the text: neither says anything reliable past this length, and
/// bounding it bounds the work one request can cost the tier.
pub const MAX_SEMANTIC_QUESTION_BYTES: usize = 1_000;

impl<'a> SemanticQuery<'a> {
    /// The semantic query of a request whose last message is the user's, at most
    /// [`MAX_SEMANTIC_QUESTION_BYTES`] long; `None` otherwise.
    pub fn derive(tenant: &str, request: &'a NormalizedRequest) -> Option<Self> {
        // A continuation depends on every character of its prompt: text completions hit exactly or not.
        if request.api != ModelApi::Chat {
            return None;
        }
        let (last, context) = request.messages.split_last()?;
        if last.role != ChatRole::User || last.content.len() > MAX_SEMANTIC_QUESTION_BYTES {
            return None;
        }
        let digest = digest(b"mesh-semantic-partition", tenant, request, context);
        Some(Self { partition: format!("p1:{digest}"), question: &last.content })
    }
}

/// The hex SHA-256 of an unambiguous encoding of the tenant, the model, `messages` and the sampling.
fn digest(domain: &[u8], tenant: &str, request: &NormalizedRequest, messages: &[Message]) -> String {
    let mut enc = Encoder(Sha256::new());
    enc.bytes(domain);
    enc.bytes(KEY_VERSION.as_bytes());
    enc.bytes(tenant.as_bytes());
    enc.bytes(request.model.name.as_bytes());
    enc.u64(request.model.version);
    enc.u64(messages.len() as u64);
    for message in messages {
        enc.bytes(message.role.as_str().as_bytes());
        enc.bytes(message.content.as_bytes());
    }
    let s = &request.sampling;
    enc.u64(u64::from(s.max_tokens));
    enc.u64(u64::from(s.temperature.to_bits()));
    enc.u64(u64::from(s.top_p.to_bits()));
    match s.seed {
        None => enc.u64(0),
        Some(seed) => {
            enc.u64(1);
            enc.u64(seed);
        }
    }
    enc.u64(s.stop.len() as u64);
    for stop in &s.stop {
        enc.bytes(stop.as_bytes());
    }
    // Only when set, so that the keys of requests without penalties stay what they were.
    if !s.penalties.is_none() {
        enc.bytes(b"penalties");
        for value in [s.penalties.frequency, s.penalties.presence, s.penalties.repetition] {
            enc.u64(u64::from(value.to_bits()));
        }
    }
    // Likewise: several sampled choices, and log-probabilities, are other answers than the one text a
    // plain request gets (greedy choices are all that text, so a greedy `n` is not part of the key).
    if s.generated_choices() > 1 {
        enc.bytes(b"n");
        enc.u64(u64::from(s.n));
    }
    if let Some(top) = s.logprobs {
        enc.bytes(b"logprobs");
        enc.u64(u64::from(top));
    }
    // Only for a text completion, so that chat keys stay what they were: the same text is a prompt to
    // continue there and a user turn inside a chat template here.
    if request.api == ModelApi::Completions {
        enc.bytes(b"api:completions");
    }
    // Likewise for cache tags: an answer carries exactly the tags of the requests it answers, so that
    // an invalidation of a tag covers every answer given under it.
    if !request.tags.is_empty() {
        enc.bytes(b"tags");
        enc.u64(request.tags.len() as u64);
        for tag in &request.tags {
            enc.bytes(tag.as_bytes());
        }
    }
    hex::encode(&enc.0.finalize())
}

/// A derived cache key, e.g. `v1:3f2a...` (64 hex digits).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    /// Derives the key of a normalized request for a tenant.
    pub fn derive(tenant: &str, request: &NormalizedRequest) -> Self {
        let digest = digest(b"mesh-cache-key", tenant, request, &request.messages);
        Self(format!("{KEY_VERSION}:{digest}"))
    }

    /// Parses a key received from another tier, checking its shape.
    pub fn parse(text: &str) -> Option<Self> {
        let digest = text.strip_prefix(KEY_VERSION)?.strip_prefix(':')?;
        (digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
            .then(|| Self(text.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The OpenAI completion id used for this key's answer (stable, so a hit matches the miss).
    pub fn completion_id(&self) -> String {
        let digest = self.0.split_once(':').map_or(self.0.as_str(), |(_, d)| d);
        format!("chatcmpl-{}", &digest[..digest.len().min(24)])
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Length-prefixed encoding into the hash, so that no two different field sequences encode the same.
struct Encoder(Sha256);

impl Encoder {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
    }

    fn u64(&mut self, value: u64) {
        self.0.update(value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelTable;
    use crate::normalize::{normalize, Limits};
    use crate::openai::parse_chat_request;

    fn key_with(tenant: &str, models: &str, json: &str) -> CacheKey {
        let request = parse_chat_request(json.as_bytes(), 1 << 20).expect("json");
        let table = ModelTable::parse(models).expect("models");
        CacheKey::derive(tenant, &normalize(&request, &table, &Limits::default()).expect("valid"))
    }

    fn key(json: &str) -> CacheKey {
        key_with("dev", "m@1", json)
    }

    const BASE: &str = r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 2+2?"}],"temperature":0,"max_tokens":32}"#;

    #[test]
    fn same_request_same_key_and_well_formed() {
        let k = key(BASE);
        assert_eq!(k, key(BASE));
        assert_eq!(CacheKey::parse(k.as_str()), Some(k.clone()));
        assert!(k.completion_id().starts_with("chatcmpl-") && k.completion_id().len() == 33);
        assert_eq!(CacheKey::parse("v1:xyz"), None);
        assert_eq!(CacheKey::parse(&k.as_str().replace("v1:", "v2:")), None);
    }

    #[test]
    fn differences_that_cannot_change_the_answer_keep_the_key() {
        let k = key(BASE);
        // Field order, whitespace at the ends and line ends, stream, user, name, parts vs string.
        let reordered = r#"{"max_tokens":32,"temperature":0,"messages":[{"content":"Be brief.  ","role":"system"},{"content":"\r\nWhat is 2+2?\n","role":"USER","name":"bob"}],"model":"M","stream":true,"user":"u1"}"#;
        assert_eq!(k, key(reordered));
        let parts = r#"{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"Be brief."}]},{"role":"user","content":"What is 2+2?"}],"temperature":0,"max_tokens":32}"#;
        assert_eq!(k, key(parts));
        // Greedy decoding ignores top_p and seed.
        let greedy_extras = BASE.replace(r#""temperature":0"#, r#""temperature":0,"top_p":0.3,"seed":5"#);
        assert_eq!(k, key(&greedy_extras));
        // Defaults spelled out equal defaults left out.
        let explicit = key(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":1,"top_p":1,"max_tokens":256}"#,
        );
        assert_eq!(explicit, key(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#));
        // Penalties at their neutral values are no penalties; the key is the one without them.
        let neutral = BASE.replace(
            r#""temperature":0"#,
            r#""temperature":0,"frequency_penalty":0,"presence_penalty":-0.0,"repetition_penalty":1"#,
        );
        assert_eq!(k, key(&neutral));
        // Every greedy choice is the one greedy answer.
        assert_eq!(k, key(&BASE.replace(r#""temperature":0"#, r#""temperature":0,"n":4"#)));
    }

    #[test]
    fn any_change_that_can_change_the_answer_changes_the_key() {
        let k = key(BASE);
        let variants = [
            BASE.replace("2+2", "2+3"),
            BASE.replace("Be brief.", "Be verbose."),
            BASE.replace(r#""role":"system""#, r#""role":"user""#),
            BASE.replace(r#""max_tokens":32"#, r#""max_tokens":33"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0.7"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"stop":["4"]"#),
            BASE.replace("What is", "What  is"),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"frequency_penalty":0.5"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"presence_penalty":0.5"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"repetition_penalty":1.1"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"logprobs":true"#),
            BASE.replace(r#""temperature":0"#, r#""temperature":0,"logprobs":true,"top_logprobs":2"#),
            // Turn order is the conversation.
            r#"{"model":"m","messages":[{"role":"user","content":"What is 2+2?"},{"role":"system","content":"Be brief."}],"temperature":0,"max_tokens":32}"#.to_owned(),
        ];
        for variant in &variants {
            assert_ne!(k, key(variant), "{variant}");
        }
        assert_ne!(k, key_with("acme", "m@1", BASE), "tenant");
        assert_ne!(k, key_with("dev", "m@2", BASE), "model version");
        let sampled = BASE.replace(r#""temperature":0"#, r#""temperature":0.7"#);
        assert_ne!(
            key(&sampled),
            key(&sampled.replace(r#""max_tokens""#, r#""seed":1,"max_tokens""#)),
            "seed"
        );
        assert_ne!(
            key(&sampled),
            key(&sampled.replace(r#""max_tokens""#, r#""top_p":0.9,"max_tokens""#)),
            "top_p"
        );
        assert_ne!(key(&sampled), key(&sampled.replace(r#""max_tokens""#, r#""n":2,"max_tokens""#)), "n");
    }

    #[test]
    fn tags_are_part_of_the_key_and_the_partition_only_when_given() {
        let parsed = parse_chat_request(BASE.as_bytes(), 1 << 20).expect("json");
        let table = ModelTable::parse("m@1").expect("models");
        let plain = normalize(&parsed, &table, &Limits::default()).expect("valid");
        let tagged = |tags: &[&str]| NormalizedRequest {
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..plain.clone()
        };
        let partition = |r: &NormalizedRequest| SemanticQuery::derive("dev", r).expect("user turn").partition;
        assert_eq!(CacheKey::derive("dev", &tagged(&[])), key(BASE), "no tags: the key it always had");
        assert_ne!(CacheKey::derive("dev", &tagged(&["stock:AAPL"])), key(BASE));
        assert_ne!(
            CacheKey::derive("dev", &tagged(&["a", "b"])),
            CacheKey::derive("dev", &tagged(&["ab"])),
            "each tag is length-prefixed"
        );
        assert_ne!(partition(&tagged(&["stock:AAPL"])), partition(&plain));
    }

    #[test]
    fn length_prefixing_keeps_field_boundaries() {
        let a = r#"{"model":"m","messages":[{"role":"user","content":"ab"},{"role":"user","content":"c"}]}"#;
        let b = r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"bc"}]}"#;
        assert_ne!(key(a), key(b));
    }

    fn query_of(tenant: &str, json: &str) -> Option<(String, String)> {
        let parsed = parse_chat_request(json.as_bytes(), 1 << 20).expect("valid request");
        let request = normalize(&parsed, &ModelTable::parse("m@1").expect("models"), &Limits::default())
            .expect("normal");
        SemanticQuery::derive(tenant, &request).map(|q| (q.partition, q.question.to_string()))
    }

    #[test]
    fn a_semantic_partition_holds_everything_but_the_last_user_turn() {
        let turn = |system: &str, question: &str| {
            format!(
                r#"{{"model":"m","messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"{question}"}}]}}"#
            )
        };
        let (partition, question) = query_of("t", &turn("Be brief.", "How old is he?")).expect("a user turn");
        assert_eq!(question, "How old is he?");
        assert!(partition.starts_with("p1:") && partition.len() == 67, "{partition}");
        let same = query_of("t", &turn("Be brief.", "What age is he?")).expect("a user turn");
        assert_eq!(same.0, partition, "the question is not part of the partition");
        assert_ne!(query_of("t", &turn("Talk about Bob.", "How old is he?")).expect("turn").0, partition);
        assert_ne!(query_of("u", &turn("Be brief.", "How old is he?")).expect("turn").0, partition);
        let assistant_last = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
        assert_eq!(query_of("t", assistant_last), None);
        let long = "why ".repeat(MAX_SEMANTIC_QUESTION_BYTES / 4 + 1);
        assert_eq!(query_of("t", &turn("Be brief.", &long)), None, "too long to compare: exact hits only");
    }
}
