//! openraft's network over the `Raft` gRPC service: openraft's messages travel as JSON payloads.
//!
//! A failed call never surfaces as a panic or a fatal error: an unreachable peer becomes
//! `RPCError::Unreachable` (openraft backs off and retries), a payload that does not parse becomes
//! `RPCError::Network`, and a call that outlives openraft's deadline becomes `RPCError::Timeout`.

use std::error::Error;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use proto::raft::raft_client::RaftClient;
use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::Channel;
use tonic::Code;

use super::convert;
use super::peers::PeerChannels;
use super::types::{NodeId, TypeConfig};
use proto::TierIdentity;

/// Creates a [`PeerConnection`] per replication target.
#[derive(Clone, Debug)]
pub struct Network {
    /// This node's id, for timeout reports.
    id: NodeId,
    /// Channels shared with write forwarding.
    channels: PeerChannels,
    /// Sent with every call.
    secret: TierIdentity,
}

impl Network {
    /// A network for node `id` over `channels`.
    pub fn new(id: NodeId, channels: PeerChannels, secret: TierIdentity) -> Self {
        Self { id, channels, secret }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerConnection {
        let client = self.channels.raft_client(&node.addr).map_err(|e| e.to_string());
        if let Err(e) = &client {
            tracing::warn!(target_node = target, addr = %node.addr, error = %e, "bad peer address");
        }
        PeerConnection { id: self.id, target, node: node.clone(), client, secret: self.secret.clone() }
    }
}

/// openraft's connection to one peer.
#[derive(Debug)]
pub struct PeerConnection {
    /// This node's id.
    id: NodeId,
    /// The peer's id.
    target: NodeId,
    /// The peer's address.
    node: BasicNode,
    /// The client, or why none could be built (a malformed address).
    client: Result<RaftClient<Channel>, String>,
    /// Sent with every call.
    secret: TierIdentity,
}

/// Which `Raft` RPC a call goes to.
#[derive(Clone, Copy, Debug)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Rpc {
    fn kind(self) -> RPCTypes {
        match self {
            Rpc::AppendEntries => RPCTypes::AppendEntries,
            Rpc::Vote => RPCTypes::Vote,
            Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
        }
    }
}

/// A plain error with a message, for failures that have no error value of their own.
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

impl PeerConnection {
    /// Sends `request` as JSON and reads back `Result<Resp, RaftError<E>>` as JSON.
    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let mut client = match &self.client {
            Ok(client) => client.clone(),
            Err(e) => return Err(RPCError::Unreachable(Unreachable::new(&Message(e.clone())))),
        };
        let payload = convert::encode(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut request = self.secret.request(payload);
        let ttl = option.hard_ttl();
        request.set_timeout(ttl);
        let sent = async {
            match rpc {
                Rpc::AppendEntries => client.append_entries(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
            }
        };
        let reply = match tokio::time::timeout(ttl, sent).await {
            Err(_) => return Err(self.timeout(rpc, ttl)),
            Ok(Err(status)) => return Err(status_error(status)),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            decode_reply(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result
            .map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }

    fn timeout<E: Error>(
        &self,
        rpc: Rpc,
        ttl: Duration,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        RPCError::Timeout(Timeout { action: rpc.kind(), id: self.id, target: self.target, timeout: ttl })
    }
}

fn decode_reply<T: DeserializeOwned>(reply: &RaftPayload) -> Result<T, serde_json::Error> {
    serde_json::from_slice(&reply.json)
}

/// A transport or server status as openraft's error: most mean the peer cannot be reached right now.
fn status_error<E: Error>(status: tonic::Status) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    match status.code() {
        Code::InvalidArgument | Code::Internal | Code::Unimplemented => {
            RPCError::Network(NetworkError::new(&status))
        }
        _ => RPCError::Unreachable(Unreachable::new(&status)),
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }
}
