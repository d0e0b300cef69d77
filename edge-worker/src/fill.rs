//! Turning a regional answer into an edge cache entry, and the rules for when not to.
//!
//! Pure: the caller reads the regional response's status, headers and body and passes them in.

use shared::answer_signature::{AnswerVerifier, SignatureError};
use shared::cache_key::CacheKey;
use shared::completion::{AnsweredQuestion, CachedCompletion};
use shared::openai::{ChatCompletion, Usage};
use shared::text_completion::{TextCompletion, TEXT_COMPLETION_OBJECT};

use crate::cache_control::{self, Freshness};

/// What the edge read from a regional answer.
#[derive(Clone, Debug, Default)]
pub struct RegionalAnswer<'a> {
    /// HTTP status.
    pub status: u16,
    /// `X-Cache`: which tier answered.
    pub x_cache: Option<&'a str>,
    /// `ETag`.
    pub etag: Option<&'a str>,
    /// `X-Cache-Key`: the key the regional tier derived.
    pub cache_key: Option<&'a str>,
    /// `X-Cache-Matched-Key`: the entry a regional semantic hit served (the paraphrase it matched).
    pub matched_key: Option<&'a str>,
    /// `Cache-Control`.
    pub cache_control: Option<&'a str>,
    /// `X-Cache-Created-Ms`: the answer's creation time at the core (the clock the core's invalidations
    /// are in); without it, the completion's `created` second is used.
    pub created_ms: Option<i64>,
    /// `X-Cache-Ttl-S`: the answer's time to live as the core committed and signed it.
    pub ttl_s: Option<u64>,
    /// `X-Cache-Signature`: the core's signature over the answer ([`shared::answer_signature`]).
    pub signature: Option<&'a str>,
    /// `X-Cache-Question-Partition` and `X-Cache-Question-Text` (hex): the question the signed answer
    /// names, which its signature covers.
    pub question: Option<(&'a str, &'a str)>,
    /// `X-Model-Version`: the version of the model that answered.
    pub model_version: Option<u64>,
    /// The JSON body of a non-streamed completion.
    pub body: &'a [u8],
}

/// What a new entry is for: the request as the edge resolved it.
#[derive(Clone, Debug)]
pub struct FillTarget<'a> {
    /// The key the edge derived.
    pub key: &'a CacheKey,
    /// The authenticated tenant.
    pub tenant: &'a str,
    /// Version of the requested model, from `MODELS`.
    pub model_version: u64,
    /// Whether the request asked for `auto`: the answer is the chosen model's, at the version its
    /// `X-Model-Version` names.
    pub auto: bool,
    /// `CACHE_TTL_S`: the lifetime when the answer gives none; 0 disables the edge cache.
    pub default_ttl_s: u64,
    /// Current Unix time in milliseconds.
    pub now_ms: i64,
    /// `ANSWER_PUBLIC_KEY`: when set, only answers the core signed are kept.
    pub verifier: Option<&'a AnswerVerifier>,
    /// The request's cache tags: the answer carries them (they are part of the key, and of the semantic
    /// partition a regional paraphrase hit came from).
    pub tags: &'a [String],
}

/// Why an answer is not stored at the edge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// `CACHE_TTL_S` is 0.
    #[error("edge cache disabled")]
    Disabled,
    /// Not a 200.
    #[error("status {0}")]
    Status(u16),
    /// `X-Cache` is absent or names no answer that may be cached (e.g. a degraded, stale answer).
    #[error("x-cache {0:?} is not cacheable")]
    NotCacheable(Option<String>),
    /// The regional tier derived another key: the tiers disagree on models, limits or normalization.
    #[error("regional key {theirs} differs from edge key {ours}")]
    KeyMismatch {
        /// Ours.
        ours: String,
        /// Theirs.
        theirs: String,
    },
    /// `Cache-Control` forbids keeping it.
    #[error("cache-control forbids storing")]
    DoNotStore,
    /// The edge verifies answers and this one does not carry the core's signature over what it says.
    #[error("not signed by the core: {0}")]
    Unsigned(SignatureError),
    /// The body is not a chat or text completion with one choice.
    #[error("body is not a completion of one choice: {0}")]
    Body(String),
}

/// Whether an `X-Cache` value names an answer that came out of generation or a cache and may be stored.
pub fn is_cacheable_source(x_cache: Option<&str>) -> bool {
    x_cache.is_some_and(|v| {
        ["MISS", "HIT-REGIONAL", "HIT-CORE", SEMANTIC_SOURCE]
            .iter()
            .any(|ok| v.trim().eq_ignore_ascii_case(ok))
    })
}

/// `X-Cache` of a regional semantic hit: a paraphrase the regional tier decided answers the request.
pub const SEMANTIC_SOURCE: &str = "HIT-REGIONAL-SEMANTIC";

/// An answer to keep at the edge, and the key it answers there.
#[derive(Clone, Debug, PartialEq)]
pub struct Fill {
    /// The request's own key, under which the edge keeps the answer.
    pub under: String,
    /// The answer: under its own key for an exact answer; for a regional semantic hit, the matched
    /// paraphrase's entry (its key is the matched one), so that an invalidation of that entry at the
    /// core also withdraws the copy the edge keeps under the paraphrase's key.
    pub entry: CachedCompletion,
}

/// Builds the entry to store for a regional answer, or says why not.
///
/// `created_ms` is the answer's creation time at the core (its own `created` second when the regional
/// tier did not say), so a later edge hit renders the very same completion and is compared with the
/// core's invalidations in the core's clock;
/// `ttl_s` is stretched by the answer's age so that the entry expires when the regional `max-age` (or
/// `CACHE_TTL_S`, counted from now) runs out.
///
/// With a verifier, the answer as the core committed it (its signed TTL from `X-Cache-Ttl-S`) must carry
/// the core's signature (`X-Cache-Signature`); the entry kept is the edge's own, its signature dropped
/// (its TTL is the edge's).
pub fn entry_from_answer(target: &FillTarget<'_>, answer: &RegionalAnswer<'_>) -> Result<Fill, Skip> {
    if target.default_ttl_s == 0 {
        return Err(Skip::Disabled);
    }
    if answer.status != 200 {
        return Err(Skip::Status(answer.status));
    }
    if !is_cacheable_source(answer.x_cache) {
        return Err(Skip::NotCacheable(answer.x_cache.map(str::to_owned)));
    }
    if let Some(theirs) = answer.cache_key.map(str::trim).filter(|k| *k != target.key.as_str()) {
        return Err(Skip::KeyMismatch { ours: target.key.to_string(), theirs: theirs.to_owned() });
    }
    let lifetime_s = match cache_control::parse(answer.cache_control) {
        Freshness::DoNotStore => return Err(Skip::DoNotStore),
        Freshness::MaxAge(s) => s,
        Freshness::Unspecified => target.default_ttl_s,
    };
    let completion = OneAnswer::read(answer.body)?;
    let created_ms = answer.created_ms.unwrap_or_else(|| completion.created.saturating_mul(1000));
    let age_s = u64::try_from(target.now_ms.saturating_sub(created_ms).max(0) / 1000).unwrap_or(0);
    let content = completion.content;
    let etag = answer
        .etag
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map_or_else(|| CachedCompletion::etag_of(&content, &completion.finish_reason), str::to_owned);
    // A regional semantic hit names the entry it served; without that name it is not kept.
    let key = if answer.x_cache.is_some_and(|v| v.trim().eq_ignore_ascii_case(SEMANTIC_SOURCE)) {
        match answer.matched_key.map(str::trim).filter(|k| !k.is_empty()) {
            Some(matched) => matched.to_owned(),
            None => return Err(Skip::NotCacheable(answer.x_cache.map(str::to_owned))),
        }
    } else {
        target.key.to_string()
    };
    let model_version = match (target.auto, answer.model_version) {
        (false, _) => target.model_version,
        (true, Some(version)) => version,
        (true, None) => return Err(Skip::NotCacheable(answer.x_cache.map(str::to_owned))),
    };
    let entry = CachedCompletion {
        key,
        tenant: target.tenant.to_owned(),
        model: completion.model,
        model_version,
        content,
        finish_reason: completion.finish_reason,
        prompt_tokens: completion.usage.prompt_tokens,
        completion_tokens: completion.usage.completion_tokens,
        etag,
        created_ms,
        ttl_s: lifetime_s.saturating_add(age_s),
        question: None,
        signature: String::new(),
        tags: target.tags.to_vec(),
    };
    if let Some(verifier) = target.verifier {
        let question = answer.question.and_then(|(partition, text)| {
            let text = String::from_utf8(shared::hex::decode(text.trim())?).ok()?;
            Some(AnsweredQuestion { partition: partition.trim().to_owned(), text })
        });
        let as_signed = CachedCompletion {
            ttl_s: answer.ttl_s.unwrap_or(entry.ttl_s),
            signature: answer.signature.unwrap_or_default().trim().to_owned(),
            question,
            ..entry.clone()
        };
        verifier.verify(&as_signed).map_err(Skip::Unsigned)?;
    }
    Ok(Fill { under: target.key.to_string(), entry })
}

/// The one answer a regional body carries: a chat completion's message, or a text completion's text.
struct OneAnswer {
    model: String,
    created: i64,
    content: String,
    finish_reason: String,
    usage: Usage,
}

impl OneAnswer {
    fn read(body: &[u8]) -> Result<Self, Skip> {
        let json: serde_json::Value = serde_json::from_slice(body).map_err(|e| Skip::Body(e.to_string()))?;
        let choices = |n: usize| Skip::Body(format!("{n} choices"));
        if json.get("object").and_then(serde_json::Value::as_str) == Some(TEXT_COMPLETION_OBJECT) {
            let text: TextCompletion = serde_json::from_value(json).map_err(|e| Skip::Body(e.to_string()))?;
            let [choice] = text.choices.as_slice() else { return Err(choices(text.choices.len())) };
            return Ok(Self {
                finish_reason: choice
                    .finish_reason
                    .clone()
                    .ok_or_else(|| Skip::Body("no finish reason".into()))?,
                usage: text.usage.ok_or_else(|| Skip::Body("no usage".into()))?,
                content: choice.text.clone(),
                model: text.model,
                created: text.created,
            });
        }
        let chat: ChatCompletion = serde_json::from_value(json).map_err(|e| Skip::Body(e.to_string()))?;
        let [choice] = chat.choices.as_slice() else { return Err(choices(chat.choices.len())) };
        Ok(Self {
            content: choice.message.content.clone(),
            finish_reason: choice.finish_reason.clone(),
            usage: chat.usage,
            model: chat.model,
            created: chat.created,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::models::ModelTable;
    use shared::normalize::{normalize, Limits};
    use shared::openai::parse_chat_request;

    const REQUEST: &str =
        r#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"}],"temperature":0}"#;

    fn key() -> CacheKey {
        let request = parse_chat_request(REQUEST.as_bytes(), 1 << 20).expect("json");
        let models = ModelTable::parse("smollm2-135m-instruct@3").expect("models");
        CacheKey::derive("dev", &normalize(&request, &models, &Limits::default()).expect("valid"))
    }

    const BODY: &str = r#"{"id":"chatcmpl-x","object":"chat.completion","created":1000,"model":"smollm2-135m-instruct",
        "choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;

    /// Tenant `dev`'s request for `key` at model version 3, with the default lifetime of 600 s.
    fn target<'a>(key: &'a CacheKey, now_ms: i64, verifier: Option<&'a AnswerVerifier>) -> FillTarget<'a> {
        FillTarget {
            key,
            tenant: "dev",
            model_version: 3,
            auto: false,
            default_ttl_s: 600,
            now_ms,
            verifier,
            tags: &[],
        }
    }

    fn answer(body: &str) -> RegionalAnswer<'_> {
        RegionalAnswer {
            status: 200,
            x_cache: Some("MISS"),
            etag: Some("\"e1\""),
            cache_key: None,
            matched_key: None,
            cache_control: None,
            created_ms: None,
            ttl_s: None,
            signature: None,
            question: None,
            model_version: None,
            body: body.as_bytes(),
        }
    }

    #[test]
    fn an_auto_answer_is_kept_at_the_version_of_the_model_that_gave_it() {
        let key = key();
        let auto = FillTarget { auto: true, ..target(&key, 1_010_500, None) };
        let answered = RegionalAnswer { model_version: Some(7), ..answer(BODY) };
        assert_eq!(entry_from_answer(&auto, &answered).expect("cacheable").entry.model_version, 7);
        assert!(entry_from_answer(&auto, &answer(BODY)).is_err(), "no version named: not kept");
        let asked = target(&key, 1_010_500, None);
        assert_eq!(entry_from_answer(&asked, &answered).expect("cacheable").entry.model_version, 3);
    }

    #[test]
    fn builds_an_entry_that_renders_the_same_completion() {
        let key = key();
        let target = target(&key, 1_010_500, None);
        let fill = entry_from_answer(&target, &answer(BODY)).expect("cacheable");
        assert_eq!(fill.under, fill.entry.key, "an exact answer is kept under its own key");
        let entry = fill.entry;
        assert_eq!(
            (entry.content.as_str(), entry.finish_reason.as_str(), entry.etag.as_str()),
            ("Hello!", "stop", "\"e1\"")
        );
        assert_eq!((entry.prompt_tokens, entry.completion_tokens, entry.model_version), (5, 2, 3));
        // Created 10.5 s ago: expires 600 s from now (rounded down to the second).
        assert_eq!((entry.created_ms, entry.ttl_s), (1_000_000, 610));
        assert_eq!(entry.remaining_ttl_s(target.now_ms), Some(599));
        let rendered = entry.to_response(1);
        assert_eq!((rendered.created, rendered.usage.total_tokens), (1000, 7));
        assert_eq!(rendered.choices[0].message.content, "Hello!");

        let with_key = RegionalAnswer {
            cache_key: Some(key.as_str()),
            cache_control: Some("max-age=60"),
            x_cache: Some("HIT-CORE"),
            ..answer(BODY)
        };
        assert_eq!(entry_from_answer(&target, &with_key).map(|f| f.entry.ttl_s), Ok(70));
        let at_core = RegionalAnswer { created_ms: Some(1_000_250), ..answer(BODY) };
        assert_eq!(
            entry_from_answer(&target, &at_core).map(|f| f.entry.created_ms),
            Ok(1_000_250),
            "the core's creation time, to the millisecond, when the regional tier names it"
        );
        let no_etag = RegionalAnswer { etag: None, ..answer(BODY) };
        assert_eq!(
            entry_from_answer(&target, &no_etag).map(|f| f.entry.etag),
            Ok(CachedCompletion::etag_of("Hello!", "stop"))
        );
    }

    #[test]
    fn a_regional_semantic_hit_is_kept_under_the_request_key_as_the_matched_entry() {
        let key = key();
        let target = target(&key, 1_000_000, None);
        let semantic = RegionalAnswer {
            x_cache: Some(SEMANTIC_SOURCE),
            cache_key: Some(key.as_str()),
            matched_key: Some("v1:matched"),
            ..answer(BODY)
        };
        let fill = entry_from_answer(&target, &semantic).expect("kept");
        assert_eq!((fill.under.as_str(), fill.entry.key.as_str()), (key.as_str(), "v1:matched"));
        let unnamed = RegionalAnswer { matched_key: None, ..semantic };
        assert!(matches!(entry_from_answer(&target, &unnamed), Err(Skip::NotCacheable(_))));
    }

    #[test]
    fn a_verifying_edge_keeps_only_what_the_core_signed() {
        use shared::answer_signature::AnswerSigner;
        let key = key();
        let signer = AnswerSigner::from_seed([9; 32]);
        let verifier = signer.verifier();
        let target = target(&key, 1_010_500, Some(&verifier));
        // The answer as the core committed it, rendered by the regional node as BODY.
        let mut committed = CachedCompletion {
            key: key.to_string(),
            tenant: "dev".into(),
            model: "smollm2-135m-instruct".into(),
            model_version: 3,
            content: "Hello!".into(),
            finish_reason: "stop".into(),
            prompt_tokens: 5,
            completion_tokens: 2,
            etag: "\"e1\"".into(),
            created_ms: 1_000_250,
            ttl_s: 3_600,
            question: None,
            signature: String::new(),
            tags: Vec::new(),
        };
        signer.sign(&mut committed);
        let signed = RegionalAnswer {
            created_ms: Some(1_000_250),
            ttl_s: Some(3_600),
            signature: Some(&committed.signature),
            cache_control: Some("max-age=60"),
            ..answer(BODY)
        };
        let fill = entry_from_answer(&target, &signed).expect("signed by the core");
        assert_eq!(fill.entry.ttl_s, 70, "the edge's own lifetime");
        // An answer that names its question is checked with it.
        let asked = AnsweredQuestion { partition: "p1:ab".into(), text: "Hi?".into() };
        let mut named = CachedCompletion { question: Some(asked), ..committed.clone() };
        signer.sign(&mut named);
        let text = shared::hex::encode(b"Hi?");
        let with_question = RegionalAnswer {
            signature: Some(&named.signature),
            question: Some(("p1:ab", &text)),
            ..signed.clone()
        };
        assert!(entry_from_answer(&target, &with_question).is_ok());
        let other = shared::hex::encode(b"Bye?");
        let refiled = RegionalAnswer { question: Some(("p1:ab", &other)), ..with_question.clone() };
        assert!(matches!(entry_from_answer(&target, &refiled), Err(Skip::Unsigned(_))), "another question");
        // A tagged answer is kept with its request's tags, which its signature covers.
        let tags = vec!["stock:AAPL".to_owned()];
        let mut tagged = CachedCompletion { tags: tags.clone(), ..committed.clone() };
        signer.sign(&mut tagged);
        let tagged_answer = RegionalAnswer { signature: Some(&tagged.signature), ..signed.clone() };
        let kept = entry_from_answer(&FillTarget { tags: &tags, ..target.clone() }, &tagged_answer);
        assert_eq!(kept.expect("its tags").entry.tags, tags);
        let stripped = entry_from_answer(&target, &tagged_answer);
        assert!(matches!(stripped, Err(Skip::Unsigned(_))), "kept without its tag");
        let unsigned = RegionalAnswer { signature: None, ..signed.clone() };
        let redated = RegionalAnswer { created_ms: Some(2_000_000), ..signed.clone() };
        let longer = RegionalAnswer { ttl_s: Some(0), ..signed.clone() };
        let forged = signed.clone();
        let other_body = BODY.replace("Hello!", "Goodbye");
        let forged = RegionalAnswer { body: other_body.as_bytes(), ..forged };
        for (answer, why) in
            [(unsigned, "unsigned"), (redated, "re-dated"), (longer, "ttl"), (forged, "content")]
        {
            assert!(matches!(entry_from_answer(&target, &answer), Err(Skip::Unsigned(_))), "{why}");
        }
    }

    #[test]
    fn refuses_what_must_not_be_kept() {
        let key = key();
        let target = target(&key, 1_000_000, None);
        let two_choices = BODY.replace(
            r#""choices":[{"#,
            r#""choices":[{"index":1,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"},{"#,
        );
        let cases = [
            (RegionalAnswer { status: 503, ..answer(BODY) }, "status"),
            (RegionalAnswer { x_cache: None, ..answer(BODY) }, "no x-cache"),
            (RegionalAnswer { x_cache: Some("STALE"), ..answer(BODY) }, "stale"),
            (RegionalAnswer { cache_key: Some("v1:other"), ..answer(BODY) }, "key"),
            (RegionalAnswer { cache_control: Some("no-store"), ..answer(BODY) }, "no-store"),
            (answer(r#"{"choices":[]}"#), "body"),
            (answer(&two_choices), "two choices"),
        ];
        for (answer, why) in &cases {
            assert!(entry_from_answer(&target, answer).is_err(), "{why}");
        }
        let disabled = FillTarget { default_ttl_s: 0, ..target.clone() };
        assert_eq!(entry_from_answer(&disabled, &answer(BODY)), Err(Skip::Disabled));
    }
}
