//! Group commit on the leader: concurrent requests are batched into one Raft entry (a [`Proposal`]), so one
//! log append and one fsync per node cover the whole batch and throughput grows with concurrency.
//!
//! A batch is formed from whatever is queued when a proposal slot frees up: at most [`MAX_IN_FLIGHT`]
//! proposals are in Raft at once, and each carries up to [`MAX_BATCH`] requests and [`MAX_BATCH_BYTES`]
//! bytes of them, so that one log entry stays small enough to replicate in one message. A lone request is
//! proposed at once (no timer), so a single client pays no batching delay.
//!
//! Under load, the slot frees up the moment a large batch commits, before its clients have had their
//! answers, so only the few requests that came in meanwhile are queued. Proposed at once, they would take
//! a whole round for themselves while the next large batch waits: at 64 clients the rounds alternated
//! between about 60 requests and 1. So when the queue holds less than seven eighths of the last batch,
//! the batch waits for more ([`top_up`]), at most half the last round's time. The rounds then carry about
//! 30 requests each; `mesh bench core` at 64 clients gave 6,093 and 5,949 puts/s with this, 5,417 and
//! 5,712 without (p99 20.3 and 23.3 ms against 24.0 and 24.5). One client never waits: its batch of one
//! is all of the last.

use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::node::metrics::Metrics;
use crate::node::state_machine::{now_ms, StateMachineStore};
use crate::node::types::{Applied, NodeId, Proposal, Raft, Request};
use crate::node::writes::leader_clock::LeaderClock;

/// Most requests in one proposal.
pub const MAX_BATCH: usize = 512;
/// Most bytes of requests in one proposal, as [`Request::approx_bytes`] counts them. A request that would
/// take a batch past it waits for the next one; a request larger than this on its own goes alone.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Most proposals in flight at once. One: while a proposal commits, the next batch grows, so the costs
/// paid per proposal (an AppendEntries per follower, a state-machine transaction, a change-feed row) are
/// shared by more requests. On 2 cores, `mesh bench core` at 64 clients gave 5,109 and 5,279 puts/s with
/// one in flight, 4,698 and 4,880 with two, 3,718 to 4,764 with four; one client is unaffected.
pub const MAX_IN_FLIGHT: usize = 1;
/// Requests queued before submitters wait.
const QUEUE: usize = 4096;
/// The longest a batch waits for the clients of the last one ([`top_up`]).
const MAX_LINGER: std::time::Duration = std::time::Duration::from_millis(5);

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

/// How large one proposal may grow.
#[derive(Clone, Copy, Debug)]
struct BatchLimits {
    /// Most requests.
    requests: usize,
    /// Most bytes of requests.
    bytes: usize,
}

/// The limits of every proposal.
const LIMITS: BatchLimits = BatchLimits { requests: MAX_BATCH, bytes: MAX_BATCH_BYTES };

/// One queued request and where its answer goes.
struct Pending {
    /// The request.
    request: Request,
    /// Where its answer goes.
    reply: oneshot::Sender<Result<Committed, SubmitError>>,
}

/// The submitting side of the group-commit task.
#[derive(Clone, Debug)]
pub struct GroupCommit {
    queue: mpsc::Sender<Pending>,
}

impl GroupCommit {
    /// Starts the batching task of node `id` over `raft`, stamping log time from `state`'s clock.
    pub fn start(id: NodeId, raft: Raft, state: StateMachineStore, metrics: Arc<Metrics>) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(id, raft, state, rx, metrics));
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

/// Proposes batches of the queued requests until every submitter is gone.
async fn run(
    id: NodeId,
    raft: Raft,
    state: StateMachineStore,
    mut rx: mpsc::Receiver<Pending>,
    metrics: Arc<Metrics>,
) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // One proposal in flight at a time, so stamps are made in log order.
    let mut clock = LeaderClock::default();
    // The request that did not fit in the last batch: it opens the next one.
    let mut carried: Option<Pending> = None;
    // The last batch's size and how long its round took.
    let last = Arc::new(std::sync::Mutex::new((0usize, std::time::Duration::ZERO)));
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match rx.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (mut batch, mut rest) = gather(first, &mut rx, LIMITS);
        let (last_len, last_round) = *last.lock().expect("never poisoned");
        let target = last_len - last_len / 8;
        if rest.is_none() && batch.len() < target {
            let linger = (last_round / 2).min(MAX_LINGER);
            rest = top_up(&mut batch, &mut rx, LIMITS, target, linger).await;
        }
        carried = rest;
        metrics.proposal_requests.observe(batch.len() as f64);
        let term = raft.metrics().borrow().current_term;
        let log_ms = || state.clock_ms().unwrap_or(0);
        let stamp = clock.stamp(term, now_ms(), log_ms, std::time::Instant::now());
        if stamp.clamped_by_ms.is_some() {
            metrics.clamped_stamps.inc();
        }
        let raft = raft.clone();
        let last = Arc::clone(&last);
        tokio::spawn(async move {
            let len = batch.len();
            let (requests, replies): (Vec<Request>, Vec<_>) =
                batch.into_iter().map(|p| (p.request, p.reply)).unzip();
            let proposal = Proposal { issued_ms: stamp.issued_ms, requests: requests.into() };
            let started = std::time::Instant::now();
            let result = raft.client_write(proposal).await;
            *last.lock().expect("never poisoned") = (len, started.elapsed());
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

/// Forms a batch of `first` and the requests queued behind it, within `limits`. Returns the batch and the
/// queued request that would have taken it past the byte limit, if any (it opens the next batch).
fn gather(
    first: Pending,
    rx: &mut mpsc::Receiver<Pending>,
    limits: BatchLimits,
) -> (Vec<Pending>, Option<Pending>) {
    let mut bytes = first.request.approx_bytes();
    let mut batch = vec![first];
    while batch.len() < limits.requests {
        let Ok(next) = rx.try_recv() else { break };
        if let Some(over) = admit(&mut batch, &mut bytes, next, limits) {
            return (batch, Some(over));
        }
    }
    (batch, None)
}

/// Adds `next` to `batch` (of `bytes` bytes so far) if it stays within the byte limit; otherwise hands it
/// back (it opens the next batch).
fn admit(batch: &mut Vec<Pending>, bytes: &mut usize, next: Pending, limits: BatchLimits) -> Option<Pending> {
    let size = next.request.approx_bytes();
    if bytes.saturating_add(size) > limits.bytes {
        return Some(next);
    }
    *bytes += size;
    batch.push(next);
    None
}

/// Adds requests to `batch` as they arrive, within `limits`, until it holds `target` of them or `linger`
/// has passed. Returns the request that would have taken it past the byte limit, if any.
async fn top_up(
    batch: &mut Vec<Pending>,
    rx: &mut mpsc::Receiver<Pending>,
    limits: BatchLimits,
    target: usize,
    linger: std::time::Duration,
) -> Option<Pending> {
    let deadline = tokio::time::Instant::now() + linger;
    let mut bytes: usize = batch.iter().map(|p| p.request.approx_bytes()).sum();
    while batch.len() < target.min(limits.requests) {
        let Ok(Some(next)) = tokio::time::timeout_at(deadline, rx.recv()).await else { break };
        if let Some(over) = admit(batch, &mut bytes, next, limits) {
            return Some(over);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::Command;

    /// A queued request of `bytes` bytes (a model name of that length).
    fn pending(bytes: usize) -> Pending {
        let command = Command::RegisterModel { model: "m".repeat(bytes), version: 1, spec: None };
        let (reply, _) = oneshot::channel();
        Pending { request: Request { id: String::new(), command }, reply }
    }

    /// A queue holding requests of these sizes.
    fn queue(sizes: &[usize]) -> mpsc::Receiver<Pending> {
        let (tx, rx) = mpsc::channel(sizes.len().max(1));
        for &bytes in sizes {
            tx.try_send(pending(bytes)).unwrap_or_else(|_| panic!("the queue has room"));
        }
        rx
    }

    /// The sizes of a batch's requests, in order.
    fn sizes(batch: &[Pending]) -> Vec<usize> {
        batch.iter().map(|p| p.request.approx_bytes()).collect()
    }

    #[test]
    fn a_batch_stops_before_the_request_that_would_pass_the_byte_limit() {
        let limits = BatchLimits { requests: 10, bytes: 100 };
        let mut rx = queue(&[30, 20, 5, 1]);
        let (batch, rest) = gather(pending(60), &mut rx, limits);
        assert_eq!(sizes(&batch), vec![60, 30]);
        let rest = rest.expect("the 20-byte request waits");
        let (batch, rest) = gather(rest, &mut rx, limits);
        assert_eq!(sizes(&batch), vec![20, 5, 1]);
        assert!(rest.is_none());
    }

    #[test]
    fn a_request_larger_than_the_limit_goes_alone() {
        let limits = BatchLimits { requests: 10, bytes: 100 };
        let mut rx = queue(&[1, 2]);
        let (batch, rest) = gather(pending(500), &mut rx, limits);
        assert_eq!(sizes(&batch), vec![500]);
        assert_eq!(rest.map(|p| p.request.approx_bytes()), Some(1));
        let mut rx = queue(&[500]);
        let (batch, rest) = gather(pending(1), &mut rx, limits);
        assert_eq!(sizes(&batch), vec![1]);
        let (batch, rest) = gather(rest.expect("the large one waits"), &mut rx, limits);
        assert_eq!((sizes(&batch), rest.is_none()), (vec![500], true));
    }

    #[tokio::test]
    async fn a_batch_waits_for_late_requests_until_its_target_or_its_linger() {
        let limits = BatchLimits { requests: 10, bytes: 100 };
        let (tx, mut rx) = mpsc::channel(8);
        let sender = tokio::spawn(async move {
            for bytes in [2, 3, 4] {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                tx.send(pending(bytes)).await.unwrap_or_else(|_| panic!("the queue is open"));
            }
            tx
        });
        let mut batch = vec![pending(1)];
        let linger = std::time::Duration::from_secs(5);
        let rest = top_up(&mut batch, &mut rx, limits, 3, linger).await;
        assert_eq!((sizes(&batch), rest.is_none()), (vec![1, 2, 3], true), "it stops at its target");
        let _tx = sender.await.expect("sender");
        let started = std::time::Instant::now();
        let mut batch = vec![pending(1)];
        let rest = top_up(&mut batch, &mut rx, limits, 5, std::time::Duration::from_millis(30)).await;
        assert_eq!(
            (sizes(&batch), rest.is_none()),
            (vec![1, 4], true),
            "what came before the linger ran out"
        );
        assert!(started.elapsed() >= std::time::Duration::from_millis(30));
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(pending(90)).unwrap_or_else(|_| panic!("the queue has room"));
        let mut batch = vec![pending(20)];
        let rest = top_up(&mut batch, &mut rx, limits, 5, linger).await;
        assert_eq!(rest.map(|p| p.request.approx_bytes()), Some(90), "the byte limit still holds");
    }

    #[test]
    fn the_request_count_still_bounds_a_batch() {
        let mut rx = queue(&[1, 1, 1, 1]);
        let (batch, rest) = gather(pending(1), &mut rx, BatchLimits { requests: 3, bytes: 100 });
        assert_eq!(batch.len(), 3);
        assert!(rest.is_none(), "nothing is taken off the queue past the count");
        assert_eq!(rx.len(), 2);
        let full = BatchLimits { requests: MAX_BATCH, bytes: MAX_BATCH_BYTES };
        let mut rx = queue(&[MAX_BATCH_BYTES / 2, MAX_BATCH_BYTES / 2, 1]);
        let (batch, rest) = gather(pending(0), &mut rx, full);
        assert_eq!(batch.len(), 3);
        assert!(rest.is_some());
    }
}
