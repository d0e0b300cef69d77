//! What the write-ahead log knows in memory: its segments, where each live entry lies, and the
//! [`Meta`]. Replay at startup and every live write go through the same [`State::apply`], so the state
//! after a restart is the state before it.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use openraft::LogId;

use super::fs::WalFile;
use super::meta::{invalid, Meta, Reader};
use super::record::{Kind, HEADER};
use crate::node::NodeId;

/// Bytes of an entry record's payload before the entry itself: its log id.
pub const ENTRY_PREFIX: usize = 24;

/// The file name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{seq:016x}.wal")
}

/// The sequence number in a segment's file name.
pub fn segment_seq(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".wal")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
}

/// One segment file.
pub struct Segment {
    /// Its sequence number (segments are written in this order).
    pub seq: u64,
    /// The open file.
    pub file: Arc<dyn WalFile>,
    /// Its length (the space records may use).
    pub len: u64,
    /// The highest entry index written to it, if any.
    pub last_index: Option<u64>,
}

/// Where one entry lies.
#[derive(Clone, Copy, Debug)]
pub struct Location {
    /// Its log id.
    pub log_id: LogId<NodeId>,
    /// Its segment.
    pub seq: u64,
    /// The offset of the encoded entry in the segment.
    pub offset: u64,
    /// The encoded entry's length.
    pub len: u32,
}

/// The log in memory.
#[derive(Default)]
pub struct State {
    /// Segments by ascending sequence; the last one is written to.
    pub segments: VecDeque<Segment>,
    /// Where the next record goes in the last segment.
    pub tail: u64,
    /// How far the last segment is known synced (a completed sync started after writes up to here).
    pub synced_through: u64,
    /// The `synced_through` the last [`Kind::Synced`] marker in the last segment stated.
    pub marked_through: u64,
    /// Live entries, consecutive by index.
    pub entries: VecDeque<Location>,
    /// Vote, committed and last purged.
    pub meta: Meta,
    /// Set when a sync failed: nothing written since can be trusted, so nothing more is accepted.
    pub failed: Option<String>,
}

impl State {
    /// Applies one record, found at `offset` of segment `seq`, to the in-memory state.
    pub fn apply(&mut self, kind: Kind, payload: &[u8], seq: u64, offset: u64) -> io::Result<()> {
        let mut reader = Reader::new(payload);
        match kind {
            Kind::Meta => {
                self.meta = reader.meta()?;
                self.drop_purged();
            }
            Kind::Vote => self.meta.vote = Some(reader.vote()?),
            Kind::Committed => self.meta.committed = reader.optional_log_id()?,
            Kind::Truncate => self.truncate(reader.u64()?),
            Kind::Purge => {
                let log_id = reader.log_id()?;
                if self.meta.last_purged.is_none_or(|p| p.index < log_id.index) {
                    self.meta.last_purged = Some(log_id);
                }
                self.drop_purged();
            }
            Kind::Synced => {}
            Kind::Entry => {
                let log_id = reader.log_id()?;
                let len = reader.rest().len() as u32;
                let offset = offset + (HEADER + ENTRY_PREFIX) as u64;
                self.insert(Location { log_id, seq, offset, len })?;
            }
        }
        Ok(())
    }

    fn insert(&mut self, location: Location) -> io::Result<()> {
        let index = location.log_id.index;
        if self.meta.last_purged.is_some_and(|p| index <= p.index) {
            return Ok(());
        }
        self.truncate(index);
        // The first live entry may lie past the purge point known so far: segments before a purge are
        // deleted while the purge record itself comes later in the log. `check_start` checks the start once
        // the whole log is read.
        if let Some(last) = self.entries.back() {
            if index != last.log_id.index + 1 {
                return Err(invalid(format!(
                    "the log jumps from entry {} to entry {index}: a hole",
                    last.log_id.index
                )));
            }
        }
        if let Some(segment) = self.segments.iter_mut().rev().find(|s| s.seq == location.seq) {
            segment.last_index = Some(segment.last_index.map_or(index, |i| i.max(index)));
        }
        self.entries.push_back(location);
        Ok(())
    }

    fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|last| last.log_id.index >= from) {
            self.entries.pop_back();
        }
    }

    fn drop_purged(&mut self) {
        let Some(purged) = self.meta.last_purged else { return };
        while self.entries.front().is_some_and(|first| first.log_id.index <= purged.index) {
            self.entries.pop_front();
        }
    }

    /// Checks that the live entries start right after the purge point.
    pub fn check_start(&self) -> io::Result<()> {
        match (self.entries.front(), self.meta.last_purged) {
            (Some(first), Some(purged)) if first.log_id.index != purged.index + 1 => Err(invalid(format!(
                "the log starts at entry {} but is purged only up to {}: entries are missing",
                first.log_id.index, purged.index
            ))),
            _ => Ok(()),
        }
    }

    /// The last entry's log id, else the last purged one.
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        self.entries.back().map(|l| l.log_id).or(self.meta.last_purged)
    }

    /// The entries with index in `start..end`.
    pub fn locations(&self, start: u64, end: u64) -> impl Iterator<Item = &Location> {
        let first = self.entries.front().map_or(0, |l| l.log_id.index);
        let skip = start.saturating_sub(first) as usize;
        self.entries.iter().skip(skip).take_while(move |l| l.log_id.index < end)
    }

    /// The file of segment `seq`.
    pub fn file(&self, seq: u64) -> Option<&Arc<dyn WalFile>> {
        self.segments.iter().rev().find(|s| s.seq == seq).map(|s| &s.file)
    }

    /// The segment written to.
    pub fn tail_segment(&self) -> &Segment {
        self.segments.back().expect("a write-ahead log always has a segment")
    }
}
