//! [`Tables`] inside a sled transaction: the state machine's trees as one atomic unit, values as JSON.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

use super::apply::Tables;
use super::records::{AppliedRequest, ModelState, StoredEntry, TenantState};

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
}

fn get<T: DeserializeOwned>(tree: &TransactionalTree, key: &str) -> Result<Option<T>, TxError> {
    match tree.get(key.as_bytes())? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ConflictableTransactionError::Abort(format!("decoding {key:?}: {e}"))),
        None => Ok(None),
    }
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
}
