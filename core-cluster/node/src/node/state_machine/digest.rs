//! A digest of the replicated state, equal on replicas that applied the same log prefix (`admin status`,
//! and every convergence check of the process tests).

use sha2::{Digest, Sha256};

use super::entry_heads;
use super::request_rows::RequestRow;
use super::rows::Row as _;
use super::{decode, StateMachineStore};
use crate::node::error::CoreError;
use crate::node::records::{FeedRow, StoredEntry};

/// Sizes and a digest of the live state, equal on replicas that applied the same log prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDigest {
    /// SHA-256 (hex) of the live entries, tenants, models, remembered request ids and change feed.
    pub digest: String,
    /// Live entries.
    pub entries: u64,
}

impl StateMachineStore {
    /// A digest of the live state at the state machine's clock.
    ///
    /// Read while openraft may be applying, so it is exact only when the node is idle (tests wait for that).
    pub fn digest(&self) -> Result<StateDigest, CoreError> {
        let clock = self.clock_ms()?;
        let (tenants, models) = self.directory()?;
        let mut hasher = Sha256::new();
        let mut entries = 0u64;
        for item in entry_heads::rows(&self.index, &self.contents) {
            let (key, bytes) = item?;
            let stored: StoredEntry = decode(&bytes)?;
            if stored.is_live(tenants.get(&stored.entry.tenant), models.get(&stored.entry.model), clock) {
                entries += 1;
                // Hashed in this binary's encoding, so that a row an older binary wrote as JSON counts
                // the same as its copy on an upgraded replica.
                let canonical = stored.to_row()?;
                hasher.update((key.len() as u64).to_be_bytes());
                hasher.update(&key);
                hasher.update((canonical.len() as u64).to_be_bytes());
                hasher.update(&canonical);
            }
        }
        hasher.update(serde_json::to_vec(&tenants)?);
        hasher.update(serde_json::to_vec(&models)?);
        // The rest of the replicated state, each in its decoded form (a replica that installed a snapshot
        // holds the same rows as one that applied the log, not necessarily the same bytes): the
        // remembered request ids with their outcomes, and the change feed with its floor. Not the clock:
        // every proposal moves it, a new leader's first included, and what it decides (which entries
        // live) is in the digest already.
        let mut requests = RequestRow::new();
        for row in self.request_rows() {
            requests.extend(row?);
        }
        hasher.update(serde_json::to_vec(&requests)?);
        hasher.update(self.feed_floor()?.to_be_bytes());
        for item in self.feed.iter() {
            let (key, bytes) = item?;
            let row: FeedRow = decode(&bytes)?;
            hasher.update(&key);
            hasher.update(serde_json::to_vec(&row)?);
        }
        Ok(StateDigest { digest: shared::hex::encode(&hasher.finalize()), entries })
    }
}
