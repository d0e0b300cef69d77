//! openraft's network over the `Raft` gRPC service: AppendEntries requests travel in the Raft log's binary
//! form and snapshot chunks in theirs ([`log_codec`]), votes and every reply in [`reply_codec`]'s.
//!
//! A failed call never surfaces as a panic or a fatal error: an unreachable peer becomes
//! `RPCError::Unreachable` (openraft backs off and retries), a payload that does not parse becomes
//! `RPCError::Network`, and a call that outlives openraft's deadline becomes `RPCError::Timeout`.
//!
//! AppendEntries is bounded in bytes as well as in entries (openraft's `max_payload_entries`): a request of
//! several entries whose JSON passes [`MAX_APPEND_BYTES`], or that the peer refuses as too large, becomes
//! `RPCError::PayloadTooLarge` with a smaller entry count, and openraft at once resends fewer entries. A
//! single entry cannot be split; it is sent whatever its size, up to the gRPC message cap.
//!
//! A replication target's AppendEntries travel over one long-lived stream ([`crate::node::raft::append_stream`]), opened
//! by the first request that carries entries; heartbeats of a connection that never carried entries (a
//! linearizable read's quorum round) stay unary calls. A peer that does not know the stream
//! (`Unimplemented`, an older binary) is sent unary calls from then on.

use std::error::Error;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout,
    Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftMetrics};
use proto::raft::raft_client::RaftClient;
use proto::raft::RaftPayload;
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::Code;

use crate::node::error::CoreError;
use crate::node::raft::append_stream::AppendStream;
use crate::node::raft::durable_log::DurableLog;
use crate::node::raft::log_codec;
use crate::node::raft::peers::{PeerChannels, MAX_RAFT_MESSAGE_BYTES};
use crate::node::raft::reply_codec::{self, Reply};
use crate::node::types::{NodeId, TypeConfig};
use daemon_runtime::TierIdentity;

/// Largest AppendEntries sent with more than one entry, in encoded bytes; a larger one is split. openraft gives
/// an AppendEntries one heartbeat interval (200 ms by default) to be encoded, sent, parsed and fsynced, and a
/// timed-out one is resent whole, so a message stays at a few MiB: still several full group-commit
/// proposals ([`crate::node::writes::group_commit::MAX_BATCH_BYTES`]) per message.
pub const MAX_APPEND_BYTES: usize = 4 * 1024 * 1024;

// A split request must never meet the peers' decode limit (the `Raft` server's and client's message cap).
const _: () = assert!(MAX_APPEND_BYTES <= MAX_RAFT_MESSAGE_BYTES / 2);

/// Creates a [`PeerConnection`] per replication target.
#[derive(Clone, Debug)]
pub struct Network {
    /// This node's id, for timeout reports.
    id: NodeId,
    /// Channels shared with write forwarding.
    channels: PeerChannels,
    /// Sent with every call.
    identity: TierIdentity,
    /// How far this node's log is durable: the commit index sent is never beyond it.
    durable_log: Option<DurableLog>,
    /// This node's Raft metrics, once Raft runs: every AppendEntries carries the time since a quorum
    /// last acknowledged this leader.
    own_metrics: OwnMetrics,
}

/// This node's Raft metrics, set once its Raft is built (the network is built first).
pub type OwnMetrics = Arc<OnceLock<watch::Receiver<RaftMetrics<NodeId, BasicNode>>>>;

impl Network {
    /// A network for node `id` over `channels`.
    pub fn new(id: NodeId, channels: PeerChannels, identity: TierIdentity) -> Self {
        Self { id, channels, identity, durable_log: None, own_metrics: OwnMetrics::default() }
    }

    /// Where to set this node's Raft metrics once Raft is built.
    pub fn own_metrics(&self) -> OwnMetrics {
        self.own_metrics.clone()
    }

    /// Makes every AppendEntries tell a commit index no higher than what this node's log holds durably
    /// ([`DurableLog::clamp_commit`]).
    pub fn committing_durable(mut self, durable_log: DurableLog) -> Self {
        self.durable_log = Some(durable_log);
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerConnection {
        let client = self.channels.raft_client(&node.addr).map_err(|e| e.to_string());
        if let Err(e) = &client {
            tracing::warn!(target_node = target, addr = %node.addr, error = %e, "bad peer address");
        }
        PeerConnection {
            id: self.id,
            target,
            node: node.clone(),
            client,
            identity: self.identity.clone(),
            stream: StreamState::default(),
            durable_log: self.durable_log.clone(),
            own_metrics: self.own_metrics.clone(),
        }
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
    identity: TierIdentity,
    /// The AppendEntries stream to the peer.
    stream: StreamState,
    /// How far this node's log is durable ([`Network::committing_durable`]).
    durable_log: Option<DurableLog>,
    /// This node's Raft metrics ([`Network::own_metrics`]).
    own_metrics: OwnMetrics,
}

impl PeerConnection {
    /// The time since a quorum last acknowledged this node as leader, as its metrics last reported it.
    fn quorum_age_ms(&self) -> Option<u64> {
        self.own_metrics.get().and_then(|metrics| metrics.borrow().millis_since_quorum_ack)
    }
}

/// A connection's AppendEntries stream.
#[derive(Debug, Default)]
struct StreamState {
    /// The open stream, if any.
    open: Option<AppendStream>,
    /// The peer answered that it has no such stream: AppendEntries go as unary calls.
    refused: bool,
}

impl StreamState {
    /// Whether an AppendEntries of `entries` entries goes over the stream (opening it if need be).
    fn carries(&self, entries: usize) -> bool {
        !self.refused && (entries > 0 || self.open.is_some())
    }
}

/// Which `Raft` RPC a call goes to.
#[derive(Clone, Copy, Debug)]
enum Rpc {
    /// Replication (or a heartbeat, with no entries).
    AppendEntries {
        /// How many entries the request carries.
        entries: usize,
    },
    /// An election.
    Vote,
    /// A snapshot chunk.
    InstallSnapshot,
}

impl Rpc {
    /// openraft's name for the call.
    fn kind(self) -> RPCTypes {
        match self {
            Rpc::AppendEntries { .. } => RPCTypes::AppendEntries,
            Rpc::Vote => RPCTypes::Vote,
            Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
        }
    }
}

/// Whether an AppendEntries of `entries` entries that encodes to `bytes` bytes must be split to stay
/// within `max_bytes`, and if so how many entries to send instead: the count that would fit if entries
/// were alike, at most half of them (so every retry shrinks), at least one. A request of one entry (or
/// none) is never split.
fn append_split(entries: usize, bytes: usize, max_bytes: usize) -> Option<u64> {
    if entries <= 1 || bytes <= max_bytes {
        return None;
    }
    let fitting = (entries as u128 * max_bytes as u128 / bytes as u128) as u64;
    Some(fitting.min(entries as u64 / 2).max(1))
}

/// Whether a gRPC status says a message was too large: tonic's encode and decode limits answer
/// `OutOfRange`, its decompression limit and a peer out of buffer space `ResourceExhausted`.
fn is_size_refusal(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted)
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
    /// Sends an encoded request and reads back `Result<Resp, RaftError<E>>` as JSON; an AppendEntries too
    /// large to send whole is answered with `PayloadTooLarge` instead.
    async fn call<Resp, E>(
        &mut self,
        rpc: Rpc,
        payload: Result<RaftPayload, CoreError>,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: Reply<Error = E>,
        E: Error,
    {
        let payload = payload.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if let Rpc::AppendEntries { entries } = rpc {
            if let Some(hint) = append_split(entries, payload.body.len(), MAX_APPEND_BYTES) {
                tracing::debug!(
                    target_node = self.target,
                    entries,
                    bytes = payload.body.len(),
                    hint,
                    "append entries too large; splitting"
                );
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint)));
            }
        }
        self.send(rpc, payload, option).await
    }

    /// Sends an encoded request and reads back `Result<Resp, RaftError<E>>`.
    async fn send<Resp, E>(
        &mut self,
        rpc: Rpc,
        payload: RaftPayload,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: Reply<Error = E>,
        E: Error,
    {
        let mut client = match &self.client {
            Ok(client) => client.clone(),
            Err(e) => return Err(RPCError::Unreachable(Unreachable::new(&Message(e.clone())))),
        };
        let ttl = option.hard_ttl();
        let reply = match rpc {
            Rpc::AppendEntries { entries } if self.stream.carries(entries) => {
                self.over_stream(&mut client, rpc, payload, ttl).await?
            }
            _ => {
                let mut request = self.identity.request(payload);
                request.set_timeout(ttl);
                let sent = async {
                    match rpc {
                        Rpc::AppendEntries { .. } => client.append_entries(request).await,
                        Rpc::Vote => client.vote(request).await,
                        Rpc::InstallSnapshot => client.install_snapshot(request).await,
                    }
                };
                match tokio::time::timeout(ttl, sent).await {
                    Err(_) => return Err(self.timeout(rpc, ttl)),
                    Ok(Err(status)) => return Err(status_error(rpc, status)),
                    Ok(Ok(reply)) => reply.into_inner(),
                }
            }
        };
        let result = Resp::decode(&reply.body).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result
            .map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }

    /// Sends an AppendEntries over the peer's stream, opening one if none is open, within `ttl`. A stream
    /// that fails or times out is dropped.
    async fn over_stream<E: Error>(
        &mut self,
        client: &mut RaftClient<Channel>,
        rpc: Rpc,
        payload: RaftPayload,
        ttl: Duration,
    ) -> Result<RaftPayload, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let open = self.stream.open.take();
        let exchanged = tokio::time::timeout(ttl, async {
            match open {
                Some(mut open) => Ok((open.exchange(payload).await?, open)),
                None => AppendStream::open(client, &self.identity, payload).await,
            }
        })
        .await;
        match exchanged {
            Err(_) => Err(self.timeout(rpc, ttl)),
            Ok(Err(status)) => {
                if status.code() == Code::Unimplemented {
                    tracing::info!(
                        target_node = self.target,
                        "peer has no AppendEntries stream; using unary calls"
                    );
                    self.stream.refused = true;
                }
                Err(status_error(rpc, status))
            }
            Ok(Ok((answer, open))) => {
                self.stream.open = Some(open);
                Ok(answer)
            }
        }
    }

    fn timeout<E: Error>(
        &self,
        rpc: Rpc,
        ttl: Duration,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        RPCError::Timeout(Timeout { action: rpc.kind(), id: self.id, target: self.target, timeout: ttl })
    }
}

/// A transport or server status of a call to `rpc` as openraft's error. A size refusal of an AppendEntries
/// that can be split asks openraft for half as many entries; most other statuses mean the peer cannot be
/// reached right now.
fn status_error<E: Error>(
    rpc: Rpc,
    status: tonic::Status,
) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    if let Rpc::AppendEntries { entries } = rpc {
        if entries > 1 && is_size_refusal(&status) {
            let hint = entries as u64 / 2;
            return RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint).with_source_error(&status),
            );
        }
    }
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
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if let Some(durable_log) = &self.durable_log {
            rpc.leader_commit = durable_log.clamp_commit(rpc.leader_commit);
        }
        let payload = RaftPayload { body: log_codec::encode_append(&rpc, self.quorum_age_ms()) };
        self.call(Rpc::AppendEntries { entries: rpc.entries.len() }, Ok(payload), &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let payload = RaftPayload { body: log_codec::encode_install(&rpc) };
        self.call(Rpc::InstallSnapshot, Ok(payload), &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let payload = RaftPayload { body: reply_codec::encode_vote(&rpc) };
        self.call(Rpc::Vote, Ok(payload), &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn append_entries_within_the_bound_go_as_they_are() {
        assert_eq!(append_split(0, 100, MIB), None, "a heartbeat");
        assert_eq!(append_split(300, MIB, MIB), None);
        assert_eq!(append_split(1, 40 * MIB, MIB), None, "one entry cannot be split");
    }

    #[test]
    fn larger_ones_are_split_to_fit_and_at_least_halved() {
        // 300 alike entries in 64 MiB: 75 fit in 16 MiB.
        assert_eq!(append_split(300, 64 * MIB, 16 * MIB), Some(75));
        // Barely over: half, so that a retry always shrinks.
        assert_eq!(append_split(300, 16 * MIB + 1, 16 * MIB), Some(150));
        // Entries far larger than the bound: one at a time.
        assert_eq!(append_split(2, 100 * MIB, MIB), Some(1));
        assert_eq!(append_split(3, 3 * MIB + 3, MIB), Some(1));
    }

    #[test]
    fn every_split_hint_shrinks_the_request_until_one_entry_goes_alone() {
        // One entry far past the bound among small ones: openraft's retries shrink to that entry alone.
        for entries in 2..600usize {
            let mut n = entries;
            let mut rounds = 0;
            while let Some(hint) = append_split(n, 50 * MIB + n * 1000, 16 * MIB) {
                assert!(hint >= 1 && (hint as usize) < n, "{n} entries -> {hint}");
                n = hint as usize;
                rounds += 1;
            }
            assert_eq!(n, 1);
            assert!(rounds <= 10, "{entries} entries took {rounds} splits");
        }
    }

    #[test]
    fn a_size_refusal_of_several_entries_asks_for_fewer() {
        let refused = |rpc: Rpc, status: tonic::Status| -> RPCError<NodeId, BasicNode, RaftError<NodeId>> {
            status_error(rpc, status)
        };
        let too_large = tonic::Status::out_of_range("Error, decoded message length too large");
        match refused(Rpc::AppendEntries { entries: 10 }, too_large.clone()) {
            RPCError::PayloadTooLarge(e) => assert_eq!(e.entries_hint(), 5),
            other => panic!("expected PayloadTooLarge, got {other}"),
        }
        let exhausted = tonic::Status::resource_exhausted("size limit exceeded");
        assert!(matches!(
            refused(Rpc::AppendEntries { entries: 2 }, exhausted),
            RPCError::PayloadTooLarge(_)
        ));
        // One entry cannot be split: openraft backs off instead of resending it at once.
        assert!(matches!(
            refused(Rpc::AppendEntries { entries: 1 }, too_large.clone()),
            RPCError::Unreachable(_)
        ));
        assert!(matches!(refused(Rpc::Vote, too_large), RPCError::Unreachable(_)));
        let down = tonic::Status::unavailable("connection refused");
        assert!(matches!(refused(Rpc::AppendEntries { entries: 10 }, down), RPCError::Unreachable(_)));
    }
}
