//! Time spent at the edge, for `Server-Timing: edge;dur=<ms>`, and the core's clock, by which answers
//! expire.
//!
//! workerd advances clocks only across I/O (a Spectre mitigation), so pure computation reads as 0 ms and
//! what this measures is the edge's own waits (body, cache lookups and stores), not the regional tier's.

use std::cell::RefCell;

use shared::core_clock::CoreClock;
use worker::js_sys::Date;

thread_local! {
    /// This isolate's offset to the core's log time, learned from the changes it pulls.
    static CORE_CLOCK: RefCell<CoreClock> = const { RefCell::new(CoreClock::new()) };
}

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

    /// The core's log time now, as this isolate reckons it (Unix milliseconds): what answers' creation
    /// times and TTLs are measured against ([`shared::core_clock`]).
    pub fn core_ms() -> i64 {
        let now = Self::now_ms();
        CORE_CLOCK.with(|clock| clock.borrow().core_ms(now))
    }

    /// Notes the core's log time `core_ms` that a changes batch just received carried.
    pub fn observe_core_time(core_ms: i64) {
        let now = Self::now_ms();
        CORE_CLOCK.with(|clock| clock.borrow_mut().observe(core_ms, now));
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
