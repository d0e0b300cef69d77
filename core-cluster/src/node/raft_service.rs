//! The `Raft` gRPC server: hands openraft's messages (JSON payloads) to the local Raft node, and accepts
//! writes forwarded by followers.

use std::sync::Arc;

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest};
use proto::raft::raft_server::Raft as RaftRpc;
use proto::raft::RaftPayload;
use tonic::{Request, Response, Status};

use super::convert::{decode, encode};
use super::group_commit::GroupCommit;
use super::leader_contact::LeaderContact;
use super::metrics::Metrics;
use super::types::{NodeId, Raft, Request as ClientRequest, TypeConfig};
use super::writer::ForwardReply;

/// Serves the `Raft` gRPC service of one core node. Callers have passed the tier-secret check.
#[derive(Clone)]
pub struct RaftService {
    /// The local Raft node.
    raft: Raft,
    /// Where forwarded writes join this node's batches.
    group: GroupCommit,
    /// Updated on every accepted AppendEntries.
    contact: Arc<LeaderContact>,
    /// Request counters.
    metrics: Arc<Metrics>,
}

impl RaftService {
    /// A service in front of `raft`.
    pub fn new(raft: Raft, group: GroupCommit, contact: Arc<LeaderContact>, metrics: Arc<Metrics>) -> Self {
        Self { raft, group, contact, metrics }
    }
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    #[tracing::instrument(level = "debug", name = "raft.append_entries", skip_all)]
    async fn append_entries(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpc_append_entries.inc();
        let req: AppendEntriesRequest<TypeConfig> = decode(request.get_ref())?;
        let result = self.raft.append_entries(req).await;
        if matches!(result, Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_))) {
            self.contact.touch();
        }
        Ok(Response::new(encode(&result)?))
    }

    #[tracing::instrument(level = "debug", name = "raft.vote", skip_all)]
    async fn vote(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpc_vote.inc();
        let req: VoteRequest<NodeId> = decode(request.get_ref())?;
        let result = self.raft.vote(req).await;
        Ok(Response::new(encode(&result)?))
    }

    #[tracing::instrument(level = "debug", name = "raft.install_snapshot", skip_all)]
    async fn install_snapshot(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpc_install_snapshot.inc();
        let req: InstallSnapshotRequest<TypeConfig> = decode(request.get_ref())?;
        let result = self.raft.install_snapshot(req).await;
        Ok(Response::new(encode(&result)?))
    }

    #[tracing::instrument(level = "debug", name = "raft.client_write", skip_all)]
    async fn client_write(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpc_client_write.inc();
        let request: ClientRequest = decode(request.get_ref())?;
        // A node that is not the leader answers NotLeader, and the sender retries elsewhere.
        let result: ForwardReply = self.group.submit(request).await;
        Ok(Response::new(encode(&result)?))
    }
}
