//! The node's wall clock, in the unit every cache record carries: Unix milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in Unix milliseconds (0 before the epoch).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
