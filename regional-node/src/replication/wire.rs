//! Records to and from their protobuf form. A clock's zero counters are dropped (a dot at zero is the
//! same as no dot), so every record has one wire form and one in-memory form.

use proto::replication::{
    version, Dot, Record as WireRecord, Tombstone as WireTombstone, Version as WireVersion,
};
use shared::answer_signature::{AnswerVerifier, SignatureError};
use shared::completion::CachedCompletion;

use super::metrics::RefusedReason;
use super::record::{Clock, Record, Tombstone, Value, Version};

/// The wire form of `key`'s record.
pub fn to_wire(key: &str, record: &Record) -> WireRecord {
    WireRecord {
        key: key.to_owned(),
        versions: record
            .versions()
            .iter()
            .map(|v| WireVersion {
                clock: v
                    .clock
                    .dots
                    .iter()
                    .map(|(actor, &counter)| Dot { actor: actor.clone(), counter })
                    .collect(),
                value: Some(match &v.value {
                    Value::Live(entry) => version::Value::Live(entry.clone().into()),
                    Value::Tombstone(t) => version::Value::Tombstone(WireTombstone {
                        tenant: t.tenant.clone(),
                        invalidated_ms: t.invalidated_ms,
                        covers_until_ms: t.covers_until_ms,
                    }),
                }),
            })
            .collect(),
    }
}

/// Largest vector-clock counter a peer may send: far beyond any real node's writes (one a microsecond
/// for 285 years), far below where `counter + 1` overflows.
pub const MAX_DOT_COUNTER: u64 = 1 << 53;

/// How far ahead of this node's clock a peer's time may be (an answer's creation, an invalidation).
pub const MAX_PEER_SKEW_MS: i64 = 60_000;

/// What a peer's record is checked against before it is merged.
#[derive(Clone, Copy, Debug)]
pub struct Checks<'a> {
    /// The core's answer key: when set, only answers the core signed are taken.
    pub verifier: Option<&'a AnswerVerifier>,
    /// This node's clock (Unix milliseconds).
    pub now_ms: i64,
}

/// Why a peer's record was refused (counted by reason, logged with the peer's id).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A version carries no value, or the record no version.
    #[error("a version without a value")]
    Empty,
    /// An answer is filed under another key.
    #[error("an answer filed under another key")]
    Misfiled,
    /// An answer does not carry the core's signature over what it says.
    #[error("an answer not signed by the core: {0}")]
    Unsigned(SignatureError),
    /// An answer created later than this node's clock allows.
    #[error("an answer created {0} ms ahead of this node's clock")]
    FromTheFuture(i64),
    /// A vector-clock counter past [`MAX_DOT_COUNTER`].
    #[error("a clock counter of {0}")]
    DotOutOfRange(u64),
}

impl Refused {
    /// The metric label of the reason.
    pub fn label(&self) -> RefusedReason {
        match self {
            Self::Empty => RefusedReason::Empty,
            Self::Misfiled => RefusedReason::Misfiled,
            Self::Unsigned(_) => RefusedReason::Unsigned,
            Self::FromTheFuture(_) => RefusedReason::Future,
            Self::DotOutOfRange(_) => RefusedReason::DotRange,
        }
    }
}

/// A record from the wire, with its key, or why it is refused. A peer relays answers; it must not be
/// able to plant one under a key it does not belong to, forge or re-date one (the core's signature, when
/// this node checks it), date one in the future (which would win every conflict and pass every cutoff),
/// or send a counter that overflows a clock. A tombstone's time is taken as at most this node's now.
pub fn from_wire(wire: WireRecord, checks: Checks<'_>) -> Result<(String, Record), Refused> {
    let mut versions = Vec::with_capacity(wire.versions.len());
    for v in wire.versions {
        let mut clock = Clock::new();
        for dot in v.clock {
            if dot.counter > MAX_DOT_COUNTER {
                return Err(Refused::DotOutOfRange(dot.counter));
            }
            if dot.counter > 0 {
                let held = clock.dots.entry(dot.actor).or_insert(0);
                *held = (*held).max(dot.counter);
            }
        }
        let value = match v.value.ok_or(Refused::Empty)? {
            version::Value::Live(entry) => {
                let entry = CachedCompletion::from(entry);
                if entry.key != wire.key {
                    return Err(Refused::Misfiled);
                }
                let ahead = entry.created_ms.saturating_sub(checks.now_ms);
                if ahead > MAX_PEER_SKEW_MS {
                    return Err(Refused::FromTheFuture(ahead));
                }
                if let Some(verifier) = checks.verifier {
                    verifier.verify(&entry).map_err(Refused::Unsigned)?;
                }
                Value::Live(entry)
            }
            version::Value::Tombstone(t) => Value::Tombstone(Tombstone {
                tenant: t.tenant,
                invalidated_ms: t.invalidated_ms.min(checks.now_ms.saturating_add(MAX_PEER_SKEW_MS)),
                // Only when a tombstone may be collected without every acknowledgement: the core's feed
                // still refuses what it covered at every node.
                covers_until_ms: t.covers_until_ms,
            }),
        };
        versions.push(Version { clock, value });
    }
    let record = Record::from_versions(versions);
    if record.is_empty() {
        return Err(Refused::Empty);
    }
    Ok((wire.key, record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_misfiled_answers_are_refused() {
        let mut record = Record::default();
        record.write("a", Value::Live(super::super::record::tests::answer("k", "v", 1)));
        record.write(
            "b",
            Value::Tombstone(Tombstone { tenant: "acme".into(), invalidated_ms: 2, covers_until_ms: None }),
        );
        let wire = to_wire("k", &record);
        assert_eq!(from_wire(wire.clone(), OPEN), Ok(("k".to_owned(), record)));
        let mut misfiled = to_wire("k", &{
            let mut r = Record::default();
            r.write("a", Value::Live(super::super::record::tests::answer("other", "v", 1)));
            r
        });
        misfiled.key = "k".into();
        assert_eq!(from_wire(misfiled, OPEN), Err(Refused::Misfiled));
        assert_eq!(from_wire(WireRecord { key: "k".into(), versions: vec![] }, OPEN), Err(Refused::Empty));
    }

    const OPEN: Checks<'static> = Checks { verifier: None, now_ms: 10_000 };

    fn live(entry: CachedCompletion, counter: u64) -> WireRecord {
        WireRecord {
            key: entry.key.clone(),
            versions: vec![WireVersion {
                clock: vec![Dot { actor: "peer".into(), counter }],
                value: Some(version::Value::Live(entry.into())),
            }],
        }
    }

    #[test]
    fn a_peer_cannot_plant_redate_or_overflow() {
        use shared::answer_signature::AnswerSigner;
        let signer = AnswerSigner::from_seed([2; 32]);
        let verifier = signer.verifier();
        let checks = Checks { verifier: Some(&verifier), now_ms: 10_000 };
        let mut signed = super::super::record::tests::answer("k", "the core's answer", 9_000);
        signer.sign(&mut signed);
        assert!(from_wire(live(signed.clone(), 1), checks).is_ok());

        let planted = CachedCompletion { content: "the attacker's answer".into(), ..signed.clone() };
        let redated = CachedCompletion { created_ms: 9_500, ..signed.clone() };
        let unsigned = CachedCompletion { signature: String::new(), ..signed.clone() };
        for (entry, why) in [(planted, "content"), (redated, "re-dated"), (unsigned, "unsigned")] {
            assert!(matches!(from_wire(live(entry, 1), checks), Err(Refused::Unsigned(_))), "{why}");
        }
        // Without a key the content cannot be checked, but the time and the clock still are.
        let future = super::super::record::tests::answer("k", "x", 10_000 + MAX_PEER_SKEW_MS + 1);
        assert_eq!(from_wire(live(future, 1), OPEN), Err(Refused::FromTheFuture(MAX_PEER_SKEW_MS + 1)));
        assert_eq!(from_wire(live(signed.clone(), u64::MAX), checks), Err(Refused::DotOutOfRange(u64::MAX)));
        let mut record = Record::default();
        record.write(
            "a",
            Value::Tombstone(Tombstone {
                tenant: "acme".into(),
                invalidated_ms: i64::MAX,
                covers_until_ms: None,
            }),
        );
        let (_, merged) = from_wire(to_wire("k", &record), OPEN).expect("tombstone");
        assert!(matches!(
            &merged.versions()[0].value,
            Value::Tombstone(t) if t.invalidated_ms == 10_000 + MAX_PEER_SKEW_MS
        ));
    }
}
