//! How many tokens to draft: more while drafts are accepted, fewer (then none for a while) when not.
//!
//! The rule is deterministic: an exponentially weighted moving average (EWMA) of the per-step
//! acceptance ratio grows the draft length by one above `grow_at` and halves it below `shrink_at`.
//! Below `shrink_at` at length 1, drafting pauses for a cooldown, then probes with one token; the
//! cooldown doubles after each failed probe (up to `max_cooldown`) and resets once a draft token is
//! accepted.

/// The knobs of [`DraftLength`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// Draft length to start with.
    pub initial: usize,
    /// Longest draft.
    pub max: usize,
    /// Weight of the newest step in the acceptance average, in (0, 1].
    pub alpha: f32,
    /// Average acceptance at or above which the draft grows by one token.
    pub grow_at: f32,
    /// Average acceptance below which the draft halves (or, at one token, pauses).
    pub shrink_at: f32,
    /// Steps without drafting after the first pause.
    pub cooldown: u32,
    /// Longest pause, after repeated failed probes.
    pub max_cooldown: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            initial: 4,
            max: 8,
            alpha: 0.25,
            grow_at: 0.75,
            shrink_at: 0.4,
            cooldown: 8,
            max_cooldown: 128,
        }
    }
}

/// The draft length of one sequence, adapted to how well its drafts have been doing.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftLength {
    /// The knobs.
    config: AdaptiveConfig,
    /// Tokens to draft at the next step while drafting (at least 1).
    k: usize,
    /// EWMA of accepted / drafted per step.
    average: f32,
    /// Steps left without drafting; 0 while drafting.
    paused_for: u32,
    /// The pause to use next time drafting stops.
    next_pause: u32,
}

impl DraftLength {
    /// Starts at `config.initial` tokens (clamped to `1..=config.max`) and an average of one half.
    pub fn new(config: AdaptiveConfig) -> Self {
        let max = config.max.max(1);
        let config = AdaptiveConfig { max, ..config };
        Self {
            k: config.initial.clamp(1, max),
            average: 0.5,
            paused_for: 0,
            next_pause: config.cooldown.max(1),
            config,
        }
    }

    /// Tokens to draft at this step; 0 while paused (each call while paused counts one step).
    pub fn next_step(&mut self) -> usize {
        if self.paused_for > 0 {
            self.paused_for -= 1;
            return 0;
        }
        self.k
    }

    /// The current average acceptance ratio.
    pub fn average(&self) -> f32 {
        self.average
    }

    /// Learns from one verified step: `accepted` of `drafted` tokens. A step that drafted nothing
    /// (paused, or no n-gram match) teaches nothing.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let ratio = accepted.min(drafted) as f32 / drafted as f32;
        let alpha = self.config.alpha.clamp(f32::EPSILON, 1.0);
        self.average = (1.0 - alpha) * self.average + alpha * ratio;
        if accepted > 0 {
            // Something was accepted: the next pause starts again from the shortest.
            self.next_pause = self.config.cooldown.max(1);
        }
        if self.average >= self.config.grow_at {
            self.k = (self.k + 1).min(self.config.max);
        } else if self.average < self.config.shrink_at {
            if self.k > 1 {
                self.k /= 2;
            } else {
                self.pause();
            }
        }
    }

    /// Stops drafting for a while; the probe that follows starts from a neutral average.
    fn pause(&mut self) {
        self.paused_for = self.next_pause;
        self.next_pause = self.next_pause.saturating_mul(2).min(self.config.max_cooldown.max(1));
        self.average = self.config.shrink_at;
        self.k = 1;
    }
}

impl Default for DraftLength {
    fn default() -> Self {
        Self::new(AdaptiveConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` steps where each draft is fully accepted or fully rejected; returns the lengths.
    fn run(d: &mut DraftLength, steps: usize, accept: bool) -> Vec<usize> {
        (0..steps)
            .map(|_| {
                let k = d.next_step();
                d.record(k, if accept { k } else { 0 });
                k
            })
            .collect()
    }

    #[test]
    fn grows_to_the_maximum_while_drafts_are_accepted() {
        let mut d = DraftLength::default();
        let ks = run(&mut d, 12, true);
        assert_eq!(ks, [4, 4, 4, 5, 6, 7, 8, 8, 8, 8, 8, 8]);
        assert!(d.average() > 0.9);
    }

    #[test]
    fn shrinks_then_pauses_and_probes_with_backoff() {
        let mut d = DraftLength::default();
        run(&mut d, 10, true);
        // Rejections: the average decays below 0.4 and the length halves each step, then pauses.
        let ks = run(&mut d, 8, false);
        assert_eq!(ks, [8, 8, 8, 8, 4, 2, 1, 0]);
        // Paused for 8 steps (one already spent above), then a one-token probe that fails...
        let ks = run(&mut d, 8 + 16, false);
        let mut want = vec![0; 7];
        want.push(1);
        want.extend([0; 16]);
        assert_eq!(ks, want);
        // ...so the next pause is twice as long (16), then another probe.
        assert_eq!(run(&mut d, 1, false), [1]);
    }

    #[test]
    fn a_successful_probe_resumes_drafting_and_resets_the_backoff() {
        let mut d = DraftLength::new(AdaptiveConfig { initial: 1, ..AdaptiveConfig::default() });
        // Fails at once: pause 8, probe, fail, pause 16.
        assert_eq!(run(&mut d, 1, false), [1]);
        assert_eq!(run(&mut d, 8, false), [0; 8]);
        assert_eq!(run(&mut d, 1, false), [1]);
        assert_eq!(run(&mut d, 16, false), [0; 16]);
        // The next probe succeeds: drafting continues and grows once the average recovers.
        let ks = run(&mut d, 8, true);
        assert_eq!(ks, [1, 1, 1, 1, 2, 3, 4, 5]);
        // The backoff was reset: failing again pauses for 8, not 32.
        let ks = run(&mut d, 30, false);
        let pause = ks.iter().skip_while(|&&k| k > 0).take_while(|&&k| k == 0).count();
        assert_eq!(pause, 8, "{ks:?}");
    }

    #[test]
    fn steps_without_a_draft_teach_nothing() {
        let mut d = DraftLength::default();
        let before = d.clone();
        d.record(0, 0);
        assert_eq!(d, before);
    }

    #[test]
    fn partial_acceptance_settles_in_between() {
        // Half of each draft accepted: the average converges to 0.5, between the thresholds.
        let mut d = DraftLength::default();
        for _ in 0..50 {
            let k = d.next_step();
            d.record(k, k / 2);
        }
        assert_eq!(d.next_step(), 4);
        assert!((d.average() - 0.5).abs() < 1e-3);
    }
}
