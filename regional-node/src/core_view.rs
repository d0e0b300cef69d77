//! This node's view of the core's decisions: the [`Cutoffs`] every cache layer checks, the recent
//! changes the edge pulls (`GET /v1/changes`), whether the view has caught up with the core, and how
//! fresh it is.
//!
//! The view is kept in `<data-dir>/core-view.json` (at most every [`SAVE_INTERVAL`] and at shutdown), so
//! a restarted node resumes the feed from its revision instead of dropping every answer it held. Until
//! the feed has brought the view to the serving core node's state after a start (an event `at_head`,
//! which the first batches of a long backlog are not), nothing held locally is served: the answers on
//! disk may have been invalidated while the node was away.
//!
//! Freshness is measured against the core, not against the core node asked: every feed event says how
//! long ago a leader confirmed the serving node's state, so the view counts as confirmed at the receipt
//! of its latest event at head minus that age. Older than [`FEED_BOUND`] (a core node cut off, a feed
//! that stopped), the view admits nothing local and `/v1/changes` answers 503, so edges and this node's
//! own requests go to the core instead of trusting a view that may miss invalidations. The edge gets the
//! view's age with every answer and composes its own bound from it.

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
/// Oldest confirmation with which the view still admits local answers and serves the edge: well above
/// the core's progress interval (250 ms) plus a heartbeat, so a healthy feed never reaches it.
pub const FEED_BOUND: Duration = Duration::from_secs(2);

/// Why `/v1/changes` cannot answer from this view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotServable {
    /// The feed has not brought the view to the core's state since this process started.
    CatchingUp,
    /// The view was last confirmed longer ago than [`FEED_BOUND`].
    Stale,
    /// The caller is at a revision this view has not reached: it knows more than this node.
    Behind,
}

impl NotServable {
    /// Why, in words.
    pub fn reason(self) -> &'static str {
        match self {
            Self::CatchingUp => "this node has not caught up with the core's feed yet",
            Self::Stale => "this node's view of the core's feed is not confirmed recently enough",
            Self::Behind => "this node's view of the core's feed is behind the caller's",
        }
    }
}

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
    /// Whether the feed has brought the view to a serving node's state since this process started.
    caught_up: AtomicBool,
    /// When the core last confirmed the view (an event at head, less its age), if ever in this process.
    confirmed: Mutex<Option<Instant>>,
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
        // Every change after the kept revision will be in `recent` once applied.
        let recent = Recent { changes: VecDeque::new(), complete_after: cutoffs.revision() };
        Self {
            cutoffs: RwLock::new(cutoffs),
            recent: Mutex::new(recent),
            caught_up: AtomicBool::new(false),
            confirmed: Mutex::new(None),
            file: file.map(|path| (path, Mutex::new(None))),
        }
    }

    /// Whether `entry` may be served or kept: the view has caught up, was confirmed within
    /// [`FEED_BOUND`], and no cutoff covers it.
    pub fn admits(&self, entry: &CachedCompletion) -> bool {
        self.fresh() && self.read().admits(entry)
    }

    /// Whether the view has caught up and was confirmed by the core within [`FEED_BOUND`].
    pub fn fresh(&self) -> bool {
        self.caught_up() && self.confirmed_age().is_some_and(|age| age <= FEED_BOUND)
    }

    /// How long ago the core last confirmed the view; `None` if it has not since this process started.
    pub fn confirmed_age(&self) -> Option<Duration> {
        self.confirmed.lock().unwrap_or_else(PoisonError::into_inner).map(|at| at.elapsed())
    }

    /// Whether `entry` is covered by no cutoff known now (whether or not the view has caught up): for
    /// answers served stale while the core is out of reach.
    pub fn not_invalidated(&self, entry: &CachedCompletion) -> bool {
        self.read().admits(entry)
    }

    /// Whether the feed has brought the view to a serving node's state since this process started.
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

    /// `model`'s version on trial, if it has one.
    pub fn canary(&self, model: &str) -> Option<shared::canary::Canary> {
        self.read().canary(model)
    }

    /// Applies `change`, made at the core's log time `at_ms`, at once: a change this node asked for,
    /// whose feed event has not arrived yet. The revision does not move (the feed brings it again).
    pub fn cut_now(&self, change: &shared::changes::Change, at_ms: i64) {
        let mut cutoffs = self.cutoffs.write().unwrap_or_else(PoisonError::into_inner);
        let revision = cutoffs.revision();
        cutoffs.apply(&Revised { revision, at_ms, change: change.clone() });
    }

    /// Applies a batch of the core's feed, received `received_at`, and remembers its changes for the
    /// edge. A batch at head marks the view caught up, and confirms it as of its receipt less its age.
    pub fn apply(&self, batch: &Changes, received_at: Instant) {
        if let Some(core_ms) = batch.core_time_ms {
            crate::clock::observe_core_time(core_ms);
        }
        let resynced = self.cutoffs.write().unwrap_or_else(PoisonError::into_inner).apply_batch(batch);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some(resync), true) = (&batch.resync, resynced) {
            // What came before the resync is unknown to this view: an edge behind it resyncs too.
            recent.changes.clear();
            recent.complete_after = resync.revision;
        }
        recent.changes.extend(batch.changes.iter().cloned());
        while recent.changes.len() > RECENT_CHANGES {
            if let Some(dropped) = recent.changes.pop_front() {
                recent.complete_after = recent.complete_after.max(dropped.revision);
            }
        }
        drop(recent);
        if batch.at_head {
            self.caught_up.store(true, Ordering::Release);
            let at =
                batch.confirmed_age_ms.and_then(|age| received_at.checked_sub(Duration::from_millis(age)));
            if let Some(at) = at {
                let mut confirmed = self.confirmed.lock().unwrap_or_else(PoisonError::into_inner);
                if confirmed.is_none_or(|old| old < at) {
                    *confirmed = Some(at);
                }
            }
        }
        self.save(false);
    }

    /// What an edge at revision `since` must apply: the changes after it, or a resync from this view
    /// when `since` is 0 or older than the changes kept; with the view's confirmation age. Refused while
    /// the view is not fresh, and to a caller ahead of this view (a resync from it would take the caller
    /// back).
    pub fn changes_since(&self, since: u64) -> Result<Changes, NotServable> {
        if !self.caught_up() {
            return Err(NotServable::CatchingUp);
        }
        let age = self.confirmed_age().filter(|age| *age <= FEED_BOUND).ok_or(NotServable::Stale)?;
        let confirmed_age_ms = Some(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        let core_time_ms = Some(crate::clock::now_ms());
        let cutoffs = self.read();
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let revision = cutoffs.revision();
        if since > revision {
            return Err(NotServable::Behind);
        }
        if since == 0 || since < recent.complete_after {
            let resync = Some(cutoffs.resync_point());
            return Ok(Changes {
                revision,
                resync,
                confirmed_age_ms,
                core_time_ms,
                at_head: true,
                ..Default::default()
            });
        }
        let changes = recent.changes.iter().filter(|r| r.revision > since).cloned().collect();
        Ok(Changes { revision, changes, confirmed_age_ms, core_time_ms, at_head: true, ..Default::default() })
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

    /// A batch at head, confirmed by the core just now.
    fn at_head(revision: u64, resync: Option<Resync>, changes: Vec<Revised>) -> Changes {
        Changes { revision, resync, changes, confirmed_age_ms: Some(0), at_head: true, core_time_ms: None }
    }

    #[test]
    fn an_edge_follows_from_its_revision_or_resyncs_from_the_view() {
        let view = CoreView::open(None);
        let resync = Resync { revision: 4, floor_ms: 40, ..Default::default() };
        view.apply(&at_head(4, Some(resync), vec![]), Instant::now());
        view.apply(&at_head(6, None, vec![key_change(5, "a"), key_change(6, "b")]), Instant::now());
        let delta = view.changes_since(5).expect("servable");
        assert!(delta.resync.is_none());
        assert_eq!(delta.changes, vec![key_change(6, "b")]);
        assert_eq!(delta.revision, 6);
        assert!(delta.confirmed_age_ms.is_some_and(|age| age < 1_000), "{delta:?}");
        let fresh = view.changes_since(0).expect("servable");
        let resync = fresh.resync.expect("a resync for a new edge");
        assert_eq!((resync.revision, resync.floor_ms), (6, 40), "the view's own floor");
        assert_eq!(resync.tenant_floors, vec![("t".to_owned(), 60)], "the tenant's latest key cutoff");
        assert!(view.changes_since(2).expect("servable").resync.is_some(), "older than the view's start");
        // Progress moves the revision on without changes: an edge behind it follows, no resync.
        view.apply(&at_head(12, None, vec![]), Instant::now());
        let quiet = view.changes_since(6).expect("servable");
        assert!(quiet.resync.is_none() && quiet.changes.is_empty() && quiet.revision == 12);
    }

    #[test]
    fn the_node_reads_time_on_the_core_s_clock_and_passes_it_to_edges() {
        // Half a second: small beside every other test's TTLs, which share this process's clock.
        let view = CoreView::open(None);
        let ahead =
            || Changes { core_time_ms: Some(crate::clock::wall_ms() + 500), ..at_head(3, None, vec![]) };
        view.apply(&ahead(), Instant::now());
        let offset = crate::clock::core_offset_ms();
        assert!((490..=500).contains(&offset), "offset {offset} ms");
        let told = view.changes_since(3).expect("servable").core_time_ms.expect("the core's time");
        assert!((told - crate::clock::wall_ms() - 500).abs() < 100, "an edge learns the same clock");
        // Back to the host's clock once every sample of the offset aged out.
        for _ in 0..8 {
            view.apply(
                &Changes { core_time_ms: Some(crate::clock::wall_ms()), ..at_head(3, None, vec![]) },
                Instant::now(),
            );
        }
        assert!(crate::clock::core_offset_ms().abs() < 10);
    }

    #[test]
    fn an_edge_ahead_of_this_node_is_refused_rather_than_taken_back() {
        let view = CoreView::open(None);
        view.apply(&at_head(4, Some(Resync { revision: 4, ..Default::default() }), vec![]), Instant::now());
        assert_eq!(view.changes_since(9), Err(NotServable::Behind), "ahead of this node");
        // A resync from a core node behind this view is ignored too.
        view.apply(&at_head(8, None, vec![key_change(8, "k")]), Instant::now());
        view.apply(&at_head(5, Some(Resync { revision: 5, ..Default::default() }), vec![]), Instant::now());
        assert_eq!(view.revision(), 8);
        assert_eq!(view.changes_since(7).expect("servable").changes, vec![key_change(8, "k")]);
    }

    #[test]
    fn a_view_not_confirmed_within_the_bound_admits_nothing_and_serves_no_edge() {
        let view = CoreView::open(None);
        let entry =
            CachedCompletion { etag: String::new(), created_ms: 100, ..CachedCompletion::example("a", "x") };
        // Events from a core node whose state a leader last confirmed long ago: caught up, not fresh.
        let old = Changes { confirmed_age_ms: Some(10_000), ..at_head(3, None, vec![]) };
        view.apply(&old, Instant::now());
        assert!(view.caught_up() && !view.fresh());
        assert!(!view.admits(&entry) && view.not_invalidated(&entry));
        assert_eq!(view.changes_since(3), Err(NotServable::Stale));
        // An event that does not know its age confirms nothing either.
        view.apply(&Changes { confirmed_age_ms: None, ..at_head(4, None, vec![]) }, Instant::now());
        assert!(!view.fresh());
        view.apply(&at_head(5, None, vec![]), Instant::now());
        assert!(view.fresh() && view.admits(&entry));
    }

    #[test]
    fn a_backlog_longer_than_one_batch_is_not_caught_up_until_its_end() {
        let view = CoreView::open(None);
        let entry = CachedCompletion {
            tenant: "t".into(),
            etag: String::new(),
            created_ms: 15,
            ..CachedCompletion::example("z", "x")
        };
        let partial = Changes { at_head: false, ..at_head(1, None, vec![key_change(1, "a")]) };
        view.apply(&partial, Instant::now());
        assert!(!view.caught_up() && !view.admits(&entry));
        assert_eq!(view.changes_since(1), Err(NotServable::CatchingUp));
        view.apply(&at_head(2, None, vec![key_change(2, "z")]), Instant::now());
        assert!(view.caught_up());
        assert!(!view.admits(&entry), "the last batch's cutoff covers it");
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
            view.apply(&at_head(5, None, vec![key_change(5, "a")]), Instant::now());
            assert!(!view.admits(&entry("a", 50)) && view.admits(&entry("a", 51)));
            view.save(true);
        }
        let view = CoreView::open(Some(&dir));
        assert_eq!(view.revision(), 5, "resumes from its revision");
        assert!(!view.not_invalidated(&entry("a", 50)), "the cutoff survived");
        // Resumed at 5: an edge at 5 follows from the changes this process receives, no resync.
        view.apply(&at_head(7, None, vec![key_change(7, "b")]), Instant::now());
        assert_eq!(view.changes_since(5).expect("servable").changes, vec![key_change(7, "b")]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
