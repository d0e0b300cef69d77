//! Content hashes of full KV blocks, chained so that a block's hash names its whole prefix.
//!
//! The KV of a position depends on every token before it, so a block can only be reused by a
//! request whose tokens match from the very first position. Chaining each block's hash through the
//! previous one's makes one 128-bit value stand for the entire prefix up to the end of the block.
//! The chain starts from a root derived from the tenant's salt: two tenants sending identical
//! prompts get unrelated hashes, so neither can reuse (or detect, through cache hits and timing)
//! the other's blocks.

use sha2::{Digest, Sha256};

/// Domain separator for the root of a chain.
const ROOT_DOMAIN: &[u8] = b"core-cluster/kv/root/v1";
/// Domain separator for a block link of a chain.
const BLOCK_DOMAIN: &[u8] = b"core-cluster/kv/block/v1";

/// The chained content hash of a full block (the first 128 bits of a SHA-256).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockHash([u8; 16]);

impl BlockHash {
    /// The hash the first block of a tenant's sequences chains from.
    pub fn root(salt: u64) -> Self {
        let mut h = Sha256::new();
        h.update(ROOT_DOMAIN);
        h.update(salt.to_le_bytes());
        Self::from_digest(h)
    }

    /// The hash of a block holding `tokens`, following the block whose hash is `self`.
    pub fn chain(&self, tokens: &[u32]) -> Self {
        let mut h = Sha256::new();
        h.update(BLOCK_DOMAIN);
        h.update(self.0);
        // The length keeps blocks of different sizes apart (a manager only makes one size, but the
        // hash should not depend on that).
        h.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            h.update(t.to_le_bytes());
        }
        Self::from_digest(h)
    }

    /// The raw 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Keeps the first 16 bytes of a finished SHA-256.
    fn from_digest(h: Sha256) -> Self {
        let digest = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        Self(out)
    }
}

impl std::fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Eight hex digits are plenty to tell hashes apart in logs and test failures.
        write!(f, "BlockHash(")?;
        for b in &self.0[..4] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_prefix_same_hash() {
        let a = BlockHash::root(7).chain(&[1, 2, 3, 4]).chain(&[5, 6, 7, 8]);
        let b = BlockHash::root(7).chain(&[1, 2, 3, 4]).chain(&[5, 6, 7, 8]);
        assert_eq!(a, b);
    }

    #[test]
    fn hash_depends_on_salt_tokens_and_whole_prefix() {
        let base = BlockHash::root(7).chain(&[1, 2, 3, 4]).chain(&[5, 6, 7, 8]);
        assert_ne!(base, BlockHash::root(8).chain(&[1, 2, 3, 4]).chain(&[5, 6, 7, 8]));
        assert_ne!(base, BlockHash::root(7).chain(&[1, 2, 3, 9]).chain(&[5, 6, 7, 8]));
        assert_ne!(base, BlockHash::root(7).chain(&[1, 2, 3, 4]).chain(&[5, 6, 8, 7]));
        // Same tokens in a different block split must not collide either.
        assert_ne!(
            BlockHash::root(7).chain(&[1, 2]).chain(&[3]),
            BlockHash::root(7).chain(&[1]).chain(&[2, 3])
        );
    }

    #[test]
    fn token_bytes_are_not_ambiguous() {
        // 0x0100 vs 0x01, 0x00 packed differently must differ: every token is four bytes.
        assert_ne!(BlockHash::root(0).chain(&[0x0100]), BlockHash::root(0).chain(&[0x01, 0x00]));
    }
}
