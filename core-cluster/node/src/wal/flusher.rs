//! Group commit: one thread syncs the log for every writer waiting at that moment.
//!
//! A writer writes its records, then queues a [`Done`] callback here. The thread takes everything queued,
//! syncs the segment being written once, and calls every callback it took, in order. While it syncs, new
//! writers queue up for the next round, so the number of syncs per second stays bounded by the disk while
//! the records per sync grow with the load.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::state::State;
use super::sync_failure::FailureMarker;

/// What to do once the records written before it are durable (or the sync failed).
pub type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

/// Counters of the flusher's work.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Syncs done.
    pub syncs: AtomicU64,
    /// Writers those syncs covered.
    pub writers: AtomicU64,
    /// Callbacks queued and not yet called: a writer may sync on its own thread only when none are, so
    /// that callbacks still run in the order their records were written.
    pub queued: AtomicU64,
}

/// Starts the flusher of `state`; it ends when every sender of its queue is dropped. A failed sync leaves
/// `marker`.
pub fn start(
    state: Arc<Mutex<State>>,
    stats: Arc<SyncStats>,
    marker: FailureMarker,
) -> io::Result<Sender<Done>> {
    let (queue, waiting) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("wal-flusher".into())
        .spawn(move || run(&state, &waiting, &stats, &marker))?;
    Ok(queue)
}

fn run(state: &Mutex<State>, waiting: &Receiver<Done>, stats: &SyncStats, marker: &FailureMarker) {
    while let Ok(first) = waiting.recv() {
        let mut round = vec![first];
        round.extend(waiting.try_iter());
        // The file is looked up after the round is taken: a writer that rolled to a new segment synced
        // the old one itself, so the segment written now is the only one that can hold unsynced records.
        // The tail read with it is how far the sync reaches: every write up to there returned before it.
        let file = {
            let state = state.lock().expect("the write-ahead log's lock is never poisoned");
            match &state.failed {
                Some(why) => Err(why.clone()),
                None => Ok((Arc::clone(&state.tail_segment().file), state.tail_segment().seq, state.tail)),
            }
        };
        let result = file.and_then(|(file, seq, through)| {
            super::sync_failure::sync(file.as_ref()).map_err(|e| e.to_string())?;
            let mut state = state.lock().expect("the write-ahead log's lock is never poisoned");
            if state.tail_segment().seq == seq {
                state.synced_through = state.synced_through.max(through);
            }
            Ok(())
        });
        if let Err(why) = &result {
            let mut state = state.lock().expect("the write-ahead log's lock is never poisoned");
            if state.failed.is_none() {
                state.failed = Some(why.clone());
                drop(state);
                tracing::error!(error = %why, "write-ahead log: sync failed; the log accepts no more writes");
                marker.leave(why);
            }
        }
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        stats.writers.fetch_add(round.len() as u64, Ordering::Relaxed);
        let called = round.len() as u64;
        for done in round {
            done(result.clone().map_err(io::Error::other));
        }
        stats.queued.fetch_sub(called, Ordering::Release);
    }
}
