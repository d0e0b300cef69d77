//! One shard of the exact cache: W-TinyLFU over a byte budget.
//!
//! Every new entry enters the admission window (an LRU of 1% of the bytes). What overflows the window is a
//! candidate for the main space, a segmented LRU: entries start in probation (nominally 20% of the main
//! bytes: whatever protected leaves) and a hit there promotes them to protected (at most 80%), whose
//! overflow is demoted back to probation's most recent end.
//! A candidate that does not fit duels the least recently used victim of the main space (probation first):
//! the one the sketch has seen more often stays, and a tie keeps the victim. A candidate that beats a victim
//! but is still too large duels the next one. Every step is O(1); evictions are paid for by the inserts
//! that caused them.
//!
//! Tenants share the bytes, but none can push the others out past its quota (a share of the shard's
//! bytes): once the shard is full, a candidate of a tenant over its quota may only take the place of
//! its own tenant's entries, and a victim whose tenant is over its quota is evicted without a duel. Below
//! that (a shard with room, or a tenant within its quota) nothing changes, so one tenant alone still uses
//! every byte.

use std::collections::HashMap;
use std::sync::Arc;

use shared::completion::CachedCompletion;

use super::lru_list::{Arena, List};
use super::sketch::FrequencySketch;
use super::CacheStats;

/// Share of a shard's bytes for the admission window, in percent.
const WINDOW_PERCENT: usize = 1;
/// Share of the main space's bytes for the protected segment, in percent.
const PROTECTED_PERCENT: usize = 80;
/// The entry size the sketch is first sized by; it widens if entries turn out smaller.
const TYPICAL_ENTRY_BYTES: usize = 2048;

/// Where an entry is; also the index of its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    /// The admission window: every new entry starts here.
    Window,
    /// Main space, admitted but not hit since.
    Probation,
    /// Main space, hit at least once since admission.
    Protected,
}

/// One cached entry.
struct Node {
    /// Shared with the responses that are serving it.
    entry: Arc<CachedCompletion>,
    /// `entry.size_bytes()`, kept so that removal never recomputes it.
    size: usize,
    /// The key's seeded hash, for the sketch.
    hash: u64,
    /// The segment whose list holds the node.
    region: Region,
}

/// One LRU list and the bytes of its entries.
#[derive(Default)]
struct Segment {
    /// Least recently used first.
    list: List,
    /// The sum of the entries' sizes.
    bytes: usize,
}

/// A W-TinyLFU cache bounded by bytes; not synchronized (the [`super::ExactCache`] locks it).
pub(super) struct Shard {
    /// Bytes this shard may hold.
    capacity: usize,
    /// Bytes the admission window may hold before its least recently used entry becomes a candidate.
    window_max: usize,
    /// Bytes the protected segment may hold before its least recently used entry is demoted.
    protected_max: usize,
    /// Key -> node.
    index: HashMap<String, usize>,
    /// Every entry's node, linked into the list of its segment.
    nodes: Arena<Node>,
    /// Indexed by [`Region`].
    segments: [Segment; 3],
    /// Lookups of this shard's keys, hits and misses.
    sketch: FrequencySketch,
    /// Counters only (entries and bytes are computed when asked).
    counts: CacheStats,
    /// Bytes each tenant holds here.
    tenant_bytes: HashMap<String, usize>,
    /// Bytes past which a tenant may not displace others' entries.
    tenant_quota: usize,
}

impl Shard {
    /// An empty shard that holds at most `capacity` bytes.
    pub(super) fn new(capacity: usize) -> Self {
        let window_max = (capacity / 100 * WINDOW_PERCENT).max(1);
        let main = capacity.saturating_sub(window_max);
        Self {
            capacity,
            window_max,
            protected_max: main / 100 * PROTECTED_PERCENT,
            index: HashMap::new(),
            nodes: Arena::new(),
            segments: Default::default(),
            sketch: FrequencySketch::with_capacity(capacity / TYPICAL_ENTRY_BYTES),
            counts: CacheStats::default(),
            tenant_bytes: HashMap::new(),
            tenant_quota: capacity,
        }
    }

    /// Sets each tenant's quota to `share` (0..=1) of the shard's bytes.
    pub(super) fn set_tenant_share(&mut self, share: f64) {
        self.tenant_quota = ((self.capacity as f64 * share.clamp(0.0, 1.0)) as usize).max(1);
    }

    /// Whether `tenant` holds more than its quota.
    fn over_quota(&self, tenant: &str) -> bool {
        self.tenant_bytes.get(tenant).is_some_and(|bytes| *bytes > self.tenant_quota)
    }

    fn count_tenant(&mut self, tenant: &str, added: usize, removed: usize) {
        if let Some(bytes) = self.tenant_bytes.get_mut(tenant) {
            *bytes = (*bytes + added).saturating_sub(removed);
            if *bytes == 0 {
                self.tenant_bytes.remove(tenant);
            }
        } else if added > removed {
            self.tenant_bytes.insert(tenant.to_owned(), added - removed);
        }
    }

    /// The fresh entry under `key`, counting the lookup (hit or miss) in the sketch; an expired entry is
    /// removed.
    pub(super) fn get(
        &mut self,
        key: &str,
        hash: u64,
        now_ms: i64,
        stale_grace_ms: i64,
    ) -> Option<Arc<CachedCompletion>> {
        self.sketch.increment(hash);
        let index = *self.index.get(key)?;
        let node = self.nodes.get(index)?;
        if node.entry.is_expired(now_ms) {
            // Kept through the grace period, for serving stale while the core is out of reach.
            if node.entry.is_expired(now_ms.saturating_sub(stale_grace_ms)) {
                self.remove(index);
                self.counts.expired += 1;
            }
            return None;
        }
        let entry = Arc::clone(&node.entry);
        self.on_hit(index);
        Some(entry)
    }

    /// Stores `entry` in the window (or replaces the entry under its key where it is), then restores the
    /// bounds. An entry larger than the shard is refused and leaves any older entry under its key alone.
    pub(super) fn insert(&mut self, entry: CachedCompletion, hash: u64) {
        let size = entry.size_bytes();
        if size > self.capacity {
            self.counts.oversized += 1;
            return;
        }
        if let Some(&index) = self.index.get(entry.key.as_str()) {
            self.replace(index, entry, size);
        } else {
            let key = entry.key.clone();
            self.count_tenant(&entry.tenant, size, 0);
            let index = self.nodes.alloc(Node { entry: Arc::new(entry), size, hash, region: Region::Window });
            self.attach(index, Region::Window);
            self.index.insert(key, index);
            self.sketch.ensure_capacity(self.index.len());
        }
        self.evict();
    }

    /// Removes the entry under `key`; true if there was one.
    pub(super) fn remove_key(&mut self, key: &str) -> bool {
        match self.index.get(key) {
            Some(&index) => {
                self.remove(index);
                true
            }
            None => false,
        }
    }

    /// The entry under `key`, expired or not, without counting a lookup or touching recency.
    pub(super) fn peek(&self, key: &str) -> Option<Arc<CachedCompletion>> {
        let index = *self.index.get(key)?;
        self.nodes.get(index).map(|node| Arc::clone(&node.entry))
    }

    /// Whether `key` is held, without counting a lookup.
    pub(super) fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Entries, bytes and the counters of this shard.
    pub(super) fn stats(&self) -> CacheStats {
        CacheStats { entries: self.index.len(), bytes: self.bytes(), ..self.counts }
    }

    fn bytes(&self) -> usize {
        self.segments.iter().map(|segment| segment.bytes).sum()
    }

    fn segment(&self, region: Region) -> &Segment {
        &self.segments[region as usize]
    }

    /// Links a node that is in no list at the most recently used end of `region`.
    fn attach(&mut self, index: usize, region: Region) {
        let Some(node) = self.nodes.get_mut(index) else { return };
        node.region = region;
        let size = node.size;
        let segment = &mut self.segments[region as usize];
        self.nodes.push_back(&mut segment.list, index);
        segment.bytes += size;
    }

    /// Unlinks a node from its segment (it stays in the arena and the index).
    fn detach(&mut self, index: usize) {
        let Some((region, size)) = self.nodes.get(index).map(|node| (node.region, node.size)) else { return };
        let segment = &mut self.segments[region as usize];
        self.nodes.unlink(&mut segment.list, index);
        segment.bytes -= size;
    }

    fn on_hit(&mut self, index: usize) {
        let Some(region) = self.nodes.get(index).map(|node| node.region) else { return };
        match region {
            Region::Window | Region::Protected => {
                self.nodes.move_to_back(&mut self.segments[region as usize].list, index);
            }
            Region::Probation => {
                self.detach(index);
                self.attach(index, Region::Protected);
                self.demote_protected_overflow();
            }
        }
    }

    /// Demotes protected's least recently used entries to probation until protected fits its share.
    fn demote_protected_overflow(&mut self) {
        while self.segment(Region::Protected).bytes > self.protected_max {
            let Some(index) = self.segment(Region::Protected).list.head() else { break };
            self.detach(index);
            self.attach(index, Region::Probation);
        }
    }

    /// Replaces the entry of a node in place: same segment, same recency, new size.
    fn replace(&mut self, index: usize, entry: CachedCompletion, size: usize) {
        let Some(node) = self.nodes.get_mut(index) else { return };
        let old = std::mem::replace(&mut node.size, size);
        let old_tenant = std::mem::replace(&mut node.entry, Arc::new(entry)).tenant.clone();
        let new_tenant = node.entry.tenant.clone();
        let region = node.region;
        self.count_tenant(&old_tenant, 0, old);
        self.count_tenant(&new_tenant, size, 0);
        let segment = &mut self.segments[region as usize];
        segment.bytes = segment.bytes - old + size;
        if region == Region::Protected {
            self.demote_protected_overflow();
        }
    }

    /// Moves the window's overflow into the main space through the admission duel, then evicts whatever
    /// still exceeds the capacity (only a replacement by a larger entry can leave some).
    fn evict(&mut self) {
        while self.segment(Region::Window).bytes > self.window_max {
            let Some(candidate) = self.segment(Region::Window).list.head() else { break };
            let Some((size, hash)) = self.nodes.get(candidate).map(|node| (node.size, node.hash)) else {
                break;
            };
            self.detach(candidate);
            let tenant = self.nodes.get(candidate).map(|node| node.entry.tenant.clone()).unwrap_or_default();
            if self.make_room(size, self.sketch.frequency(hash), &tenant) {
                self.attach(candidate, Region::Probation);
                self.counts.admitted += 1;
            } else {
                self.drop_node(candidate);
                self.counts.rejected += 1;
            }
        }
        while self.bytes() > self.capacity {
            let Some(victim) = [Region::Probation, Region::Protected, Region::Window]
                .into_iter()
                .find_map(|region| self.segment(region).list.head())
            else {
                break;
            };
            self.remove(victim);
            self.counts.evicted += 1;
        }
    }

    /// Evicts main-space victims, least recently used first (probation before protected), while `size` more
    /// bytes would not fit and the candidate of `tenant`, seen `frequency` times, was seen more often than
    /// the victim. A victim whose tenant is over its quota goes without a duel; a candidate whose tenant is
    /// over its quota displaces no other tenant's entry. False when the candidate lost or there is no
    /// victim left.
    fn make_room(&mut self, size: usize, frequency: u8, tenant: &str) -> bool {
        let candidate_over = self.over_quota(tenant);
        while self.bytes() + size > self.capacity {
            let Some(victim) = [Region::Probation, Region::Protected]
                .into_iter()
                .find_map(|region| self.segment(region).list.head())
            else {
                return false;
            };
            let Some((victim_hash, victim_tenant)) =
                self.nodes.get(victim).map(|node| (node.hash, node.entry.tenant.clone()))
            else {
                return false;
            };
            let same_tenant = victim_tenant == tenant;
            if candidate_over && !same_tenant {
                self.counts.over_quota += 1;
                return false;
            }
            let victim_over = !same_tenant && self.over_quota(&victim_tenant);
            if !victim_over && frequency <= self.sketch.frequency(victim_hash) {
                return false;
            }
            self.remove(victim);
            self.counts.evicted += 1;
        }
        true
    }

    /// Unlinks a node from its segment and drops it.
    fn remove(&mut self, index: usize) {
        self.detach(index);
        self.drop_node(index);
    }

    /// Frees a node that is in no list, and forgets its key.
    fn drop_node(&mut self, index: usize) {
        if let Some(node) = self.nodes.free(index) {
            self.index.remove(node.entry.key.as_str());
            self.count_tenant(&node.entry.tenant, 0, node.size);
        }
    }
}

#[cfg(test)]
mod tests;
