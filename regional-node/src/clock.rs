//! The node's clock, in the unit and the domain every cache record carries: the core's log time, in Unix
//! milliseconds. Answers are created at the core and their TTLs run on its log time, so the node reads
//! its wall clock moved by the offset it learns from the core's change feed ([`shared::core_clock`]);
//! until the feed says otherwise the offset is 0. One offset per process: every view of the feed in it
//! reckons the same core clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use shared::core_clock::CoreClock;

/// The samples behind the offset.
static CORE_CLOCK: Mutex<CoreClock> = Mutex::new(CoreClock::new());
/// The current offset, read on every request without the lock.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// The core's log time now, as this node reckons it, in Unix milliseconds.
pub fn now_ms() -> i64 {
    wall_ms().saturating_add(OFFSET_MS.load(Ordering::Relaxed))
}

/// This host's wall clock in Unix milliseconds (0 before the epoch).
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Notes the core's log time `core_ms` that a feed event just received carried.
pub fn observe_core_time(core_ms: i64) {
    let mut clock = CORE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
    clock.observe(core_ms, wall_ms());
    OFFSET_MS.store(clock.offset_ms(), Ordering::Relaxed);
}

/// Milliseconds this node adds to its wall clock to read the core's (for the status page).
pub fn core_offset_ms() -> i64 {
    OFFSET_MS.load(Ordering::Relaxed)
}
