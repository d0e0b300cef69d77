//! The `CoreCache` gRPC server: lookups read the local state machine; completions that miss are generated
//! on an inference pod, streamed to the caller as they decode, and committed through Raft before `Done`.

use crate::node::metrics::{CacheResult, Rpc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::cache::core_cache_server::CoreCache;
use proto::cache::{
    complete_event, AutoChosen, CompleteDone, CompleteEvent, CompleteRequest, FallbackStarted, LookupReply,
    LookupRequest, ModelsReply, ModelsRequest, ServedModel, WatchEvent, WatchRequest,
};
use proto::convert::GeneratedEntry;
use proto::inference::{generate_event, GenerateDone, GenerateRequest, Timings};
use shared::auto_model::AUTO_MODEL;
use shared::completion::CachedCompletion;
use shared::models::ModelRef;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};
use tracing::Instrument;

use crate::node::backends::{self, EventStream};
use crate::node::background::canary_audit;
use crate::node::background::canary_judge::Generated;
use crate::node::context::NodeContext;
use crate::node::convert;
use crate::node::error::CoreError;
use crate::node::services::fallback::{self, Generating, Start};
use crate::node::services::{auto_model, change_feed};
use crate::node::state_machine::now_ms;
use crate::node::types::{self, Command, Outcome, Prompt};
use crate::node::writes::validate;

/// Numbers this node's completion writes.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// Events buffered toward a slow caller before generation waits for it.
const EVENT_BUFFER: usize = 64;
/// Longest silence from a model backend in the middle of a generation before it counts as failed.
const BACKEND_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Serves `CoreCache` on one core node. Callers have passed the tier-secret check.
#[derive(Clone)]
pub struct CacheService {
    /// The node's shared parts.
    node: Arc<NodeContext>,
}

impl CacheService {
    /// A service over `node`.
    pub fn new(node: Arc<NodeContext>) -> Self {
        Self { node }
    }
}

/// A `Complete` request that passed validation.
#[derive(Debug, Clone)]
pub struct CompleteInput {
    /// The cache key to store the result under.
    pub key: String,
    /// The model version the key was derived for.
    pub model_version: u64,
    /// How long the result stays fresh, in seconds.
    pub ttl_s: u64,
    /// What to generate (tenant, model, messages, sampling).
    pub generate: GenerateRequest,
    /// The caller's content class.
    pub content_class: String,
    /// Generate even if the state holds an answer.
    pub fresh: bool,
    /// Do not commit the answer.
    pub no_store: bool,
}

fn validate_complete(request: CompleteRequest) -> Result<CompleteInput, CoreError> {
    validate::key(&request.key)?;
    let mut generate =
        request.generate.ok_or_else(|| CoreError::InvalidArgument("generate is missing".into()))?;
    // The version routes to the backends pinned to it: the one the key is derived at, whatever the caller
    // wrote there.
    generate.model_version = request.model_version;
    validate::name("tenant", &generate.tenant)?;
    validate::name("model", &generate.model)?;
    if generate.messages.is_empty() {
        return Err(CoreError::InvalidArgument("messages are empty".into()));
    }
    if !shared::cache_tags::is_canonical(&generate.tags) {
        return Err(CoreError::InvalidArgument(format!(
            "cache tags must be sorted, distinct, at most {} and each as shared::cache_tags checks",
            shared::cache_tags::MAX_TAGS
        )));
    }
    // The answer is stored under the key the request derives, never under one a caller chose: a caller
    // cannot file an answer under another question's key (or another tenant's).
    let derived = generate
        .derived_key(request.model_version)
        .ok_or_else(|| CoreError::InvalidArgument("a message role is not one the mesh knows".into()))?;
    if derived.as_str() != request.key {
        return Err(CoreError::InvalidArgument(format!(
            "the key {:?} is not the one this request derives ({})",
            request.key,
            derived.as_str()
        )));
    }
    // The state keeps one text per key, without log-probabilities.
    let sampling = generate.sampling.as_ref();
    if !request.no_store && sampling.is_some_and(|s| s.n > 1 || s.logprobs) {
        return Err(CoreError::InvalidArgument(
            "several choices and log-probabilities are generated with no_store".into(),
        ));
    }
    Ok(CompleteInput {
        key: request.key,
        model_version: request.model_version,
        ttl_s: request.ttl_s,
        generate,
        content_class: request.content_class,
        fresh: request.fresh,
        no_store: request.no_store,
    })
}

/// The normalized request behind a generation, kept with the entry for refreshes; `None` if a role is
/// not one the normalizer produces, and for a text completion (a bump's refresh regenerates chat
/// answers only; a text completion's next request after a bump is a miss).
fn prompt_of(generate: &GenerateRequest) -> Option<Prompt> {
    if generate.raw_prompt {
        return None;
    }
    Some(Prompt {
        messages: generate.normalized_messages()?,
        sampling: generate.normalized_sampling(),
        tags: generate.tags.clone(),
    })
}

fn done_event(entry: CachedCompletion, timings: Option<Timings>, commit_us: u64) -> CompleteEvent {
    let done = CompleteDone { entry: Some(entry.into()), timings, commit_us };
    CompleteEvent { event: Some(complete_event::Event::Done(done)) }
}

fn fallback_event(fallback: FallbackStarted) -> CompleteEvent {
    CompleteEvent { event: Some(complete_event::Event::Fallback(fallback)) }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[tonic::async_trait]
impl CoreCache for CacheService {
    #[tracing::instrument(name = "core.lookup", skip_all, fields(key = %request.get_ref().key, tenant = %request.get_ref().tenant))]
    async fn lookup(&self, request: Request<LookupRequest>) -> Result<Response<LookupReply>, Status> {
        let metrics = &self.node.metrics;
        metrics.rpcs.get(Rpc::Lookup).inc();
        let request = request.into_inner();
        validate::key(&request.key)?;
        validate::name("tenant", &request.tenant)?;
        self.node.check_serving()?;
        let entry = self
            .node
            .state
            .read(&request.key, &request.tenant)?
            .map(|s| self.node.signed(s.entry, s.prompt.as_ref()));
        if entry.is_some() {
            self.node.hits.record(&request.key);
            metrics.lookups.get(CacheResult::Hit).inc()
        } else {
            metrics.lookups.get(CacheResult::Miss).inc()
        }
        tracing::debug!(hit = entry.is_some(), "lookup");
        Ok(Response::new(LookupReply { entry: entry.map(Into::into) }))
    }

    type CompleteStream = ReceiverStream<Result<CompleteEvent, Status>>;

    async fn models(&self, _: Request<ModelsRequest>) -> Result<Response<ModelsReply>, Status> {
        // A node that may not serve would report versions the cluster has moved past.
        self.node.check_serving()?;
        let state = &self.node.state;
        let specs = state.model_specs();
        let spec_of = |name: &str| specs.iter().find(|(m, _)| m == name).map(|(_, spec)| spec.into());
        let models = state
            .model_versions()?
            .into_iter()
            .map(|(name, version)| ServedModel { spec: spec_of(&name), name, version })
            .collect();
        Ok(Response::new(ModelsReply { models }))
    }

    type WatchStream = ReceiverStream<Result<WatchEvent, Status>>;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        self.node.check_serving()?;
        let after = request.into_inner().after_revision;
        tracing::debug!(after, "watch");
        let node = Arc::clone(&self.node);
        let serving: change_feed::ServingCheck = Box::new(move || node.serving_staleness());
        Ok(Response::new(change_feed::watch(self.node.state.clone(), after, serving)))
    }

    #[tracing::instrument(name = "core.complete", skip_all, fields(key = %request.get_ref().key, trace_id, span_id, parent_span_id))]
    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<Self::CompleteStream>, Status> {
        let started = Instant::now();
        let trace = daemon_runtime::trace_context::from_metadata(request.metadata());
        let caller = daemon_runtime::trace_context::caller_of(request.metadata());
        daemon_runtime::trace_context::record_span(&tracing::Span::current(), &trace, caller.as_ref());
        let metrics = &self.node.metrics;
        metrics.rpcs.get(Rpc::Complete).inc();
        let input = validate_complete(request.into_inner())?;
        // A node that may not answer from its state (removed, cut off, behind) neither serves a hit from it
        // nor starts a generation it could not commit: the caller fails over.
        if let Err(e) = self.node.check_serving() {
            metrics.complete_errors.inc();
            return Err(e.into());
        }
        // A version this node knows to be old is refused before anything is generated: the commit would
        // refuse it anyway, after the pod's work and the caller's stream.
        let auto = input.generate.model == AUTO_MODEL;
        let current = match auto {
            true => Some(auto_model::current_version(&self.node)?),
            false => self.node.state.model_version(&input.generate.model)?,
        };
        if let Some(current) = current {
            if input.model_version < current {
                metrics.complete_errors.inc();
                return Err(Status::failed_precondition(format!(
                    "model {:?} is at version {current}, not {}",
                    input.generate.model, input.model_version
                )));
            }
        }

        let cached = match input.fresh {
            true => None,
            false => self
                .node
                .state
                .read(&input.key, &input.generate.tenant)?
                .map(|s| self.node.signed(s.entry, s.prompt.as_ref())),
        };
        // An auto answer carries the version of the model that produced it (whose cutoffs the read
        // applied); the auto key itself moves with every model's version.
        if let Some(entry) = cached.filter(|e| auto || e.model_version == input.model_version) {
            self.node.hits.record(&input.key);
            metrics.completions.get(CacheResult::Hit).inc();
            let (tx, rx) = mpsc::channel(1);
            // A fresh channel with room for one event: this send cannot fail.
            let _ = tx.try_send(Ok(done_event(entry, None, 0)));
            metrics.complete_seconds.observe(started.elapsed().as_secs_f64());
            tracing::info!(hit = true, "complete");
            return Ok(Response::new(ReceiverStream::new(rx)));
        }
        metrics.completions.get(CacheResult::Miss).inc();

        tracing::info!("generating on a model backend");
        let (model, version) = (input.generate.model.clone(), input.model_version);
        let started_generation = match auto {
            true => auto_model::start(&self.node, input, &trace, BACKEND_IDLE_TIMEOUT).await.map(
                |(g, decision)| {
                    self.node.metrics.record_auto(&decision);
                    tracing::info!(
                        answered_by = %decision.answered_by,
                        complexity = decision.plan.complexity,
                        reason = decision.plan.reason,
                        escalations = ?decision.escalations,
                        "auto chose a model"
                    );
                    Start::Generating(g)
                },
            ),
            false => fallback::start(&self.node, input, &trace).await,
        };
        let generating = match started_generation {
            Ok(Start::Generating(generating)) => generating,
            Ok(Start::Stored { entry, fallback }) => {
                let (tx, rx) = mpsc::channel(2);
                // A fresh channel with room for both events: these sends cannot fail.
                let _ = tx.try_send(Ok(fallback_event(fallback)));
                let _ = tx.try_send(Ok(done_event(entry, None, 0)));
                metrics.complete_seconds.observe(started.elapsed().as_secs_f64());
                tracing::info!(hit = true, fallback = true, "complete");
                return Ok(Response::new(ReceiverStream::new(rx)));
            }
            Err(e) => {
                metrics.complete_errors.inc();
                self.node.arms.record(&model, version, None);
                tracing::warn!(error = %e, "no backend took the generation");
                return Err(e.into());
            }
        };
        let Generating { backend, stream, in_flight, input, fallback } = generating;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        if let Some(fallback) = fallback {
            // The channel is new and has room: this send cannot fail.
            let _ = tx.try_send(Ok(fallback_event(fallback)));
        }
        if auto {
            // The model auto chose, before its first delta (the channel has room: this cannot fail).
            let chosen =
                AutoChosen { model: input.generate.model.clone(), model_version: input.model_version };
            let _ = tx.try_send(Ok(CompleteEvent { event: Some(complete_event::Event::AutoChosen(chosen)) }));
        }
        // Generation and commit run on their own task; a caller who hangs up before `Done` stops the
        // generation (at the backend too) and nothing is committed: nobody holds admission for it any
        // more, so finishing it would let a tenant fill the pods by asking and hanging up.
        let span = tracing::info_span!("core.complete.generate", backend = %backend);
        let node = self.node.clone();
        let completion = async move {
            run_completion(node, input, stream, tx, started).await;
            drop(in_flight);
        };
        tokio::spawn(completion.instrument(span));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Streams a generation to the caller, commits it, and sends `Done` (or the error).
async fn run_completion(
    node: Arc<NodeContext>,
    input: CompleteInput,
    stream: EventStream,
    tx: mpsc::Sender<Result<CompleteEvent, Status>>,
    started: Instant,
) {
    let mut first_text = None;
    let result = generate_and_commit(&node, &input, stream, &tx, (started, &mut first_text)).await;
    node.metrics.complete_seconds.observe(started.elapsed().as_secs_f64());
    // Each version's generations, for the canary's judge (a caller that hung up judges nothing).
    let (model, version) = (&input.generate.model, input.model_version);
    match &result {
        Ok(done) => {
            let generated = Generated {
                seconds: started.elapsed().as_secs_f64(),
                ttft_seconds: first_text.map(|d: Duration| d.as_secs_f64()),
                output_tokens: done.entry.as_ref().map_or(0, |e| u64::from(e.completion_tokens)),
            };
            node.arms.record(model, version, Some(generated));
            if let Some(entry) = &done.entry {
                canary_audit::maybe_audit(&node, &input.generate, &entry.content);
            }
        }
        Err(_) if tx.is_closed() => {}
        Err(_) => node.arms.record(model, version, None),
    }
    match result {
        Ok(done) => {
            tracing::info!(
                hit = false,
                commit_us = done.commit_us,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "complete"
            );
            let _ = tx.send(Ok(CompleteEvent { event: Some(complete_event::Event::Done(done)) })).await;
        }
        Err(e) if tx.is_closed() => {
            node.metrics.complete_cancelled.inc();
            tracing::info!(error = %e, "completion cancelled: the caller hung up");
        }
        Err(e) => {
            node.metrics.complete_errors.inc();
            tracing::warn!(error = %e, "completion failed");
            let _ = tx.send(Err(e.into())).await;
        }
    }
}

async fn generate_and_commit(
    node: &NodeContext,
    input: &CompleteInput,
    mut stream: EventStream,
    tx: &mpsc::Sender<Result<CompleteEvent, Status>>,
    (started, first_text): (Instant, &mut Option<Duration>),
) -> Result<CompleteDone, CoreError> {
    let mut content = String::new();
    let finished: GenerateDone = loop {
        let next = backends::next_event(&mut stream, BACKEND_IDLE_TIMEOUT);
        let message = tokio::select! {
            message = next => message,
            // The caller hung up: dropping the backend's stream cancels the generation there and frees
            // its place in the batch.
            () = tx.closed() => return Err(CoreError::Backend {
                code: Code::Cancelled,
                message: "the caller hung up".into(),
            }),
        };
        let Some(event) = message? else {
            return Err(CoreError::Backend {
                code: Code::Unavailable,
                message: "the backend's stream ended without Done".into(),
            });
        };
        let relayed = match event.event {
            Some(generate_event::Event::Delta(delta)) => {
                // The entry is choice 0's answer (the only one, unless the request asked for several,
                // which are never stored).
                if delta.index == 0 {
                    content.push_str(&delta.text);
                }
                if first_text.is_none() && !delta.text.is_empty() {
                    *first_text = Some(started.elapsed());
                }
                complete_event::Event::Delta(delta)
            }
            Some(generate_event::Event::ChoiceDone(choice)) => complete_event::Event::ChoiceDone(choice),
            Some(generate_event::Event::Done(done)) => break done,
            None => continue,
        };
        // A caller that hung up makes this fail; generation and commit go on regardless.
        let _ = tx.send(Ok(CompleteEvent { event: Some(relayed) })).await;
    };

    let mut entry = GeneratedEntry {
        key: input.key.clone(),
        tenant: input.generate.tenant.clone(),
        model: ModelRef { name: input.generate.model.clone(), version: input.model_version },
        ttl_s: input.ttl_s,
        created_ms: now_ms(),
        tags: input.generate.tags.clone(),
    }
    .entry(content, &finished);
    if input.no_store {
        // Answered, never stored: stamped with the log time, like a committed answer would be.
        entry.created_ms = node.state.clock_ms()?;
        return Ok(CompleteDone { entry: Some(entry.into()), timings: finished.timings, commit_us: 0 });
    }
    let commit_started = Instant::now();
    // Unique per generation: a later generation of the same key (after expiry) is a new write.
    let id = format!("complete-{}-{}-{}", node.id, now_ms(), NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let command = Command::Put {
        entry: entry.clone(),
        content_class: input.content_class.clone(),
        prompt: prompt_of(&input.generate),
    };
    let committed = node.writer.write(types::Request { id, command }).await?;
    let commit = commit_started.elapsed();
    node.metrics.commit_seconds.observe(commit.as_secs_f64());
    match &committed.applied.outcome {
        Outcome::Stored { created_ms, ttl_s, .. } => {
            entry.created_ms = *created_ms;
            entry.ttl_s = *ttl_s;
        }
        outcome => convert::outcome_result(outcome)?,
    }
    let entry = node.signed(entry, prompt_of(&input.generate).as_ref());
    tracing::debug!(log_index = committed.log_index, commit_us = micros(commit), "committed");
    Ok(CompleteDone { entry: Some(entry.into()), timings: finished.timings, commit_us: micros(commit) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::ChatMessage;

    fn request() -> CompleteRequest {
        let generate = GenerateRequest {
            request_id: "r".into(),
            tenant: "dev".into(),
            model: "m".into(),
            messages: vec![ChatMessage { role: "user".into(), content: "hi".into() }],
            sampling: None,
            ..Default::default()
        };
        CompleteRequest {
            key: generate.derived_key(1).expect("a user message").as_str().to_owned(),
            model_version: 1,
            ttl_s: 60,
            content_class: String::new(),
            generate: Some(generate),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_complete_request() {
        let input = validate_complete(request()).expect("valid");
        assert!(input.key.starts_with("v1:"), "{}", input.key);
        assert_eq!(input.generate.tenant, "dev");
    }

    #[test]
    fn a_key_the_request_does_not_derive_is_refused() {
        let refused = |r: CompleteRequest| matches!(validate_complete(r), Err(CoreError::InvalidArgument(_)));
        let other = request().generate.map(|g| GenerateRequest { tenant: "other".into(), ..g });
        let other_tenants_key = other.and_then(|g| g.derived_key(1)).expect("key").as_str().to_owned();
        assert!(refused(CompleteRequest { key: other_tenants_key, ..request() }), "another tenant's key");
        assert!(refused(CompleteRequest { model_version: 2, ..request() }), "another version's key");
        let mut other_question = request();
        if let Some(g) = other_question.generate.as_mut() {
            g.messages[0].content = "bye".into();
        }
        assert!(refused(other_question), "another question's key");
    }

    #[test]
    fn rejects_bad_complete_requests() {
        let invalid = |r: CompleteRequest| matches!(validate_complete(r), Err(CoreError::InvalidArgument(_)));
        let mut r = request();
        r.key.clear();
        assert!(invalid(r));
        let mut r = request();
        r.key = "x".repeat(validate::MAX_KEY_BYTES + 1);
        assert!(invalid(r));
        let mut r = request();
        r.generate = None;
        assert!(invalid(r));
        let mut r = request();
        if let Some(g) = r.generate.as_mut() {
            g.tenant.clear();
        }
        assert!(invalid(r));
        let mut r = request();
        if let Some(g) = r.generate.as_mut() {
            g.messages.clear();
        }
        assert!(invalid(r));
        // Answers the state cannot hold must not be stored.
        for sampling in [
            proto::inference::Sampling { n: 2, temperature: 1.0, ..Default::default() },
            proto::inference::Sampling { logprobs: true, ..Default::default() },
        ] {
            let mut r = request();
            if let Some(g) = r.generate.as_mut() {
                g.sampling = Some(sampling);
                r.key = g.derived_key(1).expect("key").as_str().to_owned();
            }
            assert!(invalid(r.clone()));
            r.no_store = true;
            assert!(validate_complete(r).is_ok());
        }
    }
}
