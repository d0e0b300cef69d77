//! Conversions at the protobuf boundary: openraft messages and forwarded requests as JSON payloads, and the
//! `CoreStore` messages to and from the state machine's requests and outcomes (cached completions convert
//! with the `From` impls in `proto`).

use proto::core as pb;
use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;
use tonic::Code;

use super::error::CoreError;
use super::types::{Command, InvalidateScope, Outcome, Rejection, Request, TenantPolicy};
use crate::node::writes::validate;

/// Wraps a value as a JSON Raft payload.
pub fn encode<T: Serialize>(value: &T) -> Result<RaftPayload, CoreError> {
    Ok(RaftPayload { body: serde_json::to_vec(value)? })
}

/// Reads a JSON Raft payload; a payload that does not parse is the sender's mistake.
pub fn decode<T: DeserializeOwned>(payload: &RaftPayload) -> Result<T, CoreError> {
    serde_json::from_slice(&payload.body)
        .map_err(|e| CoreError::InvalidArgument(format!("raft payload: {e}")))
}

fn invalid(message: impl Into<String>) -> CoreError {
    CoreError::InvalidArgument(message.into())
}

/// Checks a `Write` call and turns it into a state-machine request. Missing fields are checked here, and
/// everything else that can be checked without the state by [`validate::request`] (the same checks the
/// leader applies to forwarded writes); the rest the state machine decides.
pub fn write_request(request: pb::WriteRequest) -> Result<Request, CoreError> {
    use pb::write_request::Command as Pb;
    let command = match request.command.ok_or_else(|| invalid("command is missing"))? {
        Pb::Put(put) => {
            let mut entry: CachedCompletion =
                put.entry.ok_or_else(|| invalid("put.entry is missing"))?.into();
            if entry.etag.is_empty() {
                entry.etag = CachedCompletion::etag_of(&entry.content, &entry.finish_reason);
            }
            // Only the core signs; what a caller sends as a signature is not kept.
            entry.signature.clear();
            Command::Put { entry, content_class: put.content_class, prompt: None }
        }
        Pb::Invalidate(inv) => {
            use pb::invalidate::Scope;
            let scope = match inv.scope.ok_or_else(|| invalid("invalidate.scope is missing"))? {
                Scope::Key(key) => InvalidateScope::Key { tenant: inv.key_tenant, key },
                Scope::Tag(t) => InvalidateScope::Tag { tenant: t.tenant, tag: t.tag, refresh: inv.refresh },
                Scope::Tenant(tenant) => InvalidateScope::Tenant { tenant },
                Scope::ModelVersion(mv) => {
                    InvalidateScope::ModelVersion { model: mv.model, version: mv.version }
                }
            };
            Command::Invalidate { scope }
        }
        Pb::BumpModelVersion(bump) => Command::BumpModelVersion {
            model: bump.model,
            version: bump.version,
            canary_percent: u8::try_from(bump.canary_percent)
                .ok()
                .filter(|p| *p < 100)
                .ok_or_else(|| invalid("canary_percent must be 0 (no canary) or 1 to 99"))?,
        },
        Pb::EndCanary(end) => Command::EndCanary { model: end.model, promote: end.promote },
        Pb::RegisterModel(reg) => {
            let spec = reg.spec.map(ModelSpec::try_from).transpose().map_err(|e| invalid(&e))?;
            Command::RegisterModel { model: reg.model, version: reg.version, spec }
        }
        Pb::SetTenantPolicy(set) => {
            Command::SetTenantPolicy { tenant: set.tenant, policy: set.policy.unwrap_or_default().into() }
        }
    };
    let request = Request { id: request.request_id, command };
    validate::request(&request)?;
    Ok(request)
}

impl From<pb::TenantPolicy> for TenantPolicy {
    fn from(p: pb::TenantPolicy) -> Self {
        Self {
            max_value_bytes: p.max_value_bytes,
            default_ttl_s: p.default_ttl_s,
            max_ttl_s: p.max_ttl_s,
            cache_sampled: p.cache_sampled,
        }
    }
}

impl From<&TenantPolicy> for pb::TenantPolicy {
    fn from(p: &TenantPolicy) -> Self {
        Self {
            max_value_bytes: p.max_value_bytes,
            default_ttl_s: p.default_ttl_s,
            max_ttl_s: p.max_ttl_s,
            cache_sampled: p.cache_sampled,
        }
    }
}

/// The gRPC code of a refusal.
pub fn rejection_code(reason: Rejection) -> Code {
    match reason {
        Rejection::UnknownTenant | Rejection::UnknownModel => Code::NotFound,
        Rejection::StaleModelVersion | Rejection::Conflict => Code::FailedPrecondition,
        Rejection::ValueTooLarge => Code::InvalidArgument,
        Rejection::WrongTenant => Code::PermissionDenied,
    }
}

/// An outcome as a result: a refusal becomes [`CoreError::Rejected`].
pub fn outcome_result(outcome: &Outcome) -> Result<(), CoreError> {
    write_outcome(outcome).map(|_| ())
}

/// The wire form of an accepted command's outcome; a refused command is the error its caller gets.
pub fn write_outcome(outcome: &Outcome) -> Result<pb::WriteOutcome, CoreError> {
    use pb::write_outcome::Outcome as Wire;
    let wire = match outcome {
        Outcome::Rejected { reason, message } => {
            return Err(CoreError::Rejected { code: rejection_code(*reason), message: message.clone() })
        }
        Outcome::Stored { key, created_ms, ttl_s } => {
            Wire::Stored(pb::Stored { key: key.clone(), created_ms: *created_ms, ttl_s: *ttl_s })
        }
        Outcome::Invalidated { removed, at_ms, refresh } => Wire::Invalidated(pb::Invalidated {
            removed: *removed,
            at_ms: *at_ms,
            refreshing: u32::try_from(refresh.len()).unwrap_or(u32::MAX),
        }),
        Outcome::ModelVersion { model, previous, version, refresh } => {
            Wire::ModelVersion(pb::ModelVersionChanged {
                model: model.clone(),
                previous: *previous,
                version: *version,
                refreshing: u32::try_from(refresh.len()).unwrap_or(u32::MAX),
            })
        }
        Outcome::CanaryStarted { model, current, version, percent } => {
            Wire::CanaryStarted(pb::CanaryStarted {
                model: model.clone(),
                current: *current,
                version: *version,
                percent: u32::from(*percent),
            })
        }
        Outcome::CanaryEnded { model, version, promoted, refresh } => Wire::CanaryEnded(pb::CanaryEnded {
            model: model.clone(),
            version: *version,
            promoted: *promoted,
            refreshing: u32::try_from(refresh.len()).unwrap_or(u32::MAX),
        }),
        Outcome::ModelRegistered { model, version } => {
            Wire::ModelRegistered(pb::ModelRegistered { model: model.clone(), version: *version })
        }
        Outcome::TenantPolicySet { tenant, epoch } => {
            Wire::TenantPolicySet(pb::TenantPolicySet { tenant: tenant.clone(), epoch: *epoch })
        }
        Outcome::HitsRecorded => Wire::HitsRecorded(pb::HitsRecorded {}),
        Outcome::Swept { entries, requests, feed } => {
            Wire::Swept(pb::Swept { entries: *entries, requests: *requests, feed: *feed })
        }
    };
    Ok(pb::WriteOutcome { outcome: Some(wire) })
}

#[cfg(test)]
mod tests {
    use super::super::apply::MAX_VALUE_BYTES;
    use super::*;

    fn sample() -> CachedCompletion {
        CachedCompletion {
            model: "smollm2".into(),
            model_version: 3,
            prompt_tokens: 5,
            etag: String::new(),
            created_ms: 1_700_000_000_000,
            ttl_s: 60,
            ..CachedCompletion::example("k1", "hello")
        }
    }

    fn put(entry: CachedCompletion) -> pb::WriteRequest {
        pb::WriteRequest {
            request_id: "r1".into(),
            command: Some(pb::write_request::Command::Put(pb::PutEntry {
                entry: Some(entry.into()),
                content_class: "stable".into(),
            })),
        }
    }

    #[test]
    fn requests_round_trip_through_payloads() {
        let request = write_request(put(sample())).expect("valid");
        assert_eq!(request.id, "r1");
        let Command::Put { entry, .. } = &request.command else { panic!("not a put") };
        assert_eq!(entry.etag, CachedCompletion::etag_of("hello", "stop"));
        let back: Request = decode(&encode(&request).expect("encodes")).expect("decodes");
        assert_eq!(back, request);
        let garbage = RaftPayload { body: b"{not json".to_vec() };
        assert!(matches!(decode::<Request>(&garbage), Err(CoreError::InvalidArgument(_))));
    }

    #[test]
    fn bad_writes_are_invalid_arguments() {
        let bad = |r: pb::WriteRequest| matches!(write_request(r), Err(CoreError::InvalidArgument(_)));
        assert!(bad(pb::WriteRequest { request_id: "x".into(), command: None }));
        let mut big = sample();
        big.content = "x".repeat(MAX_VALUE_BYTES as usize + 1);
        assert!(bad(put(big)));
        let mut v0 = sample();
        v0.model_version = 0;
        assert!(bad(put(v0)));
        let mut no_tenant = sample();
        no_tenant.tenant.clear();
        assert!(bad(put(no_tenant)));
        let mut long_id = put(sample());
        long_id.request_id = "r".repeat(200);
        assert!(bad(long_id));
        let no_scope = pb::WriteRequest {
            request_id: String::new(),
            command: Some(pb::write_request::Command::Invalidate(pb::Invalidate::default())),
        };
        assert!(bad(no_scope));
    }

    #[test]
    fn refusals_map_to_codes() {
        let outcome =
            Outcome::Rejected { reason: Rejection::UnknownTenant, message: "unknown tenant".into() };
        assert!(matches!(outcome_result(&outcome), Err(CoreError::Rejected { code: Code::NotFound, .. })));
        assert!(outcome_result(&Outcome::HitsRecorded).is_ok());
    }
}
