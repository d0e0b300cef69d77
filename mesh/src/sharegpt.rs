//! The ShareGPT V3 conversations (`shared/design/MODELS.md`), parsed from the file's bytes. The file is
//! truncated mid-record, so it is read as a stream of array elements that stops at the first element
//! that does not parse. Reading the file is the caller's (this crate does no I/O).

use std::collections::HashSet;

use serde::Deserialize;

/// One conversation (only the fields read here).
#[derive(Debug, Deserialize)]
pub struct Conversation {
    /// Its turns, alternating `human` and `gpt`.
    pub conversations: Vec<Turn>,
}

/// One turn of a conversation.
#[derive(Debug, Deserialize)]
pub struct Turn {
    /// `human`, `gpt` or `system`.
    pub from: String,
    /// The text.
    pub value: String,
}

/// Which first turns to keep.
#[derive(Clone, Copy, Debug)]
pub struct FirstTurns {
    /// Stop after this many.
    pub count: usize,
    /// Shortest kept turn, in characters.
    pub min_chars: usize,
    /// Longest kept turn, in characters (a bound on prefill work per request).
    pub max_chars: usize,
}

impl FirstTurns {
    /// The distinct first human turns of the file's `bytes` in file order, within the length bounds,
    /// until `count` are found or the readable records end.
    pub fn select(&self, bytes: &[u8]) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut turns = Vec::new();
        for conversation in conversations(bytes) {
            if turns.len() >= self.count {
                break;
            }
            let Some(first) = conversation.conversations.into_iter().next() else { continue };
            let chars = first.value.chars().count();
            if first.from == "human"
                && (self.min_chars..=self.max_chars).contains(&chars)
                && seen.insert(first.value.clone())
            {
                turns.push(first.value);
            }
        }
        turns
    }
}

/// The conversations of the file's `bytes` (a JSON array), up to the first one that does not parse.
pub fn conversations(bytes: &[u8]) -> impl Iterator<Item = Conversation> + '_ {
    let mut pos = bytes.iter().position(|b| *b == b'[').map_or(bytes.len(), |p| p + 1);
    std::iter::from_fn(move || {
        while pos < bytes.len() && (bytes[pos].is_ascii_whitespace() || bytes[pos] == b',') {
            pos += 1;
        }
        let mut stream = serde_json::Deserializer::from_slice(bytes.get(pos..)?).into_iter::<Conversation>();
        let conversation = stream.next()?.ok()?;
        pos += stream.byte_offset();
        Some(conversation)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUNCATED: &str = r#"[
      {"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"}]},
      {"id": "b", "conversations": [{"from": "gpt", "value": "not a human first turn"}]},
      {"id": "c", "conversations": [{"from": "human", "value": "hello there"}]},
      {"id": "d", "conversations": [{"from": "human", "value": "x"}]},
      {"id": "e", "conversations": []},
      {"id": "f", "conversations": [{"from": "human", "value": "explain quantum computing"}]},
      {"id": "g", "conversations": [{"from": "human", "value": "cut off mid-reco"#;

    #[test]
    fn reads_distinct_first_turns_up_to_the_truncation() {
        let all = FirstTurns { count: 100, min_chars: 2, max_chars: 100 };
        assert_eq!(all.select(TRUNCATED.as_bytes()), ["hello there", "explain quantum computing"]);
        let one = FirstTurns { count: 1, ..all };
        assert_eq!(one.select(TRUNCATED.as_bytes()), ["hello there"]);
        let short = FirstTurns { max_chars: 11, ..all };
        assert_eq!(short.select(TRUNCATED.as_bytes()), ["hello there"]);
        assert!(all.select(b"not json").is_empty());
        assert_eq!(conversations(TRUNCATED.as_bytes()).count(), 6);
    }
}
