//! Admission of generations by predicted cost, with a bounded queue.
//!
//! Hits cost nothing worth limiting; a generation costs the core and the pods work in proportion to its
//! tokens. So every flight that has to generate first asks for its predicted cost, in decode-token
//! units: the output tokens it may produce (`max_tokens`) plus its prompt tokens at
//! [`PROMPT_TOKENS_PER_UNIT`] per unit (prefill is batched and far cheaper per token than decoding). The
//! costs in flight are bounded by a budget (`--admission-budget`); a request that does not fit waits in
//! a FIFO queue (tokio's semaphore is fair, so a large request is not starved by small ones); past
//! `--admission-queue` waiting requests, or after `--admission-wait-ms` in the queue, it is refused with
//! 429 and a `Retry-After` predicted from the cost ahead of it and the rate generations have been
//! completing at.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use shared::normalize::NormalizedRequest;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::RegionalError;

/// Prompt tokens that cost as much as one decoded token.
pub const PROMPT_TOKENS_PER_UNIT: u64 = 8;
/// Characters per token, for estimating a prompt's tokens without tokenizing it.
const CHARS_PER_TOKEN: u64 = 4;
/// Longest a completion-rate measurement window runs before it is folded into the rate.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// Most seconds a `Retry-After` asks for.
const MAX_RETRY_AFTER_S: u64 = 60;

/// How admission is set up.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionLimits {
    /// Cost units that may be in flight at once.
    pub budget: u64,
    /// Requests that may wait for budget.
    pub queue: usize,
    /// Longest wait in the queue.
    pub max_wait: Duration,
}

/// The admission controller.
#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    budget: Arc<Semaphore>,
    waiting: AtomicUsize,
    waiting_cost: AtomicU64,
    /// Units per second generations completed at, as f64 bits (0: not measured yet).
    rate: AtomicU64,
    window: Mutex<(Instant, u64)>,
    /// Requests refused since the start.
    pub refused: AtomicU64,
}

/// Budget held by one generation; returned when dropped.
#[derive(Debug)]
pub struct Ticket<'a> {
    admission: &'a Admission,
    cost: u64,
    _permit: OwnedSemaphorePermit,
}

/// The predicted cost of generating an answer to `request`, in decode-token units.
pub fn predicted_cost(request: &NormalizedRequest) -> u64 {
    let prompt_chars: u64 = request.messages.iter().map(|m| m.content.len() as u64 + 16).sum();
    let prompt_tokens = prompt_chars.div_ceil(CHARS_PER_TOKEN);
    u64::from(request.sampling.max_tokens) + prompt_tokens.div_ceil(PROMPT_TOKENS_PER_UNIT)
}

impl Admission {
    /// A controller with these limits.
    pub fn new(limits: AdmissionLimits) -> Self {
        let budget = limits.budget.clamp(1, Semaphore::MAX_PERMITS as u64);
        Self {
            limits: AdmissionLimits { budget, ..limits },
            budget: Arc::new(Semaphore::new(budget as usize)),
            waiting: AtomicUsize::new(0),
            waiting_cost: AtomicU64::new(0),
            rate: AtomicU64::new(0),
            window: Mutex::new((Instant::now(), 0)),
            refused: AtomicU64::new(0),
        }
    }

    /// Waits for `cost` units of budget (a cost above the whole budget takes all of it), or refuses.
    pub async fn admit(&self, cost: u64) -> Result<Ticket<'_>, RegionalError> {
        let cost = cost.clamp(1, self.limits.budget);
        let permits = cost as u32;
        if let Ok(permit) = Arc::clone(&self.budget).try_acquire_many_owned(permits) {
            return Ok(Ticket { admission: self, cost, _permit: permit });
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        if queued >= self.limits.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(self.refuse(queued, cost));
        }
        self.waiting_cost.fetch_add(cost, Ordering::AcqRel);
        let acquired =
            tokio::time::timeout(self.limits.max_wait, Arc::clone(&self.budget).acquire_many_owned(permits))
                .await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.waiting_cost.fetch_sub(cost, Ordering::AcqRel);
        match acquired {
            Ok(Ok(permit)) => Ok(Ticket { admission: self, cost, _permit: permit }),
            _ => Err(self.refuse(self.waiting.load(Ordering::Acquire), cost)),
        }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Units in flight now.
    pub fn in_flight(&self) -> u64 {
        self.limits.budget - self.budget.available_permits() as u64
    }

    fn refuse(&self, queued: usize, cost: u64) -> RegionalError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let ahead = self.in_flight() + self.waiting_cost.load(Ordering::Acquire) + cost;
        RegionalError::Overloaded { queued, retry_after_s: self.retry_after_s(ahead) }
    }

    /// Seconds for `units` of work at the measured completion rate (a guess from the budget before any
    /// measurement).
    fn retry_after_s(&self, units: u64) -> u64 {
        let rate = f64::from_bits(self.rate.load(Ordering::Acquire));
        let seconds = if rate > 0.0 { units as f64 / rate } else { units as f64 / self.limits.budget as f64 };
        (seconds.ceil() as u64).clamp(1, MAX_RETRY_AFTER_S)
    }

    /// A generation of `cost` units finished: fold it into the completion rate.
    fn completed(&self, cost: u64) {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        window.1 += cost;
        let elapsed = window.0.elapsed();
        if elapsed >= RATE_WINDOW {
            let measured = window.1 as f64 / elapsed.as_secs_f64();
            let old = f64::from_bits(self.rate.load(Ordering::Acquire));
            let rate = if old > 0.0 { 0.5 * old + 0.5 * measured } else { measured };
            self.rate.store(rate.to_bits(), Ordering::Release);
            *window = (Instant::now(), 0);
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.admission.completed(self.cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(budget: u64, queue: usize, wait_ms: u64) -> Admission {
        Admission::new(AdmissionLimits { budget, queue, max_wait: Duration::from_millis(wait_ms) })
    }

    #[tokio::test]
    async fn fits_within_budget_then_queues_then_refuses_with_a_retry_time() {
        let admission = admission(100, 1, 5_000);
        let first = admission.admit(60).await.expect("fits");
        let _second = admission.admit(40).await.expect("fits exactly");
        assert_eq!(admission.in_flight(), 100);
        let queued = admission.admit(30);
        tokio::pin!(queued);
        assert!(futures::poll!(queued.as_mut()).is_pending(), "waits in the queue");
        assert_eq!(admission.waiting(), 1);
        match admission.admit(10).await {
            Err(RegionalError::Overloaded { queued: 1, retry_after_s }) => assert!(retry_after_s >= 1),
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(first);
        let third = queued.await.expect("admitted once budget was returned");
        assert_eq!(third.cost, 30);
        assert_eq!(admission.refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_cost_above_the_budget_runs_alone_and_a_long_wait_is_refused() {
        let admission = admission(50, 4, 20);
        let big = admission.admit(10_000).await.expect("clamped to the whole budget");
        assert_eq!(admission.in_flight(), 50);
        assert!(matches!(admission.admit(1).await, Err(RegionalError::Overloaded { .. })), "timed out");
        drop(big);
        assert!(admission.admit(1).await.is_ok());
    }
}
