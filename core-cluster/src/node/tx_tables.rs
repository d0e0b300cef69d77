//! [`Tables`] inside a sled transaction: the state machine's trees as one atomic unit, values as JSON.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

use super::apply::Tables;
use super::records::{AppliedRequest, FeedRow, ModelState, StoredEntry, TenantState};

/// The meta key of the highest revision compacted out of the change feed.
pub const FEED_FLOOR: &[u8] = b"feed_floor";

/// A failed step inside a transaction; `Abort` carries a codec error's message.
pub type TxError = ConflictableTransactionError<String>;

/// The state machine's trees within one transaction.
pub struct TxTables<'a> {
    /// Cache entries by key.
    pub entries: &'a TransactionalTree,
    /// Tenants by name.
    pub tenants: &'a TransactionalTree,
    /// Models by name.
    pub models: &'a TransactionalTree,
    /// Applied request ids.
    pub requests: &'a TransactionalTree,
    /// Change-feed rows by revision (big-endian).
    pub feed: &'a TransactionalTree,
    /// The state machine's meta tree (the feed's floor).
    pub meta: &'a TransactionalTree,
}

fn decode<T: DeserializeOwned>(bytes: &[u8], what: &dyn std::fmt::Debug) -> Result<T, TxError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ConflictableTransactionError::Abort(format!("decoding {what:?}: {e}")))
}

fn get<T: DeserializeOwned>(tree: &TransactionalTree, key: &str) -> Result<Option<T>, TxError> {
    tree.get(key.as_bytes())?.map(|bytes| decode(&bytes, &key)).transpose()
}

fn put<T: Serialize>(tree: &TransactionalTree, key: &str, value: &T) -> Result<(), TxError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| ConflictableTransactionError::Abort(format!("encoding {key:?}: {e}")))?;
    tree.insert(key.as_bytes(), bytes)?;
    Ok(())
}

impl Tables for TxTables<'_> {
    type Error = TxError;

    fn entry(&mut self, key: &str) -> Result<Option<StoredEntry>, TxError> {
        get(self.entries, key)
    }
    fn put_entry(&mut self, key: &str, entry: &StoredEntry) -> Result<(), TxError> {
        put(self.entries, key, entry)
    }
    fn remove_entry(&mut self, key: &str) -> Result<(), TxError> {
        self.entries.remove(key.as_bytes())?;
        Ok(())
    }
    fn tenant(&mut self, name: &str) -> Result<Option<TenantState>, TxError> {
        get(self.tenants, name)
    }
    fn put_tenant(&mut self, name: &str, tenant: &TenantState) -> Result<(), TxError> {
        put(self.tenants, name, tenant)
    }
    fn model(&mut self, name: &str) -> Result<Option<ModelState>, TxError> {
        get(self.models, name)
    }
    fn put_model(&mut self, name: &str, model: &ModelState) -> Result<(), TxError> {
        put(self.models, name, model)
    }
    fn request(&mut self, id: &str) -> Result<Option<AppliedRequest>, TxError> {
        get(self.requests, id)
    }
    fn put_request(&mut self, id: &str, request: &AppliedRequest) -> Result<(), TxError> {
        put(self.requests, id, request)
    }
    fn remove_request(&mut self, id: &str) -> Result<(), TxError> {
        self.requests.remove(id.as_bytes())?;
        Ok(())
    }
    fn feed_row(&mut self, revision: u64) -> Result<Option<FeedRow>, TxError> {
        self.feed.get(revision.to_be_bytes())?.map(|bytes| decode(&bytes, &revision)).transpose()
    }
    fn put_feed_row(&mut self, revision: u64, row: &FeedRow) -> Result<(), TxError> {
        let bytes = serde_json::to_vec(row)
            .map_err(|e| ConflictableTransactionError::Abort(format!("encoding feed row {revision}: {e}")))?;
        self.feed.insert(&revision.to_be_bytes(), bytes)?;
        Ok(())
    }
    fn remove_feed_row(&mut self, revision: u64) -> Result<(), TxError> {
        self.feed.remove(&revision.to_be_bytes())?;
        Ok(())
    }
    fn feed_floor(&mut self) -> Result<u64, TxError> {
        Ok(self.meta.get(FEED_FLOOR)?.map(|b| decode(&b, &"feed floor")).transpose()?.unwrap_or(0))
    }
    fn set_feed_floor(&mut self, revision: u64) -> Result<(), TxError> {
        let bytes =
            serde_json::to_vec(&revision).map_err(|e| ConflictableTransactionError::Abort(e.to_string()))?;
        self.meta.insert(FEED_FLOOR, bytes)?;
        Ok(())
    }
}
