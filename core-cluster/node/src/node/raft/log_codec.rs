//! The binary form of the Raft log (`mesh.raft.v1.EntryPayload` and `AppendEntriesBody`): what the
//! write-ahead log stores and what AppendEntries carries; and of InstallSnapshot chunks. No JSON on this
//! path: an entry is encoded once by the leader's log store and once for each AppendEntries, in prost's
//! compact form.

use std::collections::{BTreeMap, BTreeSet};

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest};
use openraft::{BasicNode, EntryPayload, LeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote};
use prost::Message as _;
use proto::core as core_pb;
use proto::inference as inference_pb;
use proto::raft as pb;
use shared::model_spec::ModelSpec;
use shared::normalize::{ChatRole, Message};

use crate::node::error::CoreError;
use crate::node::types::{Command, Entry, InvalidateScope, NodeId, Prompt, Proposal, Request, TypeConfig};

fn unreadable(what: &str) -> CoreError {
    CoreError::InvalidArgument(format!("raft log: {what}"))
}

fn missing(what: &str) -> CoreError {
    CoreError::InvalidArgument(format!("raft log: {what} is missing"))
}

/// Encodes an entry's payload.
pub fn encode_payload(payload: &EntryPayload<TypeConfig>) -> Vec<u8> {
    payload_to_pb(payload).encode_to_vec()
}

/// Decodes an entry's payload.
pub fn decode_payload(bytes: &[u8]) -> Result<EntryPayload<TypeConfig>, CoreError> {
    let decoded = pb::EntryPayload::decode(bytes)
        .map_err(|e| CoreError::InvalidArgument(format!("raft log: an entry does not decode: {e}")))?;
    payload_from_pb(decoded)
}

/// Encodes an AppendEntries request.
pub fn encode_append(
    request: &AppendEntriesRequest<TypeConfig>,
    leader_quorum_age_ms: Option<u64>,
) -> Vec<u8> {
    pb::AppendEntriesBody {
        vote: Some(vote_to_pb(&request.vote)),
        prev_log_id: request.prev_log_id.as_ref().map(log_id_to_pb),
        entries: request
            .entries
            .iter()
            .map(|e| pb::LogEntry {
                log_id: Some(log_id_to_pb(&e.log_id)),
                payload: Some(payload_to_pb(&e.payload)),
            })
            .collect(),
        leader_commit: request.leader_commit.as_ref().map(log_id_to_pb),
        leader_quorum_age_ms,
    }
    .encode_to_vec()
}

/// Decodes an AppendEntries request.
pub fn decode_append(bytes: &[u8]) -> Result<DecodedAppend, CoreError> {
    let body = pb::AppendEntriesBody::decode(bytes)
        .map_err(|e| CoreError::InvalidArgument(format!("append entries does not decode: {e}")))?;
    let entries = body
        .entries
        .into_iter()
        .map(|e| {
            let log_id = log_id_from_pb(e.log_id.ok_or_else(|| missing("an entry's log id"))?);
            Ok(Entry {
                log_id,
                payload: payload_from_pb(e.payload.ok_or_else(|| missing("an entry's payload"))?)?,
            })
        })
        .collect::<Result<_, CoreError>>()?;
    let request = AppendEntriesRequest {
        vote: vote_from_pb(body.vote.ok_or_else(|| missing("the vote"))?),
        prev_log_id: body.prev_log_id.map(log_id_from_pb),
        entries,
        leader_commit: body.leader_commit.map(log_id_from_pb),
    };
    Ok(DecodedAppend { request, leader_quorum_age_ms: body.leader_quorum_age_ms })
}

/// A decoded AppendEntries.
#[derive(Debug)]
pub struct DecodedAppend {
    /// openraft's request.
    pub request: AppendEntriesRequest<TypeConfig>,
    /// The sender's time since a quorum last acknowledged it as leader; absent when it did not know.
    pub leader_quorum_age_ms: Option<u64>,
}

/// Encodes an InstallSnapshot request (one chunk of a snapshot file).
pub fn encode_install(request: &InstallSnapshotRequest<TypeConfig>) -> Vec<u8> {
    let meta = &request.meta;
    pb::InstallSnapshotBody {
        vote: Some(vote_to_pb(&request.vote)),
        last_log_id: meta.last_log_id.as_ref().map(log_id_to_pb),
        membership: Some(membership_to_pb(meta.last_membership.membership())),
        membership_log_id: meta.last_membership.log_id().as_ref().map(log_id_to_pb),
        snapshot_id: meta.snapshot_id.clone(),
        offset: request.offset,
        data: request.data.clone(),
        done: request.done,
    }
    .encode_to_vec()
}

/// Decodes an InstallSnapshot request.
pub fn decode_install(bytes: &[u8]) -> Result<InstallSnapshotRequest<TypeConfig>, CoreError> {
    let body = pb::InstallSnapshotBody::decode(bytes)
        .map_err(|e| CoreError::InvalidArgument(format!("install snapshot does not decode: {e}")))?;
    let membership = membership_from_pb(body.membership.ok_or_else(|| missing("the snapshot's membership"))?);
    Ok(InstallSnapshotRequest {
        vote: vote_from_pb(body.vote.ok_or_else(|| missing("the vote"))?),
        meta: SnapshotMeta {
            last_log_id: body.last_log_id.map(log_id_from_pb),
            last_membership: StoredMembership::new(body.membership_log_id.map(log_id_from_pb), membership),
            snapshot_id: body.snapshot_id,
        },
        offset: body.offset,
        data: body.data,
        done: body.done,
    })
}

fn membership_to_pb(membership: &Membership<NodeId, BasicNode>) -> pb::Membership {
    pb::Membership {
        configs: membership
            .get_joint_config()
            .iter()
            .map(|ids| pb::NodeIds { ids: ids.iter().copied().collect() })
            .collect(),
        nodes: membership.nodes().map(|(id, node)| (*id, node.addr.clone())).collect(),
    }
}

fn membership_from_pb(m: pb::Membership) -> Membership<NodeId, BasicNode> {
    let configs: Vec<BTreeSet<NodeId>> = m.configs.into_iter().map(|c| c.ids.into_iter().collect()).collect();
    let nodes: BTreeMap<NodeId, BasicNode> =
        m.nodes.into_iter().map(|(id, addr)| (id, BasicNode { addr })).collect();
    Membership::new(configs, nodes)
}

pub(crate) fn log_id_to_pb(log_id: &LogId<NodeId>) -> pb::LogId {
    pb::LogId { term: log_id.leader_id.term, node_id: log_id.leader_id.node_id, index: log_id.index }
}

pub(crate) fn log_id_from_pb(log_id: pb::LogId) -> LogId<NodeId> {
    LogId::new(LeaderId::new(log_id.term, log_id.node_id), log_id.index)
}

pub(crate) fn vote_to_pb(vote: &Vote<NodeId>) -> pb::Vote {
    pb::Vote { term: vote.leader_id.term, node_id: vote.leader_id.node_id, committed: vote.committed }
}

pub(crate) fn vote_from_pb(vote: pb::Vote) -> Vote<NodeId> {
    if vote.committed {
        Vote::new_committed(vote.term, vote.node_id)
    } else {
        Vote::new(vote.term, vote.node_id)
    }
}

fn payload_to_pb(payload: &EntryPayload<TypeConfig>) -> pb::EntryPayload {
    use pb::entry_payload::Kind;
    let kind = match payload {
        EntryPayload::Blank => Kind::Blank(pb::Blank {}),
        EntryPayload::Normal(proposal) => Kind::Proposal(pb::Proposal {
            issued_ms: proposal.issued_ms,
            requests: proposal.requests.iter().map(request_to_pb).collect(),
        }),
        EntryPayload::Membership(membership) => Kind::Membership(membership_to_pb(membership)),
    };
    pb::EntryPayload { kind: Some(kind) }
}

fn payload_from_pb(payload: pb::EntryPayload) -> Result<EntryPayload<TypeConfig>, CoreError> {
    use pb::entry_payload::Kind;
    Ok(match payload.kind.ok_or_else(|| missing("an entry's kind"))? {
        Kind::Blank(_) => EntryPayload::Blank,
        Kind::Proposal(p) => EntryPayload::Normal(Proposal {
            issued_ms: p.issued_ms,
            requests: p.requests.into_iter().map(request_from_pb).collect::<Result<_, _>>()?,
        }),
        Kind::Membership(m) => EntryPayload::Membership(membership_from_pb(m)),
    })
}

fn request_to_pb(request: &Request) -> pb::LoggedRequest {
    use pb::logged_request::Command as Pb;
    let command = match &request.command {
        Command::Put { entry, content_class, prompt } => Pb::Put(pb::LoggedPut {
            entry: Some(entry.clone().into()),
            content_class: content_class.clone(),
            prompt: prompt.as_ref().map(prompt_to_pb),
        }),
        Command::Invalidate { scope } => Pb::Invalidate(scope_to_pb(scope)),
        Command::BumpModelVersion { model, version, canary_percent } => {
            Pb::BumpModelVersion(core_pb::BumpModelVersion {
                model: model.clone(),
                version: *version,
                canary_percent: u32::from(*canary_percent),
            })
        }
        Command::EndCanary { model, promote } => {
            Pb::EndCanary(core_pb::EndCanary { model: model.clone(), promote: *promote })
        }
        Command::RegisterModel { model, version, spec } => Pb::RegisterModel(core_pb::RegisterModel {
            model: model.clone(),
            version: *version,
            spec: spec.as_ref().map(Into::into),
        }),
        Command::SetTenantPolicy { tenant, policy } => Pb::SetTenantPolicy(core_pb::SetTenantPolicy {
            tenant: tenant.clone(),
            policy: Some(policy.into()),
        }),
        Command::RecordHits { hits } => Pb::RecordHits(pb::RecordHits {
            hits: hits.iter().map(|(key, count)| pb::Hit { key: key.clone(), count: *count }).collect(),
        }),
        Command::Sweep { entries, requests, feed } => {
            Pb::Sweep(pb::Sweep { entries: entries.clone(), requests: requests.clone(), feed: feed.clone() })
        }
    };
    pb::LoggedRequest { id: request.id.clone(), command: Some(command) }
}

fn request_from_pb(request: pb::LoggedRequest) -> Result<Request, CoreError> {
    use pb::logged_request::Command as Pb;
    let command = match request.command.ok_or_else(|| missing("a request's command"))? {
        Pb::Put(put) => Command::Put {
            entry: put.entry.ok_or_else(|| missing("a put's entry"))?.into(),
            content_class: put.content_class,
            prompt: put.prompt.map(prompt_from_pb).transpose()?,
        },
        Pb::Invalidate(invalidate) => Command::Invalidate { scope: scope_from_pb(invalidate)? },
        Pb::BumpModelVersion(bump) => Command::BumpModelVersion {
            model: bump.model,
            version: bump.version,
            canary_percent: u8::try_from(bump.canary_percent)
                .map_err(|_| unreadable("a canary percent above 255"))?,
        },
        Pb::EndCanary(end) => Command::EndCanary { model: end.model, promote: end.promote },
        Pb::RegisterModel(register) => {
            let spec = register.spec.map(ModelSpec::try_from).transpose().map_err(|e| unreadable(&e))?;
            Command::RegisterModel { model: register.model, version: register.version, spec }
        }
        Pb::SetTenantPolicy(set) => {
            let policy = set.policy.ok_or_else(|| missing("a tenant policy"))?.into();
            Command::SetTenantPolicy { tenant: set.tenant, policy }
        }
        Pb::RecordHits(record) => {
            Command::RecordHits { hits: record.hits.into_iter().map(|h| (h.key, h.count)).collect() }
        }
        Pb::Sweep(sweep) => {
            Command::Sweep { entries: sweep.entries, requests: sweep.requests, feed: sweep.feed }
        }
    };
    Ok(Request { id: request.id, command })
}

fn scope_to_pb(scope: &InvalidateScope) -> core_pb::Invalidate {
    use core_pb::invalidate::Scope;
    match scope {
        InvalidateScope::Key { tenant, key } => core_pb::Invalidate {
            scope: Some(Scope::Key(key.clone())),
            key_tenant: tenant.clone(),
            ..Default::default()
        },
        InvalidateScope::Tag { tenant, tag, refresh } => core_pb::Invalidate {
            scope: Some(Scope::Tag(core_pb::TenantTag { tenant: tenant.clone(), tag: tag.clone() })),
            refresh: *refresh,
            ..Default::default()
        },
        InvalidateScope::Tenant { tenant } => {
            core_pb::Invalidate { scope: Some(Scope::Tenant(tenant.clone())), ..Default::default() }
        }
        InvalidateScope::ModelVersion { model, version } => core_pb::Invalidate {
            scope: Some(Scope::ModelVersion(core_pb::ModelVersion {
                model: model.clone(),
                version: *version,
            })),
            ..Default::default()
        },
    }
}

fn scope_from_pb(invalidate: core_pb::Invalidate) -> Result<InvalidateScope, CoreError> {
    use core_pb::invalidate::Scope;
    Ok(match invalidate.scope.ok_or_else(|| missing("an invalidation's scope"))? {
        Scope::Key(key) => InvalidateScope::Key { tenant: invalidate.key_tenant, key },
        Scope::Tag(t) => InvalidateScope::Tag { tenant: t.tenant, tag: t.tag, refresh: invalidate.refresh },
        Scope::Tenant(tenant) => InvalidateScope::Tenant { tenant },
        Scope::ModelVersion(mv) => InvalidateScope::ModelVersion { model: mv.model, version: mv.version },
    })
}

pub(crate) fn prompt_to_pb(prompt: &Prompt) -> pb::LoggedPrompt {
    let s = &prompt.sampling;
    pb::LoggedPrompt {
        messages: prompt
            .messages
            .iter()
            .map(|m| inference_pb::ChatMessage {
                role: m.role.as_str().to_owned(),
                content: m.content.clone(),
            })
            .collect(),
        sampling: Some(s.into()),
        tags: prompt.tags.clone(),
    }
}

pub(crate) fn prompt_from_pb(prompt: pb::LoggedPrompt) -> Result<Prompt, CoreError> {
    let messages = prompt
        .messages
        .into_iter()
        .map(|m| {
            let role = ChatRole::from_name(&m.role)
                .ok_or_else(|| CoreError::InvalidArgument(format!("raft log: unknown role {:?}", m.role)))?;
            Ok(Message { role, content: m.content })
        })
        .collect::<Result<_, CoreError>>()?;
    let sampling = prompt.sampling.ok_or_else(|| missing("a prompt's sampling"))?.into();
    Ok(Prompt { messages, sampling, tags: prompt.tags })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::TenantPolicy;
    use shared::completion::{AnsweredQuestion, CachedCompletion};
    use shared::normalize::Sampling;

    fn every_command() -> Vec<Command> {
        let entry = CachedCompletion {
            model_version: 2,
            prompt_tokens: 3,
            created_ms: 1_700_000_000_000,
            ttl_s: 60,
            question: Some(AnsweredQuestion { partition: "p".into(), text: "what?".into() }),
            ..CachedCompletion::example("v1:k", "answer")
        };
        let prompt = Prompt {
            messages: vec![Message { role: ChatRole::User, content: "hi".into() }],
            sampling: Sampling {
                max_tokens: 16,
                temperature: 0.5,
                top_p: 0.9,
                seed: Some(7),
                stop: vec!["x".into()],
                penalties: shared::normalize::Penalties { frequency: 0.5, presence: -0.25, repetition: 1.1 },
                n: 1,
                logprobs: None,
            },
            tags: vec!["region:eu".into(), "stock:AAPL".into()],
        };
        vec![
            Command::Put { entry: entry.clone(), content_class: "stable".into(), prompt: Some(prompt) },
            Command::Put { entry, content_class: String::new(), prompt: None },
            Command::Invalidate { scope: InvalidateScope::Key { tenant: "dev".into(), key: "v1:k".into() } },
            Command::Invalidate { scope: InvalidateScope::Tenant { tenant: "dev".into() } },
            Command::Invalidate {
                scope: InvalidateScope::Tag { tenant: "dev".into(), tag: "stock:AAPL".into(), refresh: true },
            },
            Command::Invalidate { scope: InvalidateScope::ModelVersion { model: "m".into(), version: 1 } },
            Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: 0 },
            Command::BumpModelVersion { model: "m".into(), version: 3, canary_percent: 20 },
            Command::EndCanary { model: "m".into(), promote: true },
            Command::RegisterModel { model: "m".into(), version: 3, spec: None },
            Command::RegisterModel {
                model: "m".into(),
                version: 0,
                spec: Some(ModelSpec { context_length: 99, ..Default::default() }),
            },
            Command::SetTenantPolicy {
                tenant: "dev".into(),
                policy: TenantPolicy {
                    max_value_bytes: 5,
                    default_ttl_s: 6,
                    max_ttl_s: 7,
                    cache_sampled: true,
                },
            },
            Command::RecordHits { hits: vec![("v1:k".into(), 4)] },
            Command::Sweep { entries: vec!["a".into()], requests: vec!["r".into()], feed: vec![9] },
        ]
    }

    #[test]
    fn every_payload_round_trips() {
        let requests = every_command()
            .into_iter()
            .enumerate()
            .map(|(i, command)| Request { id: format!("id-{i}"), command });
        let proposal = EntryPayload::Normal(Proposal { issued_ms: 42, requests: requests.collect() });
        let nodes =
            BTreeMap::from([(1, BasicNode { addr: "a:1".into() }), (2, BasicNode { addr: "b:2".into() })]);
        let membership = EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2])], nodes));
        for payload in [EntryPayload::Blank, proposal, membership] {
            assert_eq!(decode_payload(&encode_payload(&payload)).expect("test step"), payload);
        }
    }

    #[test]
    fn append_entries_round_trip_and_garbage_is_refused() {
        let request = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new(LeaderId::new(2, 1), 9)),
            entries: vec![Entry {
                log_id: LogId::new(LeaderId::new(3, 1), 10),
                payload: EntryPayload::Blank,
            }],
            leader_commit: None,
        };
        let decoded = decode_append(&encode_append(&request, Some(7))).expect("test step");
        assert_eq!(format!("{:?}", decoded.request), format!("{request:?}"));
        assert_eq!(decoded.leader_quorum_age_ms, Some(7));
        let unknown = decode_append(&encode_append(&request, None)).expect("test step");
        assert_eq!(unknown.leader_quorum_age_ms, None);
        assert!(decode_append(b"\xff\xff\xff").is_err());
        assert!(decode_payload(&[]).is_err(), "an empty payload has no kind");
    }
}
