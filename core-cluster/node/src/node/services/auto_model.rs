//! `model: "auto"` at the core: the rule of [`shared::auto_model`] picks the rungs, and the cascade
//! climbs them. Each rung but the last generates whole, with log-probabilities, before anything reaches
//! the caller; its answer is taken when its confidence reaches `--auto-min-confidence`, else the next
//! rung answers. The answer is stored under the request's auto key with the producing model and its
//! version in the entry, so the model cutoffs of every tier apply to it as to that model's own answers.

use std::collections::BTreeMap;
use std::time::Duration;

use proto::inference::{generate_event, GenerateRequest, Sampling};
use shared::auto_model::{self, Ask, Candidate, Plan};
use shared::content_class::ContentClass;
use shared::models::ModelRef;

use super::cache_service::CompleteInput;
use super::fallback::Generating;
use crate::node::backends::{self, EventStream};
use crate::node::context::NodeContext;
use crate::node::error::CoreError;

/// How a core node runs `auto` (`--auto-models`, `--auto-min-confidence`, `--auto-budgets`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoPolicy {
    /// The ladder, cheapest first; empty means every registered model, ordered by the registry's prices.
    pub models: Vec<String>,
    /// The confidence (geometric mean token probability, 0 to 1) a rung's answer needs to be taken.
    pub min_confidence: f32,
    /// Tenants with a confidence bar of their own.
    pub tenant_min_confidence: BTreeMap<String, f32>,
    /// The most one request of a tenant may cost, in micro-dollars, by tenant.
    pub budgets: BTreeMap<String, u64>,
}

impl AutoPolicy {
    /// Parses `--auto-budgets` items, `TENANT=MICRO_USD`.
    pub fn parse_budgets(items: &[String]) -> Result<BTreeMap<String, u64>, String> {
        by_tenant(items, "MICRO_USD", |v| v.parse().ok())
    }

    /// Parses `--auto-tenant-min-confidence` items, `TENANT=CONFIDENCE` (0 to 1).
    pub fn parse_confidences(items: &[String]) -> Result<BTreeMap<String, f32>, String> {
        by_tenant(items, "CONFIDENCE", |v| v.parse().ok().filter(|c: &f32| (0.0..=1.0).contains(c)))
    }

    /// The confidence bar of `tenant`'s requests.
    pub fn min_confidence_of(&self, tenant: &str) -> f32 {
        self.tenant_min_confidence.get(tenant).copied().unwrap_or(self.min_confidence)
    }
}

/// Parses `TENANT=VALUE` items, each value read by `value`.
fn by_tenant<T>(
    items: &[String],
    what: &str,
    value: impl Fn(&str) -> Option<T>,
) -> Result<BTreeMap<String, T>, String> {
    items
        .iter()
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (tenant, v) = item.split_once('=').ok_or_else(|| format!("{item:?} is not TENANT={what}"))?;
            let v = value(v.trim()).ok_or_else(|| format!("{item:?}: not a valid {what}"))?;
            Ok((tenant.trim().to_owned(), v))
        })
        .collect()
}

/// What the cascade decided, for logs and metrics.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The plan the rule made.
    pub plan: Plan,
    /// The model that answers.
    pub answered_by: String,
    /// Rungs passed over because their answer was not confident (with its confidence, if known).
    pub escalations: Vec<(String, Option<f32>)>,
}

/// The auto version this node's registry gives: what a caller's auto key must be derived at.
pub fn current_version(node: &NodeContext) -> Result<u64, CoreError> {
    let models: Vec<ModelRef> =
        node.state.model_versions()?.into_iter().map(|(name, version)| ModelRef { name, version }).collect();
    Ok(auto_model::auto_version(&models))
}

/// The rule's plan for `input` on this node's registry.
fn plan(node: &NodeContext, input: &CompleteInput) -> Result<Plan, CoreError> {
    let policy = &node.auto;
    let api = input.generate.normalized_api();
    let specs: BTreeMap<String, _> = node.state.model_specs().into_iter().collect();
    let registered = node.state.model_versions()?;
    let serves =
        |name: &str| specs.get(name).map_or(api == shared::model_spec::ModelApi::Chat, |s| s.serves(api));
    let candidate = |name: &str, version: u64| Candidate {
        model: ModelRef { name: name.to_owned(), version },
        spec: specs.get(name).cloned(),
    };
    let ladder = match policy.models.is_empty() {
        true => auto_model::ladder(
            registered.iter().filter(|(name, _)| serves(name)).map(|(name, v)| candidate(name, *v)).collect(),
        ),
        false => policy
            .models
            .iter()
            .filter_map(|name| registered.iter().find(|(n, _)| n == name))
            .filter(|(name, _)| serves(name))
            .map(|(name, v)| candidate(name, *v))
            .collect(),
    };
    let messages = input
        .generate
        .normalized_messages()
        .ok_or_else(|| CoreError::InvalidArgument("a message role is not one the mesh knows".into()))?;
    let ask = Ask {
        messages: &messages,
        max_tokens: input.generate.sampling.as_ref().map_or(0, |s| s.max_tokens),
        time_sensitive: input.content_class == ContentClass::Realtime.as_str(),
        budget_micro_usd: policy.budgets.get(&input.generate.tenant).copied(),
    };
    Ok(auto_model::plan(&ladder, &ask))
}

/// Starts `input` (asked of `auto`): climbs the plan's rungs and returns the generation that answers,
/// its input naming the producing model and version (the key stays the auto key), and the decision.
pub async fn start(
    node: &NodeContext,
    input: CompleteInput,
    trace: &shared::trace::TraceParent,
    idle: Duration,
) -> Result<(Generating, Decision), CoreError> {
    let plan = plan(node, &input)?;
    if plan.rungs.is_empty() {
        return Err(CoreError::InvalidArgument(format!(
            "no model serves this request within the tenant's auto budget ({})",
            plan.reason
        )));
    }
    let min_confidence = node.auto.min_confidence_of(&input.generate.tenant);
    let mut escalations = Vec::new();
    let last = plan.rungs.len() - 1;
    for (i, model) in plan.rungs.iter().enumerate() {
        let rung = CompleteInput {
            generate: GenerateRequest {
                model: model.name.clone(),
                model_version: model.version,
                ..input.generate.clone()
            },
            model_version: model.version,
            ..input.clone()
        };
        if i == last {
            let (backend, stream, in_flight) = node.backends.generate(rung.generate.clone(), trace).await?;
            let generating = Generating { backend, stream, in_flight, input: rung, fallback: None };
            let decision = Decision { answered_by: model.name.clone(), escalations, plan };
            return Ok((generating, decision));
        }
        match judged(node, &rung, trace, idle).await {
            Ok((generating, Some(confidence))) if confidence >= min_confidence => {
                let decision = Decision { answered_by: model.name.clone(), escalations, plan };
                return Ok((generating, decision));
            }
            Ok((_, confidence)) => escalations.push((model.name.clone(), confidence)),
            Err(error) => {
                tracing::warn!(model = %model.name, %error, "an auto rung failed; climbing to the next");
                escalations.push((model.name.clone(), None));
            }
        }
    }
    unreachable!("the last rung returns")
}

/// Generates `rung` whole with log-probabilities; returns its events (log-probabilities stripped, as
/// the caller did not ask for them) replayed as a stream, and the answer's confidence.
async fn judged(
    node: &NodeContext,
    rung: &CompleteInput,
    trace: &shared::trace::TraceParent,
    idle: Duration,
) -> Result<(Generating, Option<f32>), CoreError> {
    let mut generate = rung.generate.clone();
    let sampling = generate.sampling.get_or_insert_with(Sampling::default);
    sampling.logprobs = true;
    sampling.top_logprobs = 0;
    let (backend, mut stream, in_flight) = node.backends.generate(generate, trace).await?;
    let mut events = Vec::new();
    let mut logprobs = Vec::new();
    loop {
        let Some(mut event) = backends::next_event(&mut stream, idle).await? else {
            return Err(CoreError::Backend {
                code: tonic::Code::Unavailable,
                message: "the backend's stream ended without Done".into(),
            });
        };
        let done = matches!(event.event, Some(generate_event::Event::Done(_)));
        if let Some(generate_event::Event::Delta(delta)) = &mut event.event {
            if delta.index == 0 {
                logprobs.extend(delta.logprobs.iter().map(|t| t.logprob));
            }
            delta.logprobs.clear();
        }
        events.push(Ok(event));
        if done {
            break;
        }
    }
    let confidence = auto_model::confidence(&logprobs);
    let replay: EventStream = Box::pin(futures::stream::iter(events));
    let generating = Generating { backend, stream: replay, in_flight, input: rung.clone(), fallback: None };
    Ok((generating, confidence))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_and_bad_ones_are_refused() {
        let parsed = AutoPolicy::parse_budgets(&["dev=500".into(), " acme = 20 ".into()]).expect("valid");
        assert_eq!(parsed.get("dev"), Some(&500));
        assert_eq!(parsed.get("acme"), Some(&20));
        assert!(AutoPolicy::parse_budgets(&["dev".into()]).is_err());
        assert!(AutoPolicy::parse_budgets(&["dev=lots".into()]).is_err());
    }

    #[test]
    fn a_tenant_may_have_its_own_confidence_bar() {
        let policy = AutoPolicy {
            min_confidence: 0.5,
            tenant_min_confidence: AutoPolicy::parse_confidences(&["strict=0.9".into()]).expect("valid"),
            ..AutoPolicy::default()
        };
        assert_eq!((policy.min_confidence_of("strict"), policy.min_confidence_of("dev")), (0.9, 0.5));
        assert!(AutoPolicy::parse_confidences(&["strict=1.5".into()]).is_err(), "past 1");
    }
}
