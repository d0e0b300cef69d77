//! The write-ahead log under power loss, torn tails and bit flips.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use openraft::{LeaderId, LogId, Vote};

use super::crash_fs::{CrashFs, Rng};
use super::fs::{OsDir, WalDir};
use super::state::segment_name;
use super::{Done, Wal, WalOptions};
use crate::node::NodeId;

/// The bytes of entry `index` written in `term`: a function of both, of varying length.
fn content(index: u64, term: u64) -> Vec<u8> {
    let len = 1 + (index * 7919 + term * 104_729) % 1500;
    (0..len).map(|i| (index ^ (term << 3) ^ i).wrapping_mul(31) as u8).collect()
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(LeaderId::new(term, 1), index)
}

/// A callback that reports into a channel, and the channel.
fn done_channel() -> (Done, mpsc::Receiver<std::io::Result<()>>) {
    let (tx, rx) = mpsc::channel();
    (Box::new(move |r| drop(tx.send(r))), rx)
}

fn wait(rx: &mpsc::Receiver<std::io::Result<()>>) -> std::io::Result<()> {
    rx.recv_timeout(Duration::from_secs(10)).expect("the flusher answers")
}

fn small() -> WalOptions {
    WalOptions { segment_bytes: 8 << 10, create_ahead: true }
}

/// What the writer knows is durable: the log (index -> term), the purge point and the vote.
#[derive(Clone, Debug, Default)]
struct Acked {
    entries: BTreeMap<u64, u64>,
    purged: u64,
    vote: Option<Vote<NodeId>>,
}

/// One writer, as openraft drives a log: appends pipelined (callbacks come later), votes, truncations and
/// purges waited for. It runs until the log fails (the power went).
fn write_until_crash(wal: &Wal, acked: &Mutex<Acked>, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed);
    let (mut term, mut next) = {
        let a = acked.lock().expect("never poisoned");
        let term = a.vote.map_or(1, |v| v.leader_id.term).max(a.entries.values().copied().max().unwrap_or(1));
        (term, a.entries.keys().next_back().map_or(a.purged + 1, |i| i + 1))
    };
    // What the log holds in the writer's view (written, maybe not yet durable).
    let (mut written, mut purged, mut vote) = {
        let a = acked.lock().expect("never poisoned");
        (a.entries.clone(), a.purged, a.vote.unwrap_or(Vote::new(0, 0)))
    };
    while !stop.load(Ordering::Relaxed) {
        let roll = rng.below(100);
        let (result, rx) = if roll < 80 {
            let batch: Vec<_> =
                (0..1 + rng.below(8)).map(|k| (log_id(term, next + k), content(next + k, term))).collect();
            for (id, _) in &batch {
                written.insert(id.index, term);
            }
            next += batch.len() as u64;
            let (done, rx) = done_channel();
            // Appends are pipelined: this one is waited for only now and then. Some are synced on this
            // thread, as a follower's are, while callbacks of others may still be queued.
            let appended =
                if rng.below(3) == 0 { wal.append_and_sync(batch, done) } else { wal.append(batch, done) };
            (appended, (rng.below(4) == 0).then_some(rx))
        } else if roll < 88 {
            term += 1;
            vote = Vote::new(term, 1 + rng.below(3));
            let (done, rx) = done_channel();
            (wal.save_vote(&vote, done), Some(rx))
        } else if roll < 94 {
            let Some(&last) = written.keys().next_back() else { continue };
            let from = last.saturating_sub(rng.below(3)).max(purged + 1);
            written.retain(|&i, _| i < from);
            next = from;
            let (done, rx) = done_channel();
            (wal.truncate(from, done), Some(rx))
        } else {
            let Some(&first) = written.keys().next() else { continue };
            let upto = first + rng.below(written.len() as u64 / 2 + 1);
            let Some(&upto_term) = written.get(&upto) else { continue };
            let (done, rx) = done_channel();
            let result = wal.purge(&log_id(upto_term, upto), done);
            if result.is_ok() {
                written.retain(|&i, _| i > upto);
                purged = upto;
            }
            (result, Some(rx))
        };
        // A waited-for write that is durable makes everything written before it durable too.
        if let (Ok(()), Some(rx)) = (&result, rx) {
            if wait(&rx).is_err() {
                return;
            }
            let mut a = acked.lock().expect("never poisoned");
            a.entries = written.clone();
            a.purged = purged;
            if vote.leader_id.term > 0 {
                a.vote = Some(vote);
            }
            drop(a);
            if roll >= 94 {
                let _ = wal.remove_purged_segments();
            }
        }
        if result.is_err() {
            return;
        }
    }
}

/// Checks the recovered log against what was acknowledged, and returns it as the new acknowledged state.
fn check_recovered(wal: &Wal, acked: &Acked) -> Acked {
    let meta = wal.meta();
    let purged = meta.last_purged.map_or(0, |p| p.index);
    assert!(purged >= acked.purged, "purge point went back from {} to {purged}", acked.purged);
    if let Some(vote) = acked.vote {
        let got = meta.vote.expect("an acknowledged vote survives");
        assert!(
            got.leader_id.term > vote.leader_id.term || got == vote,
            "acknowledged vote {vote:?} came back as {got:?}: this node could vote twice in a term"
        );
    }
    let last = wal.last_log_id().map_or(0, |l| l.index);
    let entries = wal.read(0, u64::MAX).expect("test step");
    let mut recovered = BTreeMap::new();
    for ((id, bytes), expected_index) in entries.iter().zip(purged + 1..) {
        assert_eq!(id.index, expected_index, "the recovered log has a hole");
        assert_eq!(bytes, &content(id.index, id.leader_id.term), "entry {} came back changed", id.index);
        recovered.insert(id.index, id.leader_id.term);
    }
    // Every acknowledged entry above the purge point is there, except that a truncation written but not
    // yet acknowledged (it cuts at most the last three) may have replaced the end of the log.
    let acked_last = acked.entries.keys().next_back().copied().unwrap_or(0);
    for (&index, &term) in acked.entries.range(purged + 1..acked_last.saturating_sub(2)) {
        assert_eq!(
            recovered.get(&index),
            Some(&term),
            "acknowledged entry {index} (term {term}) is lost or changed; the log ends at {last}"
        );
    }
    Acked { entries: recovered, purged, vote: meta.vote }
}

#[test]
fn acknowledged_writes_and_votes_survive_power_loss_at_random_points() {
    let mut rng = Rng(0x5eed);
    let mut fs = CrashFs::new();
    let mut acked = Acked::default();
    for round in 0..40 {
        let wal = match Wal::open(Arc::new(fs.clone()), small()) {
            Ok(wal) => wal,
            Err(e) => {
                dump(&fs);
                panic!("round {round}: the log does not recover: {e}");
            }
        };
        acked = check_recovered(&wal, &acked);
        let shared = Arc::new(Mutex::new(acked.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let wal = Arc::new(wal);
        let writer = {
            let (wal, shared, stop) = (Arc::clone(&wal), Arc::clone(&shared), Arc::clone(&stop));
            let seed = rng.next();
            std::thread::spawn(move || write_until_crash(&wal, &shared, seed, &stop))
        };
        std::thread::sleep(Duration::from_micros(200 + rng.below(20_000)));
        fs = fs.crash(round % 2 == 1, &mut rng);
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("the writer ends");
        acked = shared.lock().expect("never poisoned").clone();
    }
    let wal = Wal::open(Arc::new(fs), small()).expect("the log recovers");
    let last = check_recovered(&wal, &acked);
    assert!(last.entries.len() + last.purged as usize > 100, "the rounds wrote little: {last:?}");
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "wal-{tag}-{}-{}",
        std::process::id(),
        crate::node::state_machine::now_ms()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Writes entries 1..=n in term 1 to a log in `path` and closes it.
fn fill(path: &std::path::Path, n: u64) {
    let wal = Wal::open(Arc::new(OsDir::open(path, Duration::from_secs(5)).expect("test step")), small())
        .expect("test step");
    for index in 1..=n {
        let (done, rx) = done_channel();
        wal.append([(log_id(1, index), content(index, 1))], done).expect("test step");
        wait(&rx).expect("test step");
    }
}

fn segments(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut names: Vec<_> = OsDir::open(path, Duration::from_secs(5))
        .expect("test step")
        .list()
        .expect("test step")
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names.into_iter().map(|n| path.join(n)).collect()
}

/// The newest segment file in `path` that holds records (later ones were created ahead, unused).
fn last_written_segment(path: &std::path::Path) -> std::path::PathBuf {
    segments(path)
        .into_iter()
        .rev()
        .find(|f| std::fs::read(f).expect("test step")[..16].iter().any(|&b| b != 0))
        .expect("a segment with data")
}

/// A log of small segments over a fresh crash-simulating file layer.
fn crash_wal() -> (CrashFs, Wal) {
    let fs = CrashFs::new();
    let wal = Wal::open(Arc::new(fs.clone()), small()).expect("open");
    (fs, wal)
}

/// `wal` reopened after a power loss of `fs` (seeded by `seed`): only what a completed sync covers is left.
fn reopen_after_crash(fs: &CrashFs, wal: Wal, seed: u64) -> Wal {
    let crashed = fs.crash(true, &mut Rng(seed));
    drop(wal);
    Wal::open(Arc::new(crashed), small()).expect("reopen")
}

#[test]
fn an_append_synced_on_its_own_thread_is_durable_when_it_returns() {
    let (fs, wal) = crash_wal();
    let (done, rx) = done_channel();
    wal.append_and_sync(vec![(log_id(1, 1), content(1, 1))], done).expect("append");
    assert!(matches!(rx.try_recv(), Ok(Ok(()))), "the callback ran before the append returned");
    let wal = reopen_after_crash(&fs, wal, 7);
    assert_eq!(wal.read(1, 2).expect("read"), vec![(log_id(1, 1), content(1, 1))]);
}

#[test]
fn the_bytes_of_entries_after_an_index_are_counted_across_a_reopen() {
    let path = temp_dir("entry-bytes");
    fill(&path, 6);
    let wal = Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("dir")), small())
        .expect("reopen");
    let bytes = |from: u64| (from + 1..=6).map(|i| content(i, 1).len() as u64).sum::<u64>();
    assert_eq!(wal.entry_bytes_after(0), bytes(0));
    assert_eq!(wal.entry_bytes_after(4), bytes(4));
    assert_eq!(wal.entry_bytes_after(6), 0);
    let _ = std::fs::remove_dir_all(&path);
}

/// A log that synced entry 1, wrote (without a sync) that it is committed, and was reopened after a
/// process kill, which keeps what was written, synced or not.
fn committed_then_killed() -> (CrashFs, Wal) {
    let (fs, wal) = crash_wal();
    let (done, rx) = done_channel();
    wal.append(vec![(log_id(1, 1), content(1, 1))], done).expect("append");
    wait(&rx).expect("synced");
    wal.save_committed(Some(&log_id(1, 1))).expect("committed");
    assert_eq!(wal.meta().committed, Some(log_id(1, 1)), "read back at once");
    let killed = fs.kill();
    drop(wal);
    let wal = Wal::open(Arc::new(killed.clone()), small()).expect("reopen");
    assert_eq!(wal.meta().committed, Some(log_id(1, 1)), "kept over a process kill");
    (killed, wal)
}

#[test]
fn the_committed_id_is_written_at_once_and_made_durable_by_the_next_sync() {
    let (killed, wal) = committed_then_killed();
    let (done, rx) = done_channel();
    wal.append(vec![(log_id(1, 2), content(2, 1))], done).expect("append");
    wait(&rx).expect("synced");
    let wal = reopen_after_crash(&killed, wal, 3);
    assert_eq!(wal.meta().committed, Some(log_id(1, 1)), "durable once a later sync covers it");
}

#[test]
fn what_a_killed_process_left_unsynced_is_synced_when_the_log_reopens() {
    let (killed, wal) = committed_then_killed();
    // A power loss right after the restart, before any new write, keeping no unsynced sector.
    let crashed = killed.crash(false, &mut Rng(5));
    drop(wal);
    let wal = Wal::open(Arc::new(crashed), small()).expect("reopen");
    assert_eq!(wal.meta().committed, Some(log_id(1, 1)), "synced at the reopen");
}

#[test]
fn a_torn_tail_is_cut_and_writing_resumes_after_it() {
    let path = temp_dir("torn");
    fill(&path, 30);
    // Tear the last record: zero its last sector, as a crash in the middle of its write leaves it.
    let last = last_written_segment(&path);
    let mut bytes = std::fs::read(&last).expect("test step");
    let (mut offset, mut last_record) = (0, 0);
    while let super::record::Scanned::Record { next, .. } = super::record::scan(&bytes, offset) {
        (last_record, offset) = (offset, next);
    }
    // The record's part in its last sector never reached the disk.
    let last_sector = (offset - 1) / 512 * 512;
    bytes[last_sector.max(last_record + 16)..offset].fill(0);
    std::fs::write(&last, &bytes).expect("test step");

    let wal = Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("test step")), small())
        .expect("test step");
    let last_index = wal.last_log_id().expect("test step").index;
    assert_eq!(last_index, 29, "the torn entry 30 is cut, 1..=29 stay");
    let (done, rx) = done_channel();
    wal.append([(log_id(2, 30), content(30, 2))], done).expect("test step");
    wait(&rx).expect("test step");
    drop(wal);
    let wal = Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("test step")), small())
        .expect("test step");
    let entries = wal.read(1, 31).expect("test step");
    assert_eq!(entries.len(), 30);
    assert_eq!(entries[29], (log_id(2, 30), content(30, 2)));
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn a_flipped_bit_in_the_middle_refuses_to_open() {
    let path = temp_dir("flip");
    fill(&path, 30);
    let first = &segments(&path)[0];
    let mut bytes = std::fs::read(first).expect("test step");
    // A bit inside the third record's payload of the first (fully synced) segment.
    bytes[3 * 16 + 200] ^= 0x20;
    std::fs::write(first, &bytes).expect("test step");
    let error = Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("test step")), small())
        .expect_err("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn a_flipped_bit_in_the_last_segment_is_not_taken_for_a_torn_write() {
    let fs = CrashFs::new();
    let wal = Wal::open(Arc::new(fs.clone()), WalOptions { segment_bytes: 1 << 20, create_ahead: false })
        .expect("test step");
    for index in 1..=5 {
        let (done, rx) = done_channel();
        wal.append([(log_id(1, index), vec![0xab; 600])], done).expect("test step");
        wait(&rx).expect("test step");
    }
    drop(wal);
    fs.flip_bit(&segment_name(0), 700);
    let error = Wal::open(Arc::new(fs), WalOptions::default()).expect_err("refused");
    assert!(error.to_string().contains("checksum"), "{error}");
}

#[test]
fn purged_segments_are_deleted_and_the_vote_outlives_them() {
    let fs = CrashFs::new();
    let wal = Wal::open(Arc::new(fs.clone()), small()).expect("test step");
    let (done, rx) = done_channel();
    wal.save_vote(&Vote::new_committed(3, 2), done).expect("test step");
    wait(&rx).expect("test step");
    for index in 1..=100 {
        let (done, rx) = done_channel();
        wal.append([(log_id(3, index), content(index, 3))], done).expect("test step");
        wait(&rx).expect("test step");
    }
    let before = fs.list().expect("test step").len();
    let (done, rx) = done_channel();
    wal.purge(&log_id(3, 90), done).expect("test step");
    wait(&rx).expect("test step");
    assert!(wal.remove_purged_segments().expect("test step") > 0);
    assert!(fs.list().expect("test step").len() < before);
    drop(wal);
    let wal = Wal::open(Arc::new(fs), small()).expect("test step");
    assert_eq!(wal.meta().vote, Some(Vote::new_committed(3, 2)));
    assert_eq!(wal.meta().last_purged, Some(log_id(3, 90)));
    let entries = wal.read(0, u64::MAX).expect("test step");
    assert_eq!(entries.iter().map(|(id, _)| id.index).collect::<Vec<_>>(), (91..=100).collect::<Vec<_>>());
}

/// Prints every record of every segment (for debugging a failed recovery).
pub fn dump(fs: &CrashFs) {
    let mut names = fs.list().expect("test step");
    names.sort();
    for name in names {
        let file = fs.open(&name).expect("test step");
        let mut image = vec![0u8; file.size().expect("test step") as usize];
        file.read_exact_at(&mut image, 0).expect("test step");
        let mut offset = 0;
        let mut line = format!("{name}:");
        loop {
            match super::record::scan(&image, offset) {
                super::record::Scanned::Record { kind, payload, next } => {
                    let mut r = super::meta::Reader::new(payload);
                    let what = match kind {
                        super::record::Kind::Entry => format!("E{}", r.log_id().expect("test step").index),
                        super::record::Kind::Truncate => format!("T{}", r.u64().expect("test step")),
                        super::record::Kind::Purge => format!("P{}", r.log_id().expect("test step").index),
                        super::record::Kind::Meta => {
                            format!("M{:?}", r.meta().expect("test step").last_purged.map(|p| p.index))
                        }
                        k => format!("{k:?}"),
                    };
                    line.push(' ');
                    line.push_str(&what);
                    offset = next;
                }
                other => {
                    line.push_str(&format!(" <{other:?} at {offset}>"));
                    break;
                }
            }
        }
        eprintln!("{line}");
    }
}

#[test]
fn a_zeroed_sector_in_the_synced_part_of_the_last_segment_refuses_to_open() {
    let path = temp_dir("zeroed");
    let options = WalOptions { segment_bytes: 1 << 20, create_ahead: false };
    let open =
        || Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("test step")), options);
    let wal = open().expect("test step");
    for index in 1..=40 {
        let (done, rx) = done_channel();
        wal.append([(log_id(1, index), vec![0xab; 600])], done).expect("test step");
        wait(&rx).expect("test step");
    }
    drop(wal);
    let file = path.join(segment_name(0));
    let mut bytes = std::fs::read(&file).expect("test step");
    // A sector in the middle of the acknowledged records reads back as zeros (a latent sector error).
    bytes[8 * 512..9 * 512].fill(0);
    std::fs::write(&file, &bytes).expect("test step");
    let error = open().expect_err("refused: every record there was synced");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
    assert!(error.to_string().contains("synced through"), "{error}");
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn a_log_whose_sync_failed_is_refused_in_the_same_boot_and_recovered_after_a_reboot() {
    let fs = CrashFs::new();
    let wal = Wal::open_in_boot(Arc::new(fs.clone()), small(), "boot-1").expect("open");
    let (done, rx) = done_channel();
    wal.append([(log_id(1, 1), content(1, 1))], done).expect("test step");
    wait(&rx).expect("durable");
    fs.fail_next_sync_of(&segment_name(0));
    let (done, rx) = done_channel();
    wal.append([(log_id(1, 2), content(2, 1))], done).expect("written");
    assert!(wait(&rx).is_err(), "the sync failed");
    drop(wal);
    // The process restarts in the same boot: the page cache still reads entry 2 back, and a sync now passes.
    let restarted = fs.kill();
    let error = Wal::open_in_boot(Arc::new(restarted.clone()), small(), "boot-1").expect_err("refused");
    assert!(error.to_string().contains("sync of this write-ahead log failed"), "{error}");
    // After a reboot what is read is what the disk holds.
    let rebooted = restarted.crash(false, &mut Rng(7));
    let wal = Wal::open_in_boot(Arc::new(rebooted.clone()), small(), "boot-2").expect("opens after a reboot");
    assert_eq!(wal.last_log_id().map(|id| id.index), Some(1), "entry 2 never reached the disk");
    assert!(!rebooted.list().expect("list").iter().any(|n| n == super::sync_failure::MARKER));
}

#[test]
fn a_last_segment_whose_header_reads_as_zeros_but_was_synced_refuses_to_open() {
    let path = temp_dir("zeroed-header");
    fill(&path, 30);
    let last = last_written_segment(&path);
    let mut bytes = std::fs::read(&last).expect("test step");
    bytes[..512].fill(0);
    std::fs::write(&last, &bytes).expect("test step");
    let error = Wal::open(Arc::new(OsDir::open(&path, Duration::from_secs(5)).expect("test step")), small())
        .expect_err("refused, not dropped as unused");
    assert!(error.to_string().contains("header reads as zeros"), "{error}");
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn a_sync_that_fails_while_the_log_opens_leaves_the_marker_too() {
    let fs = CrashFs::new();
    let wal = Wal::open_in_boot(Arc::new(fs.clone()), small(), "boot-1").expect("open");
    let (done, rx) = done_channel();
    wal.append([(log_id(1, 1), content(1, 1))], done).expect("test step");
    wait(&rx).expect("durable");
    drop(wal);
    let restarted = fs.kill();
    // The pages the killed process left failed to reach the disk in the background: the next sync says so.
    restarted.fail_next_sync_of(&segment_name(0));
    assert!(Wal::open_in_boot(Arc::new(restarted.clone()), small(), "boot-1").is_err());
    let error = Wal::open_in_boot(Arc::new(restarted), small(), "boot-1").expect_err("refused");
    assert!(error.to_string().contains("failed earlier in this boot"), "{error}");
}
