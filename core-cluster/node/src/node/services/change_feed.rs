//! `CoreCache.Watch`: the change feed from a revision on, then as it grows.
//!
//! Rows come from the local state machine ([`StateMachineStore::feed_after`]), which every replica holds
//! alike at a given index, so a watcher that fails over to another node resumes from its revision. A
//! revision below the feed's floor (compacted), or 0, is answered with a resync first. When nothing new
//! is applied, a progress event at least every [`PROGRESS_INTERVAL`] tells the watcher the revision it is
//! at and that the stream is alive.
//!
//! A progress event says "nothing happened since", which only a node that may serve can say: before
//! every batch and every progress event the node checks that it is still a member and that a leader
//! confirmed its state recently (the check a new watch passes). A node removed from the cluster, cut off
//! from the majority, or deposed and isolated ends its streams with `UNAVAILABLE` within
//! [`PROGRESS_INTERVAL`] of failing that check, so the watcher follows the feed on another node instead
//! of believing a frozen one.
//!
//! Every event carries how long ago a leader confirmed the node's state (`confirmed_age_ms`) and whether
//! it reaches the node's applied state (`at_head`: a batch that filled [`ROWS_PER_BATCH`] does not), so
//! a watcher knows how fresh its view is against the core, not against the node it asked.
//! Every event also carries the log time as the node reckons it when sending (`core_time_ms`), by which
//! watchers learn how far their clocks are from the core's, since answers' TTLs run on log time.

use std::time::Duration;

use proto::cache::WatchEvent;
use shared::changes::{Changes, Revised};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::node::error::CoreError;
use crate::node::state_machine::{FeedRead, StateMachineStore};

/// Longest quiet time on a watch stream: also how often a watcher's view is confirmed when nothing
/// changes, so well under the tiers' staleness bounds (a regional node's 2 s, the edge's 1 s).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// Feed rows read per batch.
const ROWS_PER_BATCH: usize = 256;

/// Whether the node may still serve (a member, its state confirmed by a leader recently), and if so how
/// long ago a leader confirmed its state.
pub type ServingCheck = Box<dyn Fn() -> Result<Duration, CoreError> + Send + Sync>;

/// Streams the feed after `after_revision` until the watcher hangs up or `serving` fails.
pub fn watch(
    state: StateMachineStore,
    after_revision: u64,
    serving: ServingCheck,
) -> ReceiverStream<Result<WatchEvent, Status>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        if let Err(e) = follow(&state, after_revision, &serving, &tx).await {
            tracing::info!(error = %e, "ending a change feed stream");
            let _ = tx.send(Err(e.into())).await;
        }
    });
    ReceiverStream::new(rx)
}

/// Why following stopped: the watcher left, or the state could not be read.
async fn follow(
    state: &StateMachineStore,
    after_revision: u64,
    serving: &ServingCheck,
    tx: &mpsc::Sender<Result<WatchEvent, Status>>,
) -> Result<(), CoreError> {
    let mut applied = state.applied_updates();
    let mut cursor = after_revision;
    let mut sent_progress = None;
    loop {
        let confirmed_age_ms = Some(u64::try_from(serving()?.as_millis()).unwrap_or(u64::MAX));
        // Read before the rows: every row at or below it is already visible, so a progress event never
        // moves the cursor past a row that was not read.
        let applied_before = state.applied_index();
        let batch = match (cursor, state.feed_after(cursor, ROWS_PER_BATCH)?) {
            (0, _) | (_, FeedRead::Compacted) => {
                let resync = state.resync_point()?;
                Changes {
                    revision: resync.revision,
                    resync: Some(resync),
                    at_head: true,
                    ..Default::default()
                }
            }
            (_, FeedRead::Rows(rows)) if !rows.is_empty() => {
                let revision = rows.last().map_or(cursor, |(r, _)| *r);
                let at_head = rows.len() < ROWS_PER_BATCH;
                let changes = rows
                    .into_iter()
                    .flat_map(|(revision, row)| {
                        row.changes.into_iter().map(move |change| Revised {
                            revision,
                            at_ms: row.at_ms,
                            change,
                        })
                    })
                    .collect();
                Changes { revision, changes, at_head, ..Default::default() }
            }
            (_, FeedRead::Rows(_)) => {
                // Nothing after the cursor: wait for the next applied index, or say where we are.
                let now = applied_before.max(cursor);
                if sent_progress != Some(now) {
                    sent_progress = Some(now);
                    if tx
                        .send(Ok(WatchEvent::from(&Changes {
                            revision: now,
                            confirmed_age_ms,
                            core_time_ms: Some(state.log_time_ms()),
                            at_head: true,
                            ..Default::default()
                        })))
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                    cursor = now;
                }
                tokio::select! {
                    changed = applied.changed() => if changed.is_err() { return Ok(()) },
                    _ = tokio::time::sleep(PROGRESS_INTERVAL) => sent_progress = None,
                    _ = tx.closed() => return Ok(()),
                }
                continue;
            }
        };
        cursor = batch.revision;
        let batch = Changes { confirmed_age_ms, core_time_ms: Some(state.log_time_ms()), ..batch };
        if tx.send(Ok(WatchEvent::from(&batch))).await.is_err() {
            return Ok(());
        }
    }
}
