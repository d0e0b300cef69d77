//! A normalized request on its way to the pod (through the core), and a finished generation on its way
//! back as a cached entry.

use shared::cache_key::CacheKey;
use shared::completion::CachedCompletion;
use shared::model_spec::ModelApi;
use shared::models::ModelRef;
use shared::normalize::{ChatRole, Message, NormalizedRequest, Penalties, Sampling};

use crate::cache::CompleteRequest;
use crate::inference::{self as pb, GenerateDone, GenerateRequest};

impl GenerateRequest {
    /// The pod's request for `request` of `tenant`, under the id `request_id`. Sampling parameters the
    /// normalizer does not produce (top-k, priority, speculative) keep their defaults.
    pub fn for_request(request_id: String, tenant: &str, request: &NormalizedRequest) -> Self {
        Self {
            request_id,
            tenant: tenant.to_owned(),
            model: request.model.name.clone(),
            messages: request
                .messages
                .iter()
                .map(|m| pb::ChatMessage { role: m.role.as_str().to_owned(), content: m.content.clone() })
                .collect(),
            sampling: Some((&request.sampling).into()),
            raw_prompt: request.api == ModelApi::Completions,
            tags: request.tags.clone(),
            model_version: request.model.version,
            ..Default::default()
        }
    }

    /// The API the request came through: a text completion when its prompt is raw.
    pub fn normalized_api(&self) -> ModelApi {
        if self.raw_prompt {
            ModelApi::Completions
        } else {
            ModelApi::Chat
        }
    }

    /// The conversation as normalized messages; `None` if a role is not one the normalizer produces.
    pub fn normalized_messages(&self) -> Option<Vec<Message>> {
        self.messages
            .iter()
            .map(|m| Some(Message { role: ChatRole::from_name(&m.role)?, content: m.content.clone() }))
            .collect()
    }

    /// The sampling parameters as the normalizer writes them (absent ones are the wire defaults).
    pub fn normalized_sampling(&self) -> Sampling {
        self.sampling.clone().unwrap_or_default().into()
    }

    /// The cache key a regional node derives for this request at `model_version`: what the core stores
    /// its answer under, whatever key a caller names. `None` when a message's role is not one the mesh
    /// knows.
    pub fn derived_key(&self, model_version: u64) -> Option<CacheKey> {
        let normalized = NormalizedRequest {
            model: ModelRef { name: self.model.clone(), version: model_version },
            messages: self.normalized_messages()?,
            sampling: self.normalized_sampling(),
            delivery: shared::openai::Delivery::Whole,
            api: self.normalized_api(),
            echo: false,
            tags: self.tags.clone(),
        };
        Some(CacheKey::derive(&self.tenant, &normalized))
    }
}

impl From<pb::Sampling> for Sampling {
    /// The sampling parameters as the normalizer writes them (absent ones are the wire defaults; a
    /// repetition penalty of 0, unset, is none).
    fn from(s: pb::Sampling) -> Self {
        let repetition = if s.repetition_penalty == 0.0 { 1.0 } else { s.repetition_penalty };
        Self {
            max_tokens: s.max_tokens,
            temperature: s.temperature,
            top_p: s.top_p,
            seed: s.seed,
            stop: s.stop,
            penalties: Penalties { frequency: s.frequency_penalty, presence: s.presence_penalty, repetition },
            n: s.n.max(1),
            logprobs: s.logprobs.then_some(s.top_logprobs),
        }
    }
}

impl From<&Sampling> for pb::Sampling {
    /// The pod's parameters: it generates [`Sampling::generated_choices`] choices (one for a greedy
    /// request, whose choices are all the greedy answer; the tier that answers copies it).
    fn from(s: &Sampling) -> Self {
        Self {
            max_tokens: s.max_tokens,
            temperature: s.temperature,
            top_p: s.top_p,
            seed: s.seed,
            stop: s.stop.clone(),
            frequency_penalty: s.penalties.frequency,
            presence_penalty: s.penalties.presence,
            repetition_penalty: s.penalties.repetition,
            n: s.generated_choices(),
            logprobs: s.logprobs.is_some(),
            top_logprobs: s.logprobs.unwrap_or(0),
            ..Default::default()
        }
    }
}

impl CompleteRequest {
    /// The core's completion request for `request` of `tenant` under `key`: generated as the pod's
    /// request, then stored with the content class and the TTL the caller chose. It takes the core's
    /// answer when there is one unless `fresh`, and is not stored when `no_store`.
    pub fn for_request(
        tenant: &str,
        key: &CacheKey,
        request: &NormalizedRequest,
        content_class: &str,
        ttl_s: u64,
    ) -> Self {
        Self {
            key: key.as_str().to_owned(),
            model_version: request.model.version,
            ttl_s,
            content_class: content_class.to_owned(),
            generate: Some(GenerateRequest::for_request(key.completion_id(), tenant, request)),
            fresh: false,
            no_store: false,
        }
    }
}

/// Who a generated answer belongs to and how long it lives: everything its entry needs that the
/// generation itself does not say.
#[derive(Clone, Debug)]
pub struct GeneratedEntry {
    /// The cache key it is stored under.
    pub key: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// The model and version that generated it.
    pub model: ModelRef,
    /// Its TTL, in seconds.
    pub ttl_s: u64,
    /// Its creation time (Unix ms); the state machine sets the committed one.
    pub created_ms: i64,
    /// The cache tags of the request it answers.
    pub tags: Vec<String>,
}

impl GeneratedEntry {
    /// The cached entry of a generation that produced `content` and finished as `done` says.
    pub fn entry(self, content: String, done: &GenerateDone) -> CachedCompletion {
        CachedCompletion {
            key: self.key,
            tenant: self.tenant,
            model: self.model.name,
            model_version: self.model.version,
            etag: CachedCompletion::etag_of(&content, &done.finish_reason),
            content,
            finish_reason: done.finish_reason.clone(),
            prompt_tokens: done.prompt_tokens,
            completion_tokens: done.completion_tokens,
            created_ms: self.created_ms,
            ttl_s: self.ttl_s,
            question: None,
            signature: String::new(),
            tags: self.tags,
        }
    }
}

impl From<pb::TokenLogprob> for shared::openai::TokenLogprob {
    /// A log-probability of `-inf` (a token the model rules out) is OpenAI's `-9999.0`: JSON has no
    /// infinity.
    fn from(t: pb::TokenLogprob) -> Self {
        Self {
            token: t.token,
            logprob: finite_logprob(t.logprob),
            bytes: t.bytes,
            top_logprobs: t
                .top
                .into_iter()
                .map(|top| shared::openai::TopLogprob {
                    token: top.token,
                    logprob: finite_logprob(top.logprob),
                    bytes: top.bytes,
                })
                .collect(),
        }
    }
}

/// The log-probability OpenAI reports for a token the model rules out.
const RULED_OUT_LOGPROB: f32 = -9999.0;

fn finite_logprob(logprob: f32) -> f32 {
    if logprob.is_nan() {
        RULED_OUT_LOGPROB
    } else {
        logprob.max(RULED_OUT_LOGPROB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NormalizedRequest {
        NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 3 },
            messages: vec![
                Message { role: ChatRole::System, content: "Be brief.".into() },
                Message { role: ChatRole::User, content: "What is 2 + 2?".into() },
            ],
            sampling: Sampling {
                max_tokens: 16,
                temperature: 0.7,
                top_p: 0.9,
                seed: Some(7),
                stop: vec!["\n".into()],
                penalties: Penalties { frequency: 0.5, presence: 0.25, repetition: 1.2 },
                n: 2,
                logprobs: Some(3),
            },
            delivery: shared::openai::Delivery::Stream { usage: false },
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        }
    }

    #[test]
    fn the_pods_request_round_trips_to_the_normalized_prompt() {
        let request = request();
        let wire = GenerateRequest::for_request("r1".into(), "acme", &request);
        assert_eq!(
            (wire.request_id.as_str(), wire.tenant.as_str(), wire.model.as_str()),
            ("r1", "acme", "m")
        );
        assert_eq!(wire.normalized_messages(), Some(request.messages.clone()));
        assert_eq!(wire.normalized_sampling(), request.sampling);
        let mut odd = wire.clone();
        odd.messages[0].role = "tool".into();
        assert_eq!(odd.normalized_messages(), None);
    }

    #[test]
    fn the_core_request_carries_key_version_class_and_ttl() {
        let request = request();
        let key = CacheKey::derive("acme", &request);
        let wire = CompleteRequest::for_request("acme", &key, &request, "stable", 86_400);
        assert_eq!(wire.key, key.as_str());
        assert_eq!((wire.model_version, wire.ttl_s, wire.content_class.as_str()), (3, 86_400, "stable"));
        assert_eq!(wire.generate.map(|g| g.request_id), Some(key.completion_id()));
    }

    #[test]
    fn ruled_out_tokens_get_a_finite_log_probability() {
        let token = pb::TokenLogprob {
            token: "x".into(),
            bytes: b"x".to_vec(),
            logprob: f32::NEG_INFINITY,
            top: vec![pb::TopLogprob { token: "y".into(), bytes: b"y".to_vec(), logprob: -0.5 }],
        };
        let rendered = shared::openai::TokenLogprob::from(token);
        assert_eq!((rendered.logprob, rendered.top_logprobs[0].logprob), (-9999.0, -0.5));
    }

    #[test]
    fn a_finished_generation_becomes_its_entry() {
        let done = GenerateDone {
            finish_reason: "stop".into(),
            prompt_tokens: 9,
            completion_tokens: 1,
            ..Default::default()
        };
        let header = GeneratedEntry {
            key: "k".into(),
            tenant: "acme".into(),
            model: ModelRef { name: "m".into(), version: 3 },
            ttl_s: 60,
            created_ms: 5,
            tags: Vec::new(),
        };
        let entry = header.entry("4".into(), &done);
        assert_eq!(entry.etag, CachedCompletion::etag_of("4", "stop"));
        assert_eq!((entry.model.as_str(), entry.model_version, entry.ttl_s), ("m", 3, 60));
        assert_eq!((entry.prompt_tokens, entry.completion_tokens, entry.created_ms), (9, 1, 5));
    }
}
