//! Cache entries: each key's head (what decides whose the entry is and whether it is live, and where its
//! row lies) in the [`EntryIndex`] (in memory; in sled's entries tree after a clean stop), its stored row
//! in the content log ([`super::contents`]).
//!
//! A head row is `0xFF | segment (u32) | offset (u64) | length (u32) | model version | tenant epoch | model
//! epoch | created (i64) | ttl (u64) | tenant length (u32) | tenant | model`, little-endian. The head of an
//! entry with cache tags begins with `0xFE` instead and ends `model length (u32) | model | tag count (u8) |
//! (tag length (u8) | tag)*`. A stored row (prost or JSON, as older binaries kept in the tree) never
//! begins with `0xFF` or `0xFE`, which as a prost tag would name wire type 7 or 6, and JSON begins with
//! `{`: a start after a clean stop of an older binary moves such rows into the log ([`adopt`]).
//!
//! Puts, sweeps, invalidations and hit counts read heads only; a read of the entry itself, a version
//! bump's refresh list, a snapshot and a digest read the row too.

use std::collections::BTreeMap;
use std::io;

use super::super::records::{EntryHead, StoredEntry};
use super::contents::{Contents, Pointer, Record};
use super::entry_index::EntryIndex;
use super::rows::Row;

/// The first byte of every head row without tags.
const HEAD_MARK: u8 = 0xFF;
/// The first byte of every head row with tags.
const TAGGED_HEAD_MARK: u8 = 0xFE;

/// Fixed-width bytes of a head row, before the tenant's and model's names.
const FIXED: usize = 1 + 4 + 8 + 4 + 8 * 5 + 4;

/// How many times a read follows a head whose segment a compaction removed meanwhile.
const MOVED_RETRIES: usize = 16;

/// The final row and head (`None`: removed) of each key a batch wrote.
pub type EntryWrites = BTreeMap<Vec<u8>, Option<(Vec<u8>, EntryHead)>>;

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("an entry's head does not decode: {what}"))
}

/// A head row: `head`, with its row at `at`.
pub fn encode(head: &EntryHead, at: Pointer) -> Vec<u8> {
    let tagged = !head.tags.is_empty();
    let tag_bytes: usize = head.tags.iter().map(|t| t.len() + 1).sum();
    let mut row = Vec::with_capacity(FIXED + head.tenant.len() + head.model.len() + 5 + tag_bytes);
    row.push(if tagged { TAGGED_HEAD_MARK } else { HEAD_MARK });
    row.extend_from_slice(&at.segment.to_le_bytes());
    row.extend_from_slice(&at.offset.to_le_bytes());
    row.extend_from_slice(&at.len.to_le_bytes());
    row.extend_from_slice(&head.model_version.to_le_bytes());
    row.extend_from_slice(&head.tenant_epoch.to_le_bytes());
    row.extend_from_slice(&head.model_epoch.to_le_bytes());
    row.extend_from_slice(&head.created_ms.to_le_bytes());
    row.extend_from_slice(&head.ttl_s.to_le_bytes());
    row.extend_from_slice(&(head.tenant.len() as u32).to_le_bytes());
    row.extend_from_slice(head.tenant.as_bytes());
    if tagged {
        row.extend_from_slice(&(head.model.len() as u32).to_le_bytes());
    }
    row.extend_from_slice(head.model.as_bytes());
    if tagged {
        // Tags are checked before they reach the log (at most 8, each at most 64 bytes).
        row.push(u8::try_from(head.tags.len()).expect("at most 8 tags"));
        for tag in &head.tags {
            row.push(u8::try_from(tag.len()).expect("tags of at most 64 bytes"));
            row.extend_from_slice(tag.as_bytes());
        }
    }
    row
}

/// Whether `row` is a head (not a stored row an older binary kept in the tree).
fn is_head(row: &[u8]) -> bool {
    matches!(row.first(), Some(&HEAD_MARK | &TAGGED_HEAD_MARK))
}

/// Where the row of the head row `row` lies.
pub fn pointer(row: &[u8]) -> io::Result<Pointer> {
    if !is_head(row) || row.len() < FIXED {
        return Err(invalid(format!("{} bytes", row.len())));
    }
    let word = |at: usize| u32::from_le_bytes(row[at..at + 4].try_into().expect("four bytes"));
    let long = |at: usize| u64::from_le_bytes(row[at..at + 8].try_into().expect("eight bytes"));
    Ok(Pointer { segment: word(1), offset: long(5), len: word(13) })
}

/// The head and row pointer of the head row `row`.
pub fn decode(row: &[u8]) -> io::Result<(EntryHead, Pointer)> {
    let at = pointer(row)?;
    let long = |at: usize| u64::from_le_bytes(row[at..at + 8].try_into().expect("eight bytes"));
    let tenant_len = u32::from_le_bytes(row[FIXED - 4..FIXED].try_into().expect("four bytes")) as usize;
    let names = &row[FIXED..];
    let name = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(invalid);
    let (tenant, rest) = names.split_at_checked(tenant_len).ok_or_else(|| invalid("names cut short"))?;
    let (model, tags) = if row[0] == TAGGED_HEAD_MARK {
        let (model, tags) = sized(rest, 4).ok_or_else(|| invalid("the model's name cut short"))?;
        (model, decode_tags(tags).ok_or_else(|| invalid("tags cut short"))?)
    } else {
        (rest, Vec::new())
    };
    let head = EntryHead {
        tenant: name(tenant)?,
        model: name(model)?,
        tags,
        model_version: long(17),
        tenant_epoch: long(25),
        model_epoch: long(33),
        created_ms: long(41) as i64,
        ttl_s: long(49),
    };
    Ok((head, at))
}

/// The `width`-byte little-endian length at the start of `bytes`, and the bytes it counts and those after.
fn sized(bytes: &[u8], width: usize) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_at_checked(width)?;
    let len = len.iter().rev().fold(0usize, |n, &b| n << 8 | usize::from(b));
    rest.split_at_checked(len)
}

/// The tags at the end of a tagged head: a count, then each tag with its one-byte length.
fn decode_tags(mut bytes: &[u8]) -> Option<Vec<String>> {
    let (&count, rest) = bytes.split_first()?;
    bytes = rest;
    let mut tags = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (tag, rest) = sized(bytes, 1)?;
        tags.push(String::from_utf8(tag.to_vec()).ok()?);
        bytes = rest;
    }
    bytes.is_empty().then_some(tags)
}

/// The head of the entry under `key`.
pub fn head(index: &EntryIndex, key: &[u8]) -> io::Result<Option<EntryHead>> {
    index.get(key).map(|row| Ok(decode(&row)?.0)).transpose()
}

/// The stored row under `key`, following its head into the log.
pub fn row(index: &EntryIndex, contents: &Contents, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
    for _ in 0..MOVED_RETRIES {
        let Some(head_row) = index.get(key) else { return Ok(None) };
        if let Some(row) = contents.read(key, pointer(&head_row)?)? {
            return Ok(Some(row));
        }
    }
    Err(io::Error::other(format!("the content of {:?} kept moving", String::from_utf8_lossy(key))))
}

/// The entry under `key`, head and row.
pub fn entry(index: &EntryIndex, contents: &Contents, key: &[u8]) -> io::Result<Option<StoredEntry>> {
    row(index, contents, key)?.map(|row| StoredEntry::from_row(&row)).transpose()
}

/// Every entry's key and stored row, in key order.
pub fn rows<'a>(
    index: &'a EntryIndex,
    contents: &'a Contents,
) -> impl Iterator<Item = io::Result<(Box<[u8]>, Vec<u8>)>> + 'a {
    index.iter().filter_map(move |(key, head_row)| {
        let found = (|| {
            let stored = match contents.read(&key, pointer(&head_row)?)? {
                Some(row) => Some(row),
                // Moved by a compaction since the scan read its head.
                None => row(index, contents, &key)?,
            };
            Ok(stored.map(|row| (key, row)))
        })();
        found.transpose()
    })
}

/// Writes a batch's entries: their rows to the log in one append, then their heads to the index.
pub fn write(index: &EntryIndex, contents: &Contents, writes: &EntryWrites) -> io::Result<()> {
    let stored: Vec<(&[u8], &[u8])> = writes
        .iter()
        .filter_map(|(key, write)| write.as_ref().map(|(row, _)| (key.as_slice(), row.as_slice())))
        .collect();
    let mut pointers = contents.append(&stored)?.into_iter();
    let mut live = Vec::with_capacity(stored.len());
    let changes = writes
        .iter()
        .map(|(key, write)| {
            let head_row = write.as_ref().map(|(_, head)| {
                let at = pointers.next().expect("a pointer for every stored row");
                live.push(at);
                encode(head, at)
            });
            (key.as_slice(), head_row)
        })
        .collect();
    contents.count_live(live);
    // A row an older binary kept in the tree ([`adopt`]) has no place in the log.
    let old = index.update(changes).into_iter().flatten().filter(|old| is_head(old));
    contents.count_dead(old.map(|old| pointer(&old)).collect::<io::Result<Vec<_>>>()?);
    Ok(())
}

/// Compacts the segment most worth it, if any: its live records are copied to the end of the log and
/// their heads moved, then it is removed. Runs as a write to the trees.
pub fn compact(index: &EntryIndex, contents: &Contents) -> io::Result<()> {
    let Some(segment) = contents.worth_compacting() else { return Ok(()) };
    let mut moved = EntryWrites::new();
    for Record { key, row, at } in contents.records(segment)? {
        let Some(head_row) = index.get(&key) else { continue };
        let (head, current) = decode(&head_row)?;
        if current == at {
            moved.insert(key, Some((row, head)));
        }
    }
    let count = moved.len();
    write(index, contents, &moved)?;
    contents.remove(segment)?;
    tracing::debug!(segment, moved = count, "compacted a content segment");
    Ok(())
}

/// At a start after a clean stop: counts the live bytes of every segment from the heads, and moves the
/// rows an older binary kept in the tree into the log. `InvalidData` when a head points past what the
/// log holds.
pub fn adopt(index: &EntryIndex, contents: &Contents) -> io::Result<()> {
    let mut inline = EntryWrites::new();
    for (key, row) in index.iter() {
        if is_head(&row) {
            let at = pointer(&row)?;
            if !contents.holds(at) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the row of {:?} at {at:?} is not in the content log",
                        String::from_utf8_lossy(&key)
                    ),
                ));
            }
            contents.count_live([at]);
        } else {
            let stored = StoredEntry::from_row(&row)?;
            inline.insert(key.to_vec(), Some((stored.to_row()?, EntryHead::of(&stored))));
        }
    }
    if !inline.is_empty() {
        write(index, contents, &inline)?;
        tracing::info!(entries = inline.len(), "entry rows moved from the tree to the content log");
    }
    Ok(())
}

/// A snapshot's entries, their rows in the content log ([`stage`]).
pub struct Staged {
    /// Each entry's key and head row, for the index.
    pub heads: Vec<(Vec<u8>, Vec<u8>)>,
    /// Where the rows lie.
    pointers: Vec<Pointer>,
    /// The log's segments before them, to go once the heads are written ([`replaced`]).
    older: Vec<u32>,
}

/// Rows of entries written to the content log at once by a [`Stager`].
const STAGE_CHUNK: usize = 4096;

/// Writes a snapshot's entry rows to a new part of the content log as they are read, [`STAGE_CHUNK`]
/// at a time, keeping only their heads: an install holds the heads and one chunk of rows in memory,
/// not the whole snapshot. The older part of the log stays until the heads are written ([`replaced`]).
pub struct Stager<'a> {
    contents: &'a Contents,
    chunk: Vec<(Vec<u8>, Vec<u8>)>,
    staged: Staged,
}

impl<'a> Stager<'a> {
    /// Starts a new part of `contents`' log.
    pub fn begin(contents: &'a Contents) -> io::Result<Self> {
        let older = contents.seal()?;
        let staged = Staged { heads: Vec::new(), pointers: Vec::new(), older };
        Ok(Self { contents, chunk: Vec::with_capacity(STAGE_CHUNK), staged })
    }

    /// Stages one entry's stored row under `key`.
    pub fn push(&mut self, key: Vec<u8>, row: Vec<u8>) -> io::Result<()> {
        self.chunk.push((key, row));
        if self.chunk.len() >= STAGE_CHUNK {
            self.write_chunk()?;
        }
        Ok(())
    }

    fn write_chunk(&mut self) -> io::Result<()> {
        let mut stored = Vec::with_capacity(self.chunk.len());
        let mut heads = Vec::with_capacity(self.chunk.len());
        for (key, row) in &self.chunk {
            heads.push(EntryHead::of(&StoredEntry::from_row(row)?));
            stored.push((key.as_slice(), row.as_slice()));
        }
        for (((key, _), head), at) in self.chunk.iter().zip(heads).zip(self.contents.append(&stored)?) {
            self.staged.heads.push((key.clone(), encode(&head, at)));
            self.staged.pointers.push(at);
        }
        self.chunk.clear();
        Ok(())
    }

    /// Writes what is left and returns the heads to index.
    pub fn finish(mut self) -> io::Result<Staged> {
        if !self.chunk.is_empty() {
            self.write_chunk()?;
        }
        Ok(self.staged)
    }
}

/// Once a snapshot's heads are written ([`Stager`]): counts their rows live and removes the older segments.
pub fn replaced(contents: &Contents, staged: &Staged) -> io::Result<()> {
    for &segment in &staged.older {
        contents.remove(segment)?;
    }
    contents.count_live(staged.pointers.iter().copied());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> EntryHead {
        EntryHead {
            tenant: "acme".into(),
            model: "m-1".into(),
            model_version: 3,
            tenant_epoch: 4,
            model_epoch: 5,
            created_ms: -6,
            ttl_s: 7,
            tags: Vec::new(),
        }
    }

    #[test]
    fn a_head_row_decodes_to_what_was_encoded() {
        let at = Pointer { segment: 9, offset: 1 << 40, len: 1234 };
        let row = encode(&head(), at);
        assert_eq!(decode(&row).expect("decode"), (head(), at));
        assert_eq!(pointer(&row).expect("pointer"), at);
        assert!(decode(&row[..FIXED - 1]).is_err(), "cut short");
        assert!(decode(b"{\"entry\":1}").is_err(), "a stored row is not a head");
        let mut bad = row.clone();
        bad[FIXED - 4] = 200;
        assert!(decode(&bad).is_err(), "a tenant length past the end");
        let tagged = EntryHead { tags: vec!["region:eu".into(), "stock:AAPL".into()], ..head() };
        let row = encode(&tagged, at);
        assert_eq!(row[0], TAGGED_HEAD_MARK);
        assert_eq!(decode(&row).expect("decode"), (tagged, at));
        assert_eq!(pointer(&row).expect("pointer"), at);
        for cut in 1..12 {
            assert!(decode(&row[..row.len() - cut]).is_err(), "tags cut short by {cut}");
        }
    }

    fn put(index: &EntryIndex, contents: &Contents, puts: &[(String, String)]) {
        let writes = puts
            .iter()
            .map(|(key, content)| {
                let entry = StoredEntry::sample(key, "acme", content);
                (key.as_bytes().to_vec(), Some((entry.to_row().expect("row"), EntryHead::of(&entry))))
            })
            .collect();
        write(index, contents, &writes).expect("write");
        compact(index, contents).expect("compact");
    }

    #[test]
    fn overwrites_are_compacted_away_and_every_entry_reads_its_latest_row_across_a_reopen() {
        let dir = std::env::temp_dir().join(format!("entry-heads-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree("entries").expect("tree");
        let index = EntryIndex::default();
        let contents = Contents::open(&dir).expect("open").with_segment_bytes(8 << 10);
        let content = |key: usize, round: usize| format!("{key} in round {round} {}", "x".repeat(200));
        for round in 0..40 {
            let puts: Vec<_> = (0..20).map(|key| (format!("k{key}"), content(key, round))).collect();
            put(&index, &contents, &puts);
        }
        let (size, live) = contents.sizes();
        assert!(size < 4 * live + 3 * (8 << 10), "garbage is compacted: {size} bytes for {live} live");
        assert!(contents.worth_compacting().is_none());
        let latest = |index: &EntryIndex, contents: &Contents| {
            (0..20).all(|key| {
                let found = entry(index, contents, format!("k{key}").as_bytes()).expect("read");
                found.map(|s| s.entry.content) == Some(content(key, 39))
            })
        };
        assert!(latest(&index, &contents));
        let all: Vec<_> = rows(&index, &contents).collect::<io::Result<_>>().expect("rows");
        assert_eq!(all.len(), 20);
        contents.sync().expect("sync");
        index.write_back(&tree).expect("write back");
        drop((contents, index));
        let contents = Contents::open(&dir).expect("reopen");
        let index = EntryIndex::load(&tree).expect("load");
        adopt(&index, &contents).expect("adopt");
        assert_eq!(contents.sizes().1, live, "live bytes are counted again from the heads");
        assert!(latest(&index, &contents));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_staged_snapshot_replaces_the_log_once_its_heads_are_written() {
        let dir = std::env::temp_dir().join(format!("entry-heads-stage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let index = EntryIndex::default();
        let contents = Contents::open(&dir).expect("open");
        put(&index, &contents, &[("old".into(), "before".into())]);
        let new = StoredEntry::sample("new", "acme", "from the snapshot");
        // More rows than one chunk, so that the stager writes as it goes.
        let mut stager = Stager::begin(&contents).expect("begin");
        stager.push(b"new".to_vec(), new.to_row().expect("row")).expect("push");
        let more = STAGE_CHUNK + 2;
        for i in 0..more {
            let entry = StoredEntry::sample(&format!("k{i}"), "acme", "from the snapshot");
            stager.push(format!("k{i}").into_bytes(), entry.to_row().expect("row")).expect("push");
        }
        assert!(stager.chunk.len() < STAGE_CHUNK, "whole chunks are written as they fill");
        let mut staged = stager.finish().expect("finish");
        assert_eq!(staged.heads.len(), more + 1);
        assert!(entry(&index, &contents, b"old").expect("read").is_some(), "readable until replaced");
        index.replace(std::mem::take(&mut staged.heads));
        replaced(&contents, &staged).expect("replaced");
        assert_eq!(entry(&index, &contents, b"new").expect("read"), Some(new));
        let last = format!("k{}", more - 1);
        assert_eq!(entry(&index, &contents, last.as_bytes()).expect("read").map(|e| e.entry.key), Some(last));
        assert_eq!(entry(&index, &contents, b"old").expect("read"), None);
        let (size, live) = contents.sizes();
        assert_eq!(size, live, "only the snapshot's rows are left");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
