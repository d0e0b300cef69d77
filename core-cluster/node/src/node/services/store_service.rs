//! The `CoreStore` gRPC server: writes commit through Raft from any node (group commit on the leader);
//! reads are linearizable (read index on the leader; a follower forwards them to the leader) unless the
//! caller asks for the local applied state.

use crate::node::metrics::Rpc;
use std::sync::Arc;
use std::time::Duration;

use daemon_runtime::TierRole;
use proto::core::core_store_server::CoreStore;
use proto::core::{invalidate, write_request, Consistency, ReadReply, ReadRequest, WriteReply, WriteRequest};
use tonic::{Request, Response, Status};

use crate::node::context::NodeContext;
use crate::node::convert;
use crate::node::error::CoreError;
use crate::node::types::RefreshJob;
use crate::node::writes::validate;

/// Metadata that marks a read forwarded by a follower, so that it is never forwarded twice.
const FORWARDED: &str = "x-mesh-forwarded";
/// How long a linearizable read may wait for the leader's quorum check.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The roles that may send `request`'s command. A regional node invalidates single keys and cache tags on
/// behalf of the tenants it authenticated (the state machine refuses a key the named tenant does not own,
/// and a tag invalidation names its tenant); answers, tenant policies, models and tenant- or model-wide
/// invalidations are the operator's.
fn roles_for(request: &WriteRequest) -> &'static [TierRole] {
    match &request.command {
        Some(write_request::Command::Invalidate(proto::core::Invalidate {
            scope: Some(invalidate::Scope::Key(_) | invalidate::Scope::Tag(_)),
            ..
        })) => &[TierRole::Regional, TierRole::Admin],
        _ => &[TierRole::Admin],
    }
}

/// Serves `CoreStore` on one core node. Callers have passed the service's role check (regional or
/// admin); each write command is then checked against [`roles_for`].
#[derive(Clone)]
pub struct StoreService {
    /// The node's shared parts.
    node: Arc<NodeContext>,
}

impl StoreService {
    /// A service over `node`.
    pub fn new(node: Arc<NodeContext>) -> Self {
        Self { node }
    }

    /// Sends a linearizable read to the leader.
    async fn forward_read(&self, read: ReadRequest) -> Result<ReadReply, CoreError> {
        let (leader, addr) =
            self.node.writer.leader().ok_or_else(|| CoreError::NoQuorum("no leader known".into()))?;
        let mut client = self.node.channels.store_client(&addr)?;
        let mut call = self.node.identity.request(read);
        call.metadata_mut().insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
        call.set_timeout(READ_TIMEOUT);
        let reply = client.read(call).await.map_err(|s| {
            CoreError::NoQuorum(format!("read forwarded to leader {leader}: {}", s.message()))
        })?;
        Ok(reply.into_inner())
    }

    fn local_read(&self, read: &ReadRequest) -> Result<ReadReply, CoreError> {
        let (leader, last_applied) = self.node.raft_position();
        let stored = self.node.state.read(&read.key, &read.tenant)?;
        Ok(ReadReply {
            content_class: stored.as_ref().map(|s| s.content_class.clone()).unwrap_or_default(),
            entry: stored.map(|s| self.node.signed(s.entry, s.prompt.as_ref()).into()),
            applied_index: last_applied.unwrap_or(0),
            leader_id: leader.unwrap_or(0),
            served_by: self.node.id,
        })
    }
}

#[tonic::async_trait]
impl CoreStore for StoreService {
    #[tracing::instrument(name = "core.write", skip_all)]
    async fn write(&self, request: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        self.node.metrics.rpcs.get(Rpc::Write).inc();
        self.node.identity.check(&request, roles_for(request.get_ref()))?;
        let request = convert::write_request(request.into_inner())?;
        let committed = self.node.writer.write(request).await?;
        let outcome = convert::write_outcome(&committed.applied.outcome)?;
        if !committed.applied.duplicate {
            use crate::node::types::Outcome;
            match &committed.applied.outcome {
                Outcome::ModelVersion { model, version, refresh, .. } => {
                    let jobs = refresh.iter().cloned().map(|job| RefreshJob {
                        model: model.clone(),
                        model_version: *version,
                        ..job
                    });
                    self.node.refresher.spawn(jobs.collect(), "version bump", "");
                }
                Outcome::CanaryEnded { model, version, promoted: true, refresh } => {
                    let jobs = refresh.iter().cloned().map(|job| RefreshJob {
                        model: model.clone(),
                        model_version: *version,
                        ..job
                    });
                    self.node.refresher.spawn(jobs.collect(), "canary promotion", "")
                }
                Outcome::Invalidated { refresh, at_ms, .. } => {
                    self.node.refresher.spawn(refresh.clone(), "tag invalidation", &at_ms.to_string())
                }
                _ => {}
            }
        }
        Ok(Response::new(WriteReply {
            log_index: committed.log_index,
            duplicate: committed.applied.duplicate,
            outcome: Some(outcome),
            leader_id: committed.leader_id,
            served_by: self.node.id,
        }))
    }

    #[tracing::instrument(name = "core.read", skip_all, fields(key = %request.get_ref().key))]
    async fn read(&self, request: Request<ReadRequest>) -> Result<Response<ReadReply>, Status> {
        self.node.metrics.rpcs.get(Rpc::Read).inc();
        let forwarded = request.metadata().contains_key(FORWARDED);
        let read = request.into_inner();
        validate::key(&read.key)?;
        validate::name("tenant", &read.tenant)?;
        let local = read.consistency == Consistency::Local as i32;
        if local && read.max_staleness_ms > 0 {
            let staleness = self.node.contact.staleness_ms(self.node.id, &self.node.raft);
            if staleness.is_none_or(|ms| ms > u64::from(read.max_staleness_ms)) {
                return Err(CoreError::NoQuorum(format!(
                    "this node's state may be stale (last leader contact {staleness:?} ms ago, bound {} ms)",
                    read.max_staleness_ms
                ))
                .into());
            }
        }
        if !local {
            let is_leader = self.node.raft_position().0 == Some(self.node.id);
            if !is_leader {
                if forwarded {
                    return Err(CoreError::NoQuorum("this node is no longer the leader".into()).into());
                }
                return Ok(Response::new(self.forward_read(read).await?));
            }
            // Confirms leadership with a quorum (shared with concurrent reads) and waits until the state
            // machine has applied up to the read index, so the local state reflects every write
            // acknowledged before this read began.
            self.node.read_barrier.wait(&self.node.raft, READ_TIMEOUT).await?;
        }
        Ok(Response::new(self.local_read(&read)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::core::{Invalidate, PutEntry, SetTenantPolicy};

    #[test]
    fn a_regional_node_may_only_invalidate_single_keys_and_tags() {
        let key = Invalidate {
            scope: Some(invalidate::Scope::Key("v1:k".into())),
            key_tenant: "t".into(),
            ..Default::default()
        };
        let tag = Invalidate {
            scope: Some(invalidate::Scope::Tag(proto::core::TenantTag {
                tenant: "t".into(),
                tag: "g".into(),
            })),
            ..Default::default()
        };
        let tenant = Invalidate { scope: Some(invalidate::Scope::Tenant("t".into())), ..Default::default() };
        let request = |command| WriteRequest { request_id: "r".into(), command: Some(command) };
        assert!(roles_for(&request(write_request::Command::Invalidate(key))).contains(&TierRole::Regional));
        assert!(roles_for(&request(write_request::Command::Invalidate(tag))).contains(&TierRole::Regional));
        for admin_only in [
            write_request::Command::Invalidate(tenant),
            write_request::Command::Put(PutEntry::default()),
            write_request::Command::SetTenantPolicy(SetTenantPolicy::default()),
        ] {
            assert_eq!(roles_for(&request(admin_only)), &[TierRole::Admin]);
        }
        assert_eq!(roles_for(&WriteRequest::default()), &[TierRole::Admin]);
    }
}
