//! Tests of the block manager: one unit test per behaviour, then a model-based property test that
//! simulates the KV pool's contents and checks every sequence always reads the KV of its own tokens.

use proptest::prelude::*;

use super::*;

/// Computes `tokens[from..to]` of `seq` the way the engine would, and registers full blocks.
fn compute(
    bm: &mut BlockManager,
    seq: &mut SeqBlocks,
    tokens: &[u32],
    from: usize,
    to: usize,
) -> Vec<BlockCopy> {
    bm.ensure_capacity(seq, to).expect("test pool is large enough");
    let copies = bm.prepare_write(seq, from, to).expect("test pool is large enough");
    bm.register_full_blocks(seq, &tokens[..to]);
    copies
}

/// A sequence that computed all of `tokens` from scratch.
fn computed_seq(bm: &mut BlockManager, salt: u64, tokens: &[u32]) -> SeqBlocks {
    let (mut seq, cached) = bm.allocate_prefix(salt, tokens);
    compute(bm, &mut seq, tokens, cached, tokens.len());
    seq
}

fn ok(bm: &BlockManager) {
    bm.check_invariants().expect("invariants hold");
}

#[test]
fn reuses_full_prefix_blocks_within_a_tenant() {
    let mut bm = BlockManager::new(8, 4);
    let prompt: Vec<u32> = (0..10).collect();
    let a = computed_seq(&mut bm, 1, &prompt);
    assert_eq!(bm.cached_blocks(), 2, "two full blocks of ten tokens are registered");

    let (b, cached) = bm.allocate_prefix(1, &prompt);
    assert_eq!(cached, 8);
    assert_eq!(b.table(), &a.table()[..2]);
    assert_eq!(bm.ref_count(a.table()[0]), 2);
    assert_eq!(b.hashed_blocks(), 2);
    ok(&bm);
    bm.check_ref_counts([&a, &b]).expect("ref counts match tables");
}

#[test]
fn always_leaves_the_last_prompt_token_to_compute() {
    let mut bm = BlockManager::new(8, 4);
    let prompt: Vec<u32> = (0..8).collect();
    let _a = computed_seq(&mut bm, 1, &prompt);
    let (_b, cached) = bm.allocate_prefix(1, &prompt);
    assert_eq!(cached, 4, "an 8-token prompt in 4-token blocks reuses only the first block");
    let (_c, cached) = bm.allocate_prefix(1, &prompt[..1]);
    assert_eq!(cached, 0);
    let (_d, cached) = bm.allocate_prefix(1, &[]);
    assert_eq!(cached, 0);
}

#[test]
fn tenants_never_share_blocks() {
    let mut bm = BlockManager::new(8, 4);
    let prompt: Vec<u32> = (0..10).collect();
    let _a = computed_seq(&mut bm, 1, &prompt);
    let (b, cached) = bm.allocate_prefix(2, &prompt);
    assert_eq!(cached, 0, "same tokens under another salt must not hit");
    assert!(b.table().is_empty());
    let (_c, cached) = bm.allocate_prefix(1, &prompt);
    assert_eq!(cached, 8, "the owner still hits");
}

#[test]
fn a_miss_stops_the_lookup() {
    let mut bm = BlockManager::new(8, 2);
    let _a = computed_seq(&mut bm, 1, &[1, 2, 3, 4, 5, 6, 7]);
    // Second block differs, third block matches A's: the chain must not skip the miss.
    let (_b, cached) = bm.allocate_prefix(1, &[1, 2, 9, 9, 5, 6, 7]);
    assert_eq!(cached, 2);
}

#[test]
fn freed_registered_blocks_stay_cached_until_reused() {
    let mut bm = BlockManager::new(4, 4);
    let prompt: Vec<u32> = (0..10).collect();
    let a = computed_seq(&mut bm, 1, &prompt);
    bm.free(a);
    assert_eq!(bm.available_blocks(), 4);
    assert_eq!(bm.evictable_blocks(), 2, "the partial third block went to the free list");
    let (b, cached) = bm.allocate_prefix(1, &prompt);
    assert_eq!(cached, 8);
    assert_eq!(bm.evictable_blocks(), 0, "hits leave the LRU");
    assert_eq!(bm.available_blocks(), 2);
    ok(&bm);
    bm.free(b);
    ok(&bm);
}

#[test]
fn evicts_the_least_recently_released_block() {
    let mut bm = BlockManager::new(3, 2);
    for prompt in [[1, 2], [3, 4], [5, 6]] {
        let s = computed_seq(&mut bm, 1, &prompt);
        bm.free(s);
    }
    // Touch [1, 2]: it becomes the most recently released.
    let (s, cached) = bm.allocate_prefix(1, &[1, 2, 0]);
    assert_eq!(cached, 2);
    bm.free(s);
    // One fresh block evicts [3, 4], the oldest.
    let (mut fresh, _) = bm.allocate_prefix(1, &[9]);
    bm.ensure_capacity(&mut fresh, 1).expect("three blocks are available");
    ok(&bm);
    let hit = |bm: &mut BlockManager, p: &[u32]| {
        let (s, cached) = bm.allocate_prefix(1, p);
        bm.free(s);
        cached
    };
    assert_eq!(hit(&mut bm, &[3, 4, 0]), 0, "the oldest was evicted");
    assert_eq!(hit(&mut bm, &[5, 6, 0]), 2);
    assert_eq!(hit(&mut bm, &[1, 2, 0]), 2);
    assert_eq!(bm.cached_blocks(), 2);
    bm.free(fresh);
    ok(&bm);
}

#[test]
fn fork_then_write_copies_the_shared_block() {
    let mut bm = BlockManager::new(8, 4);
    let tokens: Vec<u32> = (0..6).collect();
    let mut a = computed_seq(&mut bm, 1, &tokens);
    let mut b = bm.fork(&a);
    assert_eq!(bm.ref_count(a.table()[1]), 2);
    let shared_tail = a.table()[1];

    bm.ensure_capacity(&mut b, 7).expect("no growth needed");
    let copies = bm.prepare_write(&mut b, 6, 7).expect("one free block for the copy");
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].src, shared_tail);
    assert_eq!(b.table()[1], copies[0].dst);
    assert_eq!(b.table()[0], a.table()[0], "the untouched first block stays shared");
    assert_eq!(bm.ref_count(shared_tail), 1);

    let copies = bm.prepare_write(&mut a, 6, 7).expect("a's tail is now exclusive");
    assert!(copies.is_empty());
    ok(&bm);
    bm.check_ref_counts([&a, &b]).expect("ref counts match tables");
}

#[test]
fn writing_into_an_exclusive_registered_block_unregisters_it() {
    let mut bm = BlockManager::new(8, 4);
    let tokens: Vec<u32> = (0..8).collect();
    let mut a = computed_seq(&mut bm, 1, &tokens);
    assert_eq!(bm.cached_blocks(), 2);
    bm.truncate(&mut a, 6);
    let tail = a.table()[1];
    assert!(bm.registered_hash(tail).is_some(), "truncation keeps a registration that is still valid");
    let copies = bm.prepare_write(&mut a, 6, 7).expect("no copy needed");
    assert!(copies.is_empty());
    assert_eq!(bm.registered_hash(tail), None);
    assert_eq!(bm.cached_blocks(), 1);
    ok(&bm);
}

#[test]
fn truncate_drops_whole_blocks_and_keeps_valid_registrations() {
    let mut bm = BlockManager::new(8, 4);
    let tokens: Vec<u32> = (0..12).collect();
    let mut a = computed_seq(&mut bm, 1, &tokens);
    assert_eq!(a.table().len(), 3);
    assert_eq!(bm.cached_blocks(), 3);
    bm.truncate(&mut a, 5);
    assert_eq!(a.table().len(), 2);
    assert_eq!(a.hashed_blocks(), 1);
    assert_eq!(bm.evictable_blocks(), 1, "the dropped full block stays cached");
    ok(&bm);
    bm.check_ref_counts([&a]).expect("ref counts match tables");
    // The second block still holds tokens 4..8 untouched, so it still serves a hit.
    let (b, cached) = bm.allocate_prefix(1, &tokens[..9]);
    assert_eq!(cached, 8);
    assert_eq!(b.table(), a.table());
}

#[test]
fn ensure_capacity_is_all_or_nothing() {
    let mut bm = BlockManager::new(3, 4);
    let a = computed_seq(&mut bm, 1, &[1; 8]);
    let (mut b, _) = bm.allocate_prefix(2, &[2; 8]);
    let err = bm.ensure_capacity(&mut b, 8).expect_err("needs two blocks, one is left");
    assert_eq!(err, OutOfBlocks { needed: 2, available: 1 });
    assert!(b.table().is_empty());
    assert_eq!(bm.available_blocks(), 1);
    bm.ensure_capacity(&mut b, 4).expect("one block fits");
    assert_eq!(bm.available_blocks(), 0);
    ok(&bm);
    bm.check_ref_counts([&a, &b]).expect("ref counts match tables");
}

#[test]
fn prepare_write_is_all_or_nothing() {
    let mut bm = BlockManager::new(2, 4);
    let a = computed_seq(&mut bm, 1, &[1, 2, 3, 4, 5, 6]);
    let mut b = bm.fork(&a);
    let before = b.table().to_vec();
    let err = bm.prepare_write(&mut b, 2, 6).expect_err("two shared blocks, no free block");
    assert_eq!(err, OutOfBlocks { needed: 2, available: 0 });
    assert_eq!(b.table(), before);
    assert_eq!(b.hashed_blocks(), 1, "hashes are untouched on failure");
    ok(&bm);
    bm.check_ref_counts([&a, &b]).expect("ref counts match tables");
}

#[test]
fn concurrent_identical_blocks_register_once() {
    let mut bm = BlockManager::new(8, 4);
    let prompt: Vec<u32> = (0..5).collect();
    let (mut a, _) = bm.allocate_prefix(1, &prompt);
    let (mut b, _) = bm.allocate_prefix(1, &prompt);
    compute(&mut bm, &mut a, &prompt, 0, 5);
    compute(&mut bm, &mut b, &prompt, 0, 5);
    assert_ne!(a.table()[0], b.table()[0]);
    assert_eq!(bm.cached_blocks(), 1);
    assert_eq!(b.hashed_blocks(), 1, "the chain advances past the duplicate");
    assert_eq!(bm.registered_hash(b.table()[0]), None);
    let a_first = a.table()[0];
    bm.free(a);
    bm.free(b);
    ok(&bm);
    assert_eq!(bm.evictable_blocks(), 1, "only the registered twin stays cached");
    let (c, cached) = bm.allocate_prefix(1, &prompt);
    assert_eq!((cached, c.table()[0]), (4, a_first));
}

#[test]
fn eviction_removes_the_prefix_cache_entry() {
    let mut bm = BlockManager::new(2, 2);
    let a = computed_seq(&mut bm, 1, &[1, 2, 3]);
    bm.free(a);
    let (mut b, _) = bm.allocate_prefix(2, &[7, 7, 7, 7]);
    bm.ensure_capacity(&mut b, 4).expect("one free and one evictable block");
    assert_eq!(bm.cached_blocks(), 0);
    ok(&bm);
    let (c, cached) = bm.allocate_prefix(1, &[1, 2, 3]);
    assert_eq!(cached, 0);
    bm.free(c);
    bm.free(b);
    assert_eq!(bm.available_blocks(), 2);
    ok(&bm);
}

#[test]
fn free_returns_every_block() {
    let mut bm = BlockManager::new(6, 2);
    let a = computed_seq(&mut bm, 1, &[1, 2, 3, 4, 5]);
    let b = bm.fork(&a);
    let (c, _) = bm.allocate_prefix(1, &[1, 2, 3, 4, 9]);
    bm.free(a);
    bm.free(c);
    bm.free(b);
    assert_eq!(bm.available_blocks(), 6);
    bm.check_ref_counts([]).expect("nothing held");
    ok(&bm);
}

// ---------------------------------------------------------------------------------------------
// Model-based property test with a simulated KV pool.

/// What the KV of position `p` would be: a fingerprint of the salt and every token up to `p`.
fn kv_values(salt: u64, tokens: &[u32]) -> Vec<u64> {
    let mut h = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xcbf2_9ce4_8422_2325;
    tokens
        .iter()
        .map(|&t| {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3).rotate_left(17);
            h
        })
        .collect()
}

/// One sequence as the test drives it.
struct Live {
    salt: u64,
    blocks: SeqBlocks,
    tokens: Vec<u32>,
    computed: usize,
}

/// The block manager plus a fake KV pool holding one fingerprint per slot.
struct Sim {
    bm: BlockManager,
    pool: Vec<Option<u64>>,
    live: Vec<Live>,
}

impl Sim {
    fn slot(&self, seq: &SeqBlocks, pos: usize) -> usize {
        let bs = self.bm.block_size();
        seq.table()[pos / bs].index() * bs + pos % bs
    }

    /// Every live sequence reads back the KV of its own tokens for all computed positions.
    fn check_contents(&self) -> Result<(), TestCaseError> {
        for (i, l) in self.live.iter().enumerate() {
            let want = kv_values(l.salt, &l.tokens[..l.computed]);
            for (p, w) in want.iter().enumerate() {
                prop_assert_eq!(self.pool[self.slot(&l.blocks, p)], Some(*w), "seq {} pos {}", i, p);
            }
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        self.bm.check_invariants().map_err(TestCaseError::fail)?;
        self.bm.check_ref_counts(self.live.iter().map(|l| &l.blocks)).map_err(TestCaseError::fail)?;
        self.check_contents()
    }

    fn apply(&mut self, op: Op) {
        let pick = |n: usize, i: usize| if n == 0 { None } else { Some(i % n) };
        match op {
            Op::New { salt, prompt } => {
                let (blocks, cached) = self.bm.allocate_prefix(salt, &prompt);
                self.live.push(Live { salt, blocks, tokens: prompt, computed: cached });
            }
            Op::Compute { seq, n } => {
                let Some(i) = pick(self.live.len(), seq) else { return };
                let l = &mut self.live[i];
                let (from, to) = (l.computed, (l.computed + n).min(l.tokens.len()));
                if self.bm.ensure_capacity(&mut l.blocks, to).is_err() {
                    return;
                }
                let Ok(copies) = self.bm.prepare_write(&mut l.blocks, from, to) else { return };
                let bs = self.bm.block_size();
                for c in copies {
                    for k in 0..bs {
                        self.pool[c.dst.index() * bs + k] = self.pool[c.src.index() * bs + k];
                    }
                }
                let l = &self.live[i];
                let values = kv_values(l.salt, &l.tokens[..to]);
                for (p, v) in values.iter().enumerate().skip(from) {
                    let s = self.slot(&l.blocks, p);
                    self.pool[s] = Some(*v);
                }
                let l = &mut self.live[i];
                l.computed = to;
                self.bm.register_full_blocks(&mut l.blocks, &l.tokens[..to]);
            }
            Op::Append { seq, token } => {
                if let Some(i) = pick(self.live.len(), seq) {
                    self.live[i].tokens.push(token);
                }
            }
            Op::Fork { seq } => {
                let Some(i) = pick(self.live.len(), seq) else { return };
                let blocks = self.bm.fork(&self.live[i].blocks);
                let l = &self.live[i];
                let copy = Live { salt: l.salt, blocks, tokens: l.tokens.clone(), computed: l.computed };
                self.live.push(copy);
            }
            Op::Truncate { seq, back } => {
                let Some(i) = pick(self.live.len(), seq) else { return };
                let l = &mut self.live[i];
                let len = l.tokens.len().saturating_sub(back);
                l.tokens.truncate(len);
                l.computed = l.computed.min(len);
                self.bm.truncate(&mut l.blocks, len);
            }
            Op::Free { seq } => {
                let Some(i) = pick(self.live.len(), seq) else { return };
                let l = self.live.swap_remove(i);
                self.bm.free(l.blocks);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    New { salt: u64, prompt: Vec<u32> },
    Compute { seq: usize, n: usize },
    Append { seq: usize, token: u32 },
    Fork { seq: usize },
    Truncate { seq: usize, back: usize },
    Free { seq: usize },
}

fn op() -> impl Strategy<Value = Op> {
    // Tiny alphabets and salts so that prefixes collide often (hits, duplicates, tenant pairs).
    prop_oneof![
        2 => (0..2u64, prop::collection::vec(0..2u32, 1..12)).prop_map(|(salt, prompt)| Op::New { salt, prompt }),
        4 => (any::<usize>(), 1..7usize).prop_map(|(seq, n)| Op::Compute { seq, n }),
        2 => (any::<usize>(), 0..2u32).prop_map(|(seq, token)| Op::Append { seq, token }),
        1 => any::<usize>().prop_map(|seq| Op::Fork { seq }),
        1 => (any::<usize>(), 0..6usize).prop_map(|(seq, back)| Op::Truncate { seq, back }),
        2 => any::<usize>().prop_map(|seq| Op::Free { seq }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_block_operations_keep_invariants_and_contents(
        num_blocks in 1..12usize,
        block_size in 1..5usize,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut sim = Sim {
            bm: BlockManager::new(num_blocks, block_size),
            pool: vec![None; num_blocks * block_size],
            live: Vec::new(),
        };
        for op in ops {
            sim.apply(op);
            sim.check()?;
        }
        for l in std::mem::take(&mut sim.live) {
            sim.bm.free(l.blocks);
            sim.bm.check_invariants().map_err(TestCaseError::fail)?;
        }
        prop_assert_eq!(sim.bm.available_blocks(), num_blocks);
        sim.bm.check_ref_counts([]).map_err(TestCaseError::fail)?;
    }
}
