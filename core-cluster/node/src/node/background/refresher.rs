//! Invalidate-then-refresh: after a model-version bump, the old version's hottest prompts (from the
//! replicated hot summary, returned by the bump) are generated again on the model backends and stored under
//! the new version's keys, so the first readers after a bump still hit. After a tag invalidation that asks
//! for it, the hottest answers the tag covered are generated again under their own keys (created after the
//! invalidation, so every tier takes them).
//!
//! The node that committed the command runs the jobs, one at a time, in the background. A job that fails
//! (no pod, pod error, the model moved on again) is counted and skipped; nothing is retried.

use std::sync::Arc;
use std::time::Duration;

use proto::convert::GeneratedEntry;
use proto::inference::{generate_event, GenerateRequest};
use shared::cache_key::CacheKey;
use shared::models::ModelRef;
use shared::normalize::NormalizedRequest;

use crate::node::backends::{self, Backends};
use crate::node::error::CoreError;
use crate::node::metrics::Metrics;
use crate::node::types::{Command, RefreshJob, Request};
use crate::node::writes::writer::Writer;

/// Longest silence from a pod during a refresh generation.
const BACKEND_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs refresh jobs on this node.
#[derive(Clone)]
pub struct Refresher {
    backends: Arc<Backends>,
    writer: Writer,
    metrics: Arc<Metrics>,
}

impl Refresher {
    /// A refresher that generates on `backends` and commits through `writer`.
    pub fn new(backends: Arc<Backends>, writer: Writer, metrics: Arc<Metrics>) -> Self {
        Self { backends, writer, metrics }
    }

    /// Regenerates `jobs` in the background, after `cause` (for the log). `once`: what makes each job's
    /// write id unique to this cause (a key refreshed again after a later invalidation is a new write).
    pub fn spawn(&self, jobs: Vec<RefreshJob>, cause: &'static str, once: &str) {
        if jobs.is_empty() {
            return;
        }
        if self.backends.is_empty() {
            tracing::warn!(cause, jobs = jobs.len(), "no model backends configured; refresh skipped");
            return;
        }
        let (this, once) = (self.clone(), once.to_owned());
        tokio::spawn(async move {
            let total = jobs.len();
            let mut done = 0;
            for job in jobs {
                let (model, version) = (job.model.clone(), job.model_version);
                match this.refresh(job, &once).await {
                    Ok(key) => {
                        done += 1;
                        this.metrics.refreshed.inc();
                        tracing::debug!(%key, "refreshed");
                    }
                    Err(e) => {
                        this.metrics.refresh_failures.inc();
                        tracing::warn!(error = %e, %model, version, cause, "refresh job failed");
                    }
                }
            }
            tracing::info!(cause, done, total, "refresh finished");
        });
    }

    async fn refresh(&self, job: RefreshJob, once: &str) -> Result<String, CoreError> {
        let normalized = NormalizedRequest {
            model: ModelRef { name: job.model.clone(), version: job.model_version },
            messages: job.prompt.messages.clone(),
            sampling: job.prompt.sampling.clone(),
            delivery: shared::openai::Delivery::Whole,
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: job.prompt.tags.clone(),
        };
        let key = CacheKey::derive(&job.tenant, &normalized).as_str().to_owned();
        let generate = GenerateRequest::for_request(format!("refresh-{key}"), &job.tenant, &normalized);
        let (_, mut stream, _in_flight) =
            self.backends.generate(generate, &daemon_runtime::trace_context::continue_or_start(None)).await?;
        let mut content = String::new();
        let done = loop {
            let message = backends::next_event(&mut stream, BACKEND_IDLE_TIMEOUT)
                .await?
                .ok_or_else(|| CoreError::NoBackend("the backend's stream ended without Done".into()))?;
            match message.event {
                // Stored entries are of one choice.
                Some(generate_event::Event::Delta(delta)) if delta.index == 0 => {
                    content.push_str(&delta.text)
                }
                Some(generate_event::Event::Done(done)) => break done,
                Some(_) | None => {}
            }
        };
        let entry = GeneratedEntry {
            key: key.clone(),
            tenant: job.tenant,
            model: normalized.model,
            ttl_s: job.ttl_s,
            created_ms: 0,
            tags: normalized.tags,
        }
        .entry(content, &done);
        let command = Command::Put { entry, content_class: job.content_class, prompt: Some(job.prompt) };
        let id = if once.is_empty() { format!("refresh-{key}") } else { format!("refresh-{key}-{once}") };
        let committed = self.writer.write(Request { id, command }).await?;
        crate::node::convert::outcome_result(&committed.applied.outcome)?;
        Ok(key)
    }
}
