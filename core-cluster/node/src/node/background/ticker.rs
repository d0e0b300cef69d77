//! The leader's tick: every [`TICK_INTERVAL`] the leader proposes a [`Command::Sweep`], which moves the
//! log time on (reads decide expiry at it, so an idle cluster still expires entries within a tick) and
//! lists what the leader found dead for every replica to remove at the same index: request ids and feed
//! rows past their retention, and dead entries among the next part of the entry index (a cursor walks
//! it a part per tick), each bounded per tick (`StateMachineStore::sweep_candidates`).

use std::time::Duration;

use crate::node::state_machine::{StateMachineStore, SweepCursor};
use crate::node::types::{Command, NodeId, Raft, Request};
use crate::node::writes::writer::Writer;

/// How often the leader proposes a tick: the bound on how late an expiry is observed.
pub const TICK_INTERVAL: Duration = Duration::from_secs(1);

/// Runs forever: proposes a tick whenever this node is the leader.
pub async fn run(id: NodeId, raft: Raft, state: StateMachineStore, writer: Writer) {
    let mut tick = tokio::time::interval(TICK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut cursor: SweepCursor = None;
    loop {
        tick.tick().await;
        if crate::node::context::known_leader(id, &raft.metrics().borrow()) != Some(id) {
            continue;
        }
        let (store, from) = (state.clone(), cursor.clone());
        let listed = tokio::task::spawn_blocking(move || store.sweep_candidates(from))
            .await
            .map_err(|e| e.to_string())
            .and_then(|listed| listed.map_err(|e| e.to_string()));
        let command = match listed {
            Ok((command, next)) => {
                cursor = next;
                command
            }
            Err(e) => {
                // The tick still moves the log time on.
                tracing::warn!(error = %e, "listing dead entries failed");
                Command::Sweep { entries: Vec::new(), requests: Vec::new(), feed: Vec::new() }
            }
        };
        match writer.write(Request { id: String::new(), command }).await {
            Ok(committed) => {
                if let crate::node::types::Outcome::Swept { entries, requests, feed } =
                    committed.applied.outcome
                {
                    if entries + requests + feed > 0 {
                        tracing::info!(
                            entries,
                            requests,
                            feed,
                            "swept dead entries, old request ids and feed rows"
                        );
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "tick not committed"),
        }
    }
}
