//! The edge's errors and the single place where they become client-facing errors.

use shared::RequestError;

/// Everything that can end a request at the edge.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// A client error (401, 400, 404, 413, ...) or an upstream failure, already in OpenAI's shape.
    #[error(transparent)]
    Client(#[from] RequestError),
    /// A wrangler var or secret is missing or malformed; the message names the variable, never a value.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The Workers runtime failed (headers, bodies, fetch plumbing).
    #[error("workers runtime: {0}")]
    Runtime(#[from] worker::Error),
}

impl EdgeError {
    /// The error to show the client. Faults of ours are 500s whose details stay in the worker's logs.
    pub fn to_request_error(&self) -> RequestError {
        match self {
            EdgeError::Client(e) => e.clone(),
            EdgeError::Config(_) => {
                RequestError::internal("the edge is misconfigured; the operator has been told in its logs")
            }
            EdgeError::Runtime(_) => RequestError::internal("internal error at the edge"),
        }
    }
}
