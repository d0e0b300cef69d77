//! A scratch directory for one benchmark run (cluster data, logs, the fsync file), removed when dropped
//! unless the run failed and its logs are worth keeping. [`run_kept`] is every suite's entry: it runs the
//! suite in a fresh one and keeps it when the run fails.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

/// Runs `run` in a fresh scratch directory under `parent` (see [`ScratchDir::create`] for `prefix`). The
/// directory is removed afterwards, unless `run` failed: then it is kept, and where is printed to stderr,
/// so that the failed run's logs can be read.
pub fn run_kept<T>(
    parent: &Path,
    prefix: &str,
    run: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut scratch = ScratchDir::create(parent, prefix)?;
    let result = run(scratch.path());
    if result.is_err() {
        scratch.keep();
        eprintln!("logs of the failed run kept in {}", scratch.path().display());
    }
    result
}

/// A fresh directory under a parent; removed on drop unless [`ScratchDir::keep`] was called.
#[derive(Debug)]
pub struct ScratchDir {
    /// The directory.
    path: PathBuf,
    /// Whether to leave it in place on drop.
    keep: bool,
}

impl ScratchDir {
    /// Creates `<parent>/<prefix>-<pid>-<unix ms>`, as an absolute path: processes that run elsewhere
    /// (wrangler runs in `edge-worker/`) must not resolve a relative one against their own directory.
    pub fn create(parent: &Path, prefix: &str) -> anyhow::Result<Self> {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let parent =
            std::path::absolute(parent).with_context(|| format!("resolving {}", parent.display()))?;
        let path = parent.join(format!("{prefix}-{}-{ms}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path, keep: false })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory in place when dropped (to read the logs of a failed run).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
