//! The newest log entries, kept decoded: a leader reads every entry it appends again, once to send it to
//! each follower and once to apply it, and without this each read is a `pread` and a decode.
//!
//! The window is contiguous and bounded in bytes; a truncation or a purge cuts it as it cuts the log, and
//! an append that does not follow the window starts it again. A read the window does not cover whole
//! goes to the write-ahead log.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::node::types::Entry;

/// Decoded entries `first..first + len`, newest last.
#[derive(Debug)]
pub struct RecentEntries {
    window: Mutex<Window>,
    /// Most encoded bytes the window holds.
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Window {
    /// Each entry with its encoded size.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Window {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn next_index(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index + 1)
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }
}

impl RecentEntries {
    /// An empty window of at most `max_bytes` encoded bytes.
    pub fn new(max_bytes: usize) -> Self {
        Self { window: Mutex::new(Window::default()), max_bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `entry` (`size` bytes encoded), appended to the log after the window's last entry.
    pub fn push(&self, entry: Entry, size: usize) {
        let mut window = self.lock();
        if window.next_index().is_some_and(|next| next != entry.log_id.index) {
            *window = Window::default();
        }
        window.bytes += size;
        window.entries.push_back((entry, size));
        while window.bytes > self.max_bytes && !window.entries.is_empty() {
            window.pop_front();
        }
    }

    /// Clones of the entries `start..end` when the window holds all of them; `None` otherwise.
    pub fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let window = self.lock();
        let (first, next) = (window.first_index()?, window.next_index()?);
        if start < first || end > next || start >= end {
            return None;
        }
        let from = (start - first) as usize;
        Some(window.entries.range(from..from + (end - start) as usize).map(|(e, _)| e.clone()).collect())
    }

    /// Forgets the entries from `index` on (the log was truncated there).
    pub fn truncate(&self, index: u64) {
        let mut window = self.lock();
        while window.next_index().is_some_and(|next| next > index) {
            if let Some((_, size)) = window.entries.pop_back() {
                window.bytes -= size;
            }
        }
    }

    /// Forgets the entries up to `index` included (the log was purged there).
    pub fn purge(&self, index: u64) {
        let mut window = self.lock();
        while window.first_index().is_some_and(|first| first <= index) {
            window.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> Entry {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Blank }
    }

    fn indexes(entries: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        entries.map(|es| es.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn reads_within_the_window_are_served_and_others_are_not() {
        let recent = RecentEntries::new(1_000);
        for i in 5..10 {
            recent.push(entry(i), 10);
        }
        assert_eq!(indexes(recent.get(6, 9)), Some(vec![6, 7, 8]));
        assert_eq!(indexes(recent.get(5, 10)), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(recent.get(4, 7), None, "starts before the window");
        assert_eq!(recent.get(8, 11), None, "ends after it");
        assert_eq!(recent.get(7, 7), None);
    }

    #[test]
    fn the_window_is_bounded_in_bytes_and_follows_truncation_purge_and_gaps() {
        let recent = RecentEntries::new(30);
        for i in 1..=5 {
            recent.push(entry(i), 10);
        }
        assert_eq!(indexes(recent.get(3, 6)), Some(vec![3, 4, 5]), "the newest 30 bytes stay");
        assert_eq!(recent.get(2, 4), None);
        recent.truncate(5);
        assert_eq!(recent.get(3, 6), None, "entry 5 was truncated");
        recent.push(entry(5), 10);
        assert_eq!(indexes(recent.get(4, 6)), Some(vec![4, 5]));
        recent.purge(4);
        assert_eq!(indexes(recent.get(5, 6)), Some(vec![5]));
        assert_eq!(recent.get(4, 6), None);
        recent.push(entry(9), 10);
        assert_eq!(recent.get(5, 6), None, "an append after a gap starts the window again");
        assert_eq!(indexes(recent.get(9, 10)), Some(vec![9]));
    }
}
