//! `CoreClient`: the client library of the core cluster's store and admin API. A crate of its own so
//! that the operator's tools and the test harness reach the core without compiling openraft or sled.
//!
//! Give it the addresses of any core nodes. It talks to the node it believes leads (learned from replies),
//! moves on to the next node when one is unreachable or cannot commit, and retries until its deadline.
//! Retrying a write is safe because every write carries a request id, and the state machine applies an id
//! at most once (within the retention window), so a put that was committed but whose answer was lost is
//! not applied twice.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_runtime::failover::FailoverChannel;
use proto::core::core_admin_client::CoreAdminClient;
use proto::core::core_store_client::CoreStoreClient;
use proto::core::{
    write_outcome, write_request, AddLearnerRequest, ChangeMembershipRequest, MembershipReply, PutEntry,
    ReadRequest, StatusReply, StatusRequest, WriteRequest,
};
use shared::completion::CachedCompletion;
use tonic::transport::Channel;
use tonic::{Code, Status};

use daemon_runtime::failover::worth_another_node;
use daemon_runtime::TierIdentity;

mod error;
pub use error::ClientError;

/// A core node's id in the Raft membership.
pub type NodeId = u64;

/// How a read is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Confirmed with a quorum by the leader: reflects every write acknowledged before the read began.
    Linearizable,
    /// The answering node's applied state: possibly behind, no quorum round trip.
    Local,
    /// The answering node's applied state, if a leader confirmed it within this many milliseconds;
    /// otherwise the next node is tried.
    BoundedStaleness(u32),
}

/// A committed write.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteAck {
    /// The log index it was committed at.
    pub log_index: u64,
    /// Whether its request id had been applied before (nothing was applied again).
    pub duplicate: bool,
    /// The state machine's outcome (absent only from a node that predates the typed outcome).
    pub outcome: Option<write_outcome::Outcome>,
    /// The leader that committed it.
    pub leader_id: NodeId,
}

/// Default deadline of one call, retries included.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a single attempt on one node may take before the client tries another.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest and longest pause after a failed attempt.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(300));

/// A client of the core cluster. Cloning is cheap; clones share connections and what was learned.
#[derive(Clone, Debug)]
pub struct CoreClient {
    inner: Arc<Inner>,
    timeout: Duration,
}

#[derive(Debug)]
struct Inner {
    /// Each node's channel, and the one to try first.
    nodes: FailoverChannel,
    identity: TierIdentity,
    /// The node id each node index answered as (0: not yet known). Atomics, not a locked map: every reply
    /// is learned from, and 64 concurrent callers contended for a lock here.
    ids: Vec<AtomicU64>,
    /// Numbers the request ids this client makes up.
    next_id: AtomicU64,
    /// Distinguishes this client's request ids from other clients'.
    client_tag: String,
}

/// A status that will not change on retry, as the error the caller sees.
fn final_error(status: Status) -> ClientError {
    match status.code() {
        Code::InvalidArgument => ClientError::InvalidArgument(status.message().to_owned()),
        Code::Unauthenticated => ClientError::Unauthenticated,
        code => ClientError::Rejected { code, message: status.message().to_owned() },
    }
}

impl CoreClient {
    /// A client of the nodes at `addrs` (`host:port`), presenting `identity`.
    pub fn new(addrs: Vec<String>, identity: TierIdentity) -> Result<Self, ClientError> {
        let nodes = FailoverChannel::new(&addrs, &identity)
            .map_err(|e| ClientError::Config(format!("core nodes: {e}")))?;
        let since_epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let inner = Inner {
            ids: (0..nodes.len()).map(|_| AtomicU64::new(0)).collect(),
            nodes,
            identity,
            next_id: AtomicU64::new(0),
            client_tag: format!("{:x}-{:x}", std::process::id(), since_epoch.as_nanos()),
        };
        Ok(Self { inner: Arc::new(inner), timeout: DEFAULT_TIMEOUT })
    }

    /// The same client with another per-call deadline (retries included).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A request id unique to this client.
    pub fn new_request_id(&self) -> String {
        format!("c-{}-{}", self.inner.client_tag, self.inner.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Notes that the node at `index` is `served_by`, and that `leader` leads.
    fn learn(&self, index: usize, served_by: NodeId, leader: NodeId) {
        let ids = &self.inner.ids;
        if served_by != 0 {
            if let Some(id) = ids.get(index) {
                id.store(served_by, Ordering::Relaxed);
            }
        }
        if leader == 0 {
            return;
        }
        if let Some(leader_index) = ids.iter().position(|id| id.load(Ordering::Relaxed) == leader) {
            self.inner.nodes.prefer(leader_index);
        }
    }

    /// Runs `call` on the preferred node, moving on to the next one after a retryable failure, until it
    /// succeeds, fails for good, or the deadline passes.
    async fn with_retries<T, F, Fut>(&self, what: &str, mut call: F) -> Result<(usize, T), ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut pause = RETRY_PAUSE.0;
        let mut last_error = String::from("no attempt made");
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClientError::NoQuorum(format!(
                    "{what} did not succeed within {:?}: {last_error}",
                    self.timeout
                )));
            }
            let (index, addr, channel) = self.inner.nodes.preferred();
            let attempt = remaining.min(ATTEMPT_TIMEOUT);
            match tokio::time::timeout(attempt, call(channel, attempt)).await {
                Ok(Ok(reply)) => return Ok((index, reply)),
                Ok(Err(status)) if !worth_another_node(status.code(), true) => {
                    return Err(final_error(status))
                }
                Ok(Err(status)) => last_error = format!("{addr}: {}", status.message()),
                Err(_) => last_error = format!("{addr}: no answer within {attempt:?}"),
            }
            // Try the next node; the leader's index is learned again from the next reply.
            self.inner.nodes.move_past(index);
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(RETRY_PAUSE.1);
        }
    }

    /// Commits `command` under `request_id` (reuse the id when retrying on your own).
    pub async fn write(
        &self,
        request_id: &str,
        command: write_request::Command,
    ) -> Result<WriteAck, ClientError> {
        let request = WriteRequest { request_id: request_id.to_owned(), command: Some(command) };
        let identity = self.inner.identity.clone();
        let (index, reply) = self
            .with_retries("write", |channel, attempt| {
                let mut call = identity.request(request.clone());
                call.set_timeout(attempt);
                async move { CoreStoreClient::new(channel).write(call).await.map(tonic::Response::into_inner) }
            })
            .await?;
        self.learn(index, reply.served_by, reply.leader_id);
        Ok(WriteAck {
            log_index: reply.log_index,
            duplicate: reply.duplicate,
            outcome: reply.outcome.and_then(|o| o.outcome),
            leader_id: reply.leader_id,
        })
    }

    /// Stores `entry` under its key.
    pub async fn put(
        &self,
        request_id: &str,
        entry: CachedCompletion,
        content_class: &str,
    ) -> Result<WriteAck, ClientError> {
        let put = PutEntry { entry: Some(entry.into()), content_class: content_class.to_owned() };
        self.write(request_id, write_request::Command::Put(put)).await
    }

    /// The live entry under `key` owned by `tenant`, if any.
    pub async fn read(
        &self,
        tenant: &str,
        key: &str,
        consistency: Consistency,
    ) -> Result<Option<CachedCompletion>, ClientError> {
        let (consistency, max_staleness_ms) = match consistency {
            Consistency::Linearizable => (proto::core::Consistency::Linearizable, 0),
            Consistency::Local => (proto::core::Consistency::Local, 0),
            Consistency::BoundedStaleness(ms) => (proto::core::Consistency::Local, ms.max(1)),
        };
        let request = ReadRequest {
            key: key.to_owned(),
            tenant: tenant.to_owned(),
            consistency: consistency as i32,
            max_staleness_ms,
        };
        let identity = self.inner.identity.clone();
        let (index, reply) = self
            .with_retries("read", |channel, attempt| {
                let mut call = identity.request(request.clone());
                call.set_timeout(attempt);
                async move { CoreStoreClient::new(channel).read(call).await.map(tonic::Response::into_inner) }
            })
            .await?;
        self.learn(index, reply.served_by, reply.leader_id);
        Ok(reply.entry.map(Into::into))
    }

    /// One node's status (no retries, no other node): its view of the cluster and its state digest.
    pub async fn status(&self, addr: &str) -> Result<StatusReply, ClientError> {
        let channel = self.inner.nodes.channel_to(addr).map_err(|e| ClientError::Config(e.to_string()))?;
        let mut call = self.inner.identity.request(StatusRequest {});
        call.set_timeout(ATTEMPT_TIMEOUT);
        let reply = tokio::time::timeout(ATTEMPT_TIMEOUT, CoreAdminClient::new(channel).status(call))
            .await
            .map_err(|_| ClientError::NoQuorum(format!("{addr} did not answer")))?
            .map_err(|s| ClientError::NoQuorum(format!("{addr}: {}", s.message())))?;
        Ok(reply.into_inner())
    }

    /// Adds node `id` at `addr` as a learner and waits until it has caught up.
    pub async fn add_learner(&self, id: NodeId, addr: &str) -> Result<MembershipReply, ClientError> {
        let request = AddLearnerRequest { id, addr: addr.to_owned() };
        let identity = self.inner.identity.clone();
        let (_, reply) = self
            .with_retries("add learner", |channel, attempt| {
                let mut call = identity.request(request.clone());
                call.set_timeout(attempt);
                async move {
                    CoreAdminClient::new(channel).add_learner(call).await.map(tonic::Response::into_inner)
                }
            })
            .await?;
        Ok(reply)
    }

    /// Makes `voters` the voting members; nodes in `remove` leave the cluster altogether.
    pub async fn change_membership(
        &self,
        voters: Vec<NodeId>,
        remove: Vec<NodeId>,
    ) -> Result<MembershipReply, ClientError> {
        let request = ChangeMembershipRequest { voters, remove };
        let identity = self.inner.identity.clone();
        let (_, reply) = self
            .with_retries("change membership", |channel, attempt| {
                let mut call = identity.request(request.clone());
                call.set_timeout(attempt);
                async move {
                    CoreAdminClient::new(channel)
                        .change_membership(call)
                        .await
                        .map(tonic::Response::into_inner)
                }
            })
            .await?;
        Ok(reply)
    }
}
