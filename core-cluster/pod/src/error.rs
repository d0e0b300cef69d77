//! The inference pod's errors, and their one conversion to a gRPC status.

/// Everything that can go wrong loading the model or serving a generation.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// The request is malformed or asks for something the pod cannot do.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The request names a model this pod does not serve.
    #[error("unknown model {requested:?}; this pod serves {served:?}")]
    UnknownModel {
        /// The model the request asked for.
        requested: String,
        /// The model this pod serves.
        served: String,
    },
    /// The prompt (after the chat template) does not fit in the context window.
    #[error("prompt is {prompt_tokens} tokens; the context window is {context} tokens")]
    PromptTooLong {
        /// Tokens in the templated prompt.
        prompt_tokens: usize,
        /// The model's usable context window.
        context: usize,
    },
    /// The queue is full; the caller should retry later or elsewhere.
    #[error("queue full ({0} requests waiting)")]
    QueueFull(usize),
    /// The KV cache cannot hold the sequence even with every other sequence preempted.
    #[error("the KV cache cannot hold this sequence ({needed} blocks needed, {available} available)")]
    KvCacheFull {
        /// Blocks the sequence needed.
        needed: usize,
        /// Blocks there were.
        available: usize,
    },
    /// A forward step failed.
    #[error("inference step failed: {0}")]
    Internal(String),
    /// The model is still loading or the worker has stopped.
    #[error("model not ready")]
    NotReady,
    /// The client went away; the generation was abandoned.
    #[error("generation cancelled")]
    Cancelled,
    /// The GGUF file could not be read.
    #[error("reading model file {path}")]
    ModelFile {
        /// The file that failed.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The GGUF metadata lacks something the pod needs, or has it in an unexpected shape.
    #[error("model metadata: {0}")]
    Metadata(String),
    /// A tensor operation failed.
    #[error("model computation failed")]
    Candle(#[from] candle_core::Error),
    /// The tokenizer failed.
    #[error("tokenizer failed: {0}")]
    Tokenizer(String),
}

impl From<tokenizers::Error> for InferenceError {
    fn from(e: tokenizers::Error) -> Self {
        Self::Tokenizer(e.to_string())
    }
}

impl From<InferenceError> for tonic::Status {
    fn from(e: InferenceError) -> Self {
        use InferenceError as E;
        match &e {
            E::InvalidRequest(_) | E::UnknownModel { .. } | E::PromptTooLong { .. } => {
                tonic::Status::invalid_argument(e.to_string())
            }
            E::QueueFull(_) | E::KvCacheFull { .. } => tonic::Status::resource_exhausted(e.to_string()),
            E::NotReady => tonic::Status::unavailable(e.to_string()),
            E::Cancelled => tonic::Status::cancelled(e.to_string()),
            // Internal details stay in the pod's log, not in the caller's error.
            E::ModelFile { .. } | E::Metadata(_) | E::Candle(_) | E::Tokenizer(_) | E::Internal(_) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "generation failed");
                tonic::Status::internal("inference failed")
            }
        }
    }
}
