//! Our side of the core suite: puts of cached completions and linearizable reads through
//! [`core_client::CoreClient`], against a three-node core cluster of real `core-node` processes.

use core_client::{Consistency, CoreClient};
use shared::completion::CachedCompletion;

use crate::bench::core::kv_target::KvTarget;

/// Tenant of every entry (registered by [`mesh_harness::core_cluster::CoreCluster`]).
const TENANT: &str = "t1";
/// Model of every entry (registered at version 1).
const MODEL: &str = "m";
/// Content class given with each put.
const CONTENT_CLASS: &str = "default";

/// Puts and linearizable reads of the core cluster through one client.
pub struct CoreTarget {
    /// The cluster's client (shares its channels across tasks).
    client: CoreClient,
    /// The content every put writes.
    content: String,
    /// Its ETag, computed once.
    etag: String,
}

impl CoreTarget {
    /// Wraps `client`; every put writes an entry whose content is `value_bytes` long.
    pub fn new(client: CoreClient, value_bytes: usize) -> Self {
        let content = "x".repeat(value_bytes);
        let etag = CachedCompletion::etag_of(&content, "stop");
        Self { client, content, etag }
    }

    fn entry(&self, key: String) -> CachedCompletion {
        CachedCompletion {
            key,
            tenant: TENANT.into(),
            model: MODEL.into(),
            model_version: 1,
            content: self.content.clone(),
            finish_reason: "stop".into(),
            prompt_tokens: 12,
            completion_tokens: 48,
            etag: self.etag.clone(),
            created_ms: 0,
            ttl_s: 0,
            question: None,
            signature: String::new(),
            tags: Vec::new(),
        }
    }
}

impl KvTarget for CoreTarget {
    async fn put(&self, key: String) -> anyhow::Result<()> {
        let request_id = format!("bench-{}", key.strip_prefix("v1:").unwrap_or(&key));
        self.client.put(&request_id, self.entry(key), CONTENT_CLASS).await?;
        Ok(())
    }

    async fn read(&self, key: String) -> anyhow::Result<bool> {
        let entry = self.client.read(TENANT, &key, Consistency::Linearizable).await?;
        Ok(entry.is_some())
    }
}
