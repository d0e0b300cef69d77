//! The time a leader stamps on its proposals. It becomes log time: the state machine's clock, by which every
//! replica decides expiry, request-id retention and feed compaction ([`crate::node::state_machine`]).
//!
//! The wall clock alone is not safe to stamp. Log time never goes back, so one stamp from a clock that
//! stepped ahead (an NTP step, a resumed VM) would freeze log time there for everyone: entries would die
//! at once, request ids and feed rows would be dropped early, and every regeneration of an invalidated key
//! would be refused for the length of the step.
//!
//! So a leader anchors log time when its term begins, at the larger of the log's clock and its own wall
//! clock, and from then on runs it on its monotonic clock: a stamp follows the wall clock only while the
//! wall clock stays within [`MAX_WALL_DRIFT_MS`] of the anchor plus the monotonic time since, and never
//! goes back: each stamp is at least 1 ms after the previous one and after the log's clock. A wall-clock
//! step during a lead moves log time by at most that much, and a step back does not stop it. Each stamp the band clamped is counted (`mesh_core_clock_clamped_stamps_total`) and the
//! first of each excursion is logged.
//!
//! Not caught here: a leader whose wall clock is already ahead when it is elected (its anchor). Every node
//! reports how far the last stamp it applied was ahead of its own clock (`mesh_core_leader_clock_ahead_ms`),
//! which is the alarm for that case.

use std::time::Instant;

/// How far a stamp may follow the wall clock away from the leader's monotonic log time, in milliseconds.
/// NTP slews a healthy clock by at most 500 ppm, so a lead would have to last over half an hour before
/// a healthy wall clock left the band; beyond it, log time runs on the monotonic clock alone.
pub const MAX_WALL_DRIFT_MS: i64 = 1_000;

/// The leader's log-time stamper (one per node; it re-anchors at each new term).
#[derive(Debug, Default)]
pub struct LeaderClock {
    /// The term of the anchor, if any stamp was made.
    term: Option<u64>,
    /// Log time at the anchor.
    anchor_ms: i64,
    /// When the anchor was set, on the monotonic clock.
    anchor_at: Option<Instant>,
    /// The last stamp made.
    last_ms: i64,
    /// Whether the last stamp was clamped (so an excursion is logged once).
    clamping: bool,
}

/// One stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The proposal's time, in Unix milliseconds.
    pub issued_ms: i64,
    /// Whether the wall clock was outside the band (and how far: wall minus stamp).
    pub clamped_by_ms: Option<i64>,
}

impl LeaderClock {
    /// The time to stamp on a proposal made now in `term`, given the wall clock `wall_ms` and, when the
    /// term is new to this clock, the log's clock from `log_ms`.
    pub fn stamp(&mut self, term: u64, wall_ms: i64, log_ms: impl FnOnce() -> i64, now: Instant) -> Stamp {
        if self.term != Some(term) || self.anchor_at.is_none() {
            self.term = Some(term);
            let log_ms = log_ms();
            self.anchor_ms = wall_ms.max(log_ms).max(self.last_ms);
            self.anchor_at = Some(now);
            self.last_ms = self.last_ms.max(log_ms);
        }
        let since = self.anchor_at.map_or(0, |at| now.saturating_duration_since(at).as_millis());
        let steady = self.anchor_ms.saturating_add(i64::try_from(since).unwrap_or(i64::MAX));
        let banded = wall_ms.clamp(steady - MAX_WALL_DRIFT_MS, steady.saturating_add(MAX_WALL_DRIFT_MS));
        // Strictly after the last stamp: two proposals never share a time, so an answer proposed after an
        // invalidation committed is never taken for one the invalidation covers (`created <= at`), even
        // while the band holds log time back.
        let issued_ms = banded.max(self.last_ms.saturating_add(1));
        self.last_ms = issued_ms;
        let clamped_by_ms = (banded != wall_ms).then_some(wall_ms - issued_ms);
        if let (Some(by), false) = (clamped_by_ms, self.clamping) {
            tracing::warn!(
                wall_minus_log_ms = by,
                "the wall clock left the leader's log-time band; log time runs on the monotonic clock"
            );
        }
        self.clamping = clamped_by_ms.is_some();
        Stamp { issued_ms, clamped_by_ms }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const HOUR_MS: i64 = 3_600_000;
    const NOW_MS: i64 = 1_800_000_000_000;

    /// Stamps at `steps` (seconds after the start, wall clock offset in ms) for one term.
    fn run(steps: &[(u64, i64)]) -> Vec<i64> {
        let start = Instant::now();
        let mut clock = LeaderClock::default();
        steps
            .iter()
            .map(|&(at_s, offset)| {
                let wall = NOW_MS + i64::try_from(at_s).expect("small") * 1000 + offset;
                clock.stamp(3, wall, || NOW_MS - 5_000, start + Duration::from_secs(at_s)).issued_ms
            })
            .collect()
    }

    #[test]
    fn a_healthy_clock_is_stamped_as_it_reads() {
        assert_eq!(
            run(&[(0, 0), (1, 0), (2, 300), (3, -200)]),
            [NOW_MS, NOW_MS + 1000, NOW_MS + 2300, NOW_MS + 2800]
        );
    }

    #[test]
    fn a_step_forward_during_a_lead_moves_log_time_by_the_band_at_most() {
        let stamps = run(&[(0, 0), (1, HOUR_MS), (2, HOUR_MS), (60, HOUR_MS)]);
        assert_eq!(stamps, [NOW_MS, NOW_MS + 2000, NOW_MS + 3000, NOW_MS + 61_000]);
    }

    #[test]
    fn a_step_back_does_not_stop_log_time() {
        let stamps = run(&[(0, 0), (1, -HOUR_MS), (30, -HOUR_MS)]);
        assert_eq!(stamps, [NOW_MS, NOW_MS + 1, NOW_MS + 29_000], "each stamp after the last");
    }

    #[test]
    fn a_new_term_anchors_at_the_log_clock_when_the_wall_is_behind_it() {
        let start = Instant::now();
        let mut clock = LeaderClock::default();
        let stamp = clock.stamp(1, NOW_MS - HOUR_MS, || NOW_MS, start);
        assert_eq!(stamp.issued_ms, NOW_MS + 1, "after every stamp the log holds");
        let later = clock.stamp(1, NOW_MS - HOUR_MS, || unreachable!(), start + Duration::from_secs(10));
        assert_eq!(later.issued_ms, NOW_MS + 9_000);
        assert!(stamp.clamped_by_ms.is_some() && later.clamped_by_ms.is_some(), "both clamped");
        // A new term re-anchors; the clock never goes back past its own last stamp.
        let next_term = clock.stamp(2, NOW_MS - HOUR_MS, || NOW_MS, start + Duration::from_secs(11));
        assert_eq!(next_term.issued_ms, NOW_MS + 9_001);
    }
}
