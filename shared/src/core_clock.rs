//! The core's clock as another tier reckons it. Every answer's creation time is the core's log time, and
//! its TTL runs from there; a regional node or an edge isolate that compared `created_ms + ttl` with its
//! own wall clock would keep answers too long when its clock is behind and drop them early when ahead.
//! So each tier learns the offset from the log times the change feed carries (`Changes::core_time_ms`)
//! and judges expiry on its wall clock moved by that offset.
//!
//! A sample is the sender's log time less the receiver's wall clock at receipt, so it reads low by the
//! transfer's one-way delay; the estimate is the highest of the recent samples, the one delayed least.
//! Keeping only recent samples lets a stepped clock (on either side) be followed within a few feed
//! events.

impl Default for CoreClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Samples kept (the change feed sends at least one event a second).
const SAMPLES: usize = 8;

/// The offset from this tier's wall clock to the core's log time.
#[derive(Clone, Debug)]
pub struct CoreClock {
    /// The newest samples, `core - local` in milliseconds, oldest first.
    samples: [i64; SAMPLES],
    /// Samples taken so far (saturating; only whether it reached [`SAMPLES`] matters).
    taken: usize,
    /// The current estimate.
    offset_ms: i64,
}

impl CoreClock {
    /// No samples yet: the offset is 0.
    pub const fn new() -> Self {
        Self { samples: [0; SAMPLES], taken: 0, offset_ms: 0 }
    }

    /// Notes that the core's log time was `core_ms` when this tier's wall clock read `local_ms`.
    pub fn observe(&mut self, core_ms: i64, local_ms: i64) {
        self.samples.rotate_left(1);
        self.samples[SAMPLES - 1] = core_ms.saturating_sub(local_ms);
        self.taken = self.taken.saturating_add(1);
        let recent = &self.samples[SAMPLES - self.taken.min(SAMPLES)..];
        self.offset_ms = recent.iter().copied().max().unwrap_or(0);
    }

    /// Milliseconds to add to this tier's wall clock to read the core's log time (0 before any sample).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms
    }

    /// The core's log time when this tier's wall clock reads `local_ms`.
    pub fn core_ms(&self, local_ms: i64) -> i64 {
        local_ms.saturating_add(self.offset_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_any_sample_the_wall_clock_stands_for_the_core_s() {
        assert_eq!(CoreClock::default().core_ms(1_000), 1_000);
    }

    #[test]
    fn a_clock_behind_the_core_is_moved_ahead_by_the_least_delayed_sample() {
        let mut clock = CoreClock::default();
        // The local clock runs 30 s behind; transfers take 5, 1 and 40 ms.
        for (local, delay) in [(10_000, 5), (11_000, 1), (12_000, 40)] {
            clock.observe(local + 30_000 - delay, local);
        }
        assert_eq!(clock.offset_ms(), 29_999);
        assert_eq!(clock.core_ms(20_000), 49_999);
    }

    #[test]
    fn a_stepped_clock_is_followed_once_the_older_samples_age_out() {
        let mut clock = CoreClock::default();
        for i in 0..SAMPLES as i64 {
            clock.observe(1_000 * i + 60_000, 1_000 * i);
        }
        assert_eq!(clock.offset_ms(), 60_000);
        // The local clock steps 60 s ahead: the offset falls to 0 once every older sample is gone.
        for i in 0..SAMPLES as i64 {
            clock.observe(100_000 + 1_000 * i, 100_000 + 1_000 * i);
            let expected = if i + 1 < SAMPLES as i64 { 60_000 } else { 0 };
            assert_eq!(clock.offset_ms(), expected, "after {} samples of the stepped clock", i + 1);
        }
    }
}
