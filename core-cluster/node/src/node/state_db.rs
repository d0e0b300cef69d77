//! The state machine's sled database: where it lives, how it is opened, and why an untrusted one is
//! started afresh.
//!
//! sled never gives a file's space back to the file system, and it reuses freed space only partly: every
//! start after a crash rewrote the whole state (request rows and feed rows) over the untrusted trees, and
//! in a 60-minute soak with a fault every two minutes the database file of a core node grew to 1.2 GB for
//! about 150 MB of rows, while between restarts it stayed flat. After a stop that was not clean the trees
//! are not trusted anyway ([`super::clean_stop`]): the state comes from the current snapshot and the log
//! ([`super::state_machine::PreviousStop`]). So the database is then removed and created empty before the
//! snapshot is loaded, and its size is bounded by what one run writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::CoreError;
use super::state_machine::PreviousStop;

/// How long to wait for the database's lock held by an instance that is still exiting.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The most memory sled keeps for the state machine's pages (its default is 1 GiB). The entries' index
/// lives in memory beside it and their contents in their own log, so sled holds request rows, feed rows
/// and tenants; a bounded cache keeps a node's resident size flat under sustained writes (`mesh soak`).
const CACHE_BYTES: u64 = 128 * 1024 * 1024;

/// The tree in which an older layout kept the snapshot's metadata; a database that still has it is never
/// removed, since [`super::state_machine::StateMachineStore::open`] moves that metadata out of it.
const LEGACY_SNAPSHOT_TREE: &[u8] = b"sm_snapshot";

/// The database's directory in a node's data directory.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("sled-state")
}

/// Opens the state machine's database in `dir`; after a stop that was not clean it is first emptied.
pub async fn open(dir: PathBuf, previous: PreviousStop) -> Result<sled::Db, CoreError> {
    let db = open_waiting(dir.clone()).await?;
    let legacy = db.tree_names().iter().any(|name| name.as_ref() == LEGACY_SNAPSHOT_TREE);
    if previous == PreviousStop::Clean || legacy {
        return Ok(db);
    }
    drop(db);
    let removed = dir.clone();
    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&removed))
        .await
        .map_err(std::io::Error::other)??;
    tracing::info!(path = %dir.display(), "the previous stop was not clean: the state database starts empty");
    open_waiting(dir).await
}

/// Opens a sled database at `path` (sled's open blocks, so it runs off the runtime).
///
/// sled holds an exclusive lock on its files. A previous instance that is still exiting (a quick restart)
/// holds it for a moment, so a locked database is retried for up to [`LOCK_WAIT`].
async fn open_waiting(path: PathBuf) -> Result<sled::Db, CoreError> {
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        // No periodic flush: the state machine is made durable at snapshots, and the log is purged only up
        // to a durable snapshot, so sled's own flush every 500 ms (a `sync_file_range` and an `fsync`)
        // bought nothing but disk syncs queued with the write-ahead log's `fdatasync`.
        let config = sled::Config::new().path(path.clone()).flush_every_ms(None).cache_capacity(CACHE_BYTES);
        let opened =
            tokio::task::spawn_blocking(move || config.open()).await.map_err(std::io::Error::other)?;
        match opened {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && tokio::time::Instant::now() < deadline =>
            {
                tracing::info!(path = %path.display(), "data dir is locked by an exiting instance; waiting");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            opened => return Ok(opened?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_untrusted_database_starts_empty_and_a_trusted_one_keeps_its_trees() {
        let data = std::env::temp_dir().join(format!("state-db-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let db = open(dir(&data), PreviousStop::Clean).await.expect("open");
        db.open_tree("sm_request_rows").expect("tree").insert(b"k", b"v").expect("insert");
        db.flush().expect("flush");
        drop(db);
        let db = open(dir(&data), PreviousStop::Clean).await.expect("reopen");
        assert!(db.open_tree("sm_request_rows").expect("tree").contains_key(b"k").expect("read"));
        drop(db);
        let db = open(dir(&data), PreviousStop::Unclean).await.expect("reopen after a crash");
        assert!(db.open_tree("sm_request_rows").expect("tree").is_empty(), "started empty");
        db.open_tree(LEGACY_SNAPSHOT_TREE).expect("tree").insert(b"meta", b"m").expect("insert");
        db.flush().expect("flush");
        drop(db);
        let db = open(dir(&data), PreviousStop::Unclean).await.expect("reopen after a crash");
        assert!(!db.open_tree(LEGACY_SNAPSHOT_TREE).expect("tree").is_empty(), "an older layout is kept");
        drop(db);
        let _ = std::fs::remove_dir_all(&data);
    }
}
