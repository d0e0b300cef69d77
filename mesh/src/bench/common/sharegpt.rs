//! Reading the ShareGPT V3 file (`shared/design/MODELS.md`) for the benchmarks: its first human turns as
//! single-shot prompts, and its conversations turn by turn. The parsing is `crate::sharegpt`.

use std::path::Path;

pub use crate::sharegpt::FirstTurns;
use crate::sharegpt::{self as parse};
use anyhow::Context as _;

/// The file's bytes, with a hint to install it when it is missing.
fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path)
        .with_context(|| format!("reading {} (install it: .ci/setup.sh models)", path.display()))
}

/// [`FirstTurns::select`] on the file at `path`; at least one turn must be found.
pub fn first_turns(turns: &FirstTurns, path: &Path) -> anyhow::Result<Vec<String>> {
    let selected = turns.select(&read(path)?);
    anyhow::ensure!(!selected.is_empty(), "no usable first turn in {}", path.display());
    Ok(selected)
}

/// The human turns (at most `turns`) of the first `count` conversations in file order whose first turn
/// is human and every kept turn within `chars` characters; duplicates are kept (the dataset's own mix).
pub fn conversations(
    path: &Path,
    count: usize,
    turns: usize,
    chars: std::ops::RangeInclusive<usize>,
) -> anyhow::Result<Vec<Vec<String>>> {
    let bytes = read(path)?;
    let kept: Vec<Vec<String>> = parse::conversations(&bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_real_file_when_installed() {
        let path = mesh_harness::paths::sharegpt_json();
        if !path.exists() {
            return;
        }
        let turns =
            first_turns(&FirstTurns { count: 50, min_chars: 16, max_chars: 1000 }, &path).expect("read");
        assert_eq!(turns.len(), 50);
        assert!(turns.iter().all(|t| t.chars().count() >= 16));
    }
}
