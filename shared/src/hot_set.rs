//! The hot set a regional node serves to the edge (`GET /v1/hotset?since=<version>`): its most wanted
//! live entries, each with the small embedding of the question it answers, as a snapshot or as the
//! changes since a version the edge already holds.
//!
//! A version is `<epoch>.<sequence>`: the epoch changes whenever the node's sequence restarts (a new
//! process), so a version from another epoch, or one older than the changes the node still remembers,
//! is answered with a snapshot. Applying a delta to the set of its `since` version gives the set of its
//! `version`: upsert every entry, drop every removed key.

use serde::{Deserialize, Serialize};

use crate::completion::CachedCompletion;

/// A hot-set version: where in a node's change sequence a set stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotSetVersion {
    /// Identifies the node's sequence (new on every start).
    pub epoch: u64,
    /// Changes of that sequence the set includes.
    pub sequence: u64,
}

impl HotSetVersion {
    /// Parses `<epoch>.<sequence>`.
    pub fn parse(text: &str) -> Option<Self> {
        let (epoch, sequence) = text.split_once('.')?;
        Some(Self { epoch: epoch.parse().ok()?, sequence: sequence.parse().ok()? })
    }
}

impl std::fmt::Display for HotSetVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.sequence)
    }
}

/// One hot entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HotEntry {
    /// The cached answer, with the question it answers when known.
    pub entry: CachedCompletion,
    /// The question's small embedding, int8 in hex ([`crate::small_embedding`]), present when the
    /// entry has a question and the node has the table named by [`HotSet::table`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<String>,
}

impl HotEntry {
    /// The embedding as int8 values; `None` when absent or not hex.
    pub fn embedding_i8(&self) -> Option<Vec<i8>> {
        let bytes = crate::hex::decode(self.embedding.as_deref()?)?;
        Some(bytes.into_iter().map(|b| b as i8).collect())
    }
}

/// A hot-set response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HotSet {
    /// The version this response brings the set to; pass it as `since` next time.
    pub version: String,
    /// True when `entries` is the whole set (replace what is held), false for a delta.
    pub snapshot: bool,
    /// The id of the small-embedding table the embeddings come from, if any; an edge with another
    /// table embeds the questions itself.
    #[serde(default)]
    pub table: Option<String>,
    /// Entries new or changed (the whole set in a snapshot), oldest change first.
    pub entries: Vec<HotEntry>,
    /// Keys no longer in the set (invalidated, expired or evicted); empty in a snapshot.
    #[serde(default)]
    pub removed: Vec<String>,
}

/// Hits the edge served from its own caches, which the regional tier never saw
/// (`POST /v1/hotset/hits`): they count toward hotness there, so what is hot at an edge reaches the
/// hot set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeHits {
    /// What was served, and how often since the last report.
    pub hits: Vec<EdgeHit>,
}

/// One key's hits at the edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeHit {
    /// The cache key served.
    pub key: String,
    /// The tenant it belongs to.
    pub tenant: String,
    /// How often it was served.
    pub hits: u32,
}

/// Encodes int8 values as the hex of [`HotEntry::embedding`].
pub fn encode_embedding(values: &[i8]) -> String {
    let bytes: Vec<u8> = values.iter().map(|&v| v as u8).collect();
    crate::hex::encode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_and_bad_ones_are_none() {
        let v = HotSetVersion { epoch: 17, sequence: 42 };
        assert_eq!(HotSetVersion::parse(&v.to_string()), Some(v));
        for bad in ["", "17", "17.", ".4", "a.b", "1.2.3", "-1.2"] {
            assert_eq!(HotSetVersion::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn embeddings_round_trip_through_hex() {
        let values = [0i8, 1, -1, 127, -128];
        let entry = HotEntry {
            entry: serde_json::from_value(serde_json::json!({
                "key": "v1:k", "tenant": "t", "model": "m", "model_version": 1, "content": "c",
                "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1, "etag": "\"e\"",
                "created_ms": 1, "ttl_s": 0
            }))
            .expect("entry"),
            embedding: Some(encode_embedding(&values)),
        };
        assert_eq!(entry.embedding_i8().as_deref(), Some(&values[..]));
        assert_eq!(HotEntry { embedding: Some("zz".into()), ..entry }.embedding_i8(), None);
    }
}
