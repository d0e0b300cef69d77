//! Conversions at the protobuf boundary: cached completions, and openraft messages as JSON payloads.

use proto::cache::CachedCompletion as ProtoCompletion;
use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shared::completion::CachedCompletion;

use super::error::CoreError;

/// The protobuf form of a cached completion.
pub fn completion_to_proto(c: CachedCompletion) -> ProtoCompletion {
    ProtoCompletion {
        key: c.key,
        tenant: c.tenant,
        model: c.model,
        model_version: c.model_version,
        content: c.content,
        finish_reason: c.finish_reason,
        prompt_tokens: c.prompt_tokens,
        completion_tokens: c.completion_tokens,
        etag: c.etag,
        created_ms: c.created_ms,
        ttl_s: c.ttl_s,
    }
}

/// The domain form of a protobuf cached completion.
pub fn completion_from_proto(c: ProtoCompletion) -> CachedCompletion {
    CachedCompletion {
        key: c.key,
        tenant: c.tenant,
        model: c.model,
        model_version: c.model_version,
        content: c.content,
        finish_reason: c.finish_reason,
        prompt_tokens: c.prompt_tokens,
        completion_tokens: c.completion_tokens,
        etag: c.etag,
        created_ms: c.created_ms,
        ttl_s: c.ttl_s,
    }
}

/// Wraps a value as a JSON Raft payload.
pub fn encode<T: Serialize>(value: &T) -> Result<RaftPayload, CoreError> {
    Ok(RaftPayload { json: serde_json::to_vec(value)? })
}

/// Reads a JSON Raft payload; a payload that does not parse is the sender's mistake.
pub fn decode<T: DeserializeOwned>(payload: &RaftPayload) -> Result<T, CoreError> {
    serde_json::from_slice(&payload.json).map_err(|e| CoreError::InvalidArgument(format!("raft payload: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::Command;

    fn sample() -> CachedCompletion {
        CachedCompletion {
            key: "k1".into(),
            tenant: "dev".into(),
            model: "smollm2".into(),
            model_version: 3,
            content: "hello".into(),
            finish_reason: "stop".into(),
            prompt_tokens: 5,
            completion_tokens: 1,
            etag: CachedCompletion::etag_of("hello", "stop"),
            created_ms: 1_700_000_000_000,
            ttl_s: 60,
        }
    }

    #[test]
    fn completions_round_trip_through_proto() {
        assert_eq!(completion_from_proto(completion_to_proto(sample())), sample());
    }

    #[test]
    fn commands_round_trip_through_payloads() {
        let cmd = Command::Put { entry: sample() };
        let back: Command = decode(&encode(&cmd).expect("encodes")).expect("decodes");
        assert_eq!(back, cmd);
        let garbage = RaftPayload { json: b"{not json".to_vec() };
        assert!(matches!(decode::<Command>(&garbage), Err(CoreError::InvalidArgument(_))));
    }
}
