//! Which regional node to try first: the nearest healthy one.
//!
//! Each isolate keeps, per regional URL, a moving average of the time a node took to start answering
//! and when it last failed (a network error, a timeout or a 502/503/504). Nodes that failed within
//! [`FAILURE_PENALTY_MS`] go after the others; among equals the lower measured RTT goes first, and a
//! node not measured yet goes before measured ones (so every node gets measured), then the configured
//! order decides.

use std::collections::HashMap;

/// How long a failure sends a node to the back of the order.
pub const FAILURE_PENALTY_MS: i64 = 30_000;
/// Weight of the newest RTT sample in the moving average.
const RTT_WEIGHT: f64 = 0.3;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Health {
    rtt_ms: Option<f64>,
    failed_at_ms: Option<i64>,
}

/// What an isolate knows about the regional nodes.
#[derive(Clone, Debug, Default)]
pub struct NodeHealth {
    nodes: HashMap<String, Health>,
}

impl NodeHealth {
    /// `urls` in the order to try them at `now_ms`.
    pub fn order<'a>(&self, urls: &'a [String], now_ms: i64) -> Vec<&'a str> {
        let mut ranked: Vec<(bool, u8, f64, usize, &str)> = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let health = self.nodes.get(url).copied().unwrap_or_default();
                let failing = health.failed_at_ms.is_some_and(|at| now_ms - at < FAILURE_PENALTY_MS);
                let (measured, rtt) = health.rtt_ms.map_or((0, 0.0), |rtt| (1, rtt));
                (failing, measured, rtt, i, url.as_str())
            })
            .collect();
        ranked.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)).then(a.3.cmp(&b.3)));
        ranked.into_iter().map(|r| r.4).collect()
    }

    /// `url` answered after `rtt_ms`.
    pub fn succeeded(&mut self, url: &str, rtt_ms: f64) {
        let health = self.nodes.entry(url.to_owned()).or_default();
        health.rtt_ms = Some(health.rtt_ms.map_or(rtt_ms, |avg| avg + RTT_WEIGHT * (rtt_ms - avg)));
        health.failed_at_ms = None;
    }

    /// `url` failed at `now_ms`.
    pub fn failed(&mut self, url: &str, now_ms: i64) {
        self.nodes.entry(url.to_owned()).or_default().failed_at_ms = Some(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls() -> Vec<String> {
        ["http://a", "http://b", "http://c"].iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn unmeasured_then_fastest_first_and_failed_nodes_last_for_a_while() {
        let urls = urls();
        let mut health = NodeHealth::default();
        assert_eq!(health.order(&urls, 0), ["http://a", "http://b", "http://c"]);
        health.succeeded("http://a", 40.0);
        health.succeeded("http://b", 5.0);
        assert_eq!(health.order(&urls, 0), ["http://c", "http://b", "http://a"]);
        health.succeeded("http://c", 20.0);
        assert_eq!(health.order(&urls, 0), ["http://b", "http://c", "http://a"]);
        health.failed("http://b", 1_000);
        assert_eq!(health.order(&urls, 2_000), ["http://c", "http://a", "http://b"]);
        // The penalty wears off; a success clears it at once.
        assert_eq!(health.order(&urls, 1_000 + FAILURE_PENALTY_MS), ["http://b", "http://c", "http://a"]);
        health.failed("http://c", 5_000);
        health.succeeded("http://c", 20.0);
        // b is still penalized; c, cleared by its success, leads.
        assert_eq!(health.order(&urls, 5_001), ["http://c", "http://a", "http://b"]);
    }

    #[test]
    fn the_rtt_is_a_moving_average() {
        let urls = urls();
        let mut health = NodeHealth::default();
        health.succeeded("http://a", 10.0);
        health.succeeded("http://b", 12.0);
        health.succeeded("http://c", 50.0);
        // One slow answer does not send a node behind a consistently slower one.
        health.succeeded("http://a", 30.0);
        assert_eq!(health.order(&urls, 0), ["http://b", "http://a", "http://c"]);
    }
}
