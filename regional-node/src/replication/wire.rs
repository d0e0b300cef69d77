//! Records to and from their protobuf form. A clock's zero counters are dropped (a dot at zero is the
//! same as no dot), so every record has one wire form and one in-memory form.

use proto::replication::{
    version, Dot, Record as WireRecord, Tombstone as WireTombstone, Version as WireVersion,
};
use shared::completion::CachedCompletion;

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
                    }),
                }),
            })
            .collect(),
    }
}

/// A record from the wire, with its key; `None` when a version has no value or an answer is filed under
/// another key (a peer must not be able to plant an answer under a key it does not belong to).
pub fn from_wire(wire: WireRecord) -> Option<(String, Record)> {
    let mut versions = Vec::with_capacity(wire.versions.len());
    for v in wire.versions {
        let mut clock = Clock::new();
        for dot in v.clock {
            if dot.counter > 0 {
                let held = clock.dots.entry(dot.actor).or_insert(0);
                *held = (*held).max(dot.counter);
            }
        }
        let value = match v.value? {
            version::Value::Live(entry) => {
                let entry = CachedCompletion::from(entry);
                if entry.key != wire.key {
                    return None;
                }
                Value::Live(entry)
            }
            version::Value::Tombstone(t) => {
                Value::Tombstone(Tombstone { tenant: t.tenant, invalidated_ms: t.invalidated_ms })
            }
        };
        versions.push(Version { clock, value });
    }
    let record = Record::from_versions(versions);
    (!record.is_empty()).then_some((wire.key, record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_misfiled_answers_are_refused() {
        let mut record = Record::default();
        record.write("a", Value::Live(super::super::record::tests::answer("k", "v", 1)));
        record.write("b", Value::Tombstone(Tombstone { tenant: "acme".into(), invalidated_ms: 2 }));
        let wire = to_wire("k", &record);
        assert_eq!(from_wire(wire.clone()), Some(("k".to_owned(), record)));
        let mut misfiled = to_wire("k", &{
            let mut r = Record::default();
            r.write("a", Value::Live(super::super::record::tests::answer("other", "v", 1)));
            r
        });
        misfiled.key = "k".into();
        assert_eq!(from_wire(misfiled), None);
        assert_eq!(from_wire(WireRecord { key: "k".into(), versions: vec![] }), None);
    }
}
