//! What every handler of a core node shares.

use std::sync::Arc;

use serde::Serialize;

use super::backends::Backends;
use super::error::CoreError;
use super::metrics::Metrics;
use super::state_machine::StateMachineStore;
use super::types::{NodeId, Raft};
use crate::node::background::hit_reporter::HitCounter;
use crate::node::background::refresher::Refresher;
use crate::node::raft::leader_contact::LeaderContact;
use crate::node::raft::log_store::LogStore;
use crate::node::raft::peers::PeerChannels;
use crate::node::raft::read_barrier::ReadBarrier;
use crate::node::writes::writer::Writer;
use daemon_runtime::TierIdentity;
use shared::answer_signature::AnswerSigner;
use shared::cache_key::SemanticQuery;
use shared::completion::{AnsweredQuestion, CachedCompletion};
use shared::models::ModelRef;
use shared::normalize::NormalizedRequest;

use super::types::Prompt;

/// Longest time since a leader confirmed this node's state for it to serve cached answers.
pub const SERVING_STALENESS_MS: u64 = 5_000;

/// The running node's parts, shared by the gRPC services and the HTTP routes.
pub struct NodeContext {
    /// This node's Raft id.
    pub id: NodeId,
    /// The local Raft node.
    pub raft: Raft,
    /// The local state machine, read directly for lookups.
    pub state: StateMachineStore,
    /// The Raft log (a clone of openraft's), for its write-ahead log's sync counts.
    pub log: LogStore,
    /// Commits commands through Raft from this node.
    pub writer: Writer,
    /// The model backends: inference pods and OpenAI-compatible servers.
    pub backends: Arc<Backends>,
    /// Channels to the other core nodes.
    pub channels: PeerChannels,
    /// This node's identity, presented on calls to other nodes.
    pub identity: TierIdentity,
    /// Regenerates hot prompts after a model-version bump.
    pub refresher: Refresher,
    /// Hits served here, reported through Raft.
    pub hits: Arc<HitCounter>,
    /// Shares quorum rounds between concurrent linearizable reads.
    pub read_barrier: ReadBarrier,
    /// When a leader last confirmed this node's state: bounds the staleness of local reads.
    pub contact: Arc<LeaderContact>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// Signs the answers this node hands out (`--answer-signing-key`); `None` signs nothing.
    pub answer_signer: Option<AnswerSigner>,
    /// Each model version's latest generations here, which the canary's judge compares.
    pub arms: Arc<crate::node::background::canary_judge::ArmStats>,
    /// How `model: "auto"` chooses.
    pub auto: crate::node::services::auto_model::AutoPolicy,
    /// When a trial is audited and rolled back.
    pub canary_rule: crate::node::background::canary_judge::CanaryRule,
}

/// The question `entry` answers in its semantic partition, derived from the request it was generated
/// for as a regional node derives it (`None` when the request has none: its last turn is not the
/// user's, or is too long).
fn answered_question(entry: &CachedCompletion, prompt: &Prompt) -> Option<AnsweredQuestion> {
    let request = NormalizedRequest {
        model: ModelRef { name: entry.model.clone(), version: entry.model_version },
        messages: prompt.messages.clone(),
        sampling: prompt.sampling.clone(),
        delivery: shared::openai::Delivery::Whole,
        api: shared::model_spec::ModelApi::Chat,
        echo: false,
        tags: prompt.tags.clone(),
    };
    let query = SemanticQuery::derive(&entry.tenant, &request)?;
    Some(AnsweredQuestion { partition: query.partition, text: query.question.to_owned() })
}

/// The node's Raft status, as `/healthz` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Health {
    /// This node's id.
    pub id: NodeId,
    /// The leader this node knows of, if any.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// Index of the last entry applied to the state machine.
    pub last_applied: Option<u64>,
    /// Tenants in the local state machine (a fresh cluster has its `--tenants` once seeding is applied).
    pub tenants: usize,
    /// Models in the local state machine.
    pub models: usize,
}

impl NodeContext {
    /// `entry` as handed out: naming the question it answers when `prompt` (the request it was
    /// generated for) has one, and signed with the cluster's answer key, when this node has it.
    pub fn signed(&self, mut entry: CachedCompletion, prompt: Option<&Prompt>) -> CachedCompletion {
        if entry.question.is_none() {
            entry.question = prompt.and_then(|prompt| answered_question(&entry, prompt));
        }
        if let Some(signer) = &self.answer_signer {
            signer.sign(&mut entry);
        }
        entry
    }

    /// The node's current Raft status.
    pub fn health(&self) -> Health {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        Health {
            id: self.id,
            leader: known_leader(self.id, &m),
            term: m.current_term,
            last_applied: m.last_applied.map(|id| id.index),
            tenants: self.state.tenant_count(),
            models: self.state.model_count(),
        }
    }

    /// The leader this node knows of and its last applied log index, from Raft's metrics alone: the
    /// read path's cheap subset of [`health`](Self::health), which also counts tenants and models by
    /// walking their trees.
    pub fn raft_position(&self) -> (Option<u64>, Option<u64>) {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        (known_leader(self.id, &m), m.last_applied.map(|id| id.index))
    }

    /// Whether this node may answer from its state: it is a member of the cluster it knows, and a leader
    /// confirmed its state within [`SERVING_STALENESS_MS`]. A removed node (which may never learn it was
    /// removed) or one cut off from the leader refuses, so its callers fail over instead of reading a
    /// state that no longer moves.
    pub fn check_serving(&self) -> Result<(), CoreError> {
        self.serving_staleness().map(drop)
    }

    /// [`check_serving`](Self::check_serving), and when it passes, how long ago a leader confirmed
    /// this node's applied state (what the change feed tells its watchers, so freshness composes).
    pub fn serving_staleness(&self) -> Result<std::time::Duration, CoreError> {
        if !self.writer.is_member() {
            return Err(CoreError::NoQuorum("this node is not a member of the cluster".into()));
        }
        match self.contact.staleness(self.id, &self.raft) {
            Some(age) if age.as_millis() <= u128::from(SERVING_STALENESS_MS) => Ok(age),
            staleness => Err(CoreError::NoQuorum(format!(
                "no leader confirmed this node's state within {SERVING_STALENESS_MS} ms (last: {:?} ms ago)",
                staleness.map(|age| age.as_millis())
            ))),
        }
    }

    /// The metrics in OpenMetrics text format.
    pub fn render_metrics(&self) -> String {
        let raft = self.raft.metrics().borrow().clone();
        let models = self.state.model_arms();
        self.metrics.render(
            &raft,
            &self.backends,
            self.state.sizes(),
            self.log.sync_stats(),
            &self.arms,
            &models,
        )
    }
}

/// The leader node `id` knows of. A leader removed from the voters keeps its own vote (and, for a while,
/// its leader state), so Raft still names it: it is not reported as leader unless it leads and votes.
pub fn known_leader(
    id: NodeId,
    metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>,
) -> Option<NodeId> {
    let votes = || metrics.membership_config.membership().voter_ids().any(|voter| voter == id);
    metrics.current_leader.filter(|leader| *leader != id || (metrics.state.is_leader() && votes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_names_the_question_a_regional_node_derives() {
        let body = r#"{"model":"smollm2-135m-instruct","temperature":0,"max_tokens":12,
            "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 2 + 2?"}]}"#;
        let request = shared::openai::parse_chat_request(body.as_bytes(), 1 << 20).expect("json");
        let models = shared::models::ModelTable::parse("smollm2-135m-instruct@3").expect("models");
        let mut normalized =
            shared::normalize::normalize(&request, &models, &shared::normalize::Limits::default())
                .expect("valid");
        normalized.tags = vec!["stock:AAPL".into()];
        // The regional node's view: its semantic query of the request.
        let regional = SemanticQuery::derive("dev", &normalized).expect("a question");
        // The core's: the request as the regional node sent it to generate, as the state keeps it.
        let generate = proto::inference::GenerateRequest::for_request("r".into(), "dev", &normalized);
        let prompt = Prompt {
            messages: generate.normalized_messages().expect("roles"),
            sampling: generate.normalized_sampling(),
            tags: generate.tags.clone(),
        };
        let entry = CachedCompletion {
            tenant: "dev".into(),
            model: "smollm2-135m-instruct".into(),
            model_version: 3,
            ..CachedCompletion::example("v1:k", "4")
        };
        let core = answered_question(&entry, &prompt).expect("a question");
        assert_eq!(
            (core.partition.as_str(), core.text.as_str()),
            (regional.partition.as_str(), regional.question)
        );
    }
}
