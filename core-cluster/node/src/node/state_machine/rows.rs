//! How the state machine's values are stored in sled.
//!
//! The rows written on every put are prost: the entry itself (`StoredEntryRow`) and its model, whose
//! hottest-keys summary every proposal of puts changes (`ModelRow`; held in memory and written back at
//! snapshots and clean stops, `models.rs`, but decoded from snapshots and older trees). JSON spent most of its time escaping
//! an entry's content character by character, and reading and writing a model's summary of 64 keys took a
//! quarter of applying a proposal of one put. A row an older binary wrote is JSON; JSON rows begin with
//! `{`, which neither message's encoding ever does (their first byte is a field's tag), so both are read
//! and a database written before keeps working. Snapshots carry rows as stored, so they read the same way.
//!
//! The other values (tenants, request outcomes, feed rows, the meta tree's ids, clock and membership) are
//! written once per proposal or less and stay JSON.

use std::io;

use openraft::{BasicNode, LogId, SnapshotMeta};
use prost::Message as _;
use proto::raft as pb;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shared::canary::Canary;
use shared::model_spec::ModelSpec;

use super::super::hot_prompts::HotPrompts;
use super::super::records::{AppliedRequest, FeedRow, ModelState, StoredEntry, TenantState};
use super::super::types::NodeId;
use super::Membership;
use crate::node::raft::log_codec::{prompt_from_pb, prompt_to_pb};

/// A value the state machine stores as a sled row.
pub trait Row: Sized {
    /// The row's bytes.
    fn to_row(&self) -> io::Result<Vec<u8>>;
    /// The value of a row; a row that does not decode is `InvalidData`.
    fn from_row(bytes: &[u8]) -> io::Result<Self>;
}

fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("a stored {what} does not decode: {e}"))
}

fn to_json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(io::Error::other)
}

fn from_json<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| invalid(what, e))
}

/// Values stored as JSON, each with the name its decoding errors give it.
macro_rules! json_rows {
    ($($ty:ty => $what:literal),* $(,)?) => {$(
        impl Row for $ty {
            fn to_row(&self) -> io::Result<Vec<u8>> {
                to_json(self)
            }
            fn from_row(bytes: &[u8]) -> io::Result<Self> {
                from_json($what, bytes)
            }
        }
    )*};
}

json_rows! {
    TenantState => "tenant",
    AppliedRequest => "request outcome",
    FeedRow => "feed row",
    Option<LogId<NodeId>> => "log id",
    Membership => "membership",
    SnapshotMeta<NodeId, BasicNode> => "snapshot's metadata",
    i64 => "clock",
    u64 => "revision",
}

impl Row for StoredEntry {
    fn to_row(&self) -> io::Result<Vec<u8>> {
        let row = pb::StoredEntryRow {
            entry: Some(self.entry.clone().into()),
            content_class: self.content_class.clone(),
            tenant_epoch: self.tenant_epoch,
            model_epoch: self.model_epoch,
            prompt: self.prompt.as_ref().map(prompt_to_pb),
        };
        Ok(row.encode_to_vec())
    }

    fn from_row(bytes: &[u8]) -> io::Result<Self> {
        if bytes.first() == Some(&b'{') {
            return from_json("entry", bytes);
        }
        let row = pb::StoredEntryRow::decode(bytes).map_err(|e| invalid("entry", e))?;
        Ok(StoredEntry {
            entry: row.entry.ok_or_else(|| invalid("entry", "it has no completion"))?.into(),
            content_class: row.content_class,
            tenant_epoch: row.tenant_epoch,
            model_epoch: row.model_epoch,
            prompt: row.prompt.map(prompt_from_pb).transpose().map_err(|e| invalid("entry", e))?,
        })
    }
}

impl Row for ModelState {
    fn to_row(&self) -> io::Result<Vec<u8>> {
        let (counts, since_aging) = self.hot.parts();
        let row = pb::ModelRow {
            version: self.version,
            epoch: self.epoch,
            hot: counts.map(|(key, count)| pb::HotCount { key: key.to_owned(), count }).collect(),
            hot_since_aging: since_aging,
            spec: self.spec.as_ref().map(Into::into),
            canary_version: self.canary.map_or(0, |c| c.version),
            canary_percent: self.canary.map_or(0, |c| u32::from(c.percent)),
            tried: self.tried,
        };
        Ok(row.encode_to_vec())
    }

    fn from_row(bytes: &[u8]) -> io::Result<Self> {
        if bytes.first() == Some(&b'{') {
            return from_json("model", bytes);
        }
        let row = pb::ModelRow::decode(bytes).map_err(|e| invalid("model", e))?;
        let counts = row.hot.into_iter().map(|h| (h.key, h.count));
        let spec = row.spec.map(ModelSpec::try_from).transpose().map_err(|e| invalid("model spec", e))?;
        Ok(ModelState {
            version: row.version,
            epoch: row.epoch,
            hot: HotPrompts::from_parts(counts, row.hot_since_aging),
            spec,
            canary: (row.canary_version != 0).then(|| Canary {
                version: row.canary_version,
                percent: u8::try_from(row.canary_percent).unwrap_or(u8::MAX),
            }),
            tried: row.tried,
        })
    }
}

#[cfg(test)]
mod tests {
    use shared::completion::{AnsweredQuestion, CachedCompletion};
    use shared::normalize::{ChatRole, Message, Sampling};

    use super::super::super::types::Prompt;
    use super::*;

    fn stored(prompt: Option<Prompt>) -> StoredEntry {
        StoredEntry {
            entry: CachedCompletion {
                model_version: 2,
                prompt_tokens: 3,
                completion_tokens: 4,
                etag: CachedCompletion::etag_of("k", "stop"),
                created_ms: 1_700_000_000_000,
                ttl_s: 60,
                question: Some(AnsweredQuestion { partition: "p1:ab".into(), text: "What?".into() }),
                ..CachedCompletion::example("v1:k", "a \"quoted\" answer\nwith ünïcode")
            },
            content_class: "stable".into(),
            tenant_epoch: 7,
            model_epoch: 9,
            prompt,
        }
    }

    #[test]
    fn entries_round_trip_with_and_without_their_prompt() {
        let prompt = Prompt {
            messages: vec![Message { role: ChatRole::User, content: "What?".into() }],
            sampling: Sampling { seed: Some(7), stop: vec!["x".into()], ..Sampling::greedy(16) },
            tags: vec!["stock:AAPL".into()],
        };
        for entry in [stored(None), stored(Some(prompt))] {
            let row = entry.to_row().expect("encode");
            assert_ne!(row.first(), Some(&b'{'));
            assert_eq!(StoredEntry::from_row(&row).expect("decode"), entry);
        }
    }

    #[test]
    fn an_entry_an_older_binary_wrote_as_json_is_read() {
        let entry = stored(None);
        let json = serde_json::to_vec(&entry).expect("json");
        assert_eq!(StoredEntry::from_row(&json).expect("decode"), entry);
    }

    fn model() -> ModelState {
        let mut hot = HotPrompts::default();
        for (i, key) in ["v1:b", "v1:a", "v1:c", "v1:a"].into_iter().enumerate() {
            hot.record(key, i as u64 + 1);
        }
        let spec = ModelSpec { context_length: 8192, ..Default::default() };
        let canary = Some(Canary { version: 5, percent: 20 });
        ModelState { version: 3, epoch: 2, hot, spec: Some(spec), canary, tried: 5 }
    }

    #[test]
    fn models_round_trip_with_their_hottest_keys_and_json_rows_are_read() {
        for model in [model(), ModelState::default()] {
            let row = model.to_row().expect("encode");
            assert_ne!(row.first(), Some(&b'{'));
            assert_eq!(ModelState::from_row(&row).expect("decode"), model);
        }
        let json = serde_json::to_vec(&model()).expect("json");
        assert_eq!(ModelState::from_row(&json).expect("decode"), model());
        let row = model().to_row().expect("encode");
        let err = ModelState::from_row(&row[..row.len() - 3]).expect_err("a cut row decodes");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_row_that_does_not_decode_is_invalid_data() {
        let row = stored(None).to_row().expect("encode");
        for garbage in [&row[..row.len() - 3], b"{\"entry\":", &[0xff, 0xff, 0xff][..], &[][..]] {
            let err = StoredEntry::from_row(garbage).expect_err("garbage decodes");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{garbage:?}: {err}");
        }
    }
}
