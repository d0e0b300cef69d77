//! Counts the cache hits this node serves and reports them through Raft every few seconds, so the
//! replicated hot summaries know which prompts are popular cluster-wide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::node::types::{Command, Request};
// Distinct keys counted between reports: as many as one `RecordHits` may carry (further new keys wait
// for the next period).
use crate::node::writes::validate::MAX_HIT_KEYS;
use crate::node::writes::writer::Writer;

/// How often hits are reported.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Hits served since the last report.
#[derive(Debug, Default)]
pub struct HitCounter {
    counts: Mutex<HashMap<String, u32>>,
}

impl HitCounter {
    /// Counts one hit on `key`.
    pub fn record(&self, key: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(key) {
            *count = count.saturating_add(1);
        } else if counts.len() < MAX_HIT_KEYS {
            counts.insert(key.to_owned(), 1);
        }
    }

    /// Takes the counts, hottest first (ties in key order).
    pub fn take(&self) -> Vec<(String, u32)> {
        let counts = std::mem::take(&mut *self.counts.lock().unwrap_or_else(|p| p.into_inner()));
        let mut hits: Vec<(String, u32)> = counts.into_iter().collect();
        hits.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits
    }
}

/// Reports the counted hits every [`REPORT_INTERVAL`] until the task is aborted.
pub async fn report(counter: Arc<HitCounter>, writer: Writer) {
    let mut tick = tokio::time::interval(REPORT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let hits = counter.take();
        if hits.is_empty() {
            continue;
        }
        let keys = hits.len();
        let request = Request { id: String::new(), command: Command::RecordHits { hits } };
        if let Err(e) = writer.write(request).await {
            tracing::debug!(error = %e, keys, "hit report not committed; dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_drains() {
        let counter = HitCounter::default();
        for key in ["a", "b", "a", "c", "a", "b"] {
            counter.record(key);
        }
        assert_eq!(counter.take(), vec![("a".into(), 3), ("b".into(), 2), ("c".into(), 1)]);
        assert!(counter.take().is_empty());
    }
}
