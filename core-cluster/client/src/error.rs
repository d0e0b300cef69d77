//! [`ClientError`]: why a call to the core cluster failed, as its caller sees it.

use tonic::Code;

/// Why a call to the core cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request can never succeed as sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The core refused this client's identity.
    #[error("unauthenticated")]
    Unauthenticated,
    /// The core refused the command (unknown tenant or model, stale version, value too large...).
    #[error("{message}")]
    Rejected {
        /// The gRPC code that says which kind of refusal it is.
        code: Code,
        /// Why.
        message: String,
    },
    /// No node committed or answered in time (no leader, no quorum, or none reachable).
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// The client was given unusable node addresses.
    #[error("config: {0}")]
    Config(String),
}
