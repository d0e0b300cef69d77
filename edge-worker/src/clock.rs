//! Time spent at the edge, for `Server-Timing: edge;dur=<ms>`.
//!
//! workerd advances clocks only across I/O (a Spectre mitigation), so pure computation reads as 0 ms and
//! what this measures is the edge's own waits (body, cache lookups and stores), not the regional tier's.

use worker::js_sys::Date;

/// A request's stopwatch.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// When the request arrived (Unix milliseconds).
    started_ms: f64,
    /// Milliseconds spent waiting on the regional tier.
    upstream_ms: f64,
}

impl Clock {
    /// Starts timing a request.
    pub fn start() -> Self {
        Self { started_ms: Date::now(), upstream_ms: 0.0 }
    }

    /// Current Unix time in milliseconds.
    pub fn now_ms() -> i64 {
        Date::now() as i64
    }

    /// Runs `wait` and books the time it takes as upstream time.
    pub async fn upstream<T>(&mut self, wait: impl std::future::Future<Output = T>) -> T {
        let sent = Date::now();
        let out = wait.await;
        self.upstream_ms += (Date::now() - sent).max(0.0);
        out
    }

    /// Milliseconds spent at the edge so far.
    pub fn edge_ms(&self) -> f64 {
        (Date::now() - self.started_ms - self.upstream_ms).max(0.0)
    }
}
