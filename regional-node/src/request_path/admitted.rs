//! A chat request that passed authentication and validation, with what the path derives from it once:
//! its key, its content class and TTL, and the question a semantic lookup compares.

use std::time::Instant;

use shared::cache_key::{CacheKey, SemanticQuery};
use shared::completion::AnsweredQuestion;
use shared::content_class::{classify, ContentClass, TtlPolicy};
use shared::models::ModelTable;
use shared::normalize::NormalizedRequest;
use shared::trace::TraceParent;

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

/// The request's `Cache-Control` directives that the regional tier honours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// `only-if-cached`: answer from a cache or not at all (504), never generate.
    pub only_if_cached: bool,
    /// `no-cache`: do not answer from a cache (a fresh answer is still stored).
    pub no_cache: bool,
    /// `no-store`: do not store the answer anywhere.
    pub no_store: bool,
}

impl Directives {
    /// Parses a `Cache-Control` header value (unknown directives are ignored).
    pub fn parse(value: Option<&str>) -> Self {
        let mut directives = Self::default();
        for directive in value.unwrap_or_default().split(',').map(|d| d.trim().to_ascii_lowercase()) {
            match directive.as_str() {
                "only-if-cached" => directives.only_if_cached = true,
                "no-cache" => directives.no_cache = true,
                "no-store" => directives.no_store = true,
                _ => {}
            }
        }
        directives
    }
}

/// What the caches may do for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caching {
    /// Answer from a cache (this node's, the semantic tier's, the core's) when one holds an answer.
    pub lookup: bool,
    /// Keep the answer (here, at the core, at the peers).
    pub store: bool,
}

impl Caching {
    /// Only deterministic requests (greedy, or sampled with a seed, which the key includes) are cached,
    /// unless the tenant opted in to caching sampled answers; never a realtime one, nor one whose answer
    /// a cache cannot hold (log-probabilities, several sampled choices); and as far as the request's
    /// directives allow.
    pub fn decide(
        class: ClassTtl,
        request: &NormalizedRequest,
        cache_sampled: bool,
        directives: Directives,
    ) -> Self {
        let sampled = !request.sampling.is_greedy() && request.sampling.seed.is_none();
        let cacheable = class.cacheable() && (!sampled || cache_sampled) && request.sampling.cache_can_hold();
        Self { lookup: cacheable && !directives.no_cache, store: cacheable && !directives.no_store }
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
    /// What the caches may do for it.
    pub caching: Caching,
    /// `Cache-Control: only-if-cached`: answer from a cache or not at all (504), never generate.
    pub only_if_cached: bool,
    /// When the request arrived, for `Server-Timing` and latency metrics.
    pub started: Instant,
    /// This node's span of the request's trace (continued from the caller's `traceparent`).
    pub trace: TraceParent,
    /// The question a semantic lookup compares (the last user turn and its partition), hashed once;
    /// `None` when the request does not end with a user turn.
    question: Option<AnsweredQuestion>,
}

impl Admitted {
    /// Derives the key, the class under `ttl`, what the caches may do (given whether the tenant caches
    /// sampled answers, and the request's directives) and the semantic question of `request`.
    pub fn new(
        tenant: String,
        request: NormalizedRequest,
        ttl: &TtlPolicy,
        cache_sampled: bool,
        directives: Directives,
        started: Instant,
    ) -> Self {
        let class = ClassTtl::new(classify(&request), ttl);
        let caching = Caching::decide(class, &request, cache_sampled, directives);
        Self::derive(tenant, request, class, caching, directives.only_if_cached, started)
    }

    /// The request with its key and semantic question derived (the class depends on the text only).
    fn derive(
        tenant: String,
        request: NormalizedRequest,
        class: ClassTtl,
        caching: Caching,
        only_if_cached: bool,
        started: Instant,
    ) -> Self {
        let key = CacheKey::derive(&tenant, &request);
        let question = SemanticQuery::derive(&tenant, &request)
            .map(|q| AnsweredQuestion { partition: q.partition, text: q.question.to_owned() });
        let trace = daemon_runtime::trace_context::continue_or_start(None);
        Self { tenant, request, key, class, caching, only_if_cached, started, trace, question }
    }

    /// The same request as part of the trace `traceparent` names (a new trace when it names none).
    pub fn traced(self, traceparent: Option<&str>) -> Self {
        Self { trace: daemon_runtime::trace_context::continue_or_start(traceparent), ..self }
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
        let again = Self::derive(
            self.tenant.clone(),
            request,
            self.class,
            self.caching,
            self.only_if_cached,
            self.started,
        );
        Some(Self { trace: self.trace, ..again })
    }

    /// The semantic query of the request (a view of the question derived once).
    pub fn query(&self) -> Option<SemanticQuery<'_>> {
        self.question.as_ref().map(|q| SemanticQuery { partition: q.partition.clone(), question: &q.text })
    }
}

#[cfg(test)]
mod tests {
    use shared::models::ModelRef;
    use shared::normalize::{ChatRole, Message, Sampling};

    use super::*;

    fn request(messages: Vec<Message>) -> NormalizedRequest {
        NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 1 },
            messages,
            sampling: Sampling::greedy(8),
            delivery: shared::openai::Delivery::Whole,
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        }
    }

    #[test]
    fn the_query_is_the_one_semantic_query_derive_gives() {
        let asked = request(vec![Message { role: ChatRole::User, content: "What is a monad?".into() }]);
        let admitted = Admitted::new(
            "t".into(),
            asked.clone(),
            &TtlPolicy::default(),
            false,
            Directives::default(),
            Instant::now(),
        );
        let derived = SemanticQuery::derive("t", &asked).expect("a user turn");
        let query = admitted.query().expect("a user turn");
        assert_eq!((query.partition, query.question), (derived.partition, derived.question));
        assert_eq!(admitted.key, CacheKey::derive("t", &asked));
        assert_eq!(admitted.class.class, ContentClass::Stable);

        let answered = request(vec![Message { role: ChatRole::Assistant, content: "Hi".into() }]);
        let admitted = Admitted::new(
            "t".into(),
            answered,
            &TtlPolicy::default(),
            false,
            Directives::default(),
            Instant::now(),
        );
        assert!(admitted.query().is_none());
    }

    #[test]
    fn sampled_requests_and_directives_decide_what_the_caches_may_do() {
        let class = ClassTtl::new(ContentClass::Stable, &TtlPolicy::default());
        let mut asked = request(vec![Message { role: ChatRole::User, content: "What is a monad?".into() }]);
        let both = Caching { lookup: true, store: true };
        assert_eq!(Caching::decide(class, &asked, false, Directives::default()), both, "greedy");
        asked.sampling.temperature = 0.7;
        let neither = Caching { lookup: false, store: false };
        assert_eq!(
            Caching::decide(class, &asked, false, Directives::default()),
            neither,
            "one sample for all"
        );
        assert_eq!(Caching::decide(class, &asked, true, Directives::default()), both, "the tenant opted in");
        asked.sampling.seed = Some(7);
        assert_eq!(
            Caching::decide(class, &asked, false, Directives::default()),
            both,
            "seeded: reproducible"
        );
        let no_cache = Directives::parse(Some("No-Cache, max-age=0"));
        assert_eq!(Caching::decide(class, &asked, false, no_cache), Caching { lookup: false, store: true });
        let no_store = Directives::parse(Some("no-store"));
        assert_eq!(Caching::decide(class, &asked, false, no_store), Caching { lookup: true, store: false });
        let realtime = ClassTtl::new(ContentClass::Realtime, &TtlPolicy::default());
        assert_eq!(Caching::decide(realtime, &asked, false, Directives::default()), neither);
        assert!(Directives::parse(Some("only-if-cached")).only_if_cached);
    }
}
