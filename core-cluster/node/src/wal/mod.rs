//! A write-ahead log for the Raft log and the vote, in the manner of etcd's WAL.
//!
//! - **Segments**: files named by a sequence number, created zero-filled to their full size ahead of use
//!   (a spare is prepared in the background), so that appends change no file metadata.
//! - **Records**: checksummed and aligned ([`record`]); entries, votes, the committed id, truncations and
//!   purges are all records, and every segment opens with a [`Meta`] record that restates the vote, the
//!   committed id and the purge point, so whole segments can be deleted after a purge.
//! - **Group commit**: a writer writes its records and queues its callback; one flusher thread
//!   `fdatasync`s once for everything queued ([`flusher`]). Rolling to a new segment syncs the old one
//!   first, so only the segment being written can hold unsynced records.
//! - **Recovery** ([`recovery`]): replay in order, cut a torn tail, refuse a corrupt middle, and refuse a
//!   log whose sync failed earlier in the same boot ([`sync_failure`]).
//! - **The file layer** ([`fs`]) is a trait, so tests can run the log over a layer that loses every byte
//!   not covered by a completed sync.
//!
//! The log stores entries as opaque bytes beside their log ids; what the bytes mean is the caller's.

pub mod flusher;
pub mod fs;
pub mod meta;
pub mod record;
pub mod recovery;
pub mod state;
pub mod sync_failure;

#[cfg(test)]
mod crash_fs;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use openraft::{LogId, Vote};

pub use flusher::Done;
use flusher::SyncStats;
use fs::{WalDir, WalFile};
pub use meta::Meta;
use record::Kind;
use state::{segment_name, Segment, State};
use sync_failure::FailureMarker;

use crate::node::NodeId;

/// How the log lays out its files.
#[derive(Clone, Copy, Debug)]
pub struct WalOptions {
    /// Size of a segment file (a record larger than this gets a segment of its own size).
    pub segment_bytes: u64,
    /// Whether the next segment is created in the background before it is needed.
    pub create_ahead: bool,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self { segment_bytes: 64 << 20, create_ahead: true }
    }
}

/// A segment created ahead of use.
type Spare = JoinHandle<io::Result<(u64, Arc<dyn WalFile>)>>;

/// The write-ahead log of one node. Writes are serialized; reads run beside them.
pub struct Wal {
    dir: Arc<dyn WalDir>,
    options: WalOptions,
    state: Arc<Mutex<State>>,
    flusher: Sender<Done>,
    spare: Mutex<Option<Spare>>,
    stats: Arc<SyncStats>,
    /// Where a failed write or sync leaves its mark for the next open.
    marker: FailureMarker,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Wal {
    /// Opens the log in `dir`, recovering what is there, or starts an empty one. A log whose sync failed
    /// earlier in this boot is refused ([`sync_failure`]).
    pub fn open(dir: Arc<dyn WalDir>, options: WalOptions) -> io::Result<Self> {
        Self::open_in_boot(dir, options, &sync_failure::boot_id())
    }

    /// [`Wal::open`] in the boot named `boot`.
    fn open_in_boot(dir: Arc<dyn WalDir>, options: WalOptions, boot: &str) -> io::Result<Self> {
        sync_failure::check(dir.as_ref(), boot)?;
        let state = Self::recover_or_create(dir.as_ref(), options).inspect_err(|e| {
            // The previous process's unsynced pages may have failed to reach the disk in the background:
            // this start's sync reports it once, and the next start in this boot must not trust them.
            if sync_failure::is_sync_failure(e) {
                sync_failure::record(dir.as_ref(), boot, &e.to_string());
            }
        })?;
        let state = Arc::new(Mutex::new(state));
        let stats = Arc::new(SyncStats::default());
        let marker = FailureMarker { dir: Arc::clone(&dir), boot: boot.into() };
        let flusher = flusher::start(Arc::clone(&state), Arc::clone(&stats), marker.clone())?;
        let wal = Self { dir, options, state, flusher, spare: Mutex::new(None), stats, marker };
        wal.create_ahead(wal.lock().tail_segment().seq + 1);
        Ok(wal)
    }

    /// The state recovered from `dir`, or that of a new log with an empty first segment.
    fn recover_or_create(dir: &dyn WalDir, options: WalOptions) -> io::Result<State> {
        Ok(match recovery::recover(dir)? {
            Some(state) => {
                // What the last process wrote and did not sync may be in the page cache only. It is synced
                // before anything counts on it: a leader's own entries are reported before their sync
                // (`node::durable_log`), and after a restart the whole log counts as durable.
                let mut state = state;
                sync_failure::sync(state.tail_segment().file.as_ref())?;
                state.synced_through = state.tail;
                state
            }
            None => {
                let file = dir.create(&segment_name(0), options.segment_bytes)?;
                let mut header = Vec::new();
                record::encode(&mut header, Kind::Meta, &meta_payload(&Meta::default()));
                file.write_all_at(&header, 0)?;
                file.sync_data()?;
                let mut state = State::default();
                state.segments.push_back(Segment {
                    seq: 0,
                    file,
                    len: options.segment_bytes,
                    last_index: None,
                });
                state.tail = header.len() as u64;
                state
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("the write-ahead log's lock is never poisoned")
    }

    /// The vote, committed id and purge point.
    pub fn meta(&self) -> Meta {
        self.lock().meta.clone()
    }

    /// The last entry's log id, else the last purged one.
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        self.lock().last_log_id()
    }

    /// Syncs done so far and the writers they covered (their ratio is the group-commit factor).
    pub fn sync_stats(&self) -> (u64, u64) {
        (self.stats.syncs.load(Ordering::Relaxed), self.stats.writers.load(Ordering::Relaxed))
    }

    /// Appends entries (log id and encoded entry); they are readable when this returns and durable when
    /// `done` is called.
    pub fn append(
        &self,
        entries: impl IntoIterator<Item = (LogId<NodeId>, Vec<u8>)>,
        done: Done,
    ) -> io::Result<()> {
        self.write(entry_records(entries), Some(done))
    }

    /// Appends entries like [`Wal::append`], but syncs them on the calling thread when no other writer
    /// waits for the flusher, and then calls `done` before returning. A follower appends one leader's
    /// message at a time and can answer nothing before it is durable, so handing the sync to the flusher
    /// thread and back only adds two thread wake-ups (on 2 busy cores, each can take a few hundred µs).
    pub fn append_and_sync(
        &self,
        entries: impl IntoIterator<Item = (LogId<NodeId>, Vec<u8>)>,
        done: Done,
    ) -> io::Result<()> {
        let records = entry_records(entries);
        let mut state = self.lock();
        if self.stats.queued.load(Ordering::Acquire) > 0 {
            drop(state);
            return self.write(records, Some(done));
        }
        self.write_held(&mut state, records)?;
        let result = sync_failure::sync(state.tail_segment().file.as_ref());
        match &result {
            Ok(()) => state.synced_through = state.tail,
            Err(e) => self.fail(&mut state, e),
        }
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.stats.writers.fetch_add(1, Ordering::Relaxed);
        // Called under the lock, so no later writer's callback can run first.
        done(result.as_ref().map(|_| ()).map_err(|e| io::Error::new(e.kind(), e.to_string())));
        result
    }

    /// Saves a vote; it is durable when `done` is called.
    pub fn save_vote(&self, vote: &Vote<NodeId>, done: Done) -> io::Result<()> {
        let mut payload = Vec::new();
        meta::put_vote(&mut payload, vote);
        self.write(vec![(Kind::Vote, payload)], Some(done))
    }

    /// Saves the committed log id without waiting for it to be durable (a lost one is learned again from
    /// the leader). The record is written at once, before openraft applies and answers, so a process
    /// killed after acknowledging a write restarts with that write committed and applies it again from
    /// its own log; only a power loss can drop the id, and then the entries stay in the log to be
    /// committed again.
    pub fn save_committed(&self, committed: Option<&LogId<NodeId>>) -> io::Result<()> {
        let mut payload = Vec::new();
        meta::put_optional_log_id(&mut payload, committed);
        self.write(vec![(Kind::Committed, payload)], None)
    }

    /// Voids every entry from index `from` on; durable when `done` is called.
    pub fn truncate(&self, from: u64, done: Done) -> io::Result<()> {
        self.write(vec![(Kind::Truncate, from.to_le_bytes().to_vec())], Some(done))
    }

    /// Purges every entry up to `log_id`; durable when `done` is called. The files go with
    /// [`Wal::remove_purged_segments`], which must wait for that.
    pub fn purge(&self, log_id: &LogId<NodeId>, done: Done) -> io::Result<()> {
        let mut payload = Vec::new();
        meta::put_log_id(&mut payload, log_id);
        self.write(vec![(Kind::Purge, payload)], Some(done))
    }

    /// Deletes the oldest segments that hold only purged entries (never the one being written); returns
    /// how many.
    pub fn remove_purged_segments(&self) -> io::Result<usize> {
        let removed: Vec<u64> = {
            let mut state = self.lock();
            let purged = state.meta.last_purged.map(|p| p.index);
            let mut removed = Vec::new();
            while state.segments.len() > 1
                && state.segments.front().is_some_and(|s| s.last_index.is_none_or(|i| Some(i) <= purged))
            {
                removed.push(state.segments.pop_front().expect("checked above").seq);
            }
            removed
        };
        for seq in &removed {
            self.dir.remove(&segment_name(*seq))?;
        }
        if !removed.is_empty() {
            self.dir.sync()?;
        }
        Ok(removed.len())
    }

    /// Bytes of the live entries with an index above `index` (the encoded entries, as appended).
    pub fn entry_bytes_after(&self, index: u64) -> u64 {
        let state = self.lock();
        state.entries.iter().filter(|l| l.log_id.index > index).map(|l| u64::from(l.len)).sum()
    }

    /// The entries with index in `start..end`, as log ids and the bytes appended with them.
    pub fn read(&self, start: u64, end: u64) -> io::Result<Vec<(LogId<NodeId>, Vec<u8>)>> {
        let spans: Vec<_> = {
            let state = self.lock();
            state.locations(start, end).map(|l| (*l, state.file(l.seq).map(Arc::clone))).collect()
        };
        let mut entries = Vec::with_capacity(spans.len());
        for (location, file) in spans {
            let file = file.ok_or_else(|| io::Error::other("an entry's segment is gone"))?;
            let mut bytes = vec![0u8; location.len as usize];
            file.read_exact_at(&mut bytes, location.offset)?;
            entries.push((location.log_id, bytes));
        }
        Ok(entries)
    }

    /// Writes `records` after the last one, applies them in memory, and queues `done` for the next sync.
    fn write(&self, records: Vec<(Kind, Vec<u8>)>, done: Option<Done>) -> io::Result<()> {
        let mut state = self.lock();
        self.write_held(&mut state, records)?;
        if let Some(done) = done {
            // Queued under the lock, so callbacks run in the order the records were written.
            self.stats.queued.fetch_add(1, Ordering::Release);
            if self.flusher.send(done).is_err() {
                self.stats.queued.fetch_sub(1, Ordering::Release);
                return Err(io::Error::other("the write-ahead log's flusher stopped"));
            }
        }
        Ok(())
    }

    /// Writes `records` under the held lock; a failure fails the log for good.
    fn write_held(&self, state: &mut State, records: Vec<(Kind, Vec<u8>)>) -> io::Result<()> {
        if let Some(why) = &state.failed {
            return Err(io::Error::other(format!("the write-ahead log failed earlier: {why}")));
        }
        let result = self.write_locked(state, records);
        if let Err(e) = &result {
            self.fail(state, e);
        }
        result
    }

    /// Fails the log for good after a write or sync that failed with `error`; a failed sync also leaves
    /// the marker that keeps the next open in this boot from trusting the page cache.
    fn fail(&self, state: &mut State, error: &io::Error) {
        if state.failed.is_none() {
            state.failed = Some(error.to_string());
            tracing::error!(%error, "write-ahead log: a write or sync failed; the log accepts no more writes");
            if sync_failure::is_sync_failure(error) {
                self.marker.leave(&error.to_string());
            }
        }
    }

    fn write_locked(&self, state: &mut State, records: Vec<(Kind, Vec<u8>)>) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut placed = Vec::with_capacity(records.len() + 1);
        let marker = (state.synced_through > state.marked_through).then(|| {
            state.marked_through = state.synced_through;
            (Kind::Synced, synced_payload(state.tail_segment().seq, state.synced_through))
        });
        for (kind, payload) in marker.into_iter().chain(records) {
            let frame = record::frame_len(payload.len()) as u64;
            if state.tail + buf.len() as u64 + frame > state.tail_segment().len {
                self.commit(state, &buf, std::mem::take(&mut placed))?;
                buf.clear();
                self.roll(state, frame)?;
            }
            placed.push((kind, buf.len() as u64, payload.len()));
            record::encode(&mut buf, kind, &payload);
        }
        self.commit(state, &buf, placed)
    }

    /// Writes `buf` at the tail and applies the records placed in it.
    fn commit(&self, state: &mut State, buf: &[u8], placed: Vec<(Kind, u64, usize)>) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let (seq, base) = (state.tail_segment().seq, state.tail);
        state.tail_segment().file.write_all_at(buf, base)?;
        state.tail = base + buf.len() as u64;
        for (kind, at, len) in placed {
            let start = at as usize + record::HEADER;
            state.apply(kind, &buf[start..start + len], seq, base + at)?;
        }
        Ok(())
    }

    /// Moves writing to a new segment with room for a record of `frame` bytes.
    fn roll(&self, state: &mut State, frame: u64) -> io::Result<()> {
        sync_failure::sync(state.tail_segment().file.as_ref())?;
        let seq = state.tail_segment().seq + 1;
        let mut header = Vec::new();
        record::encode(&mut header, Kind::Meta, &meta_payload(&state.meta));
        let len = self.options.segment_bytes.max(header.len() as u64 + frame);
        let spare = self.spare.lock().expect("never poisoned").take().and_then(|h| h.join().ok());
        let file = match spare {
            Some(Ok((spare_seq, file))) if spare_seq == seq && file.size()? >= len => file,
            _ => self.dir.create(&segment_name(seq), len)?,
        };
        file.write_all_at(&header, 0)?;
        state.segments.push_back(Segment { seq, file, len, last_index: None });
        state.tail = header.len() as u64;
        (state.synced_through, state.marked_through) = (0, 0);
        self.create_ahead(seq + 1);
        Ok(())
    }

    fn create_ahead(&self, seq: u64) {
        if !self.options.create_ahead {
            return;
        }
        let (dir, len) = (Arc::clone(&self.dir), self.options.segment_bytes);
        let spawned = std::thread::Builder::new()
            .name("wal-create-ahead".into())
            .spawn(move || dir.create(&segment_name(seq), len).map(|file| (seq, file)));
        if let Ok(handle) = spawned {
            *self.spare.lock().expect("never poisoned") = Some(handle);
        }
    }
}

fn meta_payload(meta: &Meta) -> Vec<u8> {
    let mut payload = Vec::new();
    meta::put_meta(&mut payload, meta);
    payload
}

/// Entries (log id and encoded entry) as the write-ahead log's records.
fn entry_records(entries: impl IntoIterator<Item = (LogId<NodeId>, Vec<u8>)>) -> Vec<(Kind, Vec<u8>)> {
    entries
        .into_iter()
        .map(|(log_id, bytes)| {
            let mut payload = Vec::with_capacity(state::ENTRY_PREFIX + bytes.len());
            meta::put_log_id(&mut payload, &log_id);
            payload.extend_from_slice(&bytes);
            (Kind::Entry, payload)
        })
        .collect()
}

/// A [`Kind::Synced`] record's payload: segment `seq` was synced through `offset`.
fn synced_payload(seq: u64, offset: u64) -> Vec<u8> {
    [seq.to_le_bytes(), offset.to_le_bytes()].concat()
}
