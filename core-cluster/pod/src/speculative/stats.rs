//! Counters of how speculation went, for metrics.

use super::verify::Verdict;

/// Draft and acceptance counts over some verifications (one sequence, or many added up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpeculationStats {
    /// Verifications of a non-empty draft.
    pub steps: u64,
    /// Draft tokens proposed and checked.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

impl SpeculationStats {
    /// Counts one verification.
    pub fn record(&mut self, verdict: &Verdict) {
        if verdict.drafted > 0 {
            self.steps += 1;
            self.drafted += verdict.drafted as u64;
            self.accepted += verdict.accepted as u64;
        }
    }

    /// Adds another set of counts (e.g. a finished sequence's to the pod's).
    pub fn add(&mut self, other: &Self) {
        self.steps += other.steps;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
    }

    /// Accepted / drafted, 0 before anything was drafted.
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_drafts_and_acceptances() {
        let mut stats = SpeculationStats::default();
        assert_eq!(stats.acceptance_rate(), 0.0);
        stats.record(&Verdict { drafted: 4, accepted: 3, tokens: vec![1, 2, 3, 4] });
        stats.record(&Verdict { drafted: 0, accepted: 0, tokens: vec![5] });
        stats.record(&Verdict { drafted: 4, accepted: 0, tokens: vec![6] });
        assert_eq!(stats, SpeculationStats { steps: 2, drafted: 8, accepted: 3 });
        assert_eq!(stats.acceptance_rate(), 0.375);
        let mut total = stats;
        total.add(&stats);
        assert_eq!(total, SpeculationStats { steps: 4, drafted: 16, accepted: 6 });
    }
}
