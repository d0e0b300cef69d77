//! A token bucket per tenant, for requests that cost the whole mesh something: an invalidation is a
//! Raft write at the core and a change every tier applies, so one tenant probing or flooding keys
//! must not slow the others' writes. A tenant over its rate gets 429 with `Retry-After`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Tenants tracked at most; past it the fullest buckets (the least active tenants) are forgotten,
/// which only ever gives a tenant a full bucket again.
const MAX_TENANTS: usize = 10_000;

/// The buckets.
#[derive(Debug)]
pub struct TenantRate {
    per_s: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl TenantRate {
    /// `per_s` requests a second per tenant, `burst` at once; a rate of 0 admits everything.
    pub fn new(per_s: f64, burst: u32) -> Self {
        Self { per_s, burst: f64::from(burst.max(1)), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request of `tenant` at `now`: `Ok`, or the seconds until one would be admitted.
    pub fn take(&self, tenant: &str, now: Instant) -> Result<(), u64> {
        if self.per_s <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_TENANTS && !buckets.contains_key(tenant) {
            let (per_s, burst) = (self.per_s, self.burst);
            buckets.retain(|_, b| refill(b, per_s, burst, now) < burst);
        }
        let bucket = buckets.entry(tenant.to_owned()).or_insert(Bucket { tokens: self.burst, at: now });
        let tokens = refill(bucket, self.per_s, self.burst, now);
        if tokens >= 1.0 {
            *bucket = Bucket { tokens: tokens - 1.0, at: now };
            Ok(())
        } else {
            Err(((1.0 - tokens) / self.per_s).ceil().max(1.0) as u64)
        }
    }
}

/// The tokens `bucket` holds at `now`.
fn refill(bucket: &Bucket, per_s: f64, burst: f64, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * per_s).min(burst)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_tenant_past_its_burst_waits_and_others_do_not() {
        let rate = TenantRate::new(2.0, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(rate.take("noisy", start), Ok(()));
        }
        assert_eq!(rate.take("noisy", start), Err(1), "past the burst: wait");
        assert_eq!(rate.take("quiet", start), Ok(()), "another tenant has its own bucket");
        assert_eq!(rate.take("noisy", start + Duration::from_millis(500)), Ok(()), "refilled at 2/s");
        assert!(rate.take("noisy", start + Duration::from_millis(600)).is_err());
        let open = TenantRate::new(0.0, 1);
        assert!((0..100).all(|_| open.take("t", start).is_ok()));
    }
}
