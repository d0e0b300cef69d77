//! A chat request that passed authentication and validation, with what the path derives from it once:
//! its key, its content class and TTL, and the question a semantic lookup compares.

use std::time::Instant;

use shared::cache_key::{CacheKey, SemanticQuery};
use shared::completion::AnsweredQuestion;
use shared::content_class::{classify, ContentClass, TtlPolicy};
use shared::models::ModelTable;
use shared::normalize::NormalizedRequest;

/// A request's content class and the TTL this node's policy gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassTtl {
    /// The class of the last user message.
    pub class: ContentClass,
    /// The class's TTL in seconds (0 for realtime, which is not cached).
    pub ttl_s: u64,
}

impl ClassTtl {
    /// The class and its TTL under `policy`.
    pub fn new(class: ContentClass, policy: &TtlPolicy) -> Self {
        Self { class, ttl_s: policy.ttl_s(class) }
    }

    /// Whether answers of this class may be cached.
    pub fn cacheable(self) -> bool {
        TtlPolicy::cacheable(self.class)
    }
}

/// A validated request of a tenant, as the request path answers it.
#[derive(Clone, Debug)]
pub struct Admitted {
    /// The tenant it is answered for.
    pub tenant: String,
    /// The normalized request.
    pub request: NormalizedRequest,
    /// Its cache key.
    pub key: CacheKey,
    /// Its content class and the TTL it gets.
    pub class: ClassTtl,
    /// `Cache-Control: only-if-cached`: answer from a cache or not at all (504), never generate.
    pub only_if_cached: bool,
    /// When the request arrived, for `Server-Timing` and latency metrics.
    pub started: Instant,
    /// The question a semantic lookup compares (the last user turn and its partition), hashed once;
    /// `None` when the request does not end with a user turn.
    question: Option<AnsweredQuestion>,
}

impl Admitted {
    /// Derives the key, the class under `ttl` and the semantic question of `request`.
    pub fn new(
        tenant: String,
        request: NormalizedRequest,
        ttl: &TtlPolicy,
        only_if_cached: bool,
        started: Instant,
    ) -> Self {
        let class = ClassTtl::new(classify(&request), ttl);
        Self::derive(tenant, request, class, only_if_cached, started)
    }

    /// The request with its key and semantic question derived (the class depends on the text only).
    fn derive(
        tenant: String,
        request: NormalizedRequest,
        class: ClassTtl,
        only_if_cached: bool,
        started: Instant,
    ) -> Self {
        let key = CacheKey::derive(&tenant, &request);
        let question = SemanticQuery::derive(&tenant, &request)
            .map(|q| AnsweredQuestion { partition: q.partition, text: q.question.to_owned() });
        Self { tenant, request, key, class, only_if_cached, started, question }
    }

    /// The same request under the model's version in `models`, when that is another one (its key and
    /// semantic question are derived again; the class and the arrival time are kept).
    pub fn at_current_version(&self, models: &ModelTable) -> Option<Admitted> {
        let current = models.resolve(&self.request.model.name).ok()?;
        if current.version == self.request.model.version {
            return None;
        }
        let mut request = self.request.clone();
        request.model.version = current.version;
        Some(Self::derive(self.tenant.clone(), request, self.class, self.only_if_cached, self.started))
    }

    /// The semantic query of the request (a view of the question derived once).
    pub fn query(&self) -> Option<SemanticQuery<'_>> {
        self.question.as_ref().map(|q| SemanticQuery { partition: q.partition.clone(), question: &q.text })
    }
}

#[cfg(test)]
mod tests {
    use shared::models::ModelRef;
    use shared::normalize::{Message, Role, Sampling};

    use super::*;

    fn request(messages: Vec<Message>) -> NormalizedRequest {
        NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 1 },
            messages,
            sampling: Sampling { max_tokens: 8, temperature: 0.0, top_p: 1.0, seed: None, stop: vec![] },
            stream: false,
        }
    }

    #[test]
    fn the_query_is_the_one_semantic_query_derive_gives() {
        let asked = request(vec![Message { role: Role::User, content: "What is a monad?".into() }]);
        let admitted = Admitted::new("t".into(), asked.clone(), &TtlPolicy::default(), false, Instant::now());
        let derived = SemanticQuery::derive("t", &asked).expect("a user turn");
        let query = admitted.query().expect("a user turn");
        assert_eq!((query.partition, query.question), (derived.partition, derived.question));
        assert_eq!(admitted.key, CacheKey::derive("t", &asked));
        assert_eq!(admitted.class.class, ContentClass::Stable);

        let answered = request(vec![Message { role: Role::Assistant, content: "Hi".into() }]);
        let admitted = Admitted::new("t".into(), answered, &TtlPolicy::default(), false, Instant::now());
        assert!(admitted.query().is_none());
    }
}
