//! The core node's error type and its one conversion to a gRPC status.

use tonic::{Code, Status};

/// Everything that can go wrong in a core node, from bad input to a lost quorum.
///
/// `Display` is a short sentence without the source chain; the gRPC status carries it to the caller.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The caller sent a request that can never succeed as sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The call did not carry the right tier secret.
    #[error("missing or wrong tier secret")]
    Unauthenticated,
    /// No model backend (pod or OpenAI-compatible server) could take the request.
    #[error("no model backend available: {0}")]
    NoBackend(String),
    /// A model backend answered with an error, or its stream broke.
    #[error("model backend failed: {message}")]
    Backend {
        /// The gRPC code the backend returned (or the one chosen for its failure).
        code: Code,
        /// What went wrong, as the backend said it.
        message: String,
    },
    /// The state machine refused the command (unknown tenant or model, stale version, value too large...).
    #[error("{message}")]
    Rejected {
        /// The gRPC code that says which kind of refusal it is.
        code: Code,
        /// Why.
        message: String,
    },
    /// The cluster has no leader or no quorum to commit a write in time.
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// Raft stopped or rejected an operation in a way a retry will not fix.
    #[error("raft: {0}")]
    Raft(String),
    /// The node's configuration is invalid.
    #[error("config: {0}")]
    Config(String),
    /// Local storage failed.
    #[error("storage: {0}")]
    Storage(#[from] sled::Error),
    /// A value could not be encoded or decoded.
    #[error("codec: {0}")]
    Codec(#[from] serde_json::Error),
    /// A file or socket operation failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl From<core_client::ClientError> for CoreError {
    fn from(err: core_client::ClientError) -> Self {
        use core_client::ClientError;
        match err {
            ClientError::InvalidArgument(message) => CoreError::InvalidArgument(message),
            ClientError::Unauthenticated => CoreError::Unauthenticated,
            ClientError::Rejected { code, message } => CoreError::Rejected { code, message },
            ClientError::NoQuorum(message) => CoreError::NoQuorum(message),
            ClientError::Config(message) => CoreError::Config(message),
        }
    }
}

impl From<daemon_runtime::identity::IdentityError> for CoreError {
    fn from(err: daemon_runtime::identity::IdentityError) -> Self {
        CoreError::Config(err.to_string())
    }
}

impl From<CoreError> for Status {
    fn from(err: CoreError) -> Self {
        let code = match &err {
            CoreError::InvalidArgument(_) => Code::InvalidArgument,
            CoreError::Unauthenticated => Code::Unauthenticated,
            CoreError::NoBackend(_) | CoreError::NoQuorum(_) => Code::Unavailable,
            CoreError::Backend { code, .. } | CoreError::Rejected { code, .. } => *code,
            CoreError::Raft(_)
            | CoreError::Config(_)
            | CoreError::Storage(_)
            | CoreError::Codec(_)
            | CoreError::Io(_) => Code::Internal,
        };
        Status::new(code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_codes_callers_act_on() {
        assert_eq!(Status::from(CoreError::InvalidArgument("key".into())).code(), Code::InvalidArgument);
        assert_eq!(Status::from(CoreError::Unauthenticated).code(), Code::Unauthenticated);
        assert_eq!(Status::from(CoreError::NoBackend("all down".into())).code(), Code::Unavailable);
        assert_eq!(Status::from(CoreError::NoQuorum("no leader".into())).code(), Code::Unavailable);
        let pod = CoreError::Backend { code: Code::ResourceExhausted, message: "queue full".into() };
        assert_eq!(Status::from(pod).code(), Code::ResourceExhausted);
    }
}
