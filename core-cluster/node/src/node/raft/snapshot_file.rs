//! Snapshot files: the state machine's rows as a stream of framed records (`mesh.raft.v1.SnapshotRecord`),
//! written while the tables are iterated and read back one record at a time. A snapshot is never one
//! buffer: openraft sends a file in chunks and writes a received one to a file, chunk by chunk.
//!
//! Each record is framed as a 4-byte big-endian length, a 4-byte CRC-32 of the record, and the record.
//! The first record is the header, the last the end (with the number of rows), so a file cut short or
//! damaged anywhere is refused rather than installed in part.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use prost::Message as _;
use proto::raft::{snapshot_record, SnapshotEnd, SnapshotHeader, SnapshotRecord, SnapshotRow, SnapshotTable};

/// Largest record accepted (one entry with its prompt is far below this).
const MAX_RECORD_BYTES: usize = 64 << 20;
/// Where snapshots are written before they are complete and synced.
const PARTIAL: &str = "partial-";
/// Where a snapshot received from a leader is written.
const RECEIVING: &str = "receiving-";
/// The suffix of every snapshot file.
const SUFFIX: &str = ".snap";
/// The extension of a snapshot's metadata file, beside the snapshot's own.
const META_EXTENSION: &str = "meta";

/// Whether the file `name` is a complete snapshot's rows (not one being written or received).
fn is_complete(name: &str) -> bool {
    name.ends_with(SUFFIX) && !name.starts_with(PARTIAL) && !name.starts_with(RECEIVING)
}

/// The directory of a node's snapshot files: the current snapshot, and the one being written or received.
#[derive(Clone, Debug)]
pub struct SnapshotDir {
    path: PathBuf,
}

impl SnapshotDir {
    /// Opens (or creates) the directory and removes what a crash left half written.
    pub fn open(path: &Path) -> io::Result<Self> {
        crate::wal::fs::create_dir_synced(path)?;
        for item in fs::read_dir(path)? {
            let name = item?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(PARTIAL) || name.starts_with(RECEIVING) {
                fs::remove_file(path.join(name.as_ref()))?;
            }
        }
        Ok(Self { path: path.to_owned() })
    }

    /// The file of the snapshot `id` (made safe as a file name).
    pub fn file_of(&self, id: &str) -> PathBuf {
        let safe: String =
            id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        self.path.join(format!("{safe}{SUFFIX}"))
    }

    /// A new file to write a snapshot into; it becomes a snapshot with [`SnapshotDir::keep`].
    pub fn writer(&self, unique: u64) -> io::Result<SnapshotWriter> {
        let path = self.path.join(format!("{PARTIAL}{unique}{SUFFIX}"));
        let file = File::create(&path)?;
        Ok(SnapshotWriter { out: BufWriter::new(file), path, rows: 0 })
    }

    /// A new file for a snapshot a leader sends, readable and writable at any offset; it remembers its
    /// path ([`SnapshotFile::received`]).
    pub fn receiving(&self, unique: u64) -> io::Result<SnapshotFile> {
        let path = self.path.join(format!("{RECEIVING}{unique}{SUFFIX}"));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        Ok(SnapshotFile { file, seeked: None, received: Some(path) })
    }

    /// The file of the snapshot `id`'s metadata, beside its rows.
    fn meta_of(&self, id: &str) -> PathBuf {
        self.file_of(id).with_extension(META_EXTENSION)
    }

    /// Makes the complete file at `from` the snapshot `id`, described by `meta`: syncs it, writes and syncs
    /// the metadata beside it, renames it, syncs the directory, and removes the other complete snapshots
    /// (never a file still being written or received). Returns its path. Callers serialise their calls.
    ///
    /// A snapshot is complete once both its files are in place, so a crash at any point leaves the
    /// previous snapshot or this one complete, and [`SnapshotDir::kept`] finds it.
    pub fn keep(&self, from: &Path, id: &str, meta: &[u8]) -> io::Result<PathBuf> {
        File::open(from)?.sync_all()?;
        self.write_meta(id, meta)?;
        let to = self.file_of(id);
        fs::rename(from, &to)?;
        File::open(&self.path)?.sync_all()?;
        let ours = self.meta_of(id);
        for item in fs::read_dir(&self.path)? {
            let other = item?.path();
            let name = other.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let complete = is_complete(&name);
            let stale_meta = other.extension().is_some_and(|e| e == META_EXTENSION) && other != ours;
            if (other != to && complete) || stale_meta {
                match fs::remove_file(&other) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(to)
    }

    /// Writes and syncs the metadata of the snapshot `id` (for [`SnapshotDir::keep`], and for a snapshot
    /// an older binary kept with its metadata elsewhere).
    pub fn write_meta(&self, id: &str, meta: &[u8]) -> io::Result<()> {
        let mut file = File::create(self.meta_of(id))?;
        file.write_all(meta)?;
        file.sync_all()
    }

    /// Every complete snapshot: its file and its metadata's bytes (one, but two after a crash in the
    /// middle of a keep).
    pub fn kept(&self) -> io::Result<Vec<(PathBuf, Vec<u8>)>> {
        let mut kept = Vec::new();
        for item in fs::read_dir(&self.path)? {
            let file = item?.path();
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !is_complete(&name) {
                continue;
            }
            match fs::read(file.with_extension(META_EXTENSION)) {
                Ok(meta) => kept.push((file, meta)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(kept)
    }

    /// Removes a file that will not become a snapshot (it may be gone already).
    pub fn discard(&self, file: &Path) {
        let _ = fs::remove_file(file);
    }
}

/// Writes one snapshot file, record by record.
#[derive(Debug)]
pub struct SnapshotWriter {
    out: BufWriter<File>,
    path: PathBuf,
    rows: u64,
}

impl SnapshotWriter {
    /// Writes the header (first).
    pub fn header(&mut self, clock_ms: i64, feed_floor: u64) -> io::Result<()> {
        self.record(snapshot_record::Record::Header(SnapshotHeader { clock_ms, feed_floor }))
    }

    /// Writes one row.
    pub fn row(&mut self, table: SnapshotTable, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.rows += 1;
        let row = SnapshotRow { table: table.into(), key: key.to_vec(), value: value.to_vec() };
        self.record(snapshot_record::Record::Row(row))
    }

    /// Writes the end and flushes; returns the file's path and the rows written.
    pub fn finish(mut self) -> io::Result<(PathBuf, u64)> {
        self.record(snapshot_record::Record::End(SnapshotEnd { rows: self.rows }))?;
        self.out.flush()?;
        Ok((self.path, self.rows))
    }

    fn record(&mut self, record: snapshot_record::Record) -> io::Result<()> {
        let bytes = SnapshotRecord { record: Some(record) }.encode_to_vec();
        let len = u32::try_from(bytes.len()).map_err(|_| invalid("a snapshot record over 4 GiB"))?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(&crc32fast::hash(&bytes).to_be_bytes())?;
        self.out.write_all(&bytes)
    }
}

/// An open snapshot file as openraft's snapshot data (`AsyncRead + AsyncWrite + AsyncSeek`). The calls
/// complete at once on the calling thread: a chunk is a few MiB of local file, the state machine's sled
/// calls block the same way, and it spares the runtime a thread hop per chunk.
#[derive(Debug)]
pub struct SnapshotFile {
    file: File,
    /// The result of the last `start_seek`, for `poll_complete`.
    seeked: Option<io::Result<u64>>,
    /// Where a snapshot received from a leader is being written.
    received: Option<PathBuf>,
}

impl SnapshotFile {
    /// Opens the snapshot at `path` for reading.
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(Self::from(File::open(path)?))
    }

    /// The path of a file [`SnapshotDir::receiving`] opened.
    pub fn received(&self) -> Option<&Path> {
        self.received.as_deref()
    }

    /// The file, positioned at its start.
    pub fn into_rewound(mut self) -> io::Result<File> {
        io::Seek::rewind(&mut self.file)?;
        Ok(self.file)
    }

    /// Another handle to the same file, with its own position (tests hand a snapshot to a second store).
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self::from(self.file.try_clone()?))
    }
}

impl From<File> for SnapshotFile {
    fn from(file: File) -> Self {
        Self { file, seeked: None, received: None }
    }
}

impl tokio::io::AsyncRead for SnapshotFile {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        let read = this.file.read(buf.initialize_unfilled());
        std::task::Poll::Ready(read.map(|n| buf.advance(n)))
    }
}

impl tokio::io::AsyncWrite for SnapshotFile {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::task::Poll::Ready(self.get_mut().file.write(buf))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(self.get_mut().file.flush())
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncSeek for SnapshotFile {
    fn start_seek(self: std::pin::Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        this.seeked = Some(io::Seek::seek(&mut this.file, position));
        Ok(())
    }

    fn poll_complete(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<u64>> {
        let this = self.get_mut();
        let position = match this.seeked.take() {
            Some(result) => result,
            None => io::Seek::stream_position(&mut this.file),
        };
        std::task::Poll::Ready(position)
    }
}

/// What a snapshot file holds besides its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The state machine's clock.
    pub clock_ms: i64,
    /// The change feed's compacted revision.
    pub feed_floor: u64,
}

/// One row of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Its table.
    pub table: SnapshotTable,
    /// Its key.
    pub key: Vec<u8>,
    /// Its value, as the state machine stores it.
    pub value: Vec<u8>,
}

/// Reads a snapshot file: its header, then its rows one at a time; the end is checked when reached.
pub struct SnapshotReader<R: Read> {
    input: BufReader<R>,
    rows: u64,
    ended: bool,
}

impl<R: Read> SnapshotReader<R> {
    /// Reads the header of `input`.
    pub fn open(input: R) -> io::Result<(Header, Self)> {
        let mut reader = Self { input: BufReader::new(input), rows: 0, ended: false };
        match reader.record()? {
            snapshot_record::Record::Header(h) => {
                Ok((Header { clock_ms: h.clock_ms, feed_floor: h.feed_floor }, reader))
            }
            _ => Err(invalid("a snapshot must start with its header")),
        }
    }

    /// The next row; `None` after the end record (whose row count must match).
    pub fn next_row(&mut self) -> io::Result<Option<Row>> {
        if self.ended {
            return Ok(None);
        }
        match self.record()? {
            snapshot_record::Record::Row(row) => {
                self.rows += 1;
                let table = SnapshotTable::try_from(row.table)
                    .map_err(|_| invalid(&format!("unknown snapshot table {}", row.table)))?;
                Ok(Some(Row { table, key: row.key, value: row.value }))
            }
            snapshot_record::Record::End(end) if end.rows == self.rows => {
                self.ended = true;
                Ok(None)
            }
            snapshot_record::Record::End(end) => {
                Err(invalid(&format!("the snapshot ends after {} rows but says {}", self.rows, end.rows)))
            }
            snapshot_record::Record::Header(_) => Err(invalid("a second snapshot header")),
        }
    }

    fn record(&mut self) -> io::Result<snapshot_record::Record> {
        let mut frame = [0u8; 8];
        self.input.read_exact(&mut frame).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => invalid("the snapshot is cut short"),
            _ => e,
        })?;
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let crc = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if len > MAX_RECORD_BYTES {
            return Err(invalid(&format!("a snapshot record of {len} bytes")));
        }
        let mut bytes = vec![0u8; len];
        self.input.read_exact(&mut bytes).map_err(|_| invalid("the snapshot is cut short"))?;
        if crc32fast::hash(&bytes) != crc {
            return Err(invalid("a snapshot record fails its checksum"));
        }
        SnapshotRecord::decode(bytes.as_slice())
            .map_err(|e| invalid(&format!("a snapshot record does not decode: {e}")))?
            .record
            .ok_or_else(|| invalid("an empty snapshot record"))
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(dir: &SnapshotDir) -> PathBuf {
        let mut writer = dir.writer(1).expect("writer");
        writer.header(42, 7).expect("header");
        writer.row(SnapshotTable::Entries, b"k1", b"{\"v\":1}").expect("row");
        writer.row(SnapshotTable::Feed, &9u64.to_be_bytes(), b"[]").expect("row");
        let (path, rows) = writer.finish().expect("finish");
        assert_eq!(rows, 2);
        path
    }

    fn read_all(bytes: &[u8]) -> io::Result<(Header, Vec<Row>)> {
        let (header, mut reader) = SnapshotReader::open(bytes)?;
        let mut rows = Vec::new();
        while let Some(row) = reader.next_row()? {
            rows.push(row);
        }
        Ok((header, rows))
    }

    #[test]
    fn a_snapshot_reads_back_row_by_row_and_is_kept_alone() {
        let tmp = std::env::temp_dir().join(format!("snapshot-file-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let dir = SnapshotDir::open(&tmp).expect("dir");
        let stale = dir.keep(&written(&dir), "1-5-old", b"old").expect("keep");
        let kept = dir.keep(&written(&dir), "2-9-new", b"new").expect("keep");
        assert!(!stale.exists() && kept.exists(), "the older snapshot is removed");
        assert_eq!(dir.kept().expect("kept"), vec![(kept.clone(), b"new".to_vec())], "with its metadata");
        let (header, rows) = read_all(&fs::read(&kept).expect("read")).expect("valid");
        assert_eq!(header, Header { clock_ms: 42, feed_floor: 7 });
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].table, rows[0].key.as_slice()), (SnapshotTable::Entries, &b"k1"[..]));
        // Keeping a snapshot leaves files being written or received alone; a crash's leftovers go at the
        // next start, and the current snapshot stays.
        let leftover = dir.receiving(3).expect("receiving").received().expect("a path").to_owned();
        let partial = dir.writer(4).expect("writer").finish().expect("finish").0;
        let kept = dir.keep(&written(&dir), "3-12-newest", b"newest").expect("keep");
        assert!(leftover.exists() && partial.exists(), "files in progress survive a keep");
        SnapshotDir::open(&tmp).expect("reopen");
        assert!(!leftover.exists() && !partial.exists() && kept.exists());
        // A crash after the metadata of a newer snapshot was written and before its file was renamed.
        dir.write_meta("4-20-unfinished", b"unfinished").expect("meta");
        assert_eq!(dir.kept().expect("kept"), vec![(kept, b"newest".to_vec())], "only complete ones");
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_cut_or_damaged_snapshot_is_refused() {
        let tmp = std::env::temp_dir().join(format!("snapshot-bad-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let dir = SnapshotDir::open(&tmp).expect("dir");
        let bytes = fs::read(written(&dir)).expect("read");
        assert!(read_all(&bytes).is_ok());
        for cut in [0, 5, 12, bytes.len() - 1] {
            assert!(read_all(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in [9, bytes.len() / 2, bytes.len() - 2] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(read_all(&flipped).is_err(), "bit flipped at {at}");
        }
        let _ = fs::remove_dir_all(&tmp);
    }
}
