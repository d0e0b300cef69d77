//! The ShareGPT V3 conversations (`shared/design/MODELS.md`): the first human turns, as single-shot
//! prompts. The file is truncated mid-record, so it is read as a stream of array elements that stops at the
//! first element that does not parse.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;

/// One conversation (only the fields the benchmark reads).
#[derive(Deserialize)]
struct Conversation {
    /// Its turns, alternating `human` and `gpt`.
    conversations: Vec<Turn>,
}

/// One turn of a conversation.
#[derive(Deserialize)]
struct Turn {
    /// `human`, `gpt` or `system`.
    from: String,
    /// The text.
    value: String,
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
    /// Reads the distinct first human turns of the file at `path` in file order, keeping those within
    /// the length bounds, until `count` are found or the readable records end.
    pub fn read(&self, path: &Path) -> anyhow::Result<Vec<String>> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading {} (install it: .ci/setup.sh models)", path.display()))?;
        let turns = self.select(&bytes);
        anyhow::ensure!(!turns.is_empty(), "no usable first turn in {}", path.display());
        Ok(turns)
    }

    /// [`FirstTurns::read`] on the file's bytes.
    fn select(&self, bytes: &[u8]) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut turns = Vec::new();
        for conversation in elements(bytes) {
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

/// The human turns (at most `turns`) of the first `count` conversations in file order whose first turn
/// is human and every kept turn within `chars` characters; duplicates are kept (the dataset's own mix).
pub fn conversations(
    path: &Path,
    count: usize,
    turns: usize,
    chars: std::ops::RangeInclusive<usize>,
) -> anyhow::Result<Vec<Vec<String>>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("reading {} (install it: .ci/setup.sh models)", path.display()))?;
    let kept: Vec<Vec<String>> = elements(&bytes)
        .filter(|c| c.conversations.first().is_some_and(|t| t.from == "human"))
        .map(|c| {
            let human = c.conversations.into_iter().filter(|t| t.from == "human").map(|t| t.value);
            human.take(turns).take_while(|t| chars.contains(&t.chars().count())).collect::<Vec<_>>()
        })
        .filter(|turns| !turns.is_empty())
        .take(count)
        .collect();
    anyhow::ensure!(!kept.is_empty(), "no usable conversation in {}", path.display());
    Ok(kept)
}

/// The elements of a JSON array of conversations, up to the first one that does not parse.
fn elements(bytes: &[u8]) -> impl Iterator<Item = Conversation> + '_ {
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
    }

    #[test]
    fn reads_the_real_file_when_installed() {
        let path = crate::paths::sharegpt_json();
        if !path.exists() {
            return;
        }
        let turns = FirstTurns { count: 50, min_chars: 16, max_chars: 1000 }.read(&path).expect("read");
        assert_eq!(turns.len(), 50);
        assert!(turns.iter().all(|t| t.chars().count() >= 16));
    }
}
