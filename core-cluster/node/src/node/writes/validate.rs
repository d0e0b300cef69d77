//! Checks on what callers send, done on the receiving node before anything reaches Raft: the store API
//! checks its writes here, and the leader checks every write a follower forwards the same way.

use shared::cache_key::MAX_SEMANTIC_QUESTION_BYTES;
use shared::completion::CachedCompletion;

use crate::node::apply::MAX_VALUE_BYTES;
use crate::node::error::CoreError;
use crate::node::types::{Command, InvalidateScope, Prompt, Request};

/// Longest cache key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest tenant or model name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest request id accepted, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// Most keys in one hit report (a node counts at most this many distinct keys between reports).
pub const MAX_HIT_KEYS: usize = 4096;
/// Largest prompt kept with an entry, as [`Prompt::approx_bytes`] counts it: what one `CoreCache.Complete`
/// call can carry (tonic's default 4 MiB decode limit), so a prompt any node accepted passes.
pub const MAX_PROMPT_BYTES: usize = 4 * 1024 * 1024;

/// A refusal in words.
fn invalid(message: impl Into<String>) -> CoreError {
    CoreError::InvalidArgument(message.into())
}

/// A cache key: not empty, at most [`MAX_KEY_BYTES`].
pub fn key(key: &str) -> Result<(), CoreError> {
    if key.is_empty() {
        return Err(CoreError::InvalidArgument("key is empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(CoreError::InvalidArgument(format!("key is longer than {MAX_KEY_BYTES} bytes")));
    }
    Ok(())
}

/// A tenant or model name: not empty, at most [`MAX_NAME_BYTES`], no control characters.
pub fn name(what: &str, value: &str) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::InvalidArgument(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(CoreError::InvalidArgument(format!("{what} is longer than {MAX_NAME_BYTES} bytes")));
    }
    if value.chars().any(char::is_control) {
        return Err(CoreError::InvalidArgument(format!("{what} contains control characters")));
    }
    Ok(())
}

/// A request id: at most [`MAX_REQUEST_ID_BYTES`] (empty means none).
pub fn request_id(id: &str) -> Result<(), CoreError> {
    if id.len() > MAX_REQUEST_ID_BYTES {
        return Err(CoreError::InvalidArgument(format!(
            "request_id is longer than {MAX_REQUEST_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

/// A request that did not come from the leader itself (a store API write, or a write a follower forwards):
/// every check that needs no state. The state machine decides the rest (unknown tenants and models, stale
/// versions, a tenant's own value limit). A sweep is refused: only the leader proposes one, for itself.
pub fn request(request: &Request) -> Result<(), CoreError> {
    request_id(&request.id)?;
    match &request.command {
        Command::Put { entry, content_class, prompt } => put(entry, content_class, prompt.as_ref()),
        Command::Invalidate { scope } => invalidate_scope(scope),
        Command::BumpModelVersion { model, canary_percent, .. } => {
            name("model", model)?;
            match canary_percent {
                0..=99 => Ok(()),
                _ => Err(invalid("a canary takes 1 to 99 percent of requests (0: none)")),
            }
        }
        Command::EndCanary { model, .. } => name("model", model),
        Command::RegisterModel { model, version, spec } => {
            name("model", model)?;
            if model.eq_ignore_ascii_case(shared::auto_model::AUTO_MODEL) {
                return Err(invalid("`auto` names the mesh's choice of model; it cannot be registered"));
            }
            match spec {
                Some(spec) => spec.clone().validated().map(drop).map_err(|e| invalid(&e)),
                None => at_least_one("version", *version),
            }
        }
        Command::SetTenantPolicy { tenant, .. } => name("tenant", tenant),
        Command::RecordHits { hits } => hit_report(hits),
        Command::Sweep { .. } => Err(invalid("a sweep is proposed by the leader only")),
    }
}

/// A put: its entry, an optional content class, and the prompt kept for refreshes.
fn put(entry: &CachedCompletion, content_class: &str, prompt: Option<&Prompt>) -> Result<(), CoreError> {
    key(&entry.key)?;
    name("tenant", &entry.tenant)?;
    name("model", &entry.model)?;
    if !content_class.is_empty() {
        name("content_class", content_class)?;
    }
    at_least_one("model_version", entry.model_version)?;
    if entry.content.len() as u64 > MAX_VALUE_BYTES {
        return Err(invalid(format!(
            "the value has {} bytes; the limit is {MAX_VALUE_BYTES}",
            entry.content.len()
        )));
    }
    bounded("finish_reason", &entry.finish_reason, MAX_NAME_BYTES)?;
    bounded("etag", &entry.etag, MAX_NAME_BYTES)?;
    if let Some(question) = &entry.question {
        bounded("question.partition", &question.partition, MAX_KEY_BYTES)?;
        bounded("question.text", &question.text, MAX_SEMANTIC_QUESTION_BYTES)?;
    }
    tags("entry.tags", &entry.tags)?;
    if let Some(prompt) = prompt {
        tags("prompt.tags", &prompt.tags)?;
    }
    match prompt.map(Prompt::approx_bytes) {
        Some(bytes) if bytes > MAX_PROMPT_BYTES => {
            Err(invalid(format!("the prompt has {bytes} bytes; the limit is {MAX_PROMPT_BYTES}")))
        }
        _ => Ok(()),
    }
}

/// An invalidation's names and key.
fn invalidate_scope(scope: &InvalidateScope) -> Result<(), CoreError> {
    match scope {
        InvalidateScope::Key { tenant, key: k } => {
            key(k)?;
            name("key_tenant", tenant)
        }
        InvalidateScope::Tag { tenant, tag, .. } => {
            name("tenant", tenant)?;
            shared::cache_tags::check_tag(tag).map_err(|e| invalid(e.message))
        }
        InvalidateScope::Tenant { tenant } => name("tenant", tenant),
        InvalidateScope::ModelVersion { model, .. } => name("model", model),
    }
}

/// A list of cache tags as a request's header gives them: sorted, distinct, each well-formed.
fn tags(what: &str, tags: &[String]) -> Result<(), CoreError> {
    if shared::cache_tags::is_canonical(tags) {
        return Ok(());
    }
    Err(invalid(format!(
        "{what} must be at most {} sorted, distinct cache tags, each 1 to {} of `A-Za-z0-9:._-/=@+`",
        shared::cache_tags::MAX_TAGS,
        shared::cache_tags::MAX_TAG_BYTES
    )))
}

/// A hit report: at most [`MAX_HIT_KEYS`] valid keys.
fn hit_report(hits: &[(String, u32)]) -> Result<(), CoreError> {
    if hits.len() > MAX_HIT_KEYS {
        return Err(invalid(format!("the hit report has {} keys; the limit is {MAX_HIT_KEYS}", hits.len())));
    }
    hits.iter().try_for_each(|(k, _)| key(k))
}

/// A version that must be at least 1.
fn at_least_one(what: &str, version: u64) -> Result<(), CoreError> {
    if version == 0 {
        return Err(invalid(format!("{what} must be at least 1")));
    }
    Ok(())
}

/// A free-form string of at most `limit` bytes.
fn bounded(what: &str, value: &str, limit: usize) -> Result<(), CoreError> {
    if value.len() > limit {
        return Err(invalid(format!("{what} is longer than {limit} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_characters() {
        assert!(key("").is_err());
        assert!(key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
        assert!(key("v1:abc").is_ok());
        assert!(name("tenant", "").is_err());
        assert!(name("tenant", "a\u{0}b").is_err());
        assert!(name("tenant", &"t".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(name("tenant", "acme").is_ok());
        assert!(request_id(&"r".repeat(MAX_REQUEST_ID_BYTES + 1)).is_err());
        assert!(request_id("").is_ok());
    }

    /// A put of `entry` with an id and a content class.
    fn put_request(entry: CachedCompletion) -> Request {
        Request {
            id: "r1".into(),
            command: Command::Put { entry, content_class: "stable".into(), prompt: None },
        }
    }

    /// A valid entry.
    fn entry() -> CachedCompletion {
        CachedCompletion { etag: String::new(), ttl_s: 60, ..CachedCompletion::example("k1", "hello") }
    }

    /// Whether `command` (without an id) is refused as invalid.
    fn refused(command: Command) -> bool {
        matches!(request(&Request { id: String::new(), command }), Err(CoreError::InvalidArgument(_)))
    }

    #[test]
    fn accepts_what_callers_and_followers_send() {
        assert!(request(&put_request(entry())).is_ok());
        let ok = |command| request(&Request { id: String::new(), command }).is_ok();
        assert!(ok(Command::Invalidate {
            scope: InvalidateScope::Key { tenant: "dev".into(), key: "k".into() }
        }));
        assert!(ok(Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: 0 }));
        assert!(ok(Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: 99 }));
        assert!(ok(Command::EndCanary { model: "m".into(), promote: false }));
        assert!(ok(Command::RegisterModel { model: "m".into(), version: 2, spec: None }));
        assert!(ok(Command::RegisterModel { model: "m".into(), version: 0, spec: Some(Default::default()) }));
        assert!(ok(Command::SetTenantPolicy { tenant: "dev".into(), policy: Default::default() }));
        assert!(ok(Command::RecordHits { hits: vec![("k".into(), 3); MAX_HIT_KEYS] }));
    }

    #[test]
    fn refuses_bad_requests_of_every_kind() {
        let bad_put = |change: fn(&mut CachedCompletion)| {
            let mut e = entry();
            change(&mut e);
            matches!(request(&put_request(e)), Err(CoreError::InvalidArgument(_)))
        };
        assert!(bad_put(|e| e.key.clear()));
        assert!(bad_put(|e| e.tenant = "a\nb".into()));
        assert!(bad_put(|e| e.model = "m".repeat(MAX_NAME_BYTES + 1)));
        assert!(bad_put(|e| e.model_version = 0));
        assert!(bad_put(|e| e.tags = vec!["b".into(), "a".into()]), "unsorted tags");
        assert!(bad_put(|e| e.tags = vec!["a b".into()]));
        assert!(bad_put(|e| e.content = "x".repeat(MAX_VALUE_BYTES as usize + 1)));
        assert!(bad_put(|e| e.etag = "e".repeat(MAX_NAME_BYTES + 1)));
        let mut long_id = put_request(entry());
        long_id.id = "r".repeat(MAX_REQUEST_ID_BYTES + 1);
        assert!(request(&long_id).is_err());
        let mut bad_class = put_request(entry());
        bad_class.command = Command::Put { entry: entry(), content_class: "\u{7}".into(), prompt: None };
        assert!(request(&bad_class).is_err());

        assert!(refused(Command::Invalidate {
            scope: InvalidateScope::Key { tenant: "dev".into(), key: String::new() }
        }));
        assert!(refused(Command::Invalidate { scope: InvalidateScope::Tenant { tenant: String::new() } }));
        for tag in ["", "a b", &"t".repeat(shared::cache_tags::MAX_TAG_BYTES + 1)] {
            let scope = InvalidateScope::Tag { tenant: "dev".into(), tag: tag.to_owned(), refresh: false };
            assert!(refused(Command::Invalidate { scope }), "{tag:?}");
        }
        assert!(refused(Command::RegisterModel { model: "m".into(), version: 0, spec: None }));
        assert!(refused(Command::RegisterModel { model: "Auto".into(), version: 1, spec: None }));
        let pool = "pod=http://p".parse().expect("valid backend");
        let twice = shared::model_spec::ModelSpec { backends: vec![pool; 2], ..Default::default() };
        assert!(refused(Command::RegisterModel { model: "m".into(), version: 1, spec: Some(twice) }));
        assert!(refused(Command::BumpModelVersion { model: String::new(), version: 2, canary_percent: 0 }));
        assert!(refused(Command::BumpModelVersion { model: "m".into(), version: 2, canary_percent: 100 }));
        assert!(refused(Command::RecordHits { hits: vec![("k".into(), 1); MAX_HIT_KEYS + 1] }));
        assert!(refused(Command::RecordHits { hits: vec![(String::new(), 1)] }));
        assert!(refused(Command::Sweep { entries: Vec::new(), requests: Vec::new(), feed: Vec::new() }));
    }

    #[test]
    fn bounds_the_prompt_kept_for_refreshes() {
        use shared::normalize::{ChatRole, Message, Sampling};
        let prompt = |bytes: usize| Prompt {
            messages: vec![Message { role: ChatRole::User, content: "q".repeat(bytes) }],
            sampling: Sampling::greedy(8),
            tags: Vec::new(),
        };
        let with = |p: Prompt| Command::Put { entry: entry(), content_class: String::new(), prompt: Some(p) };
        assert!(!refused(with(prompt(MAX_PROMPT_BYTES - "user".len()))));
        assert!(refused(with(prompt(MAX_PROMPT_BYTES))));
    }
}
