//! The paged KV cache's bookkeeping: which physical blocks hold which sequence's keys and values.
//!
//! No tensors live here: the model's KV pool is `num_blocks * block_size` slots per layer, and this
//! module only decides which slots each sequence uses. A sequence's position `pos` lives in slot
//! `table[pos / block_size] * block_size + pos % block_size` of its block table.
//!
//! # Layout
//! - [`prefix_hash`]: [`BlockHash`], the salted, chained content hash naming a full block's prefix.
//! - [`block_manager`]: [`BlockManager`] (free list, reference counts, copy-on-write, prefix cache
//!   with LRU eviction) and the per-sequence [`SeqBlocks`].
//!
//! Architecture Invariant: every block is exactly one of free, evictable (cached, unowned) or in
//! use; a block registered in the prefix cache is full and its content never changes while
//! registered.
//!
//! Architecture Invariant: prefix-cache hashes chain from a per-tenant salt, so one tenant can
//! never hit (or time) another tenant's blocks.

pub mod block_manager;
pub mod prefix_hash;

pub use block_manager::{BlockCopy, BlockId, BlockManager, OutOfBlocks, SeqBlocks};
pub use prefix_hash::BlockHash;

#[cfg(test)]
mod tests;
