//! What a failed sync leaves behind, so that the next start in the same boot refuses the log.
//!
//! After a failed `fdatasync` the log fails stop, which is right. But Linux may keep the pages it could
//! not write readable and clean in the page cache: a restarted process would read the records back as
//! they were written, its own sync in [`super::Wal::open`] would succeed, and entries and votes that never
//! reached the disk would count as durable. So the log writes a marker naming the boot it failed in; an
//! open in that boot refuses the log. After a reboot the page cache is gone, what is read is what the disk
//! holds, and recovery judges it as after a power loss ([`super::recovery`]); the marker is removed.

use std::io;
use std::sync::Arc;

use super::fs::{WalDir, WalFile};

/// The marker's name in the log's directory.
pub const MARKER: &str = "SYNC-FAILED";

/// A failed `fdatasync`, told apart from the log's other I/O errors: only a failed sync leaves the marker
/// (a full disk at a segment's creation, say, does not keep the next start in this boot from the log).
#[derive(Debug)]
struct SyncFailed(io::Error);

impl std::fmt::Display for SyncFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sync failed: {}", self.0)
    }
}

impl std::error::Error for SyncFailed {}

/// `file.sync_data()`, its error marked as a failed sync.
pub fn sync(file: &dyn WalFile) -> io::Result<()> {
    file.sync_data().map_err(|e| io::Error::new(e.kind(), SyncFailed(e)))
}

/// Whether `error` is a failed sync ([`sync`]).
pub fn is_sync_failure(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<SyncFailed>())
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or `"unknown"` where there is none (then a failed
/// sync is refused until an operator removes the marker).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Leaves the marker for a sync that failed with `why` in boot `boot`. What matters is that a start in
/// this boot sees it, which needs no sync: the disk that failed the sync will likely fail the marker's
/// too, and then a reboot loses it, rightly (recovery then reads what the disk holds). Best effort: the
/// log has failed stop either way.
pub fn record(dir: &dyn WalDir, boot: &str, why: &str) {
    let text = format!("{boot}\n{why}\n");
    match dir.write_now(MARKER, text.as_bytes()) {
        Ok(file) => {
            if let Err(e) = file.sync_data().and_then(|()| dir.sync()) {
                tracing::warn!(error = %e, "write-ahead log: the failed-sync marker holds for this boot only");
            }
        }
        Err(e) => tracing::error!(error = %e, "write-ahead log: could not leave the failed-sync marker"),
    }
}

/// Where a failed sync of one log leaves its marker.
#[derive(Clone)]
pub struct FailureMarker {
    /// The log's directory.
    pub dir: Arc<dyn WalDir>,
    /// The boot the log was opened in.
    pub boot: Arc<str>,
}

impl FailureMarker {
    /// Leaves the marker for a sync that failed with `why`.
    pub fn leave(&self, why: &str) {
        record(self.dir.as_ref(), &self.boot, why);
    }
}

/// Refuses a log whose sync failed in boot `boot`; forgets a failure from an earlier boot.
pub fn check(dir: &dyn WalDir, boot: &str) -> io::Result<()> {
    if !dir.list()?.iter().any(|name| name == MARKER) {
        return Ok(());
    }
    let file = dir.open(MARKER)?;
    let mut bytes = vec![0u8; usize::try_from(file.size()?).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    let failed_in = lines.next().unwrap_or_default().trim_matches('\0');
    // A marker without a boot (a crash between its creation and its text) counts as this boot's.
    if failed_in == boot || failed_in.is_empty() || boot == "unknown" {
        let why = lines.next().unwrap_or("unknown error");
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a sync of this write-ahead log failed earlier in this boot ({why}); the page cache may hold \
                 records that never reached the disk. Reboot, or check the disk and remove {MARKER}, to start"
            ),
        ));
    }
    tracing::warn!(failed_in, "write-ahead log: a sync failed in an earlier boot; recovering from the disk");
    dir.remove(MARKER)?;
    dir.sync()
}
