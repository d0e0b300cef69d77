//! A replicated entry: a multi-value register of cached answers and tombstones under vector clocks.
//!
//! Every write at a node takes the join of the clocks it has seen for the key and increments its own
//! counter, so it supersedes everything it saw. Two writes that did not see each other are concurrent;
//! a record keeps every version that no other version supersedes (its "siblings"), so merging is the set
//! of maximal versions of the union: commutative, associative and idempotent by construction, whatever
//! order, duplication or loss the deltas went through. Two versions with equal clocks (which honest
//! nodes never make, since each node's counter only grows) are ordered by a digest of their value, so
//! the law holds for every input.
//!
//! Reading resolves the siblings deterministically: a tombstone among them wins (an invalidation beats
//! any write it raced), otherwise the newest answer (by creation time, then digest) is served. A write
//! that saw the tombstone dominates it and brings the key back; a stale write never does.

use std::cmp::Ordering;

use crdts::VClock;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use shared::completion::CachedCompletion;

/// A vector clock over node ids.
pub type Clock = VClock<String>;

/// An invalidation, kept until every peer has seen it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The tenant that owned the entry.
    pub tenant: String,
    /// Unix milliseconds at the node that invalidated it.
    pub invalidated_ms: i64,
    /// When every answer it superseded had expired (the latest `created_ms` plus TTL among them); past
    /// it the tombstone has nothing left to cover and expires like an answer, whether or not every peer
    /// acknowledged it, so a peer lost for good does not hold collection back for ever. `None`: one of
    /// them never expires, and the tombstone waits for the acknowledgements.
    #[serde(default)]
    pub covers_until_ms: Option<i64>,
}

impl Tombstone {
    /// A tombstone of `tenant`'s answers `superseded`, invalidated at `invalidated_ms`.
    pub fn of<'a>(
        tenant: &str,
        invalidated_ms: i64,
        superseded: impl IntoIterator<Item = &'a CachedCompletion>,
    ) -> Self {
        let covers_until_ms = superseded.into_iter().try_fold(i64::MIN, |until, answer| {
            let ttl_ms = i64::try_from(answer.ttl_s).ok()?.checked_mul(1_000)?;
            (answer.ttl_s > 0).then(|| until.max(answer.created_ms.saturating_add(ttl_ms)))
        });
        Self { tenant: tenant.to_owned(), invalidated_ms, covers_until_ms }
    }
}

/// What one write put under a key.
// Most values are answers: boxing them would add an allocation to nearly every record for the sake of
// the few tombstones.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    /// A cached answer.
    Live(CachedCompletion),
    /// An invalidation.
    Tombstone(Tombstone),
}

/// One value with the clock of the write that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The write's clock.
    pub clock: Clock,
    /// What it wrote.
    pub value: Value,
}

/// Every version of a key that no other version supersedes, in a canonical order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    versions: Vec<Version>,
}

/// What a record reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// The answer to serve.
    Live(&'a CachedCompletion),
    /// Invalidated: serve nothing.
    Invalidated,
}

impl Record {
    /// A record of the given versions, reduced to the maximal ones.
    pub fn from_versions(versions: Vec<Version>) -> Self {
        Self { versions: maximal(versions) }
    }

    /// The versions, in canonical order.
    pub fn versions(&self) -> &[Version] {
        &self.versions
    }

    /// Whether the record holds nothing (never the case for a stored record).
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The join of every version's clock: everything this record has seen.
    pub fn clock(&self) -> Clock {
        let mut clock = Clock::new();
        for version in &self.versions {
            join(&mut clock, &version.clock);
        }
        clock
    }

    /// A write of `value` by `actor` that supersedes every version held, taking the actor's next counter.
    pub fn write(&mut self, actor: &str, value: Value) {
        let next = self.clock().get(&actor.to_owned()).saturating_add(1);
        self.write_at(actor, next, value);
    }

    /// A write of `value` by `actor` at `counter`, which must exceed the actor's counter in every version
    /// held; the store passes a per-node counter, so a node's dots never repeat across keys or time.
    pub fn write_at(&mut self, actor: &str, counter: u64, value: Value) {
        let mut clock = self.clock();
        let held = clock.get(&actor.to_owned());
        clock.dots.insert(actor.to_owned(), counter.max(held.saturating_add(1)));
        self.versions = vec![Version { clock, value }];
    }

    /// Merges `other` in: the maximal versions of both.
    pub fn merge(&mut self, other: &Record) {
        let mut all = std::mem::take(&mut self.versions);
        all.extend(other.versions.iter().cloned());
        self.versions = maximal(all);
    }

    /// Drops the versions `floor` has seen (those of a collected tombstone); true if any went.
    pub fn forget_seen_by(&mut self, floor: &Clock) -> bool {
        let before = self.versions.len();
        self.versions.retain(|v| !dominated_or_equal(&v.clock, floor));
        self.versions.len() != before
    }

    /// What the record reads as; see the module docs.
    pub fn resolve(&self) -> Option<Resolved<'_>> {
        if self.versions.iter().any(|v| matches!(v.value, Value::Tombstone(_))) {
            return Some(Resolved::Invalidated);
        }
        self.versions
            .iter()
            .filter_map(|v| match &v.value {
                Value::Live(entry) => Some((entry.created_ms, value_digest(&v.value), entry)),
                Value::Tombstone(_) => None,
            })
            .max_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)))
            .map(|(_, _, entry)| Resolved::Live(entry))
    }

    /// Whether any version is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self.resolve(), Some(Resolved::Invalidated))
    }

    /// Whether a live version already holds this very answer (same etag and creation time).
    pub fn holds_answer(&self, entry: &CachedCompletion) -> bool {
        self.versions.iter().any(|v| match &v.value {
            Value::Live(held) => held.etag == entry.etag && held.created_ms == entry.created_ms,
            Value::Tombstone(_) => false,
        })
    }

    /// Whether every version is past its time at `now_ms`: an answer past its TTL, a tombstone past the
    /// expiry of every answer it covered ([`Tombstone::covers_until_ms`]).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        !self.versions.is_empty()
            && self.versions.iter().all(|v| match &v.value {
                Value::Live(entry) => entry.is_expired(now_ms),
                Value::Tombstone(t) => t.covers_until_ms.is_some_and(|until| until <= now_ms),
            })
    }

    /// A 64-bit digest of the key and every version (clock and value): equal records, equal digests.
    pub fn digest(&self, key: &str) -> u64 {
        let mut hasher = Sha256::new();
        hasher.update((key.len() as u64).to_le_bytes());
        hasher.update(key.as_bytes());
        for version in &self.versions {
            hash_clock(&mut hasher, &version.clock);
            hasher.update(value_digest(&version.value).to_le_bytes());
        }
        first_u64(&hasher.finalize())
    }
}

/// `into` becomes the least upper bound of itself and `other`.
pub fn join(into: &mut Clock, other: &Clock) {
    for (actor, &counter) in &other.dots {
        let held = into.dots.entry(actor.clone()).or_insert(0);
        *held = (*held).max(counter);
    }
}

/// Whether `floor` has seen every write `clock` has.
pub fn dominated_or_equal(clock: &Clock, floor: &Clock) -> bool {
    clock.dots.iter().all(|(actor, &counter)| floor.get(actor) >= counter)
}

/// The versions no other version supersedes, one per clock, in canonical order.
fn maximal(versions: Vec<Version>) -> Vec<Version> {
    let keyed: Vec<(u64, Version)> = versions.into_iter().map(|v| (value_digest(&v.value), v)).collect();
    let mut kept: Vec<(u64, Version)> = Vec::with_capacity(keyed.len());
    for (index, (digest, version)) in keyed.iter().enumerate() {
        let superseded = keyed.iter().enumerate().any(|(other_index, (other_digest, other))| {
            other_index != index
                && supersedes((*other_digest, other), (*digest, version), other_index < index)
        });
        if !superseded {
            kept.push((*digest, version.clone()));
        }
    }
    kept.sort_by(|a, b| clock_order(&a.1.clock, &b.1.clock).then(a.0.cmp(&b.0)));
    kept.into_iter().map(|(_, v)| v).collect()
}

/// Whether `a` supersedes `b`: a later clock, or an equal clock and a greater value digest (or, for
/// identical versions, the earlier copy wins, so exactly one survives).
fn supersedes(a: (u64, &Version), b: (u64, &Version), a_first: bool) -> bool {
    match a.1.clock.partial_cmp(&b.1.clock) {
        Some(Ordering::Greater) => true,
        Some(Ordering::Equal) => a.0 > b.0 || (a.0 == b.0 && a_first),
        _ => false,
    }
}

/// A total order on clocks (their dots in actor order), for a canonical version order.
fn clock_order(a: &Clock, b: &Clock) -> Ordering {
    a.dots.iter().cmp(b.dots.iter())
}

fn hash_clock(hasher: &mut Sha256, clock: &Clock) {
    hasher.update((clock.dots.len() as u64).to_le_bytes());
    for (actor, counter) in &clock.dots {
        hasher.update((actor.len() as u64).to_le_bytes());
        hasher.update(actor.as_bytes());
        hasher.update(counter.to_le_bytes());
    }
}

/// A 64-bit digest of a value (its JSON form, whose field order is fixed).
fn value_digest(value: &Value) -> u64 {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    first_u64(&Sha256::digest(&bytes))
}

fn first_u64(bytes: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(head)
}

#[cfg(test)]
#[path = "record_tests.rs"]
pub(crate) mod tests;
