//! Applying a batch of log entries atomically without a sled transaction.
//!
//! sled 0.34 rolls its log buffer twice for every transaction (and every `apply_batch`), and its I/O
//! threads write each rolled buffer and wait for it with `sync_file_range`: two small disk writes per
//! applied batch on every node, each waking all of sled's seven I/O threads, and all of it on the same
//! disk as the write-ahead log's `fdatasync`. So a batch is applied in three steps instead:
//! 1. its commands run against an [`Overlay`], where reads see the batch's own writes and writes are
//!    collected as the final value (or removal) of each key;
//! 2. those writes are stored as one redo record in their own tree: chunks, then a header naming the
//!    batch's last log index;
//! 3. they are written to their trees: the meta tree's first (the change feed's floor rises before the rows
//!    under it go), then the others', and the last applied log id last of all.
//!
//! sled recovers a prefix of its writes in order (it replays its log up to the first record that is not
//! all there), so after a crash either the header is missing, and with it every write of the batch, or it
//! is there with all its chunks, and [`recover`] writes the batch again. Every write is a final value, so
//! writing it twice leaves what writing it once does.
//!
//! A batch is atomic across a crash, not for readers meanwhile: a read may see some of a batch's writes
//! and not others, as a read of two keys could between two transactions before. Reads that need one
//! applied index wait for it (`read_barrier`), and the change feed checks its floor again after a scan.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;

use super::super::apply::Tables;
use super::super::records::{AppliedRequest, FeedRow, ModelState, StoredEntry, TenantState};
use super::request_rows::{BatchRows, IndexChanges, RequestIndex};
use super::rows::Row;
use super::FEED_FLOOR;

/// The state machine's trees, in the order a write names them by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Table {
    /// Cache entries by key.
    Entries = 0,
    /// Tenants by name.
    Tenants = 1,
    /// Models by name.
    Models = 2,
    /// Applied request ids, a row per proposal ([`super::request_rows`]).
    Requests = 3,
    /// Change-feed rows by revision (big-endian).
    Feed = 4,
    /// The meta tree; written after the others.
    Meta = 5,
}

impl Table {
    const ALL: [Table; 6] =
        [Table::Entries, Table::Tenants, Table::Models, Table::Requests, Table::Feed, Table::Meta];

    fn from_byte(byte: u8) -> Option<Table> {
        Table::ALL.get(usize::from(byte)).copied()
    }
}

/// The trees a batch reads and writes, indexed by [`Table`].
pub type Trees<'a> = [&'a sled::Tree; 6];

/// The meta key whose write ends a batch (the last applied log id).
pub type LastKey = &'static [u8];

/// Final values (`None`: removed) by key, one map per table (indexed by [`Table`]).
pub type Writes = [BTreeMap<Vec<u8>, Option<Vec<u8>>>; 6];

/// Every write of a batch, table by table.
fn each(writes: &Writes) -> impl Iterator<Item = (Table, &Vec<u8>, &Option<Vec<u8>>)> {
    Table::ALL
        .into_iter()
        .flat_map(move |table| writes[table as usize].iter().map(move |(k, v)| (table, k, v)))
}

/// The redo record's header key in its tree.
const HEADER: &[u8] = b"header.2";
/// Where binaries before per-proposal request rows kept the header: their records write request ids a
/// row per id, so their writes to [`Table::Requests`] belong in that layout's tree ([`recover_legacy`]).
const LEGACY_HEADER: &[u8] = b"header";
/// Bytes per chunk of the record: well under sled's largest inline value (a quarter of its 512 KiB
/// segment), so writing a chunk never writes a blob file (a node of several chunks may become one when
/// sled consolidates it, as a node of large entries does).
const CHUNK: usize = 32 * 1024;

fn sled_err(e: sled::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// A row's error, naming its key.
fn keyed(key: &[u8], e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{:?}: {e}", String::from_utf8_lossy(key)))
}

/// The trees as a batch sees them: sled's values under the batch's own writes.
pub struct Overlay<'a> {
    trees: Trees<'a>,
    writes: Writes,
    requests: BatchRows<'a>,
}

impl<'a> Overlay<'a> {
    /// An overlay with no writes yet, finding request ids through `index`.
    pub fn new(trees: Trees<'a>, index: &'a RequestIndex) -> Self {
        let requests = BatchRows::new(index, trees[Table::Requests as usize]);
        Self { trees, writes: Writes::default(), requests }
    }

    /// The requests applied from now on are the proposal at log index `revision`.
    pub fn begin_proposal(&mut self, revision: u64) {
        self.requests.begin_proposal(revision);
    }

    /// The value under `key`, the batch's own write first.
    pub fn get_raw(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        if let Some(value) = self.writes[table as usize].get(key) {
            return Ok(value.clone());
        }
        Ok(self.trees[table as usize].get(key).map_err(sled_err)?.map(|v| v.to_vec()))
    }

    /// Sets (or, with `None`, removes) the value under `key`.
    pub fn set_raw(&mut self, table: Table, key: &[u8], value: Option<Vec<u8>>) {
        self.writes[table as usize].insert(key.to_vec(), value);
    }

    fn get<T: Row>(&self, table: Table, key: &[u8]) -> io::Result<Option<T>> {
        self.get_raw(table, key)?.map(|bytes| T::from_row(&bytes).map_err(|e| keyed(key, e))).transpose()
    }

    fn put<T: Row>(&mut self, table: Table, key: &[u8], value: &T) -> io::Result<()> {
        let bytes = value.to_row().map_err(|e| keyed(key, e))?;
        self.set_raw(table, key, Some(bytes));
        Ok(())
    }

    /// The batch's writes, and the changes to the request index to make once they are stored.
    pub fn into_writes(mut self) -> io::Result<(Writes, IndexChanges)> {
        let (rows, changes) = self.requests.finish()?;
        self.writes[Table::Requests as usize].extend(rows);
        Ok((self.writes, changes))
    }
}

impl Tables for Overlay<'_> {
    type Error = io::Error;

    fn entry(&mut self, key: &str) -> io::Result<Option<StoredEntry>> {
        self.get(Table::Entries, key.as_bytes())
    }
    fn put_entry(&mut self, key: &str, entry: &StoredEntry) -> io::Result<()> {
        self.put(Table::Entries, key.as_bytes(), entry)
    }
    fn remove_entry(&mut self, key: &str) -> io::Result<()> {
        self.set_raw(Table::Entries, key.as_bytes(), None);
        Ok(())
    }
    fn tenant(&mut self, name: &str) -> io::Result<Option<TenantState>> {
        self.get(Table::Tenants, name.as_bytes())
    }
    fn put_tenant(&mut self, name: &str, tenant: &TenantState) -> io::Result<()> {
        self.put(Table::Tenants, name.as_bytes(), tenant)
    }
    fn model(&mut self, name: &str) -> io::Result<Option<ModelState>> {
        self.get(Table::Models, name.as_bytes())
    }
    fn put_model(&mut self, name: &str, model: &ModelState) -> io::Result<()> {
        self.put(Table::Models, name.as_bytes(), model)
    }
    fn request(&mut self, id: &str) -> io::Result<Option<AppliedRequest>> {
        self.requests.get(id)
    }
    fn put_request(&mut self, id: &str, request: &AppliedRequest) -> io::Result<()> {
        self.requests.put(id, request)
    }
    fn remove_request(&mut self, id: &str) -> io::Result<()> {
        self.requests.remove(id)
    }
    fn feed_row(&mut self, revision: u64) -> io::Result<Option<FeedRow>> {
        self.get(Table::Feed, &revision.to_be_bytes())
    }
    fn put_feed_row(&mut self, revision: u64, row: &FeedRow) -> io::Result<()> {
        self.put(Table::Feed, &revision.to_be_bytes(), row)
    }
    fn remove_feed_row(&mut self, revision: u64) -> io::Result<()> {
        self.set_raw(Table::Feed, &revision.to_be_bytes(), None);
        Ok(())
    }
    fn feed_floor(&mut self) -> io::Result<u64> {
        Ok(self.get(Table::Meta, FEED_FLOOR)?.unwrap_or(0))
    }
    fn set_feed_floor(&mut self, revision: u64) -> io::Result<()> {
        self.put(Table::Meta, FEED_FLOOR, &revision)
    }
}

/// Where a step of a commit writes: the redo record's tree, or one of the state machine's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Redo,
    Table(Table),
}

/// One single-key write of a commit, in the order sled must recover them. A write of the batch borrows
/// its key and value from the batch's [`Writes`]; the record's own steps own theirs.
#[derive(Clone, Debug)]
struct Step<'a> {
    target: Target,
    key: Cow<'a, [u8]>,
    value: Option<Cow<'a, [u8]>>,
}

/// The redo record's header: the batch's last log index, its chunk count, length and checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    index: u64,
    chunks: u32,
    length: u64,
    crc: u32,
}

impl Header {
    const LEN: usize = 24;

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.chunks.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Header> {
        if bytes.len() != Self::LEN {
            return None;
        }
        Some(Header {
            index: u64::from_le_bytes(bytes[0..8].try_into().ok()?),
            chunks: u32::from_le_bytes(bytes[8..12].try_into().ok()?),
            length: u64::from_le_bytes(bytes[12..20].try_into().ok()?),
            crc: u32::from_le_bytes(bytes[20..24].try_into().ok()?),
        })
    }
}

fn corrupt(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("redo record: {why}"))
}

fn read_header(redo: &sled::Tree, key: &[u8]) -> io::Result<Option<Header>> {
    match redo.get(key).map_err(sled_err)? {
        None => Ok(None),
        Some(bytes) => Header::decode(&bytes).map(Some).ok_or_else(|| corrupt("header of the wrong size")),
    }
}

/// Makes `writes` durable as a batch ending at log index `index` (see the module's comment): the redo
/// record in `redo`, then every write, with the meta tree's `last` key written last of all.
pub fn commit(
    redo: &sled::Tree,
    trees: Trees<'_>,
    index: u64,
    writes: &Writes,
    last: LastKey,
) -> io::Result<()> {
    let previous_chunks = read_header(redo, HEADER)?.map_or(0, |h| h.chunks);
    run(redo, trees, &commit_steps(index, writes, last, previous_chunks))
}

/// The steps of a commit: the record's chunks, its header, the removal of chunks an earlier, longer record
/// left, then the writes.
fn commit_steps(index: u64, writes: &Writes, last: LastKey, previous_chunks: u32) -> Vec<Step<'_>> {
    let record = encode(writes);
    let mut steps: Vec<Step> = record
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, chunk)| Step {
            target: Target::Redo,
            key: chunk_key(i).into(),
            value: Some(chunk.to_vec().into()),
        })
        .collect();
    let chunks = steps.len() as u32;
    let header = Header { index, chunks, length: record.len() as u64, crc: crc32fast::hash(&record) };
    steps.push(Step { target: Target::Redo, key: HEADER.into(), value: Some(header.encode().into()) });
    for stale in chunks..previous_chunks {
        steps.push(Step { target: Target::Redo, key: chunk_key(stale as usize).into(), value: None });
    }
    steps.extend(write_steps(writes, last));
    steps
}

fn chunk_key(i: usize) -> Vec<u8> {
    (i as u32).to_be_bytes().to_vec()
}

/// A batch's writes in the order they are made: the meta tree's first (so the change feed's floor rises
/// before the rows under it go), then the other trees', then the meta tree's `last` key.
fn write_steps(writes: &Writes, last: LastKey) -> Vec<Step<'_>> {
    fn step<'a>((table, key, value): (Table, &'a Vec<u8>, &'a Option<Vec<u8>>)) -> Step<'a> {
        Step {
            target: Target::Table(table),
            key: Cow::Borrowed(key),
            value: value.as_deref().map(Cow::Borrowed),
        }
    }
    let is_last = |table: Table, key: &[u8]| table == Table::Meta && key == last;
    let meta = each(writes).filter(|&(t, k, _)| t == Table::Meta && !is_last(t, k));
    let others = each(writes).filter(|&(t, _, _)| t != Table::Meta);
    let final_write = each(writes).filter(|&(t, k, _)| is_last(t, k));
    meta.chain(others).chain(final_write).map(step).collect()
}

fn run(redo: &sled::Tree, trees: Trees<'_>, steps: &[Step]) -> io::Result<()> {
    for step in steps {
        let tree = match step.target {
            Target::Redo => redo,
            Target::Table(table) => trees[table as usize],
        };
        match &step.value {
            Some(value) => tree.insert(&*step.key, &**value).map(drop),
            None => tree.remove(&*step.key).map(drop),
        }
        .map_err(sled_err)?;
    }
    Ok(())
}

/// After a restart: writes the last batch again if its redo record is complete and `applied` (the last
/// applied index the trees hold) is below it. Returns the index redone, if any.
pub fn recover(
    redo: &sled::Tree,
    trees: Trees<'_>,
    applied: Option<u64>,
    last: LastKey,
) -> io::Result<Option<u64>> {
    recover_from(redo, HEADER, trees, applied, last)
}

/// After the first restart on this layout: writes again a batch whose record an older binary left (as
/// [`recover`] does, into `trees`, whose requests tree is the older per-id one), then forgets that record
/// and its chunks. Returns the index redone, if any.
pub fn recover_legacy(
    redo: &sled::Tree,
    trees: Trees<'_>,
    applied: Option<u64>,
    last: LastKey,
) -> io::Result<Option<u64>> {
    let Some(header) = read_header(redo, LEGACY_HEADER)? else { return Ok(None) };
    let redone = recover_from(redo, LEGACY_HEADER, trees, applied, last)?;
    // The batch's writes are in (or were before): its chunks go first, so a crash meanwhile leaves a
    // header whose batch is applied, which the next start skips and removes.
    for i in 0..header.chunks {
        redo.remove(chunk_key(i as usize)).map_err(sled_err)?;
    }
    redo.remove(LEGACY_HEADER).map_err(sled_err)?;
    Ok(redone)
}

fn recover_from(
    redo: &sled::Tree,
    header_key: &[u8],
    trees: Trees<'_>,
    applied: Option<u64>,
    last: LastKey,
) -> io::Result<Option<u64>> {
    let Some(header) = read_header(redo, header_key)? else { return Ok(None) };
    if applied.is_some_and(|applied| applied >= header.index) {
        return Ok(None);
    }
    let mut record = Vec::new();
    for i in 0..header.chunks {
        let chunk = redo
            .get(chunk_key(i as usize))
            .map_err(sled_err)?
            .ok_or_else(|| corrupt("a chunk is missing"))?;
        record.extend_from_slice(&chunk);
    }
    if record.len() as u64 != header.length || crc32fast::hash(&record) != header.crc {
        return Err(corrupt("its chunks do not match its header"));
    }
    let writes = decode(&record).ok_or_else(|| corrupt("undecodable"))?;
    run(redo, trees, &write_steps(&writes, last))?;
    Ok(Some(header.index))
}

/// Forgets the redo record, for a snapshot installed over the whole state.
pub fn clear(redo: &sled::Tree) -> io::Result<()> {
    redo.remove(HEADER).map(drop).map_err(sled_err)
}

/// A batch's writes as bytes: per write, its table, the key's length and key, then 1 and the value's
/// length and value, or 0 for a removal (lengths little-endian `u32`).
fn encode(writes: &Writes) -> Vec<u8> {
    let size: usize = each(writes).map(|(_, k, v)| 10 + k.len() + v.as_ref().map_or(0, Vec::len)).sum();
    let mut out = Vec::with_capacity(size);
    for (table, key, value) in each(writes) {
        out.push(table as u8);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        match value {
            Some(value) => {
                out.push(1);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            None => out.push(0),
        }
    }
    out
}

fn decode(mut bytes: &[u8]) -> Option<Writes> {
    fn take<'b>(bytes: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
        let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(head)
    }
    fn length(bytes: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize)
    }
    let mut writes = Writes::default();
    while !bytes.is_empty() {
        let table = Table::from_byte(take(&mut bytes, 1)?[0])?;
        let key_len = length(&mut bytes)?;
        let key = take(&mut bytes, key_len)?.to_vec();
        let value = match take(&mut bytes, 1)?[0] {
            0 => None,
            1 => {
                let len = length(&mut bytes)?;
                Some(take(&mut bytes, len)?.to_vec())
            }
            _ => return None,
        };
        writes[table as usize].insert(key, value);
    }
    Some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAST: &[u8] = b"last_applied";

    fn open() -> (sled::Db, Vec<sled::Tree>, sled::Tree) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let trees = (0..6).map(|i| db.open_tree(format!("t{i}")).expect("tree")).collect();
        let redo = db.open_tree("redo").expect("tree");
        (db, trees, redo)
    }

    fn trees(t: &[sled::Tree]) -> Trees<'_> {
        [&t[0], &t[1], &t[2], &t[3], &t[4], &t[5]]
    }

    fn batch(t: &[sled::Tree], index: u64, big: usize) -> Writes {
        let requests = RequestIndex::default();
        let mut overlay = Overlay::new(trees(t), &requests);
        overlay.set_raw(Table::Entries, b"a", Some(vec![7; big]));
        overlay.set_raw(Table::Entries, b"gone", None);
        overlay.set_raw(Table::Requests, b"r1", Some(b"{}".to_vec()));
        overlay.set_raw(Table::Meta, LAST, Some(index.to_le_bytes().to_vec()));
        overlay.into_writes().expect("writes").0
    }

    #[test]
    fn reads_see_the_batch_own_writes_over_the_trees() {
        let (_db, t, _redo) = open();
        t[0].insert(b"k", b"old".to_vec()).expect("insert");
        t[0].insert(b"x", b"kept".to_vec()).expect("insert");
        let requests = RequestIndex::default();
        let mut overlay = Overlay::new(trees(&t), &requests);
        overlay.set_raw(Table::Entries, b"k", Some(b"new".to_vec()));
        overlay.set_raw(Table::Entries, b"x", None);
        assert_eq!(overlay.get_raw(Table::Entries, b"k").expect("get"), Some(b"new".to_vec()));
        assert_eq!(overlay.get_raw(Table::Entries, b"x").expect("get"), None);
        assert_eq!(overlay.get_raw(Table::Tenants, b"k").expect("get"), None);
        assert_eq!(
            t[0].get(b"k").expect("get").as_deref(),
            Some(&b"old"[..]),
            "nothing written before commit"
        );
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let (_db, t, _redo) = open();
        let writes = batch(&t, 3, 100);
        assert_eq!(decode(&encode(&writes)), Some(writes.clone()));
        let bytes = encode(&writes);
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode(&[9, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_batch_lost_after_its_record_is_written_again_on_recovery() {
        let (_db, t, redo) = open();
        t[0].insert(b"gone", b"x".to_vec()).expect("insert");
        // A record larger than one chunk, as if the node stopped right after writing it.
        let writes = batch(&t, 5, 3 * CHUNK + 17);
        commit(&redo, trees(&t), 5, &writes, LAST).expect("commit");
        for tree in &t {
            tree.clear().expect("clear");
        }
        t[0].insert(b"gone", b"x".to_vec()).expect("insert");
        t[5].insert(LAST, 4u64.to_le_bytes().to_vec()).expect("insert");
        assert_eq!(recover(&redo, trees(&t), Some(4), LAST).expect("recover"), Some(5));
        assert_eq!(t[0].get(b"a").expect("get").map(|v| v.len()), Some(3 * CHUNK + 17));
        assert_eq!(t[0].get(b"gone").expect("get"), None);
        assert_eq!(t[3].get(b"r1").expect("get").as_deref(), Some(&b"{}"[..]));
        assert_eq!(t[5].get(LAST).expect("get").as_deref(), Some(&5u64.to_le_bytes()[..]));
        // Applied already: nothing to redo.
        assert_eq!(recover(&redo, trees(&t), Some(5), LAST).expect("recover"), None);
    }

    /// Every tree's rows, in order.
    fn state(t: &[sled::Tree]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        t.iter()
            .map(|tree| {
                tree.iter().map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("row")).collect()
            })
            .collect()
    }

    fn applied(t: &[sled::Tree]) -> Option<u64> {
        t[5].get(LAST).expect("get").map(|v| u64::from_le_bytes(v.as_ref().try_into().expect("8 bytes")))
    }

    #[test]
    fn a_crash_after_any_step_of_a_commit_recovers_the_state_before_or_after_the_batch() {
        let prepare = || {
            let (db, t, redo) = open();
            t[0].insert(b"gone", b"x".to_vec()).expect("insert");
            // An earlier, longer batch, fully committed: its extra chunks must not confuse the next one.
            commit(&redo, trees(&t), 4, &batch(&t, 4, 3 * CHUNK), LAST).expect("commit");
            t[0].insert(b"gone", b"x".to_vec()).expect("insert");
            t[4].insert(b"feed-7", b"row".to_vec()).expect("insert");
            (db, t, redo)
        };
        let next = |t: &[sled::Tree]| {
            let requests = RequestIndex::default();
            let mut overlay = Overlay::new(trees(t), &requests);
            overlay.set_raw(Table::Entries, b"a", Some(b"short".to_vec()));
            overlay.set_raw(Table::Entries, b"gone", None);
            overlay.set_raw(Table::Feed, b"feed-7", None);
            overlay.set_raw(Table::Meta, b"feed_floor", Some(b"7".to_vec()));
            overlay.set_raw(Table::Meta, LAST, Some(5u64.to_le_bytes().to_vec()));
            overlay.into_writes().expect("writes").0
        };
        let (_db, t, redo) = prepare();
        let before = state(&t);
        let writes = next(&t);
        let steps =
            commit_steps(5, &writes, LAST, read_header(&redo, HEADER).expect("header").expect("some").chunks);
        run(&redo, trees(&t), &steps).expect("run");
        let after = state(&t);
        assert_ne!(before, after);
        for k in 0..=steps.len() {
            let (_db, t, redo) = prepare();
            run(&redo, trees(&t), &steps[..k]).expect("run");
            let row_gone = t[4].get(b"feed-7").expect("get").is_none();
            let floor_risen = t[5].get(b"feed_floor").expect("get").is_some();
            assert!(floor_risen || !row_gone, "after {k} steps a feed row went before the floor rose");
            recover(&redo, trees(&t), applied(&t), LAST).expect("recover");
            let recovered = state(&t);
            assert!(recovered == before || recovered == after, "a crash after {k} of {} steps", steps.len());
        }
    }

    #[test]
    fn an_older_binary_record_is_written_again_into_the_trees_given_then_forgotten() {
        let (db, t, redo) = open();
        let writes = batch(&t, 5, 2 * CHUNK);
        commit(&redo, trees(&t), 5, &writes, LAST).expect("commit");
        // As an older binary left it: the same record under the older header key, the batch not applied.
        let header = redo.remove(HEADER).expect("remove").expect("a header");
        redo.insert(LEGACY_HEADER, header).expect("insert");
        for tree in &t {
            tree.clear().expect("clear");
        }
        t[5].insert(LAST, 4u64.to_le_bytes().to_vec()).expect("insert");
        let legacy_requests = db.open_tree("per-id requests").expect("tree");
        let older = [&t[0], &t[1], &t[2], &legacy_requests, &t[4], &t[5]];
        assert_eq!(recover(&redo, trees(&t), Some(4), LAST).expect("recover"), None, "not this layout's");
        assert_eq!(recover_legacy(&redo, older, Some(4), LAST).expect("recover"), Some(5));
        assert_eq!(applied(&t), Some(5));
        assert_eq!(t[3].get(b"r1").expect("get"), None, "request ids go to the older tree");
        assert_eq!(legacy_requests.get(b"r1").expect("get").as_deref(), Some(&b"{}"[..]));
        assert_eq!(redo.get(LEGACY_HEADER).expect("get"), None);
        assert_eq!(redo.get(chunk_key(0)).expect("get"), None, "its chunks are gone with it");
        assert_eq!(recover_legacy(&redo, older, Some(5), LAST).expect("again"), None);
    }

    #[test]
    fn a_record_with_a_missing_chunk_is_refused() {
        let (_db, t, redo) = open();
        let writes = batch(&t, 2, 2 * CHUNK);
        commit(&redo, trees(&t), 2, &writes, LAST).expect("commit");
        redo.remove(1u32.to_be_bytes()).expect("remove");
        assert!(recover(&redo, trees(&t), Some(1), LAST).is_err());
        assert_eq!(
            recover(&redo, trees(&t), None, LAST).map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidData)
        );
    }
}
