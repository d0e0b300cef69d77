//! Auditing a semantic hit off the request path: the question as asked is generated again at the
//! core, fresh and stored nowhere, and the answer served is compared with it
//! ([`crate::semantic::audit`]).

use std::sync::Arc;

use proto::cache::complete_event::Event;
use shared::completion::CachedCompletion;

use super::flight_task::{complete_request, next_event};
use super::{Admitted, RequestPath};
use crate::core_cache_client::CoreCacheClient;
use crate::semantic::audit::answers_agree;
use crate::semantic::experiment::Arm;
use crate::RegionalError;

impl RequestPath {
    /// Audits the semantic hit `served` for `admitted` when the sampler picks it.
    pub(super) fn audit_hit(&self, admitted: &Admitted, served: &CachedCompletion, arm: Option<Arm>) {
        let Some(tier) = self.semantic.clone() else { return };
        let audit = tier.audit();
        if !audit.sample() {
            return;
        }
        let sampling = &admitted.request.sampling;
        let deterministic = sampling.temperature == 0.0 || sampling.seed.is_some();
        let Some(permit) =
            deterministic.then(|| Arc::clone(&audit.in_flight).try_acquire_owned().ok()).flatten()
        else {
            audit.skipped.inc();
            return;
        };
        let mut request = complete_request(admitted);
        (request.fresh, request.no_store) = (true, true);
        let (core, tenant, class) = (self.core.clone(), admitted.tenant.clone(), admitted.class.class);
        let served = served.content.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let fresh = match generate(&core, request).await {
                Ok(fresh) => fresh,
                Err(error) => {
                    tier.audit().skipped.inc();
                    tracing::debug!(%error, "a semantic hit was not audited");
                    return;
                }
            };
            // The embeddings are computed only when the texts differ.
            let agreed = answers_agree(&served, &fresh, None)
                || answers_agree(&served, &fresh, tier.similarity(served.clone(), fresh.clone()).await.ok());
            tracing::debug!(%tenant, class = class.as_str(), agreed, "semantic hit audited");
            if let Some(arm) = arm {
                tier.experiments().record_audit(&tenant, arm, agreed);
            }
            if let Some(tightened) = tier.audit().record(&tenant, class, agreed) {
                tracing::warn!(
                    %tenant,
                    class = class.as_str(),
                    audited = tightened.evidence.audited,
                    agreed = tightened.evidence.agreed,
                    raised = tightened.raised,
                    "semantic hits disagree with fresh answers more often than the tenant's error budget allows: threshold raised"
                );
            }
        });
    }
}

/// The answer the core generates for `request`, whole.
async fn generate(
    core: &CoreCacheClient,
    request: proto::cache::CompleteRequest,
) -> Result<String, RegionalError> {
    // An audit is a trace of its own.
    let trace = daemon_runtime::trace_context::continue_or_start(None);
    let mut events = core.complete(request, &trace).await?;
    while let Some(event) = next_event(&mut events).await? {
        if let Some(Event::Done(done)) = event.event {
            let entry =
                done.entry.ok_or_else(|| RegionalError::Core("completion without an entry".into()))?;
            return Ok(entry.content);
        }
    }
    Err(RegionalError::Core("the completion stream ended without a result".into()))
}
