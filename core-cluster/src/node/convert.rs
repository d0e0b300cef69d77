//! openraft messages as JSON payloads at the protobuf boundary (cached completions convert with the
//! `From` impls in `proto`).

use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::CoreError;

/// Wraps a value as a JSON Raft payload.
pub fn encode<T: Serialize>(value: &T) -> Result<RaftPayload, CoreError> {
    Ok(RaftPayload { json: serde_json::to_vec(value)? })
}

/// Reads a JSON Raft payload; a payload that does not parse is the sender's mistake.
pub fn decode<T: DeserializeOwned>(payload: &RaftPayload) -> Result<T, CoreError> {
    serde_json::from_slice(&payload.json)
        .map_err(|e| CoreError::InvalidArgument(format!("raft payload: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::Command;
    use shared::completion::CachedCompletion;

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
    fn commands_round_trip_through_payloads() {
        let cmd = Command::Put { entry: sample() };
        let back: Command = decode(&encode(&cmd).expect("encodes")).expect("decodes");
        assert_eq!(back, cmd);
        let garbage = RaftPayload { json: b"{not json".to_vec() };
        assert!(matches!(decode::<Command>(&garbage), Err(CoreError::InvalidArgument(_))));
    }
}
