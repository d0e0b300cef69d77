//! Commits a command through Raft from any node: on the leader directly, on a follower by forwarding it to
//! the leader's `Raft.ClientWrite`. While there is no leader (an election) it retries until its deadline.
//!
//! Retrying is safe because every command is idempotent: applying the same `Put` twice stores the same entry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::BasicNode;

use super::auth::TierSecret;
use super::convert;
use super::error::CoreError;
use super::metrics::Metrics;
use super::peers::PeerChannels;
use super::types::{Command, NodeId, Raft, TypeConfig};

/// What a write through the leader returns.
type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>;

/// Shortest and longest pause between attempts while the cluster has no usable leader.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(500));

/// Writes commands through Raft from this node.
#[derive(Clone)]
pub struct Writer {
    /// This node's id.
    id: NodeId,
    /// The local Raft node, for leadership and for local writes.
    raft: Raft,
    /// Channels to the other nodes, for forwarding.
    channels: PeerChannels,
    /// Sent with forwarded writes.
    secret: TierSecret,
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
        channels: PeerChannels,
        secret: TierSecret,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { id, raft, channels, secret, timeout, metrics }
    }

    /// Commits `command` and returns once it is applied on the leader; `NoQuorum` after the timeout.
    pub async fn write(&self, command: Command) -> Result<ClientWriteResponse<TypeConfig>, CoreError> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = RETRY_PAUSE.0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(CoreError::NoQuorum(format!(
                    "no leader committed the write within {:?}",
                    self.timeout
                )));
            }
            // Why this attempt did not commit, when another attempt may.
            let retry: String = match self.leader() {
                None => "no leader known".into(),
                Some((leader, _)) if leader == self.id => {
                    match tokio::time::timeout(remaining, self.raft.client_write(command.clone())).await {
                        Ok(result) => match classify(result, false) {
                            Ok(done) => return done,
                            Err(retry) => retry,
                        },
                        Err(_) => "local write timed out".into(),
                    }
                }
                Some((leader, addr)) => match self.forward(&addr, &command, remaining).await {
                    Ok(result) => match classify(result, true) {
                        Ok(done) => {
                            self.metrics.forwarded_writes.inc();
                            return done;
                        }
                        Err(retry) => retry,
                    },
                    Err(e) => format!("leader {leader} at {addr}: {e}"),
                },
            };
            tracing::debug!(%retry, "write not committed yet; retrying");
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(RETRY_PAUSE.1);
        }
    }

    /// The leader this node knows of, with its address.
    fn leader(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader?;
        let node = metrics.membership_config.membership().get_node(&leader)?;
        Some((leader, node.addr.clone()))
    }

    /// Sends `command` to the leader at `addr`.
    async fn forward(
        &self,
        addr: &str,
        command: &Command,
        remaining: Duration,
    ) -> Result<WriteResult, CoreError> {
        let mut client = self.channels.raft_client(addr)?;
        let mut request = self.secret.request(convert::encode(command)?);
        request.set_timeout(remaining);
        let reply = tokio::time::timeout(remaining, client.client_write(request))
            .await
            .map_err(|_| CoreError::NoQuorum("forwarded write timed out".into()))?
            .map_err(|status| CoreError::NoQuorum(format!("forwarded write: {}", status.message())))?;
        Ok(serde_json::from_slice(&reply.get_ref().json)?)
    }
}

/// Sorts a write's outcome into done (committed, or failed for good) and worth retrying (with the reason).
///
/// A fatal error from a remote leader (it is shutting down) is worth retrying: another node takes over.
fn classify(
    result: WriteResult,
    remote: bool,
) -> Result<Result<ClientWriteResponse<TypeConfig>, CoreError>, String> {
    match result {
        Ok(response) => Ok(Ok(response)),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Err(format!("not the leader (leader hint {:?})", f.leader_id))
        }
        Err(RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_))) => {
            Ok(Err(CoreError::Raft(e.to_string())))
        }
        Err(RaftError::Fatal(e)) if remote => Err(format!("leader stopped: {e}")),
        Err(RaftError::Fatal(e)) => Ok(Err(CoreError::Raft(e.to_string()))),
    }
}
