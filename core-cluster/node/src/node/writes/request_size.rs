//! How large a request is, roughly: the bytes of its strings, counted without encoding anything. Group
//! commit bounds a proposal's bytes with it, and validation bounds what a forwarded write may carry.

use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;

use crate::node::types::{Command, InvalidateScope, Prompt, Request};

/// Bytes counted for each number in a list (a change-feed revision, a hit count).
const NUMBER_BYTES: usize = 8;

impl Request {
    /// The bytes of the request's id and its command's strings: a cheap lower bound of its encoded size
    /// (fixed-size fields and JSON syntax are left out, and so is escaping).
    pub fn approx_bytes(&self) -> usize {
        self.id.len().saturating_add(self.command.approx_bytes())
    }
}

impl Command {
    /// The bytes of the command's strings (see [`Request::approx_bytes`]).
    pub fn approx_bytes(&self) -> usize {
        match self {
            Command::Put { entry, content_class, prompt } => entry_bytes(entry)
                .saturating_add(content_class.len())
                .saturating_add(prompt.as_ref().map_or(0, Prompt::approx_bytes)),
            Command::Invalidate { scope } => scope_bytes(scope),
            Command::BumpModelVersion { model, .. } | Command::EndCanary { model, .. } => model.len(),
            Command::RegisterModel { model, spec, .. } => {
                model.len().saturating_add(spec.as_ref().map_or(0, spec_bytes))
            }
            Command::SetTenantPolicy { tenant, .. } => tenant.len(),
            Command::RecordHits { hits } => {
                hits.iter().fold(0, |sum: usize, (key, _)| sum.saturating_add(key.len() + NUMBER_BYTES))
            }
            Command::Sweep { entries, requests, feed } => strings_bytes(entries)
                .saturating_add(strings_bytes(requests))
                .saturating_add(feed.len().saturating_mul(NUMBER_BYTES)),
        }
    }
}

impl Prompt {
    /// The bytes of the conversation (role names and texts) and of the stop sequences.
    pub fn approx_bytes(&self) -> usize {
        let messages = self
            .messages
            .iter()
            .fold(0, |sum: usize, m| sum.saturating_add(m.role.as_str().len() + m.content.len()));
        messages.saturating_add(strings_bytes(&self.sampling.stop)).saturating_add(strings_bytes(&self.tags))
    }
}

/// The bytes of an entry's strings: key, names, content, finish reason, ETag and question.
fn entry_bytes(entry: &CachedCompletion) -> usize {
    let question = entry.question.as_ref().map_or(0, |q| q.partition.len().saturating_add(q.text.len()));
    [entry.key.len(), entry.tenant.len(), entry.model.len(), entry.content.len()]
        .into_iter()
        .chain([entry.finish_reason.len(), entry.etag.len(), question, strings_bytes(&entry.tags)])
        .fold(0, usize::saturating_add)
}

/// The bytes of an invalidation's names and key.
fn scope_bytes(scope: &InvalidateScope) -> usize {
    match scope {
        InvalidateScope::Key { tenant, key } => tenant.len().saturating_add(key.len()),
        InvalidateScope::Tag { tenant, tag, .. } => tenant.len().saturating_add(tag.len()),
        InvalidateScope::Tenant { tenant } => tenant.len(),
        InvalidateScope::ModelVersion { model, .. } => model.len(),
    }
}

/// The bytes of a model spec's URLs and names (its numbers count as a few bytes each).
fn spec_bytes(spec: &ModelSpec) -> usize {
    spec.backends.iter().fold(spec.apis.len().saturating_mul(NUMBER_BYTES), |sum: usize, b| {
        sum.saturating_add(strings_bytes(&[&b.url, &b.upstream_model, &b.key_file, &b.ca_file]))
            .saturating_add(NUMBER_BYTES)
    })
}

/// The total length of `strings`.
fn strings_bytes(strings: &[impl AsRef<str>]) -> usize {
    strings.iter().fold(0, |sum: usize, s| sum.saturating_add(s.as_ref().len()))
}

#[cfg(test)]
mod tests {
    use shared::normalize::{ChatRole, Message, Sampling};

    use super::*;

    fn entry(content: &str) -> CachedCompletion {
        CachedCompletion {
            prompt_tokens: 0,
            completion_tokens: 0,
            etag: String::new(),
            ..CachedCompletion::example("k1", content)
        }
    }

    #[test]
    fn counts_the_strings_of_every_command() {
        let put = Request {
            id: "r1".into(),
            command: Command::Put { entry: entry("hello"), content_class: "stable".into(), prompt: None },
        };
        // id 2 + key 2 + tenant 3 + model 1 + content 5 + finish reason 4 + class 6.
        assert_eq!(put.approx_bytes(), 23);
        let prompt = Prompt {
            messages: vec![Message { role: ChatRole::User, content: "hi there".into() }],
            sampling: Sampling { stop: vec!["\n".into()], ..Sampling::greedy(1) },
            tags: Vec::new(),
        };
        assert_eq!(prompt.approx_bytes(), 4 + 8 + 1);
        let with_prompt =
            Command::Put { entry: entry("hello"), content_class: String::new(), prompt: Some(prompt) };
        assert_eq!(with_prompt.approx_bytes(), 15 + 13);
        let hits = Command::RecordHits { hits: vec![("abc".into(), 3), ("de".into(), 1)] };
        assert_eq!(hits.approx_bytes(), 5 + 2 * NUMBER_BYTES);
        let sweep = Command::Sweep { entries: vec!["k".into()], requests: vec!["rq".into()], feed: vec![7] };
        assert_eq!(sweep.approx_bytes(), 3 + NUMBER_BYTES);
        let scope = InvalidateScope::Key { tenant: "dev".into(), key: "k1".into() };
        assert_eq!(Command::Invalidate { scope }.approx_bytes(), 5);
    }
}
