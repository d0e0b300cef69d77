//! [`EmbeddingShare`]: how many MiniLM forwards one tenant may have running at once. A forward takes
//! milliseconds of CPU every tenant shares; a tenant past its share waits behind its own forwards, so a
//! flood of one tenant's questions queues on itself while another tenant's forwards run. (Skipping the
//! tier instead would turn paraphrase hits into generations, far dearer than the wait.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Forwards one tenant may run at once.
pub const FORWARDS_PER_TENANT: usize = 2;

/// Each tenant's running forwards.
#[derive(Debug, Default)]
pub struct EmbeddingShare {
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl EmbeddingShare {
    /// A place for one forward of `tenant`, once it has fewer than [`FORWARDS_PER_TENANT`] running.
    pub async fn take(&self, tenant: &str) -> Option<OwnedSemaphorePermit> {
        self.share_of(tenant).acquire_owned().await.ok()
    }

    fn share_of(&self, tenant: &str) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let share =
            tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(FORWARDS_PER_TENANT)));
        Arc::clone(share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_past_its_share_waits_and_others_do_not() {
        let share = EmbeddingShare::default();
        let mut held = Vec::new();
        for _ in 0..FORWARDS_PER_TENANT {
            held.push(share.take("flood").await.expect("within its share"));
        }
        let waiting = share.take("flood");
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending(), "past its share");
        assert!(share.take("quiet").await.is_some(), "another tenant does not wait");
        held.pop();
        assert!(waiting.await.is_some(), "a place came back");
    }
}
