use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::*;
use crate::exact_cache::test_support::{entry_sized, Rng};

/// Every test entry is this large unless it says otherwise.
const SIZE: usize = 1000;
/// Ten entries and a half: the window (1%, 105 bytes) holds none, so each insert goes straight to the duel.
const TEN_AND_A_HALF: usize = 10 * SIZE + SIZE / 2;

fn hash(key: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

impl Shard {
    fn lookup(&mut self, key: &str, now_ms: i64) -> Option<Arc<CachedCompletion>> {
        self.get(key, hash(key), now_ms, 0)
    }

    fn put(&mut self, key: &str, size: usize) {
        self.insert(entry_sized(key, size, 0, 0), hash(key));
    }

    fn region_of(&self, key: &str) -> Option<Region> {
        self.nodes.get(*self.index.get(key)?).map(|node| node.region)
    }

    /// Every structural invariant: lists, regions, byte counts, the index, and the three bounds.
    fn check(&self) {
        let mut linked = 0;
        for region in [Region::Window, Region::Probation, Region::Protected] {
            let mut bytes = 0;
            for index in self.nodes.iter(&self.segment(region).list) {
                let node = self.nodes.get(index).expect("a linked node is live");
                assert_eq!(node.region, region);
                assert_eq!(node.size, node.entry.size_bytes());
                assert_eq!(self.index.get(node.entry.key.as_str()), Some(&index));
                bytes += node.size;
                linked += 1;
            }
            assert_eq!(bytes, self.segment(region).bytes, "{region:?} bytes");
        }
        assert_eq!(linked, self.index.len());
        assert!(self.bytes() <= self.capacity, "{} > {}", self.bytes(), self.capacity);
        assert!(self.segment(Region::Window).bytes <= self.window_max);
        assert!(self.segment(Region::Protected).bytes <= self.protected_max);
    }
}

#[test]
fn random_operations_keep_every_bound_and_serve_the_latest_fresh_value() {
    let mut rng = Rng::new(42);
    let mut shard = Shard::new(60_000);
    // What was last stored under each key: (size, created_ms, ttl_s).
    let mut model: HashMap<String, (usize, i64, u64)> = HashMap::new();
    let mut now_ms = 0;
    for _ in 0..40_000 {
        now_ms += rng.below(20) as i64;
        // A skewed key space: low keys come up far more often.
        let spread = 1 + rng.below(600);
        let key = format!("k{:04}", rng.below(spread));
        if rng.below(2) == 0 {
            let size = match rng.below(100) {
                0 => 70_000, // larger than the shard
                1..=9 => 5_000 + rng.below(20_000) as usize,
                _ => 300 + rng.below(2_000) as usize,
            };
            let ttl_s = [0, 1, 5, 60][rng.below(4) as usize];
            shard.insert(entry_sized(&key, size, now_ms, ttl_s), hash(&key));
            if size <= 60_000 {
                model.insert(key, (size, now_ms, ttl_s));
            }
        } else {
            let got = shard.lookup(&key, now_ms);
            if let Some(&(size, created_ms, ttl_s)) = model.get(&key) {
                let expired = ttl_s != 0 && now_ms >= created_ms + ttl_s as i64 * 1000;
                if expired {
                    assert!(got.is_none(), "{key} expired but served");
                } else if let Some(got) = got {
                    assert_eq!((got.size_bytes(), got.created_ms), (size, created_ms), "{key}");
                }
            } else {
                assert!(got.is_none(), "{key} never stored but served");
            }
        }
        shard.check();
    }
    let stats = shard.stats();
    for (name, count) in [
        ("admitted", stats.admitted),
        ("rejected", stats.rejected),
        ("evicted", stats.evicted),
        ("expired", stats.expired),
        ("oversized", stats.oversized),
    ] {
        assert!(count > 0, "the run never took the {name} path: {stats:?}");
    }
}

#[test]
fn a_candidate_seen_more_often_than_the_victim_displaces_it() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    for i in 0..10 {
        shard.put(&format!("a{i}"), SIZE);
    }
    assert_eq!((shard.stats().entries, shard.stats().admitted), (10, 10));
    // Never looked up, like every entry in there: a tie keeps the victim.
    shard.put("b", SIZE);
    assert_eq!(shard.region_of("b"), None);
    for _ in 0..3 {
        assert!(shard.lookup("c", 0).is_none());
    }
    shard.put("c", SIZE);
    assert_eq!(shard.region_of("c"), Some(Region::Probation));
    assert_eq!(shard.region_of("a0"), None, "the least recently used victim lost");
    let stats = shard.stats();
    assert_eq!((stats.admitted, stats.rejected, stats.evicted, stats.entries), (11, 1, 1, 10));
    shard.check();
}

#[test]
fn a_large_candidate_must_beat_every_victim_it_needs_room_from() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    for _ in 0..5 {
        shard.lookup("s1", 0);
    }
    for i in 0..10 {
        shard.put(&format!("s{i}"), SIZE);
    }
    for _ in 0..2 {
        shard.lookup("big", 0);
    }
    // Needs three slots' worth: beats s0 (never seen), then loses to s1 (seen five times).
    shard.put("big", 3 * SIZE);
    assert_eq!((shard.region_of("big"), shard.region_of("s0")), (None, None));
    assert_eq!(shard.region_of("s1"), Some(Region::Probation));
    assert_eq!(shard.stats().bytes, 9 * SIZE);
    for _ in 0..6 {
        shard.lookup("bigger", 0);
    }
    shard.put("bigger", 3 * SIZE);
    assert_eq!(shard.region_of("bigger"), Some(Region::Probation));
    assert_eq!((shard.region_of("s1"), shard.region_of("s2"), shard.stats().bytes), (None, None, 10 * SIZE));
    let stats = shard.stats();
    assert_eq!((stats.rejected, stats.evicted), (1, 3));
    shard.check();
}

#[test]
fn a_hit_in_probation_promotes_and_protected_overflow_is_demoted() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    // Protected holds 80% of the main space: eight entries.
    assert_eq!(shard.protected_max / SIZE, 8);
    for i in 0..10 {
        shard.put(&format!("k{i}"), SIZE);
    }
    for i in 0..10 {
        assert!(shard.lookup(&format!("k{i}"), 0).is_some());
    }
    for i in 0..10 {
        let expected = if i < 2 { Region::Probation } else { Region::Protected };
        assert_eq!(shard.region_of(&format!("k{i}")), Some(expected), "k{i}");
    }
    // The demoted ones are probation's most recent; a hit there promotes again and demotes k2.
    assert!(shard.lookup("k0", 0).is_some());
    assert_eq!(
        (shard.region_of("k0"), shard.region_of("k2")),
        (Some(Region::Protected), Some(Region::Probation))
    );
    shard.check();
}

#[test]
fn recent_entries_wait_in_the_window_and_hits_there_keep_them() {
    // A 1% window of 200 000 bytes holds two entries before the duel.
    let mut shard = Shard::new(200 * SIZE);
    shard.put("w0", SIZE);
    shard.put("w1", SIZE);
    assert_eq!((shard.region_of("w0"), shard.region_of("w1")), (Some(Region::Window), Some(Region::Window)));
    assert!(shard.lookup("w0", 0).is_some());
    shard.put("w2", SIZE);
    // w1 is now the window's least recently used: it moves on to the main space, w0 stays.
    assert_eq!(shard.region_of("w1"), Some(Region::Probation));
    assert_eq!((shard.region_of("w0"), shard.region_of("w2")), (Some(Region::Window), Some(Region::Window)));
    shard.check();
}

#[test]
fn replacing_an_entry_keeps_its_place_and_counts_its_new_size() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    shard.put("k", SIZE);
    assert!(shard.lookup("k", 0).is_some());
    assert_eq!(shard.region_of("k"), Some(Region::Protected));
    shard.put("k", 2 * SIZE);
    assert_eq!(shard.region_of("k"), Some(Region::Protected));
    assert_eq!((shard.stats().entries, shard.stats().bytes), (1, 2 * SIZE));
    assert_eq!(shard.lookup("k", 0).map(|entry| entry.size_bytes()), Some(2 * SIZE));
    shard.check();
}

#[test]
fn expired_entries_are_removed_when_read() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    shard.insert(entry_sized("k", SIZE, 0, 1), hash("k"));
    assert!(shard.lookup("k", 999).is_some());
    assert!(shard.lookup("k", 1000).is_none());
    let stats = shard.stats();
    assert_eq!((stats.entries, stats.bytes, stats.expired), (0, 0, 1));
    shard.check();
}

#[test]
fn an_entry_larger_than_the_shard_is_refused_and_the_old_one_stays() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    shard.put("k", SIZE);
    shard.put("k", TEN_AND_A_HALF + 1);
    shard.put("huge", 2 * TEN_AND_A_HALF);
    assert_eq!(shard.lookup("k", 0).map(|entry| entry.size_bytes()), Some(SIZE));
    assert!(shard.lookup("huge", 0).is_none());
    assert_eq!((shard.stats().oversized, shard.stats().bytes), (2, SIZE));
    // One exactly as large as the shard fits, once it wins its place from everything else.
    shard.lookup("whole", 0);
    shard.lookup("whole", 0);
    shard.put("whole", TEN_AND_A_HALF);
    assert_eq!((shard.region_of("whole"), shard.region_of("k")), (Some(Region::Probation), None));
    assert_eq!(shard.stats().bytes, TEN_AND_A_HALF);
    shard.check();
}

impl Shard {
    fn put_for(&mut self, tenant: &str, key: &str) {
        let mut entry = entry_sized(key, SIZE, 0, 0);
        entry.tenant = tenant.into();
        self.insert(entry, hash(key));
    }

    fn held_by(&self, tenant: &str) -> usize {
        self.index.keys().filter(|key| self.peek(key).is_some_and(|e| e.tenant == tenant)).count()
    }
}

#[test]
fn a_tenant_over_its_quota_cannot_push_another_out() {
    let mut shard = Shard::new(TEN_AND_A_HALF);
    shard.set_tenant_share(0.5);
    // Alone, a tenant uses every byte.
    for i in 0..10 {
        shard.put_for("flood", &format!("flood-{i}"));
    }
    assert_eq!(shard.held_by("flood"), 10);
    // Another tenant's entries take the over-quota tenant's places without a duel...
    for i in 0..4 {
        shard.put_for("quiet", &format!("quiet-{i}"));
    }
    assert_eq!(shard.held_by("quiet"), 4);
    // ...and then the flood, however hot its keys, only replaces its own.
    for round in 0..3 {
        for i in 0..30 {
            let key = format!("flood-new-{i}");
            for _ in 0..=round {
                shard.lookup(&key, 0);
            }
            shard.put_for("flood", &key);
        }
    }
    assert_eq!(shard.held_by("quiet"), 4, "the quiet tenant's entries stay");
    assert!(shard.stats().over_quota > 0);
    let counted: usize = shard.tenant_bytes.values().sum();
    assert_eq!(counted, shard.bytes(), "per-tenant bytes add up");
    shard.check();
}
