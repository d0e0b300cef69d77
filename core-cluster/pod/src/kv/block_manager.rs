//! [`BlockManager`]: the physical KV blocks, their reference counts, copy-on-write and the prefix
//! cache with least-recently-used eviction.
//!
//! Every block is in exactly one of three states:
//! - **free**: no owner, no content worth keeping (on the free list);
//! - **evictable**: no owner, but registered in the prefix cache under its content hash, kept
//!   until a fresh block is needed (in the LRU, oldest evicted first);
//! - **in use**: referenced by one or more sequences' block tables (`ref_count > 0`), registered
//!   or not.
//!
//! A registered block is always full and its content final: a write into it goes through
//! [`BlockManager::prepare_write`], which copies a shared block or unregisters an exclusive one
//! first. So a prefix-cache hit always serves KV that matches its hash.

use std::collections::{BTreeMap, HashMap};

use super::prefix_hash::BlockHash;

/// A physical block in the KV pool (block `i` holds slots `i * block_size .. (i + 1) * block_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub u32);

impl BlockId {
    /// The block's index in the pool.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A block copy the KV pool must perform before the forward pass that writes into `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    /// The shared block to copy from.
    pub src: BlockId,
    /// The fresh block, now in the writer's table, to copy into.
    pub dst: BlockId,
}

/// Not enough free or evictable blocks; nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("out of KV blocks: {needed} needed, {available} available")]
pub struct OutOfBlocks {
    /// Blocks the operation needed.
    pub needed: usize,
    /// Blocks that were free or evictable.
    pub available: usize,
}

/// One sequence's blocks: its block table and how far its content hashes are known.
///
/// Not `Clone`: a copy would hold references the manager does not count. Use
/// [`BlockManager::fork`] to share blocks and [`BlockManager::free`] (which takes it by value) to
/// release them exactly once. A `SeqBlocks` belongs to the manager that made it.
#[derive(Debug)]
#[must_use = "dropping a SeqBlocks leaks its blocks; pass it to BlockManager::free"]
pub struct SeqBlocks {
    /// The tenant's salt, the root of the hash chain.
    salt: u64,
    /// Logical block `i` of the sequence lives in physical block `table[i]`.
    table: Vec<BlockId>,
    /// Chain hashes of the leading full blocks whose content is computed and final. Block `i` may
    /// be unregistered even when `hashes[i]` is known (another block held the same content first).
    hashes: Vec<BlockHash>,
}

impl SeqBlocks {
    /// The block table: logical block `i` is `table()[i]`.
    pub fn table(&self) -> &[BlockId] {
        &self.table
    }

    /// The tenant salt the sequence's hashes chain from.
    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// How many leading blocks have a known content hash (registered, or duplicates of a
    /// registered block).
    pub fn hashed_blocks(&self) -> usize {
        self.hashes.len()
    }

    /// The chain hash of the last hashed block (the salt's root when none is).
    pub fn last_hash(&self) -> BlockHash {
        self.hashes.last().copied().unwrap_or_else(|| BlockHash::root(self.salt))
    }
}

/// Per-block bookkeeping.
#[derive(Debug, Clone, Default)]
struct BlockMeta {
    /// Block tables that hold this block.
    ref_count: u32,
    /// The hash this block is registered under in the prefix cache, if any.
    hash: Option<BlockHash>,
    /// The LRU tick while the block is evictable.
    lru_tick: Option<u64>,
}

/// The KV blocks of one model's cache (see the module docs for the states a block goes through).
#[derive(Debug)]
pub struct BlockManager {
    /// Tokens per block.
    block_size: usize,
    /// Bookkeeping for every physical block, indexed by [`BlockId::index`].
    meta: Vec<BlockMeta>,
    /// Unowned, unregistered blocks (a stack: the most recently freed is reused first).
    free: Vec<BlockId>,
    /// Unowned registered blocks by the tick at which they were released; the smallest is evicted
    /// first.
    evictable: BTreeMap<u64, BlockId>,
    /// The prefix cache: content hash to the block that holds it.
    cached: HashMap<BlockHash, BlockId>,
    /// Monotonic counter ordering releases into the LRU.
    tick: u64,
}

impl BlockManager {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free. A `block_size` of 0 is
    /// taken as 1; at most `u32::MAX` blocks are managed.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        let num_blocks = num_blocks.min(u32::MAX as usize);
        // Reversed so that pops hand out block 0 first, which reads better in tests and logs.
        let free = (0..num_blocks as u32).rev().map(BlockId).collect();
        Self {
            block_size: block_size.max(1),
            meta: vec![BlockMeta::default(); num_blocks],
            free,
            evictable: BTreeMap::new(),
            cached: HashMap::new(),
            tick: 0,
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Physical blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.meta.len()
    }

    /// Blocks that can be handed out now: free plus evictable.
    pub fn available_blocks(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Blocks registered in the prefix cache, in use or evictable.
    pub fn cached_blocks(&self) -> usize {
        self.cached.len()
    }

    /// Registered blocks no sequence holds (evicted first when fresh blocks run out).
    pub fn evictable_blocks(&self) -> usize {
        self.evictable.len()
    }

    /// How many block tables hold `block` (0 for an unknown block).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.meta.get(block.index()).map_or(0, |m| m.ref_count)
    }

    /// The hash `block` is registered under in the prefix cache, if any.
    pub fn registered_hash(&self, block: BlockId) -> Option<BlockHash> {
        self.meta.get(block.index()).and_then(|m| m.hash)
    }

    /// Blocks needed to cover `total_tokens` slots.
    fn blocks_for(&self, total_tokens: usize) -> usize {
        total_tokens.div_ceil(self.block_size)
    }

    /// Starts a sequence for `prompt`, reusing every cached full block of its prefix.
    ///
    /// Looks up the chained hashes of the prompt's full blocks and takes a reference to each hit
    /// (an evictable hit leaves the LRU), stopping at the first miss. At least the last prompt
    /// token is always left to compute, because its logits are needed. Returns the sequence's
    /// blocks and the number of prompt tokens whose KV is already there (a multiple of the block
    /// size, less than `prompt.len()` unless the prompt is empty).
    pub fn allocate_prefix(&mut self, salt: u64, prompt: &[u32]) -> (SeqBlocks, usize) {
        let mut seq = SeqBlocks { salt, table: Vec::new(), hashes: Vec::new() };
        let reusable = prompt.len().saturating_sub(1) / self.block_size;
        let mut prev = BlockHash::root(salt);
        for chunk in prompt.chunks_exact(self.block_size).take(reusable) {
            let hash = prev.chain(chunk);
            let Some(&block) = self.cached.get(&hash) else { break };
            self.retain(block);
            seq.table.push(block);
            seq.hashes.push(hash);
            prev = hash;
        }
        let cached_tokens = seq.table.len() * self.block_size;
        (seq, cached_tokens)
    }

    /// Blocks that [`ensure_capacity`](Self::ensure_capacity) to `to_pos` followed by
    /// [`prepare_write`](Self::prepare_write) of `from_pos..to_pos` would take.
    pub fn blocks_needed(&self, seq: &SeqBlocks, from_pos: usize, to_pos: usize) -> usize {
        let grow = self.blocks_for(to_pos).saturating_sub(seq.table.len());
        let cow = self.written_blocks(seq, from_pos, to_pos).filter(|&b| self.ref_count(b) > 1).count();
        grow + cow
    }

    /// Grows `seq`'s table so that it covers `total_tokens` slots. All or nothing: on error
    /// nothing changed. Takes free blocks first, then evicts the least recently used cached ones.
    pub fn ensure_capacity(&mut self, seq: &mut SeqBlocks, total_tokens: usize) -> Result<(), OutOfBlocks> {
        let needed = self.blocks_for(total_tokens).saturating_sub(seq.table.len());
        self.check_available(needed)?;
        for _ in 0..needed {
            let block = self.take_fresh()?;
            seq.table.push(block);
        }
        Ok(())
    }

    /// Makes the blocks that positions `from_pos..to_pos` fall in safe to write, and returns the
    /// copies the KV pool must perform first (in order, before the forward pass).
    ///
    /// A block shared with another table is replaced by a fresh copy (copy-on-write); an
    /// exclusive block registered in the prefix cache is unregistered, since its content is about
    /// to change. Hashes of blocks at or after `from_pos` are forgotten. Blocks past the end of the
    /// table are ignored (call [`ensure_capacity`](Self::ensure_capacity) first). All or nothing.
    pub fn prepare_write(
        &mut self,
        seq: &mut SeqBlocks,
        from_pos: usize,
        to_pos: usize,
    ) -> Result<Vec<BlockCopy>, OutOfBlocks> {
        if from_pos >= to_pos {
            return Ok(Vec::new());
        }
        let first = from_pos / self.block_size;
        let end = self.blocks_for(to_pos).min(seq.table.len());
        let shared = self.written_blocks(seq, from_pos, to_pos).filter(|&b| self.ref_count(b) > 1).count();
        self.check_available(shared)?;
        seq.hashes.truncate(first);
        let mut copies = Vec::new();
        for i in first..end {
            let src = seq.table[i];
            if self.ref_count(src) > 1 {
                let dst = self.take_fresh()?;
                self.meta[src.index()].ref_count -= 1;
                seq.table[i] = dst;
                copies.push(BlockCopy { src, dst });
            } else {
                self.unregister(src);
            }
        }
        Ok(copies)
    }

    /// Registers every block that became full once `computed` (the sequence's tokens whose KV is
    /// written, from position 0) are in the cache, so later requests can reuse it.
    ///
    /// A block whose content is already registered elsewhere (computed concurrently by another
    /// sequence) stays in the table unregistered; the chain still advances past it.
    pub fn register_full_blocks(&mut self, seq: &mut SeqBlocks, computed: &[u32]) {
        let full = (computed.len() / self.block_size).min(seq.table.len());
        for i in seq.hashes.len()..full {
            let hash = seq.last_hash().chain(&computed[i * self.block_size..(i + 1) * self.block_size]);
            let block = seq.table[i];
            // Already registered (this block, or a twin computed concurrently): nothing to add.
            if !self.cached.contains_key(&hash) {
                // A stale registration would mean the block was written without prepare_write;
                // drop it rather than keep a wrong entry.
                self.unregister(block);
                self.meta[block.index()].hash = Some(hash);
                self.cached.insert(hash, block);
            }
            seq.hashes.push(hash);
        }
    }

    /// A second sequence sharing every block of `seq` (for several choices of one prompt). Writes
    /// into shared blocks are copied on write.
    pub fn fork(&mut self, seq: &SeqBlocks) -> SeqBlocks {
        for &block in &seq.table {
            self.retain(block);
        }
        SeqBlocks { salt: seq.salt, table: seq.table.clone(), hashes: seq.hashes.clone() }
    }

    /// Releases a sequence's blocks. A block no table holds any more becomes evictable if it is
    /// registered, free otherwise. Tail blocks are released first, so they are evicted before the
    /// (more widely useful) prefix blocks.
    pub fn free(&mut self, seq: SeqBlocks) {
        for &block in seq.table.iter().rev() {
            self.release(block);
        }
    }

    /// Drops the blocks past the first `tokens` slots (speculative decoding rollback). Blocks
    /// that stay keep their registration; the hashes of blocks no longer fully covered are
    /// forgotten (a later write into them goes through [`prepare_write`](Self::prepare_write)).
    pub fn truncate(&mut self, seq: &mut SeqBlocks, tokens: usize) {
        let keep = self.blocks_for(tokens);
        while seq.table.len() > keep {
            if let Some(block) = seq.table.pop() {
                self.release(block);
            }
        }
        seq.hashes.truncate(tokens / self.block_size);
    }

    /// Checks the manager's internal invariants; for tests and debug assertions (O(blocks)).
    ///
    /// Every block is in exactly one of free / evictable / in use; the free list has no
    /// duplicates and no registered block; every evictable block is registered; the prefix cache
    /// and the blocks' recorded hashes agree both ways.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut on_free = vec![false; self.meta.len()];
        for &b in &self.free {
            let m = self.meta.get(b.index()).ok_or(format!("{b:?} on the free list is out of range"))?;
            if std::mem::replace(&mut on_free[b.index()], true) {
                return Err(format!("{b:?} is on the free list twice"));
            }
            if m.ref_count != 0 || m.hash.is_some() || m.lru_tick.is_some() {
                return Err(format!("free {b:?} is also in use, registered or evictable: {m:?}"));
            }
        }
        for (&tick, &b) in &self.evictable {
            let m = self.meta.get(b.index()).ok_or(format!("evictable {b:?} is out of range"))?;
            if m.lru_tick != Some(tick) || m.ref_count != 0 || m.hash.is_none() {
                return Err(format!("evictable {b:?} at tick {tick} has inconsistent state {m:?}"));
            }
        }
        for (i, m) in self.meta.iter().enumerate() {
            let states =
                usize::from(on_free[i]) + usize::from(m.lru_tick.is_some()) + usize::from(m.ref_count > 0);
            if states != 1 {
                return Err(format!("block {i} is in {states} states: {m:?}, on free list: {}", on_free[i]));
            }
            if let Some(tick) = m.lru_tick {
                if self.evictable.get(&tick).map(|b| b.index()) != Some(i) {
                    return Err(format!("block {i} records LRU tick {tick} but the LRU disagrees"));
                }
            }
            if let Some(h) = m.hash {
                if self.cached.get(&h).map(|b| b.index()) != Some(i) {
                    return Err(format!("block {i} records {h:?} but the prefix cache disagrees"));
                }
            }
        }
        for (h, &b) in &self.cached {
            if self.meta.get(b.index()).and_then(|m| m.hash) != Some(*h) {
                return Err(format!("prefix cache maps {h:?} to {b:?}, which records another hash"));
            }
        }
        Ok(())
    }

    /// Checks that every block's reference count equals the number of times `live` tables hold
    /// it, i.e. that nothing leaked and nothing was released twice. For tests (O(blocks)).
    pub fn check_ref_counts<'a>(&self, live: impl IntoIterator<Item = &'a SeqBlocks>) -> Result<(), String> {
        let mut held = vec![0u32; self.meta.len()];
        for seq in live {
            for &b in &seq.table {
                let n = held.get_mut(b.index()).ok_or(format!("a table holds out-of-range {b:?}"))?;
                *n += 1;
            }
        }
        for (i, (m, n)) in self.meta.iter().zip(&held).enumerate() {
            if m.ref_count != *n {
                return Err(format!("block {i} has ref_count {} but {n} tables hold it", m.ref_count));
            }
        }
        Ok(())
    }

    /// The physical blocks of `seq` that positions `from_pos..to_pos` fall in.
    fn written_blocks<'s>(
        &self,
        seq: &'s SeqBlocks,
        from_pos: usize,
        to_pos: usize,
    ) -> impl Iterator<Item = BlockId> + 's {
        let (first, end) = if from_pos < to_pos {
            (from_pos / self.block_size, self.blocks_for(to_pos).min(seq.table.len()))
        } else {
            (0, 0)
        };
        seq.table.get(first..end).unwrap_or(&[]).iter().copied()
    }

    /// Fails unless `needed` blocks can be handed out.
    fn check_available(&self, needed: usize) -> Result<(), OutOfBlocks> {
        let available = self.available_blocks();
        if needed > available {
            return Err(OutOfBlocks { needed, available });
        }
        Ok(())
    }

    /// Hands out a block with `ref_count` 1 and no registration: a free one, else the least
    /// recently released evictable one (whose prefix-cache entry goes).
    fn take_fresh(&mut self) -> Result<BlockId, OutOfBlocks> {
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.evictable.pop_first().ok_or(OutOfBlocks { needed: 1, available: 0 })?;
                self.meta[b.index()].lru_tick = None;
                self.unregister(b);
                b
            }
        };
        self.meta[block.index()].ref_count = 1;
        Ok(block)
    }

    /// Adds a reference to a block that is in use or evictable (a prefix-cache hit or a fork).
    fn retain(&mut self, block: BlockId) {
        let m = &mut self.meta[block.index()];
        if let Some(tick) = m.lru_tick.take() {
            self.evictable.remove(&tick);
        }
        m.ref_count += 1;
    }

    /// Drops a reference; at zero the block becomes evictable if registered, free otherwise.
    fn release(&mut self, block: BlockId) {
        let m = &mut self.meta[block.index()];
        debug_assert!(m.ref_count > 0, "{block:?} released more often than retained");
        if m.ref_count == 0 {
            return;
        }
        m.ref_count -= 1;
        if m.ref_count > 0 {
            return;
        }
        if m.hash.is_some() {
            self.tick += 1;
            m.lru_tick = Some(self.tick);
            self.evictable.insert(self.tick, block);
        } else {
            self.free.push(block);
        }
    }

    /// Removes `block`'s prefix-cache entry, if it has one.
    fn unregister(&mut self, block: BlockId) {
        if let Some(h) = self.meta[block.index()].hash.take() {
            self.cached.remove(&h);
        }
    }
}
