//! `CachedCompletion` between its wire form and `shared`'s domain type.

use crate::cache::CachedCompletion as WireCompletion;
use shared::completion::{AnsweredQuestion, CachedCompletion};

impl From<CachedCompletion> for WireCompletion {
    fn from(e: CachedCompletion) -> Self {
        Self {
            key: e.key,
            tenant: e.tenant,
            model: e.model,
            model_version: e.model_version,
            content: e.content,
            finish_reason: e.finish_reason,
            prompt_tokens: e.prompt_tokens,
            completion_tokens: e.completion_tokens,
            etag: e.etag,
            created_ms: e.created_ms,
            ttl_s: e.ttl_s,
            question_partition: e.question.as_ref().map(|q| q.partition.clone()).unwrap_or_default(),
            question: e.question.map(|q| q.text).unwrap_or_default(),
            signature: e.signature,
            tags: e.tags,
        }
    }
}

impl From<WireCompletion> for CachedCompletion {
    fn from(e: WireCompletion) -> Self {
        Self {
            key: e.key,
            tenant: e.tenant,
            model: e.model,
            model_version: e.model_version,
            content: e.content,
            finish_reason: e.finish_reason,
            prompt_tokens: e.prompt_tokens,
            completion_tokens: e.completion_tokens,
            etag: e.etag,
            created_ms: e.created_ms,
            ttl_s: e.ttl_s,
            question: (!e.question_partition.is_empty())
                .then_some(AnsweredQuestion { partition: e.question_partition, text: e.question }),
            signature: e.signature,
            tags: e.tags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_round_trip() {
        let entry = CachedCompletion {
            key: "v1:k".into(),
            tenant: "dev".into(),
            model: "m".into(),
            model_version: 3,
            content: "hello".into(),
            finish_reason: "stop".into(),
            prompt_tokens: 5,
            completion_tokens: 1,
            etag: CachedCompletion::etag_of("hello", "stop"),
            created_ms: 1_700_000_000_000,
            ttl_s: 60,
            question: None,
            signature: "ab".repeat(64),
            tags: vec!["region:eu".into(), "stock:AAPL".into()],
        };
        assert_eq!(CachedCompletion::from(WireCompletion::from(entry.clone())), entry);
        let asked = AnsweredQuestion { partition: "p1:ab".into(), text: "What is 2 + 2?".into() };
        let entry = CachedCompletion { question: Some(asked), ..entry };
        assert_eq!(CachedCompletion::from(WireCompletion::from(entry.clone())), entry);
    }
}
