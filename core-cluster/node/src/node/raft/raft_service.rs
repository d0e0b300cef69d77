//! The `Raft` gRPC server: hands openraft's messages (binary, with binary replies) to the local Raft node,
//! and accepts
//! writes forwarded by followers once they pass the same checks as the store API's writes
//! ([`validate::request`]).

use crate::node::metrics::Rpc;
use std::sync::Arc;
use std::time::Duration;

use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
use proto::raft::raft_server::Raft as RaftRpc;
use proto::raft::RaftPayload;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::node::convert::{decode, encode};
use crate::node::error::CoreError;
use crate::node::metrics::Metrics;
use crate::node::raft::leader_contact::LeaderContact;
use crate::node::raft::log_codec;
use crate::node::raft::reply_codec::{self, Reply as _};
use crate::node::types::{Raft, Request as ClientRequest};
use crate::node::writes::group_commit::GroupCommit;
use crate::node::writes::validate;
use crate::node::writes::writer::ForwardReply;

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
    /// Becomes true when the node shuts down: open AppendEntries streams end, so they never hold the
    /// server's drain.
    stopping: watch::Receiver<bool>,
}

impl RaftService {
    /// A service in front of `raft`.
    pub fn new(
        raft: Raft,
        group: GroupCommit,
        contact: Arc<LeaderContact>,
        metrics: Arc<Metrics>,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self { raft, group, contact, metrics, stopping }
    }

    /// Hands one encoded AppendEntries to the local Raft node and encodes its answer.
    async fn append(&self, request: &RaftPayload) -> Result<RaftPayload, Status> {
        self.metrics.rpcs.get(Rpc::AppendEntries).inc();
        let decoded = log_codec::decode_append(&request.body)?;
        let commit = decoded.request.leader_commit.map_or(0, |id| id.index);
        let result = self.raft.append_entries(decoded.request).await;
        if matches!(result, Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_))) {
            self.contact.accepted(decoded.leader_quorum_age_ms.map(Duration::from_millis), commit);
        }
        Ok(RaftPayload { body: AppendEntriesResponse::encode(&result) })
    }
}

/// The answers of an AppendEntries stream, one per request, in order.
type AppendAnswers = ReceiverStream<Result<RaftPayload, Status>>;

#[tonic::async_trait]
impl RaftRpc for RaftService {
    #[tracing::instrument(level = "debug", name = "raft.append_entries", skip_all)]
    async fn append_entries(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        Ok(Response::new(self.append(request.get_ref()).await?))
    }

    type AppendStreamStream = AppendAnswers;

    /// Answers each request of the stream in turn. A request that does not parse ends the stream with its
    /// error (the sender opens another); so does the node shutting down.
    async fn append_stream(
        &self,
        request: Request<Streaming<RaftPayload>>,
    ) -> Result<Response<AppendAnswers>, Status> {
        let (answers, outgoing) = mpsc::channel(1);
        let (service, mut requests, mut stopping) =
            (self.clone(), request.into_inner(), self.stopping.clone());
        tokio::spawn(async move {
            loop {
                let request = tokio::select! {
                    request = requests.message() => request,
                    _ = stopping.wait_for(|stopping| *stopping) => break,
                };
                let answer = match request {
                    Ok(Some(request)) => service.append(&request).await,
                    Ok(None) => break,
                    Err(status) => Err(status),
                };
                let failed = answer.is_err();
                if answers.send(answer).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(outgoing)))
    }

    #[tracing::instrument(level = "debug", name = "raft.vote", skip_all)]
    async fn vote(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpcs.get(Rpc::Vote).inc();
        let req = reply_codec::decode_vote(&request.get_ref().body)?;
        let result = self.raft.vote(req).await;
        Ok(Response::new(RaftPayload { body: VoteResponse::encode(&result) }))
    }

    #[tracing::instrument(level = "debug", name = "raft.install_snapshot", skip_all)]
    async fn install_snapshot(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpcs.get(Rpc::InstallSnapshot).inc();
        let req = log_codec::decode_install(&request.get_ref().body)?;
        let result = self.raft.install_snapshot(req).await;
        Ok(Response::new(RaftPayload { body: InstallSnapshotResponse::encode(&result) }))
    }

    #[tracing::instrument(level = "debug", name = "raft.client_write", skip_all)]
    async fn client_write(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        self.metrics.rpcs.get(Rpc::ClientWrite).inc();
        let request = forwarded_request(request.get_ref())?;
        // A node that is not the leader answers NotLeader, and the sender retries elsewhere.
        let result: ForwardReply = self.group.submit(request).await;
        Ok(Response::new(encode(&result)?))
    }
}

/// Reads a write a follower forwarded and checks it as the store API checks its own writes: a request
/// that does not parse or does not pass is refused (`InvalidArgument`) before it reaches the log.
fn forwarded_request(payload: &RaftPayload) -> Result<ClientRequest, CoreError> {
    let request: ClientRequest = decode(payload)?;
    validate::request(&request)?;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::{Command, InvalidateScope};

    /// `command` as a follower forwards it.
    fn payload(command: Command) -> RaftPayload {
        encode(&ClientRequest { id: "fwd-1".into(), command }).expect("encodes")
    }

    /// The gRPC code a forwarded `command` is refused with, if refused.
    fn refusal(command: Command) -> Option<tonic::Code> {
        forwarded_request(&payload(command)).err().map(|e| Status::from(e).code())
    }

    #[test]
    fn a_forwarded_write_is_checked_like_a_store_write() {
        let scope = InvalidateScope::Tenant { tenant: "dev".into() };
        let request = forwarded_request(&payload(Command::Invalidate { scope })).expect("valid");
        assert_eq!(request.id, "fwd-1");
        let hits = Command::RecordHits { hits: vec![("v1:abc".into(), 2)] };
        assert!(forwarded_request(&payload(hits)).is_ok(), "followers report hits");

        let invalid = Some(tonic::Code::InvalidArgument);
        assert_eq!(refusal(Command::RegisterModel { model: "m".into(), version: 0, spec: None }), invalid);
        assert_eq!(
            refusal(Command::SetTenantPolicy { tenant: "a\u{0}b".into(), policy: Default::default() }),
            invalid
        );
        let scope =
            InvalidateScope::Key { tenant: "dev".into(), key: "k".repeat(validate::MAX_KEY_BYTES + 1) };
        assert_eq!(refusal(Command::Invalidate { scope }), invalid);
        let too_many = vec![("k".to_owned(), 1); validate::MAX_HIT_KEYS + 1];
        assert_eq!(refusal(Command::RecordHits { hits: too_many }), invalid);
        let sweep = Command::Sweep { entries: vec!["k".into()], requests: Vec::new(), feed: Vec::new() };
        assert_eq!(refusal(sweep), invalid, "only the leader proposes sweeps");
        let garbage = RaftPayload { body: br#"{"command":{"op":"drop_everything"}}"#.to_vec() };
        assert!(matches!(forwarded_request(&garbage), Err(CoreError::InvalidArgument(_))));
    }
}
