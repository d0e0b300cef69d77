//! Starting a completion's generation: on a backend of the asked model, or, when the model has a
//! fallback (`--fallback-models`) and none of its backends can answer (every one failed, none is up, or
//! none is predicted to start within `--fallback-ttft-ms`), on the fallback model. A fallback answer is
//! the fallback model's in every way: its key (derived as a regional node derives it for that model),
//! its version, its entry; the asked model's key stays empty. The caller learns of it first, by a
//! `FallbackStarted` event.

use proto::cache::FallbackStarted;
use proto::inference::GenerateRequest;
use shared::completion::CachedCompletion;
use tonic::Code;

use super::cache_service::CompleteInput;
use crate::node::backends::{EventStream, InFlight};
use crate::node::context::NodeContext;
use crate::node::error::CoreError;

/// A generation under way.
pub struct Generating {
    /// The backend's URL.
    pub backend: String,
    /// Its events.
    pub stream: EventStream,
    /// Counts it against the backend while held.
    pub in_flight: InFlight,
    /// What is generated and stored: the request's own input, or the fallback's.
    pub input: CompleteInput,
    /// Set when the fallback model answers.
    pub fallback: Option<FallbackStarted>,
}

/// How a completion that missed starts.
pub enum Start {
    /// Generating.
    Generating(Generating),
    /// The fallback model's answer is already stored.
    Stored {
        /// The stored answer.
        entry: CachedCompletion,
        /// What to tell the caller first.
        fallback: FallbackStarted,
    },
}

/// Starts `input`'s generation, falling back as the node's policy says.
pub async fn start(
    node: &NodeContext,
    input: CompleteInput,
    trace: &shared::trace::TraceParent,
) -> Result<Start, CoreError> {
    let backends = &node.backends;
    let Some(fallback_model) = backends.fallback_for(&input.generate.model).map(str::to_owned) else {
        let (backend, stream, in_flight) = backends.generate(input.generate.clone(), trace).await?;
        return Ok(Start::Generating(Generating { backend, stream, in_flight, input, fallback: None }));
    };
    let reason = match backends.too_slow(&input.generate) {
        Some(reason) => reason,
        None => match backends.generate(input.generate.clone(), trace).await {
            Ok((backend, stream, in_flight)) => {
                return Ok(Start::Generating(Generating {
                    backend,
                    stream,
                    in_flight,
                    input,
                    fallback: None,
                }));
            }
            Err(error) if falls_back(&error) => error.to_string(),
            Err(error) => return Err(error),
        },
    };
    let input = fallback_input(node, &input, &fallback_model)?;
    node.metrics.fallbacks.inc();
    tracing::warn!(model = %input.generate.model, fallback = %fallback_model, %reason, "answering with the fallback model");
    let fallback = FallbackStarted {
        model: fallback_model,
        model_version: input.model_version,
        key: input.key.clone(),
        reason,
    };
    if !input.fresh {
        if let Some(stored) = node.state.read(&input.key, &input.generate.tenant)? {
            if stored.entry.model_version == input.model_version {
                node.hits.record(&input.key);
                let entry = node.signed(stored.entry, stored.prompt.as_ref());
                return Ok(Start::Stored { entry, fallback });
            }
        }
    }
    let (backend, stream, in_flight) = backends.generate(input.generate.clone(), trace).await?;
    Ok(Start::Generating(Generating { backend, stream, in_flight, input, fallback: Some(fallback) }))
}

/// Whether `error` means the asked model cannot answer now (rather than that the request is bad).
fn falls_back(error: &CoreError) -> bool {
    match error {
        CoreError::NoBackend(_) => true,
        CoreError::Backend { code, .. } => {
            matches!(
                code,
                Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded | Code::Internal
            )
        }
        _ => false,
    }
}

/// `input` asked of `fallback_model` at its current version, under that model's key.
fn fallback_input(
    node: &NodeContext,
    input: &CompleteInput,
    fallback_model: &str,
) -> Result<CompleteInput, CoreError> {
    let version = node.state.model_version(fallback_model)?.ok_or_else(|| {
        CoreError::NoBackend(format!("the fallback model {fallback_model:?} is not registered"))
    })?;
    let generate = GenerateRequest {
        model: fallback_model.to_owned(),
        model_version: version,
        ..input.generate.clone()
    };
    let key = fallback_key(&generate, version)?;
    Ok(CompleteInput { key, model_version: version, generate, ..input.clone() })
}

/// The key a regional node derives for `generate` (already naming the fallback model) at `version`.
fn fallback_key(generate: &GenerateRequest, version: u64) -> Result<String, CoreError> {
    let key = generate
        .derived_key(version)
        .ok_or_else(|| CoreError::InvalidArgument("a message role is not one the mesh knows".into()))?;
    Ok(key.as_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::{ChatMessage, Sampling};
    use shared::cache_key::CacheKey;
    use shared::models::ModelRef;
    use shared::normalize::NormalizedRequest;

    #[test]
    fn the_fallback_key_is_the_one_a_regional_node_derives_for_that_model() {
        let generate = GenerateRequest {
            tenant: "dev".into(),
            model: "small".into(),
            messages: vec![ChatMessage { role: "user".into(), content: "Who wrote Hamlet?".into() }],
            sampling: Some(Sampling { max_tokens: 16, ..Default::default() }),
            ..Default::default()
        };
        let normalized = NormalizedRequest {
            model: ModelRef { name: "small".into(), version: 3 },
            messages: generate.normalized_messages().expect("roles"),
            sampling: generate.normalized_sampling(),
            delivery: shared::openai::Delivery::Stream { usage: false },
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        };
        let expected = CacheKey::derive("dev", &normalized).as_str().to_owned();
        assert_eq!(fallback_key(&generate, 3).expect("key"), expected, "delivery is not part of the key");
        assert_ne!(fallback_key(&generate, 4).expect("key"), expected, "the version is");
    }

    #[test]
    fn only_an_unavailable_model_falls_back() {
        assert!(falls_back(&CoreError::NoBackend("all down".into())));
        assert!(falls_back(&CoreError::Backend { code: Code::Unavailable, message: "down".into() }));
        assert!(!falls_back(&CoreError::InvalidArgument("top_k".into())));
        assert!(!falls_back(&CoreError::Backend { code: Code::InvalidArgument, message: "bad".into() }));
    }
}
