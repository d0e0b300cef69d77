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
//!
//! No tenant can starve the others: each has a share of the budget (`--admission-tenant-share`), and
//! of the queue's places. Past its share a tenant may borrow budget nobody else is waiting for (so one
//! tenant alone still uses the whole node); once another tenant waits, it borrows no more, and waits
//! (or is refused) behind its own requests while the budget its borrowed generations return goes to
//! the others.
//!
//! A request is also refused at once when its predicted wait (the cost that must finish before it
//! gets budget, at the measured completion rate) exceeds its tenant's time-to-first-token target
//! (`--admission-ttft-target-ms`, or `--admission-tenant-ttft-target tenant=ms`): better an early 429
//! with an honest `Retry-After` than an answer after the client's deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use shared::normalize::NormalizedRequest;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::RegionalError;

/// Prompt tokens that cost as much as one decoded token.
pub const PROMPT_TOKENS_PER_UNIT: u64 = 8;
/// Letters per token, for estimating a prompt's tokens without tokenizing it (digits, punctuation and
/// symbols are counted a token each: tokenizers split them, and a prompt made of them is that long).
const LETTERS_PER_TOKEN: u64 = 4;
/// Longest a completion-rate measurement window runs before it is folded into the rate.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// Most seconds a `Retry-After` asks for.
const MAX_RETRY_AFTER_S: u64 = 60;

/// How admission is set up.
#[derive(Clone, Debug)]
pub struct AdmissionLimits {
    /// Cost units that may be in flight at once.
    pub budget: u64,
    /// Requests that may wait for budget.
    pub queue: usize,
    /// Longest wait in the queue.
    pub max_wait: Duration,
    /// Share (0..=1] of the budget, and of the queue, one tenant may hold.
    pub tenant_share: f64,
    /// Longest predicted wait for budget a request is queued for (zero: no target).
    pub ttft_target: Duration,
    /// Tenants' own targets, overriding [`AdmissionLimits::ttft_target`].
    pub tenant_ttft_targets: HashMap<String, Duration>,
}

impl AdmissionLimits {
    /// Cost units one tenant may have in flight.
    fn tenant_budget(&self) -> u64 {
        ((self.budget as f64 * self.tenant_share.clamp(0.0, 1.0)).ceil() as u64).clamp(1, self.budget)
    }

    /// The time-to-first-token target of `tenant`'s generations, if it has one.
    fn ttft_target_of(&self, tenant: &str) -> Option<Duration> {
        let target = self.tenant_ttft_targets.get(tenant).copied().unwrap_or(self.ttft_target);
        (!target.is_zero()).then_some(target)
    }

    /// Parses `tenant=ms` items.
    pub fn parse_ttft_targets(items: &[String]) -> Result<HashMap<String, Duration>, String> {
        items
            .iter()
            .map(|item| {
                let (tenant, ms) = item.split_once('=').ok_or_else(|| {
                    format!("a tenant's time-to-first-token target is tenant=ms, not {item:?}")
                })?;
                let ms = ms.trim().parse::<u64>().map_err(|_| format!("{ms:?} is not whole milliseconds"))?;
                Ok((tenant.trim().to_owned(), Duration::from_millis(ms)))
            })
            .collect()
    }

    /// Requests of one tenant that may wait.
    fn tenant_queue(&self) -> usize {
        ((self.queue as f64 * self.tenant_share.clamp(0.0, 1.0)).ceil() as usize).max(1)
    }
}

/// One tenant's share: its own budget, and how many of its requests wait (and their cost) for it.
#[derive(Debug)]
struct TenantShare {
    budget: Arc<Semaphore>,
    waiting: AtomicUsize,
    waiting_cost: AtomicU64,
}

/// The admission controller.
#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    budget: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// Cost of the requests that hold their tenant's share and wait for the node's budget (those still
    /// waiting for their tenant's share are counted by it: they do not wait ahead of other tenants).
    waiting_cost: AtomicU64,
    /// Units per second generations completed at, as f64 bits (0: not measured yet).
    rate: AtomicU64,
    window: Mutex<(Instant, u64)>,
    /// Requests refused since the start.
    pub refused: AtomicU64,
    /// Of those, requests refused because their predicted wait exceeded their target.
    pub shed: AtomicU64,
    /// Each tenant's share, made on its first generation.
    tenants: Mutex<HashMap<String, Arc<TenantShare>>>,
}

/// Budget held by one generation; returned when dropped.
#[derive(Debug)]
pub struct Ticket<'a> {
    admission: &'a Admission,
    cost: u64,
    _permit: OwnedSemaphorePermit,
    /// The tenant's share it holds; none when it borrowed idle budget past its share.
    _tenant_permit: Option<OwnedSemaphorePermit>,
}

/// The predicted cost of generating an answer to `request`, in decode-token units: every choice the pod
/// generates decodes, and the prompt is computed once.
pub fn predicted_cost(request: &NormalizedRequest) -> u64 {
    let prompt_tokens: u64 = request.messages.iter().map(|m| estimated_tokens(&m.content) + 4).sum();
    let decoded = u64::from(request.sampling.max_tokens) * u64::from(request.sampling.generated_choices());
    decoded + prompt_tokens.div_ceil(PROMPT_TOKENS_PER_UNIT)
}

/// A prompt's tokens, estimated without its tokenizer: a token per [`LETTERS_PER_TOKEN`] letters (or
/// other word characters), and one per digit, punctuation mark or symbol. Whitespace goes with words.
fn estimated_tokens(text: &str) -> u64 {
    let (mut letters, mut singles) = (0u64, 0u64);
    for c in text.chars() {
        if c.is_alphabetic() {
            letters += 1;
        } else if !c.is_whitespace() {
            singles += 1;
        }
    }
    letters.div_ceil(LETTERS_PER_TOKEN) + singles
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
            shed: AtomicU64::new(0),
            tenants: Mutex::default(),
        }
    }

    fn share_of(&self, tenant: &str) -> Arc<TenantShare> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = tenants.get(tenant) {
            return Arc::clone(share);
        }
        let share = Arc::new(TenantShare {
            budget: Arc::new(Semaphore::new(self.limits.tenant_budget() as usize)),
            waiting: AtomicUsize::new(0),
            waiting_cost: AtomicU64::new(0),
        });
        tenants.insert(tenant.to_owned(), Arc::clone(&share));
        share
    }

    /// Waits for `cost` units of `tenant`'s share and of the budget (a cost above the tenant's share
    /// takes all of it), or refuses.
    pub async fn admit(&self, tenant: &str, cost: u64) -> Result<Ticket<'_>, RegionalError> {
        let share = self.share_of(tenant);
        let cost = cost.clamp(1, self.limits.tenant_budget());
        let permits = cost as u32;
        match Arc::clone(&share.budget).try_acquire_many_owned(permits) {
            // Within its share.
            Ok(tenant_permit) => {
                if let Ok(permit) = Arc::clone(&self.budget).try_acquire_many_owned(permits) {
                    return Ok(Ticket {
                        admission: self,
                        cost,
                        _permit: permit,
                        _tenant_permit: Some(tenant_permit),
                    });
                }
            }
            // Past it: idle budget may be borrowed while no other tenant waits.
            Err(_) if self.waiting.load(Ordering::Acquire) == share.waiting.load(Ordering::Acquire) => {
                if let Ok(permit) = Arc::clone(&self.budget).try_acquire_many_owned(permits) {
                    return Ok(Ticket { admission: self, cost, _permit: permit, _tenant_permit: None });
                }
            }
            Err(_) => {}
        }
        if let Some(wait) = self
            .predicted_wait(cost, &share)
            .filter(|wait| self.limits.ttft_target_of(tenant).is_some_and(|target| *wait > target))
        {
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.shed.fetch_add(1, Ordering::Relaxed);
            let retry_after_s = (wait.as_secs_f64().ceil() as u64).clamp(1, MAX_RETRY_AFTER_S);
            return Err(RegionalError::Overloaded { queued: self.waiting(), retry_after_s });
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let tenant_queued = share.waiting.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.waiting, &share.waiting);
        if queued >= self.limits.queue || tenant_queued >= self.limits.tenant_queue() {
            return Err(self.refuse(queued, cost, &share));
        }
        let acquired = tokio::time::timeout(self.limits.max_wait, async {
            let for_share = Waiting::new(&share.waiting_cost, cost);
            let tenant_permit = Arc::clone(&share.budget).acquire_many_owned(permits).await?;
            drop(for_share);
            let _for_budget = Waiting::new(&self.waiting_cost, cost);
            let permit = Arc::clone(&self.budget).acquire_many_owned(permits).await?;
            Ok::<_, tokio::sync::AcquireError>((permit, tenant_permit))
        })
        .await;
        match acquired {
            Ok(Ok((permit, tenant_permit))) => {
                Ok(Ticket { admission: self, cost, _permit: permit, _tenant_permit: Some(tenant_permit) })
            }
            _ => Err(self.refuse(self.waiting.load(Ordering::Acquire).saturating_sub(1), cost, &share)),
        }
    }

    /// How long a request of `cost` of the tenant of `share` would wait for budget now: the cost that
    /// must finish first, at the measured completion rate; `None` before any rate is measured. Ahead of
    /// it: what is in flight, what waits for the node's budget, and what its own tenant has waiting,
    /// never another tenant's requests still waiting for that tenant's share.
    fn predicted_wait(&self, cost: u64, share: &TenantShare) -> Option<Duration> {
        let rate = f64::from_bits(self.rate.load(Ordering::Acquire));
        if rate <= 0.0 {
            return None;
        }
        let must_finish = self.ahead_of(cost, share).saturating_sub(self.limits.budget);
        Some(Duration::from_secs_f64(must_finish as f64 / rate))
    }

    /// The cost that must be admitted before a request of `cost` of the tenant of `share` is, itself
    /// included.
    fn ahead_of(&self, cost: u64, share: &TenantShare) -> u64 {
        let waiting = self.waiting_cost.load(Ordering::Acquire) + share.waiting_cost.load(Ordering::Acquire);
        self.in_flight() + waiting + cost
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Units in flight now.
    pub fn in_flight(&self) -> u64 {
        self.limits.budget - self.budget.available_permits() as u64
    }

    fn refuse(&self, queued: usize, cost: u64, share: &TenantShare) -> RegionalError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        RegionalError::Overloaded { queued, retry_after_s: self.retry_after_s(self.ahead_of(cost, share)) }
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

/// Cost counted as waiting until the wait ends, however it ends.
struct Waiting<'a>(&'a AtomicU64, u64);

impl<'a> Waiting<'a> {
    fn new(counter: &'a AtomicU64, cost: u64) -> Self {
        counter.fetch_add(cost, Ordering::AcqRel);
        Self(counter, cost)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

/// Leaves the queue (the node's count and the tenant's) however the wait ends.
struct Leave<'a>(&'a AtomicUsize, &'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        self.1.fetch_sub(1, Ordering::AcqRel);
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

    #[test]
    fn every_generated_choice_counts_and_greedy_copies_do_not() {
        use shared::normalize::{ChatRole, Message, Sampling};
        let request = |sampling: Sampling| NormalizedRequest {
            model: shared::models::ModelRef { name: "m".into(), version: 1 },
            messages: vec![Message { role: ChatRole::User, content: "x".repeat(40) }],
            sampling,
            delivery: shared::openai::Delivery::Whole,
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        };
        let one = predicted_cost(&request(Sampling { temperature: 0.8, ..Sampling::greedy(100) }));
        let four = predicted_cost(&request(Sampling { temperature: 0.8, n: 4, ..Sampling::greedy(100) }));
        let copies = predicted_cost(&request(Sampling { n: 4, ..Sampling::greedy(100) }));
        assert_eq!(four - one, 300, "three more choices of 100 tokens");
        assert_eq!(copies, one, "greedy choices are one generation");
    }

    #[test]
    fn digits_and_punctuation_are_not_undercounted() {
        assert_eq!(estimated_tokens("What is the capital of France?"), 6 + 1);
        let words: Vec<String> = (0..300).map(|i| format!("w{}", 100 + i)).collect();
        // 300 x (w, three digits, ;) is about 1,500 tokens to a tokenizer; four characters a token said 375.
        assert!(estimated_tokens(&words.join(";")) >= 1_200, "{}", estimated_tokens(&words.join(";")));
    }

    fn admission(budget: u64, queue: usize, wait_ms: u64) -> Admission {
        Admission::new(AdmissionLimits {
            budget,
            queue,
            max_wait: Duration::from_millis(wait_ms),
            tenant_share: 1.0,
            ttft_target: Duration::ZERO,
            tenant_ttft_targets: HashMap::new(),
        })
    }

    #[tokio::test]
    async fn fits_within_budget_then_queues_then_refuses_with_a_retry_time() {
        let admission = admission(100, 1, 5_000);
        let first = admission.admit("t", 60).await.expect("fits");
        let _second = admission.admit("t", 40).await.expect("fits exactly");
        assert_eq!(admission.in_flight(), 100);
        let queued = admission.admit("t", 30);
        tokio::pin!(queued);
        assert!(futures::poll!(queued.as_mut()).is_pending(), "waits in the queue");
        assert_eq!(admission.waiting(), 1);
        match admission.admit("t", 10).await {
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
        let big = admission.admit("t", 10_000).await.expect("clamped to the whole budget");
        assert_eq!(admission.in_flight(), 50);
        assert!(matches!(admission.admit("t", 1).await, Err(RegionalError::Overloaded { .. })), "timed out");
        drop(big);
        assert!(admission.admit("t", 1).await.is_ok());
    }

    #[tokio::test]
    async fn a_tenant_borrows_idle_budget_but_not_from_a_waiting_tenant() {
        let admission = Admission::new(AdmissionLimits {
            budget: 100,
            queue: 4,
            max_wait: Duration::from_millis(5_000),
            tenant_share: 0.5,
            ttft_target: Duration::ZERO,
            tenant_ttft_targets: HashMap::new(),
        });
        let flood = admission.admit("flood", 50).await.expect("its share");
        let borrowed = admission.admit("flood", 30).await.expect("alone, it borrows idle budget");
        assert_eq!(admission.in_flight(), 80);
        // Another tenant needs more than is left: it waits, and from now on the flood borrows no more.
        let quiet = admission.admit("quiet", 40);
        tokio::pin!(quiet);
        assert!(futures::poll!(quiet.as_mut()).is_pending());
        let more = admission.admit("flood", 10);
        tokio::pin!(more);
        assert!(futures::poll!(more.as_mut()).is_pending(), "no borrowing while another tenant waits");
        // The flood's places in the queue are its share of them (2 of 4): its third waiter is refused.
        let second = admission.admit("flood", 10);
        tokio::pin!(second);
        assert!(futures::poll!(second.as_mut()).is_pending());
        assert!(matches!(admission.admit("flood", 10).await, Err(RegionalError::Overloaded { .. })));
        // The borrowed budget returns to the waiting tenant, not to the flood.
        drop(borrowed);
        let quiet = quiet.await.expect("the quiet tenant gets the returned budget");
        assert!(futures::poll!(more.as_mut()).is_pending(), "the flood still waits for its own share");
        drop(flood);
        assert_eq!(more.await.expect("within its share again").cost, 10);
        drop(quiet);
    }

    #[tokio::test]
    async fn a_request_predicted_to_miss_its_target_is_shed_at_once() {
        let admission = Admission::new(AdmissionLimits {
            budget: 100,
            queue: 8,
            max_wait: Duration::from_millis(5_000),
            tenant_share: 1.0,
            ttft_target: Duration::from_secs(2),
            tenant_ttft_targets: AdmissionLimits::parse_ttft_targets(&["patient=60000".into()])
                .expect("targets"),
        });
        let full = admission.admit("t", 100).await.expect("fits");
        // Nothing measured yet: no prediction, so the request waits as before.
        let waiting = admission.admit("t", 50);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        // 10 units a second: 50 waiting + 100 more must finish before another 100, which is 15 s.
        admission.rate.store(10.0_f64.to_bits(), Ordering::Release);
        match admission.admit("t", 100).await {
            Err(RegionalError::Overloaded { retry_after_s, .. }) => assert_eq!(retry_after_s, 15),
            other => panic!("expected a shed request, got {other:?}"),
        }
        assert_eq!(admission.shed.load(Ordering::Relaxed), 1);
        // A tenant with a longer target waits instead.
        let patient = admission.admit("patient", 100);
        tokio::pin!(patient);
        assert!(futures::poll!(patient.as_mut()).is_pending());
        assert!(AdmissionLimits::parse_ttft_targets(&["nonsense".into()]).is_err());
        drop(full);
    }

    #[tokio::test]
    async fn a_tenant_that_fills_its_own_queue_does_not_get_another_shed() {
        let admission = Admission::new(AdmissionLimits {
            budget: 100,
            queue: 8,
            max_wait: Duration::from_millis(5_000),
            tenant_share: 0.5,
            ttft_target: Duration::from_secs(2),
            tenant_ttft_targets: HashMap::new(),
        });
        let _share = admission.admit("flood", 50).await.expect("its share");
        let borrowed = admission.admit("flood", 50).await.expect("idle budget, borrowed");
        // The flood queues three more behind its own share (before any rate is measured, so none is
        // shed): 15 s of work at the 10 units a second measured next.
        let mut queued: Vec<_> = (0..3).map(|_| Box::pin(admission.admit("flood", 50))).collect();
        for waiting in &mut queued {
            assert!(futures::poll!(waiting.as_mut()).is_pending());
        }
        admission.rate.store(10.0_f64.to_bits(), Ordering::Release);
        // Another tenant waits only for what is in flight past the budget (1 s), not behind the flood.
        let quiet = admission.admit("quiet", 10);
        tokio::pin!(quiet);
        assert!(futures::poll!(quiet.as_mut()).is_pending(), "queued, not shed");
        assert_eq!(admission.shed.load(Ordering::Relaxed), 0);
        drop(borrowed);
        let quiet = quiet.await.expect("admitted when the borrowed budget returns");
        assert_eq!(quiet.cost, 10);
        // The flood's own next request is predicted behind its own queue (15 s): shed.
        let next = admission.admit("flood", 50).await;
        assert!(matches!(next, Err(RegionalError::Overloaded { .. })), "{next:?}");
        drop(quiet);
    }
}
