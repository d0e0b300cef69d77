//! The content log: where the state machine keeps each cache entry's stored row, append-only, while sled
//! keeps only the entry's head and where its row lies ([`super::entry_heads`]).
//!
//! sled 0.34 splits a leaf after 16 items and rewrites a whole node when it splits or consolidates one,
//! so with 1 KiB entries in the tree every put copied and logged about 8 KB of nodes, and splits were
//! half of applying a proposal. With heads of about 80 bytes in the tree, those copies are small; the row
//! is written once, here, in one `write` per applied batch.
//!
//! The log is a directory of segment files (`<n>.seg`). A record is `len (u32) | crc32 (u32) | key length
//! (u32) | key | row`, little-endian, `len` counting what follows the checksum, which covers the same.
//! Appends go to the newest segment until it passes [`SEGMENT_BYTES`]; a start appends to a new one.
//!
//! Durability is the trees': nothing here is synced until a clean stop ([`Contents::sync`]), and after any
//! other stop the state machine starts again from its snapshot, which carries whole rows, into an empty
//! log ([`Contents::seal`], then the older segments go).
//!
//! Garbage: a row overwritten or removed stays in its segment. The log counts each segment's live bytes
//! (rebuilt at start from the heads), and a sealed segment less than half live is compacted: its live
//! records are copied to the end and the segment removed ([`super::entry_heads::compact`]). A reader that
//! found a head pointing into a removed segment reads the head again.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// A segment takes appends until it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 16 << 20;

/// Where one record lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pointer {
    /// The segment's number.
    pub segment: u32,
    /// The record's first byte in it.
    pub offset: u64,
    /// The record's length, header included.
    pub len: u32,
}

/// One record of a segment, read back.
#[derive(Debug)]
pub struct Record {
    /// The entry's key.
    pub key: Vec<u8>,
    /// Its stored row.
    pub row: Vec<u8>,
    /// Where the record lies.
    pub at: Pointer,
}

/// One segment: its file and its byte counts.
#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    /// Bytes written.
    size: u64,
    /// Bytes of records some head points to.
    live: u64,
}

/// The segments, by number; the last one takes appends.
#[derive(Debug, Default)]
struct Segments {
    by_number: BTreeMap<u32, Segment>,
    /// Segments written since the log was opened (to sync at a clean stop).
    written: Vec<u32>,
}

/// The content log of one state machine. Appends and accounting come from the single writer of the
/// trees; reads from any thread.
#[derive(Debug)]
pub struct Contents {
    dir: PathBuf,
    /// A segment takes appends until it holds this many bytes ([`SEGMENT_BYTES`]; less in tests).
    segment_bytes: u64,
    segments: RwLock<Segments>,
    /// Serialises appends (the trees have one writer; this keeps the log right without relying on it).
    appending: Mutex<()>,
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn segment_number(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.strip_suffix(".seg")?.parse().ok()
}

/// A record's bytes: header, key and row.
pub fn encode_record(key: &[u8], row: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "a content record over 4 GiB");
    let body_len = u32::try_from(4 + key.len() + row.len()).map_err(|_| too_big())?;
    let key_len = u32::try_from(key.len()).map_err(|_| too_big())?;
    let start = out.len();
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(row);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The key and row of the record at the start of `bytes`, and its length; `InvalidData` when it is cut
/// short or its checksum fails.
pub fn decode_record(bytes: &[u8]) -> io::Result<(&[u8], &[u8], usize)> {
    let word = |at: usize| -> io::Result<u32> {
        let b = bytes.get(at..at + 4).ok_or_else(|| corrupt("a content record is cut short".into()))?;
        Ok(u32::from_le_bytes(b.try_into().expect("four bytes")))
    };
    let body_len = word(0)? as usize;
    let crc = word(4)?;
    let body = bytes.get(8..8 + body_len).ok_or_else(|| corrupt("a content record is cut short".into()))?;
    if crc32fast::hash(body) != crc {
        return Err(corrupt("a content record fails its checksum".into()));
    }
    let key_len = word(8)? as usize;
    let key = body.get(4..4 + key_len).ok_or_else(|| corrupt("a content record's key overruns it".into()))?;
    Ok((key, &body[4 + key_len..], 8 + body_len))
}

impl Contents {
    /// Opens the log in `dir` (created if missing); appends go to a new segment.
    pub fn open(dir: &Path) -> io::Result<Self> {
        crate::wal::fs::create_dir_synced(dir)?;
        let mut segments = Segments::default();
        for item in fs::read_dir(dir)? {
            let path = item?.path();
            let Some(number) = segment_number(&path) else { continue };
            let file = File::open(&path)?;
            let size = file.metadata()?.len();
            segments.by_number.insert(number, Segment { file: Arc::new(file), size, live: 0 });
        }
        let contents = Self {
            dir: dir.to_owned(),
            segment_bytes: SEGMENT_BYTES,
            segments: RwLock::new(segments),
            appending: Mutex::new(()),
        };
        contents.start_segment()?;
        Ok(contents)
    }

    /// The same log, with segments of `bytes` (tests that fill several).
    #[cfg(test)]
    pub fn with_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    fn path_of(&self, number: u32) -> PathBuf {
        self.dir.join(format!("{number:08}.seg"))
    }

    fn read_segments(&self) -> std::sync::RwLockReadGuard<'_, Segments> {
        self.segments.read().expect("the content log's lock is never poisoned")
    }

    fn write_segments(&self) -> std::sync::RwLockWriteGuard<'_, Segments> {
        self.segments.write().expect("the content log's lock is never poisoned")
    }

    /// Starts a new, empty segment after the others, which takes the appends from now on.
    fn start_segment(&self) -> io::Result<()> {
        let number = self.read_segments().by_number.keys().next_back().map_or(1, |n| n + 1);
        let file = OpenOptions::new().read(true).append(true).create_new(true).open(self.path_of(number))?;
        let mut segments = self.write_segments();
        segments.by_number.insert(number, Segment { file: Arc::new(file), size: 0, live: 0 });
        segments.written.push(number);
        Ok(())
    }

    /// Appends `records` (key and row each) in one write, and returns where each lies. Nothing counts as
    /// live until [`Contents::count_live`] says a head points to it.
    pub fn append(&self, records: &[(&[u8], &[u8])]) -> io::Result<Vec<Pointer>> {
        let _appending = self.appending.lock().expect("the content log's lock is never poisoned");
        let (number, file, mut offset) = {
            let segments = self.read_segments();
            let (&number, active) =
                segments.by_number.iter().next_back().expect("the log always has a segment to append to");
            (number, active.file.clone(), active.size)
        };
        let mut bytes = Vec::new();
        let mut pointers = Vec::with_capacity(records.len());
        for (key, row) in records {
            let before = bytes.len();
            encode_record(key, row, &mut bytes)?;
            let len = (bytes.len() - before) as u32;
            pointers.push(Pointer { segment: number, offset, len });
            offset += u64::from(len);
        }
        if let Err(e) = (&*file).write_all(&bytes) {
            // Part of it may be written: later appends go to a new segment, at offsets that are right.
            self.start_segment()?;
            return Err(e);
        }
        let full = {
            let mut segments = self.write_segments();
            let active = segments.by_number.get_mut(&number).expect("the active segment");
            active.size = offset;
            offset >= self.segment_bytes
        };
        if full {
            self.start_segment()?;
        }
        Ok(pointers)
    }

    /// The row of the record at `at`, which must be `key`'s; `None` when its segment was removed (a
    /// compaction moved it: read the head again).
    pub fn read(&self, key: &[u8], at: Pointer) -> io::Result<Option<Vec<u8>>> {
        let Some(file) = self.read_segments().by_number.get(&at.segment).map(|s| s.file.clone()) else {
            return Ok(None);
        };
        let mut bytes = vec![0; at.len as usize];
        file.read_exact_at(&mut bytes, at.offset).map_err(|e| {
            corrupt(format!("content of {:?} at {at:?} is unreadable: {e}", String::from_utf8_lossy(key)))
        })?;
        let (found, row, _) = decode_record(&bytes)?;
        if found != key {
            return Err(corrupt(format!(
                "content at {at:?} belongs to {:?}, not {:?}",
                String::from_utf8_lossy(found),
                String::from_utf8_lossy(key)
            )));
        }
        let header = bytes.len() - row.len();
        bytes.drain(..header);
        Ok(Some(bytes))
    }

    /// Whether the log holds bytes at `at` (its segment is there and long enough).
    pub fn holds(&self, at: Pointer) -> bool {
        let end = at.offset.saturating_add(u64::from(at.len));
        self.read_segments().by_number.get(&at.segment).is_some_and(|s| end <= s.size)
    }

    /// Heads now point to the records at `pointers`.
    pub fn count_live(&self, pointers: impl IntoIterator<Item = Pointer>) {
        let mut segments = self.write_segments();
        for at in pointers {
            if let Some(segment) = segments.by_number.get_mut(&at.segment) {
                segment.live += u64::from(at.len);
            }
        }
    }

    /// No head points to the records at `pointers` any more.
    pub fn count_dead(&self, pointers: impl IntoIterator<Item = Pointer>) {
        let mut segments = self.write_segments();
        for at in pointers {
            if let Some(segment) = segments.by_number.get_mut(&at.segment) {
                segment.live = segment.live.saturating_sub(u64::from(at.len));
            }
        }
    }

    /// The sealed segment most worth compacting: the least live of those at most half live.
    pub fn worth_compacting(&self) -> Option<u32> {
        let segments = self.read_segments();
        let active = *segments.by_number.keys().next_back()?;
        segments
            .by_number
            .iter()
            .filter(|&(&n, s)| n != active && s.live * 2 <= s.size)
            .min_by_key(|(_, s)| s.live)
            .map(|(&n, _)| n)
    }

    /// Every record in `segment`.
    pub fn records(&self, segment: u32) -> io::Result<Vec<Record>> {
        let Some((file, size)) =
            self.read_segments().by_number.get(&segment).map(|s| (s.file.clone(), s.size))
        else {
            return Ok(Vec::new());
        };
        let mut bytes = vec![0; size as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let mut records = Vec::new();
        let mut offset = 0;
        while offset < bytes.len() {
            let (key, row, len) = decode_record(&bytes[offset..])
                .map_err(|e| corrupt(format!("content segment {segment} at {offset}: {e}")))?;
            let at = Pointer { segment, offset: offset as u64, len: len as u32 };
            records.push(Record { key: key.to_vec(), row: row.to_vec(), at });
            offset += len;
        }
        Ok(records)
    }

    /// Removes `segment` (no head points into it). A reader holding its file still reads it.
    pub fn remove(&self, segment: u32) -> io::Result<()> {
        let removed = {
            let mut segments = self.write_segments();
            segments.written.retain(|&n| n != segment);
            segments.by_number.remove(&segment)
        };
        if removed.is_some() {
            fs::remove_file(self.path_of(segment))?;
        }
        Ok(())
    }

    /// Starts a new segment for the appends from now on, and returns the segments before it (to
    /// [`Contents::remove`] once nothing points into them).
    pub fn seal(&self) -> io::Result<Vec<u32>> {
        let _appending = self.appending.lock().expect("the content log's lock is never poisoned");
        let older = self.read_segments().by_number.keys().copied().collect();
        self.start_segment()?;
        Ok(older)
    }

    /// Makes what was appended since the log was opened durable, for a clean stop.
    pub fn sync(&self) -> io::Result<()> {
        let files: Vec<Arc<File>> = {
            let segments = self.read_segments();
            segments
                .written
                .iter()
                .filter_map(|n| segments.by_number.get(n))
                .map(|s| s.file.clone())
                .collect()
        };
        for file in files {
            file.sync_data()?;
        }
        File::open(&self.dir)?.sync_all()
    }

    /// Bytes in the log, and of those, bytes some head points to.
    pub fn sizes(&self) -> (u64, u64) {
        let segments = self.read_segments();
        segments.by_number.values().fold((0, 0), |(size, live), s| (size + s.size, live + s.live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("contents-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn appended_rows_read_back_by_their_key_and_survive_a_reopen() {
        let dir = dir("reopen");
        let log = Contents::open(&dir).expect("open");
        let at = log.append(&[(b"a", b"first row"), (b"bb", b"second")]).expect("append");
        assert_eq!(log.read(b"a", at[0]).expect("read").as_deref(), Some(&b"first row"[..]));
        assert_eq!(log.read(b"bb", at[1]).expect("read").as_deref(), Some(&b"second"[..]));
        assert!(log.read(b"a", at[1]).is_err(), "a record read under another key is refused");
        log.sync().expect("sync");
        drop(log);
        let log = Contents::open(&dir).expect("reopen");
        assert_eq!(log.read(b"bb", at[1]).expect("read").as_deref(), Some(&b"second"[..]));
        let later = log.append(&[(b"c", b"x")]).expect("append");
        assert_ne!(later[0].segment, at[0].segment, "a start appends to a new segment");
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_flipped_bit_or_a_cut_record_is_refused() {
        let mut bytes = Vec::new();
        encode_record(b"key", b"row", &mut bytes).expect("encode");
        assert_eq!(decode_record(&bytes).expect("decode").0, b"key");
        assert!(decode_record(&bytes[..bytes.len() - 1]).is_err());
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(decode_record(&bytes).is_err());
    }

    #[test]
    fn a_sealed_segment_at_most_half_live_is_worth_compacting_and_goes_when_removed() {
        let dir = dir("compact");
        let log = Contents::open(&dir).expect("open");
        let row = vec![7u8; 1 << 20];
        let mut pointers = Vec::new();
        while pointers.iter().all(|p: &Pointer| p.segment == pointers[0].segment) {
            let at = log.append(&[(b"k", &row)]).expect("append")[0];
            log.count_live([at]);
            pointers.push(at);
        }
        assert_eq!(log.worth_compacting(), None, "every record is live");
        let sealed = pointers[0].segment;
        let in_sealed: Vec<_> = pointers.iter().filter(|p| p.segment == sealed).copied().collect();
        for at in &in_sealed[..in_sealed.len() / 2 + 1] {
            log.count_dead([*at]);
        }
        assert_eq!(log.worth_compacting(), Some(sealed));
        assert_eq!(log.records(sealed).expect("records").len(), in_sealed.len());
        log.remove(sealed).expect("remove");
        assert_eq!(log.read(b"k", pointers[0]).expect("read"), None, "a removed segment reads as moved");
        assert!(!log.path_of(sealed).exists());
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
