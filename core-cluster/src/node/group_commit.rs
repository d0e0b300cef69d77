//! Group commit on the leader: concurrent requests are batched into one Raft entry (a [`Proposal`]), so one
//! log append and one fsync per node cover the whole batch and throughput grows with concurrency.
//!
//! A batch is formed from whatever is queued when a proposal slot frees up: at most [`MAX_IN_FLIGHT`]
//! proposals are in Raft at once, and each carries up to [`MAX_BATCH`] requests. A lone request is proposed
//! at once (no timer), so a single client pays no batching delay.

use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::metrics::Metrics;
use super::state_machine::now_ms;
use super::types::{Applied, NodeId, Proposal, Raft, Request};

/// Most requests in one proposal.
pub const MAX_BATCH: usize = 512;
/// Most proposals in flight at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// Requests queued before submitters wait.
const QUEUE: usize = 4096;

/// A request committed and applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Committed {
    /// The log index of its proposal.
    pub log_index: u64,
    /// The leader that committed it.
    pub leader_id: NodeId,
    /// What it did.
    pub applied: Applied,
}

/// Why a request was not committed here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SubmitError {
    /// This node is not the leader (the leader it knows of, if any): try there.
    #[error("not the leader (leader hint {leader:?})")]
    NotLeader {
        /// The leader this node knows of.
        leader: Option<NodeId>,
    },
    /// Raft stopped on this node.
    #[error("raft stopped: {0}")]
    Stopped(String),
}

/// One queued request and where its answer goes.
struct Pending {
    request: Request,
    reply: oneshot::Sender<Result<Committed, SubmitError>>,
}

/// The submitting side of the group-commit task.
#[derive(Clone, Debug)]
pub struct GroupCommit {
    queue: mpsc::Sender<Pending>,
}

impl GroupCommit {
    /// Starts the batching task of node `id` over `raft`.
    pub fn start(id: NodeId, raft: Raft, metrics: Arc<Metrics>) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(id, raft, rx, metrics));
        Self { queue }
    }

    /// Proposes `request` in the next batch and waits until it is committed and applied.
    pub async fn submit(&self, request: Request) -> Result<Committed, SubmitError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { request, reply })
            .await
            .map_err(|_| SubmitError::Stopped("the group-commit task ended".into()))?;
        answer.await.map_err(|_| SubmitError::Stopped("the proposal was dropped".into()))?
    }
}

async fn run(id: NodeId, raft: Raft, mut rx: mpsc::Receiver<Pending>, metrics: Arc<Metrics>) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        metrics.proposal_requests.observe(batch.len() as f64);
        let raft = raft.clone();
        tokio::spawn(async move {
            let (requests, replies): (Vec<Request>, Vec<_>) =
                batch.into_iter().map(|p| (p.request, p.reply)).unzip();
            let proposal = Proposal { issued_ms: now_ms(), requests };
            let result = raft.client_write(proposal).await;
            drop(slot);
            match result {
                Ok(response) => {
                    let log_index = response.log_id.index;
                    let mut applied = response.data.applied.into_iter();
                    for reply in replies {
                        let answer = match applied.next() {
                            Some(applied) => Ok(Committed { log_index, leader_id: id, applied }),
                            None => Err(SubmitError::Stopped(
                                "the state machine answered too few requests".into(),
                            )),
                        };
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    let error = match e {
                        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                            SubmitError::NotLeader { leader: f.leader_id }
                        }
                        RaftError::APIError(e) => SubmitError::Stopped(e.to_string()),
                        RaftError::Fatal(e) => SubmitError::Stopped(e.to_string()),
                    };
                    for reply in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
        });
    }
}
