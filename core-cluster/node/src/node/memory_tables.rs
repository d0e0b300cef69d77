//! The state machine's [`Tables`] in memory, for tests of the apply rules.

use std::collections::BTreeMap;
use std::convert::Infallible;

use super::apply::Tables;
use super::records::{AppliedRequest, FeedRow, ModelState, StoredEntry, TenantState};

/// Every table as an ordered map, comparable as a whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// Cache entries by key.
    pub entries: BTreeMap<String, StoredEntry>,
    /// Tenants by name.
    pub tenants: BTreeMap<String, TenantState>,
    /// Models by name.
    pub models: BTreeMap<String, ModelState>,
    /// Applied request ids.
    pub requests: BTreeMap<String, AppliedRequest>,
    /// Change-feed rows by revision.
    pub feed: BTreeMap<u64, FeedRow>,
    /// The highest compacted revision.
    pub feed_floor: u64,
}

impl Tables for Memory {
    type Error = Infallible;
    fn entry(&mut self, key: &str) -> Result<Option<StoredEntry>, Infallible> {
        Ok(self.entries.get(key).cloned())
    }
    fn put_entry(&mut self, key: &str, entry: &StoredEntry) -> Result<(), Infallible> {
        self.entries.insert(key.into(), entry.clone());
        Ok(())
    }
    fn remove_entry(&mut self, key: &str) -> Result<(), Infallible> {
        self.entries.remove(key);
        Ok(())
    }
    fn tenant(&mut self, name: &str) -> Result<Option<TenantState>, Infallible> {
        Ok(self.tenants.get(name).cloned())
    }
    fn put_tenant(&mut self, name: &str, tenant: &TenantState) -> Result<(), Infallible> {
        self.tenants.insert(name.into(), tenant.clone());
        Ok(())
    }
    fn model(&mut self, name: &str) -> Result<Option<ModelState>, Infallible> {
        Ok(self.models.get(name).cloned())
    }
    fn model_names(&mut self) -> Result<Vec<String>, Infallible> {
        Ok(self.models.keys().cloned().collect())
    }
    fn put_model(&mut self, name: &str, model: &ModelState) -> Result<(), Infallible> {
        self.models.insert(name.into(), model.clone());
        Ok(())
    }
    fn request(&mut self, id: &str) -> Result<Option<AppliedRequest>, Infallible> {
        Ok(self.requests.get(id).cloned())
    }
    fn put_request(&mut self, id: &str, request: &AppliedRequest) -> Result<(), Infallible> {
        self.requests.insert(id.into(), request.clone());
        Ok(())
    }
    fn remove_request(&mut self, id: &str) -> Result<(), Infallible> {
        self.requests.remove(id);
        Ok(())
    }
    fn feed_row(&mut self, revision: u64) -> Result<Option<FeedRow>, Infallible> {
        Ok(self.feed.get(&revision).cloned())
    }
    fn put_feed_row(&mut self, revision: u64, row: &FeedRow) -> Result<(), Infallible> {
        self.feed.insert(revision, row.clone());
        Ok(())
    }
    fn remove_feed_row(&mut self, revision: u64) -> Result<(), Infallible> {
        self.feed.remove(&revision);
        Ok(())
    }
    fn feed_floor(&mut self) -> Result<u64, Infallible> {
        Ok(self.feed_floor)
    }
    fn set_feed_floor(&mut self, revision: u64) -> Result<(), Infallible> {
        self.feed_floor = revision;
        Ok(())
    }
}
