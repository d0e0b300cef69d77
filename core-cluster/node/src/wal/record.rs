//! The framing of one write-ahead-log record, and what a recovery scan makes of the bytes at an offset.
//!
//! A record is a 16-byte header and its payload, padded to a multiple of 16 bytes:
//!
//! ```text
//! len: u32 LE | !len: u32 LE | crc32(kind ++ payload): u32 LE | kind: u8 | 0 0 0 | payload | zero padding
//! ```
//!
//! Segments are created zero-filled, so an all-zero header is where the written part of a segment ends.
//! The length is stored twice (plain and complemented) so that a damaged length is recognised as damage
//! rather than followed. Headers never straddle a 512-byte sector (16 divides 512), and a disk writes a
//! sector whole or not at all; a record whose checksum fails is therefore *torn* (a write that a crash
//! cut short, never acknowledged) when one of its sectors is still all zeros, and *corrupt* otherwise.
//! A zeroed sector can also be damage to a synced record (a latent sector error reads back as zeros), so
//! writers leave [`Kind::Synced`] markers, which let recovery tell the two apart ([`super::recovery`]).

/// Records start at multiples of this.
pub const ALIGN: usize = 16;
/// Bytes before the payload.
pub const HEADER: usize = 16;
/// The unit a disk writes atomically.
pub const SECTOR: usize = 512;

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The log's metadata (vote, committed, last purged), restated at the start of every segment.
    Meta = 1,
    /// One log entry: its index, then the encoded entry.
    Entry = 2,
    /// A new vote.
    Vote = 3,
    /// A new committed log id.
    Committed = 4,
    /// Every entry from an index on is void.
    Truncate = 5,
    /// Every entry up to a log id is purged.
    Purge = 6,
    /// The segment (its sequence number) was synced through an offset before this record was written:
    /// recovery's evidence that a damaged record before that offset is corruption, not a torn write.
    Synced = 7,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Meta,
            2 => Self::Entry,
            3 => Self::Vote,
            4 => Self::Committed,
            5 => Self::Truncate,
            6 => Self::Purge,
            7 => Self::Synced,
            _ => return None,
        })
    }
}

/// The bytes a record with `payload_len` payload bytes takes, padding included.
pub fn frame_len(payload_len: usize) -> usize {
    (HEADER + payload_len).next_multiple_of(ALIGN)
}

/// Appends one framed record to `out`.
pub fn encode(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("a write-ahead-log record is smaller than 4 GiB");
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind as u8]);
    crc.update(payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&[kind as u8, 0, 0, 0]);
    out.extend_from_slice(payload);
    out.resize(out.len() + frame_len(payload.len()) - HEADER - payload.len(), 0);
}

/// What a scan finds at one offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Scanned<'a> {
    /// A whole record; the next one starts at `next`.
    Record {
        /// Its kind.
        kind: Kind,
        /// Its payload.
        payload: &'a [u8],
        /// The offset after it.
        next: usize,
    },
    /// The written part of the segment ends here.
    End,
    /// A record cut short by a crash: nothing from here on was ever acknowledged.
    Torn,
    /// Damage that no crash explains.
    Corrupt(String),
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("four bytes"))
}

/// The bytes the record at `offset` takes when its header's two lengths agree (its checksum unchecked).
pub fn stated_frame_len(buf: &[u8], offset: usize) -> Option<usize> {
    let header = buf.get(offset..offset + HEADER)?;
    let len = u32_at(header, 0);
    (!len == u32_at(header, 4) && header.iter().any(|&b| b != 0)).then(|| frame_len(len as usize))
}

/// Reads the record at `offset` (a multiple of [`ALIGN`]) of the segment `buf`.
pub fn scan(buf: &[u8], offset: usize) -> Scanned<'_> {
    if offset + HEADER > buf.len() {
        return Scanned::End;
    }
    let header = &buf[offset..offset + HEADER];
    if header.iter().all(|&b| b == 0) {
        return Scanned::End;
    }
    let len = u32_at(header, 0);
    if !len != u32_at(header, 4) || header[13..16] != [0, 0, 0] {
        return Scanned::Corrupt(format!("a damaged record header at offset {offset}"));
    }
    let end = offset + frame_len(len as usize);
    if end > buf.len() {
        return Scanned::Corrupt(format!("a record at offset {offset} runs past the end of its segment"));
    }
    let payload = &buf[offset + HEADER..offset + HEADER + len as usize];
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[header[12]]);
    crc.update(payload);
    if crc.finalize() != u32_at(header, 8) {
        return if has_zero_sector(&buf[..offset + HEADER + len as usize], offset) {
            Scanned::Torn
        } else {
            Scanned::Corrupt(format!("a record at offset {offset} fails its checksum"))
        };
    }
    match Kind::from_byte(header[12]) {
        Some(kind) => Scanned::Record { kind, payload, next: end },
        None => Scanned::Corrupt(format!("a record at offset {offset} has unknown kind {}", header[12])),
    }
}

/// Whether the part of some sector between `from` and the end of `buf` is all zeros: the trace of a
/// sector the crash did not let the disk write.
fn has_zero_sector(buf: &[u8], from: usize) -> bool {
    let mut start = from;
    while start < buf.len() {
        let end = ((start / SECTOR + 1) * SECTOR).min(buf.len());
        if buf[start..end].iter().all(|&b| b == 0) {
            return true;
        }
        start = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(records: &[(Kind, &[u8])], len: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        for (kind, payload) in records {
            encode(&mut buf, *kind, payload);
        }
        buf.resize(len, 0);
        buf
    }

    #[test]
    fn records_round_trip_and_the_zeros_after_them_read_as_the_end() {
        let buf = segment(&[(Kind::Vote, b"abc"), (Kind::Entry, &[7; 40])], 4096);
        let Scanned::Record { kind, payload, next } = scan(&buf, 0) else { panic!("no first record") };
        assert_eq!((kind, payload, next), (Kind::Vote, &b"abc"[..], 32));
        let Scanned::Record { kind, payload, next } = scan(&buf, next) else { panic!("no second record") };
        assert_eq!((kind, payload.len(), next), (Kind::Entry, 40, 32 + 64));
        assert_eq!(scan(&buf, next), Scanned::End);
    }

    #[test]
    fn a_record_with_a_lost_sector_is_torn_and_a_flipped_bit_is_corrupt() {
        let big = vec![9u8; 3 * SECTOR];
        let buf = segment(&[(Kind::Entry, &big)], 8 * SECTOR);
        let mut torn = buf.clone();
        torn[SECTOR..2 * SECTOR].fill(0);
        assert_eq!(scan(&torn, 0), Scanned::Torn);
        let mut flipped = buf.clone();
        flipped[SECTOR + 3] ^= 0x10;
        assert!(matches!(scan(&flipped, 0), Scanned::Corrupt(_)));
        let mut bad_length = buf;
        bad_length[1] ^= 0x01;
        assert!(matches!(scan(&bad_length, 0), Scanned::Corrupt(_)));
    }
}
