//! Commits a request through Raft from any node: on the leader through its group commit, on a follower by
//! forwarding it to the leader's `Raft.ClientWrite` (which joins the leader's group commit). While there is
//! no leader (an election) it retries until its deadline.
//!
//! Retrying is safe: a request with an id is applied at most once (the state machine remembers applied
//! ids), and the commands sent without one (hit reports) tolerate a rare double count. A write the leader
//! refuses as invalid is not retried: its checks give the same answer every time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::convert;
use crate::node::error::CoreError;
use crate::node::metrics::Metrics;
use crate::node::raft::peers::PeerChannels;
use crate::node::types::{Command, NodeId, Raft, Request};
use crate::node::writes::group_commit::{Committed, GroupCommit, SubmitError};
use crate::node::writes::validate;
use daemon_runtime::TierIdentity;

/// Shortest and longest pause between attempts while the cluster has no usable leader.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(300));

/// What a forwarded write returns.
pub type ForwardReply = Result<Committed, SubmitError>;

/// Writes requests through Raft from this node.
#[derive(Clone)]
pub struct Writer {
    /// This node's id.
    id: NodeId,
    /// The local Raft node, for leadership.
    raft: Raft,
    /// The local group commit (used while this node leads).
    group: GroupCommit,
    /// Channels to the other nodes, for forwarding.
    channels: PeerChannels,
    /// Sent with forwarded writes.
    identity: TierIdentity,
    /// How long a write may wait for a leader and a quorum.
    timeout: Duration,
    /// Counts forwarded writes.
    metrics: Arc<Metrics>,
}

impl Writer {
    /// A writer for node `id`.
    pub fn new(
        id: NodeId,
        raft: Raft,
        group: GroupCommit,
        channels: PeerChannels,
        identity: TierIdentity,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { id, raft, group, channels, identity, timeout, metrics }
    }

    /// The local group commit, for writes forwarded to this node.
    pub fn group(&self) -> &GroupCommit {
        &self.group
    }

    /// Commits `request` and returns once it is applied on the leader; `NoQuorum` after the timeout.
    pub async fn write(&self, request: Request) -> Result<Committed, CoreError> {
        self.write_within(request, self.timeout).await
    }

    /// [`Writer::write`] with its own deadline.
    ///
    /// Every request but the leader's `Sweep` is checked as a forwarded one is (`validate::request`), so
    /// the node's own writes (answers, refreshes, hit reports, seeding) meet the same bounds on the leader
    /// as on a follower.
    pub async fn write_within(&self, request: Request, timeout: Duration) -> Result<Committed, CoreError> {
        if !matches!(request.command, Command::Sweep { .. }) {
            validate::request(&request)?;
        }
        let deadline = Instant::now() + timeout;
        let mut pause = RETRY_PAUSE.0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(CoreError::NoQuorum(format!("no leader committed the write within {timeout:?}")));
            }
            if !self.is_member() {
                return Err(CoreError::NoQuorum(format!("node {} is not a member of the cluster", self.id)));
            }
            // Why this attempt did not commit, when another attempt may.
            let retry: String = match self.leader() {
                None => "no leader known".into(),
                Some((leader, _)) if leader == self.id => {
                    match tokio::time::timeout(remaining, self.group.submit(request.clone())).await {
                        Ok(Ok(committed)) => return Ok(committed),
                        Ok(Err(e @ SubmitError::NotLeader { .. })) => e.to_string(),
                        Ok(Err(SubmitError::Stopped(e))) => return Err(CoreError::Raft(e)),
                        Err(_) => "local write timed out".into(),
                    }
                }
                Some((leader, addr)) => match self.forward(&addr, &request, remaining).await {
                    Ok(Ok(committed)) => {
                        self.metrics.forwarded_writes.inc();
                        return Ok(committed);
                    }
                    // A remote leader that stepped down or stopped: another node takes over.
                    Ok(Err(e)) => format!("leader {leader}: {e}"),
                    Err(e @ CoreError::InvalidArgument(_)) => return Err(e),
                    Err(e) => format!("leader {leader} at {addr}: {e}"),
                },
            };
            tracing::debug!(%retry, "write not committed yet; retrying");
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(RETRY_PAUSE.1);
        }
    }

    /// Whether this node is in the membership it knows of (a removed node stops serving writes at once,
    /// so that clients move on instead of waiting for a leader it will never learn).
    pub fn is_member(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        metrics.membership_config.membership().get_node(&self.id).is_some()
    }

    /// The leader this node knows of, with its address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = crate::node::context::known_leader(self.id, &metrics)?;
        let node = metrics.membership_config.membership().get_node(&leader)?;
        Some((leader, node.addr.clone()))
    }

    /// Sends `request` to the leader at `addr`. A refusal of the request itself is `InvalidArgument`; every
    /// other failure is `NoQuorum` (another attempt may succeed).
    async fn forward(
        &self,
        addr: &str,
        request: &Request,
        remaining: Duration,
    ) -> Result<ForwardReply, CoreError> {
        let mut client = self.channels.raft_client(addr)?;
        let mut call = self.identity.request(convert::encode(request)?);
        call.set_timeout(remaining);
        let reply = tokio::time::timeout(remaining, client.client_write(call))
            .await
            .map_err(|_| CoreError::NoQuorum("forwarded write timed out".into()))?
            .map_err(forward_error)?;
        Ok(serde_json::from_slice(&reply.get_ref().body)?)
    }
}

/// A failed `Raft.ClientWrite` call as the writer's error: the leader's refusal of the request is final,
/// anything else (a transport failure, a stopping node) is worth another attempt.
fn forward_error(status: tonic::Status) -> CoreError {
    match status.code() {
        tonic::Code::InvalidArgument => {
            let message = status.message();
            // The leader's own `InvalidArgument` display already starts with this prefix.
            let reason = message.strip_prefix("invalid argument: ").unwrap_or(message);
            CoreError::InvalidArgument(format!("the leader refused the write: {reason}"))
        }
        _ => CoreError::NoQuorum(format!("forwarded write: {}", status.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_of_the_request_ends_the_retries() {
        let refused = forward_error(tonic::Status::from(CoreError::InvalidArgument("key is empty".into())));
        match refused {
            CoreError::InvalidArgument(message) => {
                assert_eq!(message, "the leader refused the write: key is empty")
            }
            other => panic!("a refusal must be final, got {other:?}"),
        }
        let lost = forward_error(tonic::Status::unavailable("connection refused"));
        assert!(matches!(lost, CoreError::NoQuorum(_)), "{lost:?}");
    }
}
