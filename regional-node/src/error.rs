//! The regional daemon's error type and its one conversion to an HTTP response.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::RequestError;

/// Everything that can go wrong in the regional daemon.
#[derive(Debug, thiserror::Error)]
pub enum RegionalError {
    /// The client's request is at fault (bad body, auth, unknown model, ...).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// No core node answered.
    #[error("core cluster unavailable: {0}")]
    CoreUnavailable(String),
    /// The circuit breaker toward the core is open: the core is not called until it half-opens.
    #[error("core cluster unavailable (circuit open for {retry_after_s} s more)")]
    CircuitOpen {
        /// Seconds until the breaker lets a probe through.
        retry_after_s: u64,
    },
    /// Generation is at capacity and its queue is full.
    #[error("overloaded: {queued} requests already queued")]
    Overloaded {
        /// Requests waiting when this one was refused.
        queued: usize,
        /// Seconds the queue ahead is predicted to take.
        retry_after_s: u64,
    },
    /// A core node answered with an error.
    #[error("core cluster error: {0}")]
    Core(String),
    /// The core refused a generation for a model version it has moved past.
    #[error("the model moved to a new version: {0}")]
    ModelVersionMoved(String),
    /// Invalid configuration (at start-up).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// This node's identity (TLS material or insecure secret) is unusable.
    #[error("identity: {0}")]
    Identity(#[from] daemon_runtime::identity::IdentityError),
    /// The embedding model failed to load or run.
    #[error("embedding: {0}")]
    Embedding(String),
    /// Listening or serving failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl RegionalError {
    /// Whether the core failed the request (counted as a core error), as opposed to the request or
    /// this node's own limits.
    pub fn is_core_failure(&self) -> bool {
        matches!(
            self,
            RegionalError::CoreUnavailable(_) | RegionalError::Core(_) | RegionalError::ModelVersionMoved(_)
        )
    }

    /// The client-facing form of the error.
    pub fn to_request_error(&self) -> RequestError {
        match self {
            RegionalError::Request(e) => e.clone(),
            RegionalError::CoreUnavailable(_) => {
                RequestError::upstream(503, "the core cluster is unavailable; retry shortly")
            }
            RegionalError::CircuitOpen { retry_after_s } => {
                RequestError::upstream(503, "the core cluster is unavailable (circuit open); retry later")
                    .with_retry_after(*retry_after_s)
            }
            RegionalError::Overloaded { retry_after_s, .. } => RequestError::overloaded(
                "this region is generating at capacity and its queue is full; retry later",
                *retry_after_s,
            ),
            RegionalError::Core(m) => RequestError::upstream(502, format!("the core cluster failed: {m}")),
            RegionalError::ModelVersionMoved(m) => {
                RequestError::upstream(502, format!("the model moved to a new version ({m}); retry"))
            }
            RegionalError::Config(_)
            | RegionalError::Identity(_)
            | RegionalError::Embedding(_)
            | RegionalError::Io(_) => RequestError::internal("internal error"),
        }
    }
}

impl From<tonic::Status> for RegionalError {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            tonic::Code::InvalidArgument => {
                RegionalError::Request(RequestError::invalid(status.message().to_owned()))
            }
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => {
                RegionalError::CoreUnavailable(status.message().to_owned())
            }
            tonic::Code::FailedPrecondition => RegionalError::ModelVersionMoved(status.message().to_owned()),
            _ => RegionalError::Core(format!("{:?}: {}", status.code(), status.message())),
        }
    }
}

/// Renders a [`RequestError`] as an HTTP response with an OpenAI-shaped JSON body.
pub fn error_response(error: &RequestError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, error.to_json()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let retry_after = error.retry_after_s.or((status == StatusCode::SERVICE_UNAVAILABLE).then_some(1));
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

impl IntoResponse for RegionalError {
    fn into_response(self) -> Response {
        if !matches!(self, RegionalError::Request(_)) {
            tracing::warn!(error = %self, "request failed");
        }
        error_response(&self.to_request_error())
    }
}
