//! Counting the hits this isolate served from its own caches, and reporting them to the regional tier
//! (`POST /v1/hotset/hits`) at most every [`REPORT_INTERVAL_MS`], after a response. The regional tier
//! never sees those requests; without the report, what is hot at the edge would never become hot there,
//! and so would never reach the hot set the edges pull.

use std::cell::RefCell;
use std::collections::HashMap;

use shared::hot_set::{EdgeHit, EdgeHits};
use worker::Context;

use crate::clock::Clock;
use crate::config::Config;
use crate::regional;

/// Least time between two reports of one isolate.
pub const REPORT_INTERVAL_MS: i64 = 1_000;
/// Keys counted before new ones are dropped until the next report.
const MAX_KEYS: usize = 1_000;

#[derive(Default)]
struct Counts {
    /// Hits by (key, tenant).
    hits: HashMap<(String, String), u32>,
    last_report_ms: i64,
}

thread_local! {
    static COUNTS: RefCell<Counts> = RefCell::new(Counts::default());
}

/// Counts one hit of `key` (of `tenant`) served here.
pub fn record(key: &str, tenant: &str) {
    COUNTS.with(|counts| {
        let mut counts = counts.borrow_mut();
        let id = (key.to_owned(), tenant.to_owned());
        if counts.hits.len() < MAX_KEYS || counts.hits.contains_key(&id) {
            *counts.hits.entry(id).or_default() += 1;
        }
    });
}

/// Sends the counts after the response (`ctx.wait_until`) when a report is due and there is anything.
pub fn report_if_due(config: &Config, ctx: &Context) {
    let now = Clock::now_ms();
    let due = COUNTS.with(|counts| {
        let mut counts = counts.borrow_mut();
        if counts.hits.is_empty() || now - counts.last_report_ms < REPORT_INTERVAL_MS {
            return None;
        }
        counts.last_report_ms = now;
        let hits = counts.hits.drain().map(|((key, tenant), hits)| EdgeHit { key, tenant, hits }).collect();
        Some(EdgeHits { hits })
    });
    let Some(report) = due else { return };
    let config = config.clone();
    ctx.wait_until(async move {
        let sent = match serde_json::to_vec(&report) {
            Ok(body) => regional::post_json(&config, "/v1/hotset/hits", &body).await.map(|r| r.status_code()),
            Err(e) => return worker::console_warn!("hit report not encoded: {e}"),
        };
        match sent {
            Ok(200) => {}
            Ok(status) => worker::console_warn!("hit report refused: status {status}"),
            Err(e) => worker::console_warn!("hit report not sent: {e}"),
        }
    });
}
