//! This node's view of the core's decisions: the [`Cutoffs`] every cache layer checks, the recent
//! changes the edge pulls (`GET /v1/changes`), and whether the view has caught up with the core.
//!
//! The view is kept in `<data-dir>/core-view.json` (at most every [`SAVE_INTERVAL`] and at shutdown), so
//! a restarted node resumes the feed from its revision instead of dropping every answer it held. Until
//! the feed has delivered its first batch after a start, nothing held locally is served: the answers
//! on disk may have been invalidated while the node was away.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use shared::changes::{Changes, Revised};
use shared::completion::CachedCompletion;
use shared::cutoffs::Cutoffs;

/// Changes kept for the edge; an edge further behind resyncs.
pub const RECENT_CHANGES: usize = 10_000;
/// Least time between two saves of the view.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);

/// The changes kept for the edge.
#[derive(Debug, Default)]
struct Recent {
    /// Oldest first.
    changes: VecDeque<Revised>,
    /// Every change after this revision is in `changes` (an edge at or past it can follow).
    complete_after: u64,
}

/// The view, shared by the request path, the feed follower and the HTTP handlers.
#[derive(Debug)]
pub struct CoreView {
    cutoffs: RwLock<Cutoffs>,
    /// The latest changes, oldest first, for the edge.
    recent: Mutex<Recent>,
    /// Whether the feed has delivered a batch since this process started.
    caught_up: AtomicBool,
    /// Where the view is kept, if anywhere, and when it was last saved.
    file: Option<(PathBuf, Mutex<Option<Instant>>)>,
}

impl CoreView {
    /// The view kept in `data_dir` (a fresh one if there is none or it does not parse), or a fresh
    /// view in memory only.
    pub fn open(data_dir: Option<&std::path::Path>) -> Self {
        let file = data_dir.map(|dir| dir.join("core-view.json"));
        let cutoffs = file
            .as_ref()
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|bytes| match serde_json::from_slice::<Cutoffs>(&bytes) {
                Ok(cutoffs) => Some(cutoffs),
                Err(error) => {
                    tracing::warn!(%error, "the kept core view does not parse: resyncing");
                    None
                }
            })
            .unwrap_or_default();
        Self {
            cutoffs: RwLock::new(cutoffs),
            recent: Mutex::new(Recent::default()),
            caught_up: AtomicBool::new(false),
            file: file.map(|path| (path, Mutex::new(None))),
        }
    }

    /// Whether `entry` may be served or kept: the view has caught up, and no cutoff covers it.
    pub fn admits(&self, entry: &CachedCompletion) -> bool {
        self.caught_up() && self.read().admits(entry)
    }

    /// Whether `entry` is covered by no cutoff known now (whether or not the view has caught up): for
    /// answers served stale while the core is out of reach.
    pub fn not_invalidated(&self, entry: &CachedCompletion) -> bool {
        self.read().admits(entry)
    }

    /// Whether the feed has delivered a batch since this process started.
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// The revision to resume the feed from.
    pub fn revision(&self) -> u64 {
        self.read().revision()
    }

    /// Whether `tenant` caches answers to sampled requests.
    pub fn caches_sampled(&self, tenant: &str) -> bool {
        self.read().caches_sampled(tenant)
    }

    /// Applies `change`, made at the core's log time `at_ms`, at once: a change this node asked for,
    /// whose feed event has not arrived yet. The revision does not move (the feed brings it again).
    pub fn cut_now(&self, change: &shared::changes::Change, at_ms: i64) {
        let mut cutoffs = self.cutoffs.write().unwrap_or_else(PoisonError::into_inner);
        let revision = cutoffs.revision();
        cutoffs.apply(&Revised { revision, at_ms, change: change.clone() });
    }

    /// Applies a batch of the core's feed and remembers its changes for the edge.
    pub fn apply(&self, batch: &Changes) {
        let before = {
            let mut cutoffs = self.cutoffs.write().unwrap_or_else(PoisonError::into_inner);
            let before = cutoffs.revision();
            cutoffs.apply_batch(batch);
            before
        };
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(resync) = &batch.resync {
            // What came before the resync is unknown to this view: an edge behind it resyncs too.
            recent.changes.clear();
            recent.complete_after = resync.revision;
        } else if !self.caught_up() {
            // The first batch since this process started: complete from the revision it resumed at.
            recent.complete_after = before;
        }
        recent.changes.extend(batch.changes.iter().cloned());
        while recent.changes.len() > RECENT_CHANGES {
            if let Some(dropped) = recent.changes.pop_front() {
                recent.complete_after = recent.complete_after.max(dropped.revision);
            }
        }
        drop(recent);
        self.caught_up.store(true, Ordering::Release);
        self.save(false);
    }

    /// What an edge at revision `since` must apply: the changes after it, or a resync from this view
    /// when `since` is 0 or older than the changes kept.
    pub fn changes_since(&self, since: u64) -> Changes {
        let cutoffs = self.read();
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let revision = cutoffs.revision();
        let covered = since > 0 && since >= recent.complete_after && since <= revision;
        if !covered {
            return Changes { revision, resync: Some(cutoffs.resync_point()), changes: Vec::new() };
        }
        let changes = recent.changes.iter().filter(|r| r.revision > since).cloned().collect();
        Changes { revision, resync: None, changes }
    }

    /// Writes the view to its file, unless it was written less than [`SAVE_INTERVAL`] ago (`force`:
    /// regardless, at shutdown).
    pub fn save(&self, force: bool) {
        let Some((path, last)) = &self.file else { return };
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        if !force && last.is_some_and(|at| at.elapsed() < SAVE_INTERVAL) {
            return;
        }
        let bytes = match serde_json::to_vec(&*self.read()) {
            Ok(bytes) => bytes,
            Err(error) => return tracing::warn!(%error, "core view not encoded"),
        };
        let temp = path.with_extension("json.tmp");
        let written = std::fs::write(&temp, bytes).and_then(|()| std::fs::rename(&temp, path));
        match written {
            Ok(()) => *last = Some(Instant::now()),
            Err(error) => tracing::warn!(%error, path = %path.display(), "core view not saved"),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cutoffs> {
        self.cutoffs.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use shared::changes::{Change, Resync};

    use super::*;

    fn key_change(revision: u64, key: &str) -> Revised {
        Revised {
            revision,
            at_ms: revision as i64 * 10,
            change: Change::Key { tenant: "t".into(), key: key.into() },
        }
    }

    #[test]
    fn an_edge_follows_from_its_revision_or_resyncs_from_the_view() {
        let view = CoreView::open(None);
        let resync = Resync { revision: 4, floor_ms: 40, ..Default::default() };
        view.apply(&Changes { revision: 4, resync: Some(resync), changes: vec![] });
        view.apply(&Changes {
            revision: 6,
            resync: None,
            changes: vec![key_change(5, "a"), key_change(6, "b")],
        });
        let delta = view.changes_since(5);
        assert!(delta.resync.is_none());
        assert_eq!(delta.changes, vec![key_change(6, "b")]);
        assert_eq!(delta.revision, 6);
        let fresh = view.changes_since(0);
        let resync = fresh.resync.expect("a resync for a new edge");
        assert_eq!((resync.revision, resync.floor_ms), (6, 60), "the floor is the latest cutoff");
        assert!(view.changes_since(2).resync.is_some(), "older than the resync the view started from");
        assert!(view.changes_since(9).resync.is_some(), "ahead of this node: another node's revision");
        // Progress moves the revision on without changes: an edge behind it follows, no resync.
        view.apply(&Changes { revision: 12, resync: None, changes: vec![] });
        let quiet = view.changes_since(6);
        assert!(quiet.resync.is_none() && quiet.changes.is_empty() && quiet.revision == 12);
    }

    #[test]
    fn nothing_is_admitted_before_the_feed_caught_up_and_the_view_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("core-view-{}-{}", std::process::id(), line!()));
        std::fs::create_dir_all(&dir).expect("dir");
        let entry = |key: &str, created_ms| CachedCompletion {
            tenant: "t".into(),
            etag: String::new(),
            created_ms,
            ..CachedCompletion::example(key, "a")
        };
        {
            let view = CoreView::open(Some(&dir));
            assert!(!view.admits(&entry("a", 100)), "not caught up yet");
            assert!(view.not_invalidated(&entry("a", 100)));
            view.apply(&Changes { revision: 5, resync: None, changes: vec![key_change(5, "a")] });
            assert!(!view.admits(&entry("a", 50)) && view.admits(&entry("a", 51)));
            view.save(true);
        }
        let view = CoreView::open(Some(&dir));
        assert_eq!(view.revision(), 5, "resumes from its revision");
        assert!(!view.not_invalidated(&entry("a", 50)), "the cutoff survived");
        let _ = std::fs::remove_dir_all(dir);
    }
}
