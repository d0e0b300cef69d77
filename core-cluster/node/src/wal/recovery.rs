//! Opening a write-ahead log: replay every segment in order, cut a torn tail, refuse damage elsewhere.
//!
//! Segments before the last one that holds data were synced whole before the next one was started, so
//! any record there that fails its check is corruption. In the last one, a record cut short by the crash
//! (see [`record`](super::record)) ends the log: it and everything after it were never acknowledged, and
//! they are zeroed (and synced) so that new records follow the last good one. Unused segments after the
//! last written one (created ahead of time) and half-created `.tmp` files are removed.
//!
//! A record that reads as torn, or a header of zeros with written bytes after it, can also be damage to
//! a record that *was* synced (a latent sector error that reads back as zeros). Records written after a
//! torn one in the same unsynced stretch are legitimate, so a valid record after it proves nothing; a
//! [`Kind::Synced`] marker after it that states a sync through a later offset does. Then the log refuses
//! to open rather than cut acknowledged entries and votes.

use std::io;
use std::sync::Arc;

use super::fs::WalDir;
use super::meta::invalid;
use super::record::{self, Kind, Scanned, ALIGN, HEADER};
use super::state::{segment_name, segment_seq, Segment, State};

/// Replays the log in `dir` into a [`State`]; `None` when the directory holds no segment yet.
pub fn recover(dir: &dyn WalDir) -> io::Result<Option<State>> {
    let mut seqs = Vec::new();
    let mut removed = false;
    for name in dir.list()? {
        if name.ends_with(".tmp") {
            dir.remove(&name)?;
            removed = true;
        } else if let Some(seq) = segment_seq(&name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    let mut images = Vec::with_capacity(seqs.len());
    for &seq in &seqs {
        let file = dir.open(&segment_name(seq))?;
        let len = file.size()?;
        let mut image = vec![0u8; len as usize];
        file.read_exact_at(&mut image, 0)?;
        images.push((seq, file, image));
    }
    // Segments after the last one with data were created ahead and never used, or their first records
    // were never synced (a roll syncs the segment it leaves, not the one it starts). One whose header
    // reads as zeros but holds a marker of a completed sync was damaged, not unused.
    while images.len() > 1 && images.last().is_some_and(|(_, _, image)| !starts_with_record(image)) {
        let (seq, _, image) = images.last().expect("checked above");
        if let Some(through) = synced_past(&image[..written_end(image)], 0, *seq) {
            return Err(invalid(format!(
                "{}: its header reads as zeros, yet a record in it says it was synced through offset {through}",
                segment_name(*seq)
            )));
        }
        let (seq, _, _) = images.pop().expect("checked above");
        dir.remove(&segment_name(seq))?;
        removed = true;
    }
    if removed {
        dir.sync()?;
    }
    if images.is_empty() {
        return Ok(None);
    }

    let mut state = State::default();
    let last = images.len() - 1;
    for (position, (seq, file, image)) in images.into_iter().enumerate() {
        let name = segment_name(seq);
        state.segments.push_back(Segment {
            seq,
            file: Arc::clone(&file),
            len: image.len() as u64,
            last_index: None,
        });
        let mut offset = 0usize;
        let cut = loop {
            match record::scan(&image, offset) {
                Scanned::Record { kind, payload, next } => {
                    state
                        .apply(kind, payload, seq, offset as u64)
                        .map_err(|e| invalid(format!("{name} at offset {offset}: {e}")))?;
                    offset = next;
                }
                Scanned::End => break false,
                Scanned::Torn if position == last => break true,
                Scanned::Torn => {
                    return Err(invalid(format!(
                        "{name}: a torn record at offset {offset} before the last segment"
                    )))
                }
                Scanned::Corrupt(why) => return Err(invalid(format!("{name}: {why}"))),
            }
        };
        if position == last {
            // Whatever follows the last good record was never acknowledged: zero it, so that records
            // written from here on are not followed by stale bytes a later scan could misread.
            let end = written_end(&image);
            if cut || end > offset {
                if let Some(through) = synced_past(&image[..end], offset, seq) {
                    return Err(invalid(format!(
                        "{name}: the record at offset {offset} is damaged, yet a later record says the segment was synced through offset {through}"
                    )));
                }
                file.write_all_at(&vec![0u8; end - offset], offset as u64)?;
                super::sync_failure::sync(file.as_ref())?;
                tracing::warn!(segment = %name, offset, bytes = end - offset, "write-ahead log: cut a torn tail");
            }
            state.tail = offset as u64;
        }
    }
    state.check_start()?;
    Ok(Some(state))
}

/// Where the written part of a segment ends: past its last non-zero byte, rounded up to [`ALIGN`]. A
/// [`Kind::Synced`] record ends within it: its last field, the offset it states, is not zero.
fn written_end(image: &[u8]) -> usize {
    image.iter().rposition(|&b| b != 0).map_or(0, |i| (i + 1).next_multiple_of(ALIGN).min(image.len()))
}

fn starts_with_record(image: &[u8]) -> bool {
    image.iter().take(record::HEADER).any(|&b| b != 0)
}

/// The offset a [`Kind::Synced`] marker of segment `seq` found after the damaged record at `from` says
/// the segment was synced through, if any says beyond `from`. Whole records are stepped over, so a
/// payload's bytes are never read as a marker (the damaged record's too, when its header states its
/// length); elsewhere the scan moves by [`ALIGN`].
fn synced_past(image: &[u8], from: usize, seq: u64) -> Option<u64> {
    let mut at = from + record::stated_frame_len(image, from).unwrap_or(ALIGN);
    while at + HEADER <= image.len() {
        match record::scan(image, at) {
            Scanned::Record { kind: Kind::Synced, payload, next } => {
                let field =
                    |i: usize| payload.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
                if let (Some(marked_seq), Some(through)) = (field(0), field(8)) {
                    if marked_seq == seq && through > from as u64 {
                        return Some(through);
                    }
                }
                at = next;
            }
            Scanned::Record { next, .. } => at = next,
            _ => at += ALIGN,
        }
    }
    None
}
