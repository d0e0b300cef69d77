//! The leader's tick: every [`TICK_INTERVAL`] the leader proposes a [`Command::Sweep`], which moves the
//! log time on (reads decide expiry at it, so an idle cluster still expires entries within a tick) and,
//! every [`SWEEP_EVERY`] ticks, lists what the leader found dead for every replica to remove at the same
//! index.

use std::time::Duration;

use crate::node::state_machine::StateMachineStore;
use crate::node::types::{Command, NodeId, Raft, Request};
use crate::node::writes::writer::Writer;

/// How often the leader proposes a tick: the bound on how late an expiry is observed.
pub const TICK_INTERVAL: Duration = Duration::from_secs(1);
/// Every how many ticks the tick lists dead entries, old request ids and old feed rows.
const SWEEP_EVERY: u32 = 30;

/// Runs forever: proposes a tick whenever this node is the leader.
pub async fn run(id: NodeId, raft: Raft, state: StateMachineStore, writer: Writer) {
    let mut tick = tokio::time::interval(TICK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut count: u32 = 0;
    loop {
        tick.tick().await;
        if crate::node::context::known_leader(id, &raft.metrics().borrow()) != Some(id) {
            continue;
        }
        count = count.wrapping_add(1);
        let command = if count.is_multiple_of(SWEEP_EVERY) {
            let store = state.clone();
            match tokio::task::spawn_blocking(move || store.sweep_candidates()).await {
                Ok(Ok(command)) => command,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "listing dead entries failed");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listing dead entries panicked");
                    continue;
                }
            }
        } else {
            Command::Sweep { entries: Vec::new(), requests: Vec::new(), feed: Vec::new() }
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
