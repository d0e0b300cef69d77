//! Whether the state machine's trees can be trusted at start: a marker file that only a clean stop leaves.
//!
//! The state machine writes sled without a sync of its own and without making a batch atomic: after a
//! crash (a kill, a panic, a power loss) its trees may hold part of a batch, or lose writes sled had not
//! yet written out. So a node trusts them only when the previous run stopped cleanly: it flushed sled,
//! synced sled's files, and then left this marker. A start takes the marker away before anything is
//! applied; without one, the state machine starts again from its durable snapshot and openraft applies the
//! durable log after it again ([`super::state_machine::PreviousStop`]).

use std::fs::{self, File};
use std::io;
use std::path::Path;

use super::state_machine::PreviousStop;

/// The marker's name in the node's data directory.
const MARKER: &str = "stopped-cleanly";

/// How the previous run in `data_dir` stopped; a clean stop's marker is removed (durably), so a crash
/// from now on is seen as one.
pub fn take(data_dir: &Path) -> io::Result<PreviousStop> {
    match fs::remove_file(data_dir.join(MARKER)) {
        Ok(()) => {
            sync_dir(data_dir)?;
            Ok(PreviousStop::Clean)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(PreviousStop::Unclean),
        Err(e) => Err(e),
    }
}

/// Records a clean stop in `data_dir`, once sled's database in `sled_dir` is flushed: syncs every file
/// of the database and every directory under it (sled keeps large items as files in `blobs/`, written
/// without a sync), then writes and syncs the marker.
pub fn leave(data_dir: &Path, sled_dir: &Path) -> io::Result<()> {
    sync_tree(sled_dir)?;
    File::create(data_dir.join(MARKER))?.sync_all()?;
    sync_dir(data_dir)
}

/// Syncs every file under `dir`, at any depth, then each directory after its contents; the number of
/// files synced.
fn sync_tree(dir: &Path) -> io::Result<usize> {
    let mut synced = 0;
    for item in fs::read_dir(dir)? {
        let item = item?;
        let kind = item.file_type()?;
        if kind.is_dir() {
            synced += sync_tree(&item.path())?;
        } else if kind.is_file() {
            File::open(item.path())?.sync_all()?;
            synced += 1;
        }
    }
    sync_dir(dir)?;
    Ok(synced)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stop_that_left_the_marker_is_clean_and_the_marker_counts_once() {
        let dir = std::env::temp_dir().join(format!("clean-stop-{}", std::process::id()));
        let sled_dir = dir.join("sled");
        fs::create_dir_all(&sled_dir).expect("dirs");
        fs::write(sled_dir.join("db"), b"rows").expect("write");
        assert_eq!(take(&dir).expect("take"), PreviousStop::Unclean, "a first start");
        leave(&dir, &sled_dir).expect("leave");
        assert_eq!(take(&dir).expect("take"), PreviousStop::Clean);
        assert_eq!(take(&dir).expect("take"), PreviousStop::Unclean, "a crash after that start");
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_clean_stop_syncs_the_files_in_sleds_subdirectories() {
        let dir = std::env::temp_dir().join(format!("clean-stop-tree-{}", std::process::id()));
        let blobs = dir.join("sled").join("blobs");
        fs::create_dir_all(&blobs).expect("dirs");
        fs::write(dir.join("sled").join("db"), b"rows").expect("write");
        fs::write(blobs.join("17"), b"a large item").expect("write");
        fs::write(blobs.join("18"), b"another").expect("write");
        assert_eq!(sync_tree(&dir.join("sled")).expect("sync"), 3, "the database file and both blobs");
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
