//! How far this node's own log is durable, so that a leader's disk sync and its replication overlap.
//!
//! openraft 0.9 waits for a leader's log append to be reported flushed, inside its core task, before it
//! sends the new entries to any follower. Reported only after the leader's `fdatasync`, every write paid
//! the leader's sync and then a follower's, one after the other (an strace of one client showed the
//! AppendEntries leaving the leader only once its own sync had returned). So the log store reports a
//! leader's own appends at once ([`crate::node::raft::log_store`]) and keeps here what is really durable.
//!
//! openraft then counts the leader's copy towards a commit before it is on disk. Raft only needs a
//! majority of durable copies before anything depends on the entry, so two things wait here:
//! - the state machine applies an entry only once it is durable on this node: no client is answered and
//!   no read sees it before it is on the leader's disk and on the disk of the follower whose answer
//!   committed it;
//! - a leader tells its followers a commit index no higher than what is durable here
//!   ([`DurableLog::clamp_commit`]), so no follower applies an entry that a power loss could still take
//!   from the leader and so from a majority. When a commit was held back, the next sync asks for a
//!   heartbeat ([`DurableLog::held_back_commits`]), so followers learn it at once rather than at the next
//!   heartbeat.
//!
//! A follower's appends are synced before they are reported, as before, so on a follower the state
//! machine never waits here.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use openraft::LogId;
use tokio::sync::watch;

use crate::node::types::NodeId;

/// What is durable in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Durable {
    /// The last durable log id.
    last: Option<LogId<NodeId>>,
    /// Why the log failed to sync, if it did: nothing after that becomes durable.
    failed: Option<String>,
}

/// The durable end of one node's log. Cloning is cheap and shares it.
#[derive(Clone, Debug)]
pub struct DurableLog {
    durable: Arc<watch::Sender<Durable>>,
    /// Whether a commit index was held back since the last sync.
    held_back: Arc<AtomicBool>,
    /// AppendEntries whose commit index was held back, ever (a metric).
    held_back_total: Arc<AtomicU64>,
    /// Told when a sync made a held-back commit index sendable.
    release: Arc<tokio::sync::Notify>,
}

impl DurableLog {
    /// A log durable up to `last` (what was recovered from disk).
    pub fn new(last: Option<LogId<NodeId>>) -> Self {
        let (durable, _) = watch::channel(Durable { last, failed: None });
        Self {
            durable: Arc::new(durable),
            held_back: Arc::default(),
            held_back_total: Arc::default(),
            release: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The log is durable up to `last`. Syncs report in the order their records were written, and a
    /// truncation reports the log's new end once it is synced, so the latest report is the truth.
    pub fn synced(&self, last: Option<LogId<NodeId>>) {
        self.durable.send_modify(|d| d.last = last);
        if self.held_back.swap(false, Ordering::AcqRel) {
            self.release.notify_one();
        }
    }

    /// A sync failed: nothing written after it is durable, and whoever waits is told why.
    pub fn failed(&self, error: &io::Error) {
        self.durable.send_modify(|d| {
            d.failed.get_or_insert_with(|| error.to_string());
        });
    }

    /// The last durable log id.
    pub fn last(&self) -> Option<LogId<NodeId>> {
        self.durable.borrow().last
    }

    /// Waits until the entry at `index` is durable; an error if the log failed to sync first.
    pub async fn wait_for(&self, index: u64) -> io::Result<()> {
        let mut rx = self.durable.subscribe();
        let durable = rx
            .wait_for(|d| d.failed.is_some() || d.last.is_some_and(|last| last.index >= index))
            .await
            .map_err(|_| io::Error::other("the log's durability watch closed"))?;
        match &durable.failed {
            Some(why) if durable.last.is_none_or(|last| last.index < index) => {
                Err(io::Error::other(format!("the write-ahead log failed to sync: {why}")))
            }
            _ => Ok(()),
        }
    }

    /// The commit index a leader may tell its followers: `committed`, or the last durable log id if that
    /// is lower (every entry up to it is then committed too).
    pub fn clamp_commit(&self, committed: Option<LogId<NodeId>>) -> Option<LogId<NodeId>> {
        let last = self.last();
        match committed {
            Some(c) if last.is_none_or(|last| last.index < c.index) => {
                self.held_back.store(true, Ordering::Release);
                self.held_back_total.fetch_add(1, Ordering::Relaxed);
                last
            }
            committed => committed,
        }
    }

    /// How many AppendEntries had their commit index held back so far.
    pub fn held_back_total(&self) -> u64 {
        self.held_back_total.load(Ordering::Relaxed)
    }

    /// Resolves once a sync has made a commit index held back by [`DurableLog::clamp_commit`] sendable.
    pub async fn held_back_commits(&self) {
        self.release.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log_id(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    #[tokio::test]
    async fn an_entry_waits_until_a_sync_covers_it() {
        let durable = DurableLog::new(Some(log_id(3)));
        durable.wait_for(3).await.expect("recovered entries are durable");
        let waiting = tokio::spawn({
            let durable = durable.clone();
            async move { durable.wait_for(5).await }
        });
        durable.synced(Some(log_id(4)));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "index 5 is not durable at 4");
        durable.synced(Some(log_id(5)));
        waiting.await.expect("task").expect("durable at 5");
    }

    #[tokio::test]
    async fn a_failed_sync_fails_the_waits_it_leaves_behind() {
        let durable = DurableLog::new(Some(log_id(3)));
        durable.failed(&io::Error::other("disk gone"));
        let error = durable.wait_for(4).await.expect_err("never durable");
        assert!(error.to_string().contains("disk gone"), "{error}");
        durable.wait_for(3).await.expect("what was durable before stays durable");
    }

    #[tokio::test]
    async fn commits_beyond_the_durable_end_are_held_back_until_a_sync() {
        let durable = DurableLog::new(Some(log_id(3)));
        assert_eq!(durable.clamp_commit(Some(log_id(2))), Some(log_id(2)));
        assert_eq!(durable.clamp_commit(None), None);
        assert_eq!(durable.clamp_commit(Some(log_id(5))), Some(log_id(3)));
        assert_eq!(durable.held_back_total(), 1);
        let released = tokio::spawn({
            let durable = durable.clone();
            async move { durable.held_back_commits().await }
        });
        tokio::task::yield_now().await;
        durable.synced(Some(log_id(5)));
        released.await.expect("a sync after a held-back commit asks for a heartbeat");
        assert_eq!(durable.clamp_commit(Some(log_id(5))), Some(log_id(5)));
        assert_eq!(DurableLog::new(None).clamp_commit(Some(log_id(1))), None, "nothing durable yet");
    }
}
