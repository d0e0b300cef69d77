//! The gRPC client of the core cluster. Any core node can serve a request (followers forward writes to
//! the leader), so the client calls through a [`FailoverChannel`]: the last node that answered first,
//! then the next on transport errors, in one pass behind the circuit breaker.

use std::sync::Arc;
use std::time::Duration;

use daemon_runtime::failover::FailoverChannel;
use daemon_runtime::TierIdentity;
use proto::cache::core_cache_client::CoreCacheClient as CoreCacheGrpc;
use proto::cache::{CompleteEvent, CompleteRequest, LookupRequest, ModelsRequest, WatchEvent, WatchRequest};
use proto::core::core_store_client::CoreStoreClient;
use proto::core::{invalidate, write_outcome, write_request, Invalidate, TenantTag, WriteRequest};
use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;
use shared::models::{ModelRef, ModelTable};
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::breaker::CircuitBreaker;
use crate::RegionalError;

/// How long a lookup may take before the next node is tried.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a generation may take in all.
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(600);

/// Longest silence from the core in the middle of a completion stream before it counts as failed.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(180);

/// Client of every configured core node.
#[derive(Clone)]
pub struct CoreCacheClient {
    nodes: Arc<FailoverChannel>,
    identity: TierIdentity,
    breaker: Arc<CircuitBreaker>,
}

impl CoreCacheClient {
    /// Prepares channels to the given node URLs (`http://host:port`); nothing connects until first use.
    pub fn new(
        urls: &[String],
        identity: TierIdentity,
        breaker: CircuitBreaker,
    ) -> Result<Self, RegionalError> {
        let nodes = FailoverChannel::new(urls, &identity)
            .map_err(|e| RegionalError::Config(format!("--core: {e}")))?;
        Ok(Self { nodes: Arc::new(nodes), identity, breaker: Arc::new(breaker) })
    }

    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = self.identity.request(message);
        request.set_timeout(timeout);
        request
    }

    /// The circuit breaker every call goes through.
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }

    /// Calls `rpc` through the circuit breaker: on the preferred node, then on each other node while the
    /// failure is a transport one.
    async fn with_failover<T, F, Fut>(&self, rpc: F) -> Result<T, RegionalError>
    where
        F: FnMut(Channel) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let permit =
            self.breaker.admit().map_err(|retry_after_s| RegionalError::CircuitOpen { retry_after_s })?;
        let result = self.each_node(rpc).await;
        self.breaker.record(permit, !matches!(result, Err(RegionalError::CoreUnavailable(_))));
        result
    }

    async fn each_node<T, F, Fut>(&self, mut rpc: F) -> Result<T, RegionalError>
    where
        F: FnMut(Channel) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let mut last = None;
        for (index, url, channel) in self.nodes.attempt_order() {
            match rpc(channel).await {
                Ok(value) => {
                    self.nodes.prefer(index);
                    return Ok(value);
                }
                Err(status) if is_retryable(&status) => {
                    tracing::debug!(core = %url, code = ?status.code(), "core node unavailable, trying the next");
                    last = Some(status);
                }
                Err(status) => return Err(status.into()),
            }
        }
        Err(RegionalError::CoreUnavailable(
            last.map_or_else(|| "no core nodes configured".into(), |s| s.message().to_owned()),
        ))
    }

    /// The core's registry of models and their current versions; `None` when it has none. Not counted
    /// by the circuit breaker (a background refresh must not open it, nor take its half-open probe).
    pub async fn models(&self) -> Result<Option<ModelTable>, RegionalError> {
        let reply = self
            .each_node(|channel| {
                let request = self.request(ModelsRequest {}, LOOKUP_TIMEOUT);
                async move { CoreCacheGrpc::new(channel).models(request).await }
            })
            .await?;
        let models = reply.into_inner().models;
        let specs: Vec<(String, ModelSpec)> = models
            .iter()
            .filter_map(|m| Some((m.name.clone(), ModelSpec::try_from(m.spec.clone()?).ok()?)))
            .collect();
        let table = ModelTable::from_models(
            models.into_iter().map(|m| ModelRef { name: m.name, version: m.version }),
        );
        Ok(table
            .map(|table| specs.into_iter().fold(table, |table, (name, spec)| table.with_spec(&name, spec))))
    }

    /// Opens the core's change feed after `after_revision` on the first node that serves it. Returns
    /// that node's index too, so that a stream that goes quiet can be moved away from
    /// ([`CoreCacheClient::move_past`]). Not counted by the circuit breaker.
    pub async fn watch(&self, after_revision: u64) -> Result<(usize, Streaming<WatchEvent>), RegionalError> {
        let stream = self
            .each_node(|channel| {
                // No deadline: the stream lives as long as the node serves it.
                let request = self.identity.request(WatchRequest { after_revision });
                async move { CoreCacheGrpc::new(channel).watch(request).await }
            })
            .await?;
        // A successful call made its node the preferred one.
        Ok((self.nodes.preferred().0, stream.into_inner()))
    }

    /// Prefers the node after `index` from now on (its feed went quiet).
    pub fn move_past(&self, index: usize) {
        self.nodes.move_past(index);
    }

    /// The core's entry under `key`, if it has a fresh one.
    pub async fn lookup(&self, key: &str, tenant: &str) -> Result<Option<CachedCompletion>, RegionalError> {
        let message = LookupRequest { key: key.to_owned(), tenant: tenant.to_owned() };
        let reply = self
            .with_failover(|channel| {
                let request = self.request(message.clone(), LOOKUP_TIMEOUT);
                async move { CoreCacheGrpc::new(channel).lookup(request).await }
            })
            .await?;
        Ok(reply.into_inner().entry.map(CachedCompletion::from))
    }

    /// Starts a generation on the core; the stream yields text deltas and ends with the committed entry.
    pub async fn complete(
        &self,
        message: CompleteRequest,
        trace: &shared::trace::TraceParent,
    ) -> Result<Streaming<CompleteEvent>, RegionalError> {
        let reply = self
            .with_failover(|channel| {
                let mut request = self.request(message.clone(), COMPLETE_TIMEOUT);
                daemon_runtime::trace_context::attach(&mut request, trace);
                async move { CoreCacheGrpc::new(channel).complete(request).await }
            })
            .await?;
        Ok(reply.into_inner())
    }
}

impl CoreCacheClient {
    /// Invalidates `key` (owned by `tenant`) in the core's state; `request_id` makes a retry apply once.
    /// Returns how many entries the core removed (0 when it held none); another tenant's key is refused.
    pub async fn invalidate(
        &self,
        key: &str,
        tenant: &str,
        request_id: &str,
    ) -> Result<InvalidatedAtCore, RegionalError> {
        let scope = invalidate::Scope::Key(key.to_owned());
        self.write_invalidation(
            Invalidate { scope: Some(scope), key_tenant: tenant.to_owned(), ..Default::default() },
            request_id,
        )
        .await
    }

    /// Invalidates every answer of `tenant` carrying `tag` in the core's state, regenerating the hottest
    /// of them when `refresh`; `request_id` makes a retry apply once.
    pub async fn invalidate_tag(
        &self,
        tenant: &str,
        tag: &str,
        refresh: bool,
        request_id: &str,
    ) -> Result<InvalidatedAtCore, RegionalError> {
        let scope = invalidate::Scope::Tag(TenantTag { tenant: tenant.to_owned(), tag: tag.to_owned() });
        self.write_invalidation(Invalidate { scope: Some(scope), refresh, ..Default::default() }, request_id)
            .await
    }

    async fn write_invalidation(
        &self,
        invalidation: Invalidate,
        request_id: &str,
    ) -> Result<InvalidatedAtCore, RegionalError> {
        let message = WriteRequest {
            request_id: request_id.to_owned(),
            command: Some(write_request::Command::Invalidate(invalidation)),
        };
        let reply = self
            .with_failover(|channel| {
                let request = self.request(message.clone(), LOOKUP_TIMEOUT);
                async move { CoreStoreClient::new(channel).write(request).await }
            })
            .await?
            .into_inner();
        match reply.outcome.and_then(|o| o.outcome) {
            Some(write_outcome::Outcome::Invalidated(invalidated)) => Ok(InvalidatedAtCore {
                removed: invalidated.removed,
                at_ms: invalidated.at_ms,
                refreshing: invalidated.refreshing,
            }),
            other => Err(RegionalError::Core(format!("unexpected outcome {other:?}"))),
        }
    }
}

/// What the core did with an invalidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidatedAtCore {
    /// Entries it removed (0 when it held none).
    pub removed: u64,
    /// Its log time: answers created at or before it are invalid.
    pub at_ms: i64,
    /// How many of the answers it invalidated are being regenerated.
    pub refreshing: u32,
}

impl std::fmt::Debug for CoreCacheClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&str> = self.nodes.addresses().collect();
        f.debug_struct("CoreCacheClient").field("nodes", &urls).field("identity", &"<redacted>").finish()
    }
}

/// Transport failures and a node without quorum are worth another node; a rejected request is not. A
/// generation is not idempotent, so `Aborted` and `Internal` are not retried.
fn is_retryable(status: &Status) -> bool {
    daemon_runtime::failover::worth_another_node(status.code(), false)
}
