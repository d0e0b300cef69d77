//! The tonic `InferencePod` service: validates, queues, and streams generations.
//!
//! A request's prompt is its conversation in the model's chat template ([`encode_prompt`]), or, for a
//! text completion (`raw_prompt`), its one user message as it is ([`ChatTokenizer::encode_raw_prompt`]).
//! Either way the prompt is plain token ids from then on: the prefix cache, speculation and the step loop
//! do not tell them apart.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use proto::inference as pb;
use proto::inference::inference_pod_server::InferencePod;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};

use super::chat_template::encode_prompt;
use super::load::Load;
use super::metrics::PodMetrics;
use super::request::{ChatMessage, GenerationRequest};
use super::step_loop::LoopConfig;
use super::tokenizer::ChatTokenizer;
use super::worker::{GenerationEvent, Submission, Worker};
use super::{Engine, InferenceError};

/// The pod's request handling, shared by the gRPC service and the HTTP routes. Cheap to clone.
#[derive(Clone)]
pub struct InferenceService {
    /// State shared by every clone.
    shared: Arc<Shared>,
}

/// State shared by every clone of the service.
struct Shared {
    /// The model name requests must use.
    model_name: String,
    /// The pod's metrics.
    metrics: Arc<PodMetrics>,
    /// Set once the model is loaded.
    ready: OnceLock<Ready>,
}

/// What exists once the model is loaded.
struct Ready {
    /// The queue into the model thread.
    worker: Worker,
    /// The model's tokenizer, to template and measure prompts before queueing.
    tokenizer: Arc<ChatTokenizer>,
    /// The model's context window.
    context: usize,
    /// Bytes of weights one decode step reads.
    weight_bytes_per_token: usize,
    /// Threads of the compute pool.
    threads: usize,
}

/// The stream of a `Generate` call.
pub type GenerateStream = Pin<Box<dyn Stream<Item = Result<pb::GenerateEvent, Status>> + Send>>;

impl InferenceService {
    /// A service for `model_name` whose model is still loading.
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            shared: Arc::new(Shared {
                model_name: model_name.into(),
                metrics: Arc::new(PodMetrics::default()),
                ready: OnceLock::new(),
            }),
        }
    }

    /// Hands the loaded model to a new worker thread; requests are accepted from now on.
    pub fn set_ready(&self, engine: Engine, config: LoopConfig, max_queue: usize) -> std::io::Result<()> {
        let tokenizer = Arc::clone(engine.tokenizer());
        let context = engine.context_len();
        let weight_bytes_per_token = engine.model().weight_bytes_per_token();
        let worker = Worker::spawn(Arc::new(engine), Arc::clone(&self.shared.metrics), config, max_queue)?;
        let threads = crate::compute_threads::compute_threads();
        tracing::info!(threads, "compute pool");
        let ready = Ready { worker, tokenizer, context, weight_bytes_per_token, threads };
        if self.shared.ready.set(ready).is_err() {
            tracing::warn!("model loaded twice; keeping the first");
        }
        Ok(())
    }

    /// Whether the model is loaded and its step loop still runs.
    pub fn is_ready(&self) -> bool {
        self.shared.ready.get().is_some_and(|r| r.worker.is_alive())
    }

    /// Why the pod is not ready: still loading, or its step loop has stopped.
    pub fn not_ready_reason(&self) -> &'static str {
        match self.shared.ready.get() {
            None => "loading",
            Some(_) => "the step loop stopped",
        }
    }

    /// The OpenMetrics text exposition of the pod's metrics.
    pub fn render_metrics(&self) -> String {
        let idle = Load::default();
        let (ready, load) = match self.shared.ready.get() {
            Some(r) => (r.worker.is_alive(), r.worker.load().as_ref()),
            None => (false, &idle),
        };
        self.shared.metrics.render(&self.shared.model_name, ready, load)
    }

    /// The model name requests must use.
    pub fn model_name(&self) -> &str {
        &self.shared.model_name
    }

    /// Validates, templates and queues a generation: the one way in, for gRPC and the OpenAI API
    /// alike. Its events arrive on the receiver in order; dropping the receiver cancels the generation
    /// (before it starts, or at its next token). A refusal is counted.
    pub async fn submit(
        &self,
        request: GenerationRequest,
    ) -> Result<UnboundedReceiver<GenerationEvent>, InferenceError> {
        self.start(request).await.inspect_err(|e| self.note_rejected(e))
    }

    /// Counts a request refused before it could be submitted (one that did not parse).
    pub fn note_rejected(&self, error: &dyn std::fmt::Display) {
        self.shared.metrics.rejected.inc();
        tracing::debug!(error = %error, "request rejected");
    }

    /// Validates and templates a request, then queues it.
    async fn start(
        &self,
        request: GenerationRequest,
    ) -> Result<UnboundedReceiver<GenerationEvent>, InferenceError> {
        let ready = self.shared.ready.get().ok_or(InferenceError::NotReady)?;
        request.validate(&self.shared.model_name, ready.context)?;
        // Tokenizing a long conversation takes milliseconds: keep it off the async workers.
        let tokenizer = Arc::clone(&ready.tokenizer);
        let (messages, raw_prompt) = (request.messages, request.raw_prompt);
        let prompt = tokio::task::spawn_blocking(move || encode(&tokenizer, &messages, raw_prompt))
            .await
            .map_err(|e| InferenceError::Tokenizer(e.to_string()))??;
        if prompt.len() >= ready.context {
            return Err(InferenceError::PromptTooLong {
                prompt_tokens: prompt.len(),
                context: ready.context,
            });
        }
        let submission = Submission {
            sampling: request.sampling,
            tenant: request.tenant,
            priority: request.priority,
            speculative: request.speculative,
        };
        ready.worker.submit(prompt, submission)
    }
}

/// The prompt's token ids: the conversation in the chat template, or a raw prompt's one message as it is.
fn encode(
    tokenizer: &ChatTokenizer,
    messages: &[ChatMessage],
    raw_prompt: bool,
) -> Result<Vec<u32>, InferenceError> {
    match (raw_prompt, messages) {
        (false, _) => encode_prompt(tokenizer, messages),
        (true, [prompt]) => tokenizer.encode_raw_prompt(&prompt.content),
        (true, _) => Err(InferenceError::InvalidRequest("a raw prompt is exactly one user message".into())),
    }
}

#[tonic::async_trait]
impl InferencePod for InferenceService {
    type GenerateStream = GenerateStream;

    #[tracing::instrument(
        name = "generate",
        skip_all,
        fields(request_id, tenant, trace_id, span_id, parent_span_id)
    )]
    async fn generate(
        &self,
        request: Request<pb::GenerateRequest>,
    ) -> Result<Response<GenerateStream>, Status> {
        let trace = daemon_runtime::trace_context::from_metadata(request.metadata());
        let caller = daemon_runtime::trace_context::caller_of(request.metadata());
        let request =
            GenerationRequest::try_from(request.into_inner()).inspect_err(|e| self.note_rejected(e))?;
        let span = tracing::Span::current();
        span.record("request_id", request.request_id.as_str());
        span.record("tenant", request.tenant.as_str());
        daemon_runtime::trace_context::record_span(&span, &trace, caller.as_ref());
        tracing::info!("generation accepted");
        let events = self.submit(request).await?;
        let stream = UnboundedReceiverStream::new(events).map(Result::<pb::GenerateEvent, Status>::from);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn health(
        &self,
        _request: Request<pb::HealthRequest>,
    ) -> Result<Response<pb::HealthReply>, Status> {
        let ready = self.shared.ready.get().ok_or(InferenceError::NotReady)?;
        let load = ready.worker.load();
        Ok(Response::new(pb::HealthReply {
            model: self.shared.model_name.clone(),
            queue_depth: u32::try_from(load.queued()).unwrap_or(u32::MAX),
            running: u32::try_from(load.running()).unwrap_or(u32::MAX),
            free_blocks: u32::try_from(load.free_blocks()).unwrap_or(u32::MAX),
            total_blocks: u32::try_from(load.total_blocks()).unwrap_or(u32::MAX),
            block_size: u32::try_from(load.block_size()).unwrap_or(u32::MAX),
            weight_bytes_per_token: ready.weight_bytes_per_token as u64,
            threads: u32::try_from(ready.threads).unwrap_or(u32::MAX),
            isa: crate::model::quant::kernel::isa().into(),
        }))
    }
}
