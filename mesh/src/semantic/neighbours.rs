//! How the verifier judges the nearest neighbours of real questions: for each question of a traffic
//! sample, its nearest other questions by the small embedding, as a semantic lookup would find them
//! among cached questions, and whether the verifier would serve one of their answers.
//!
//! Nearest neighbours in real traffic are mostly other questions, so an accepted neighbour is either a
//! real paraphrase or a wrong hit that no labelled set foresaw. Listing the accepted ones by similarity
//! lets a person label them, and shows what a lower similarity gate would let through.

use std::collections::HashSet;

use crate::sharegpt::FirstTurns;
use near_miss::verify;
use shared::normalize::normalize_text;
use shared::small_embedding::SmallEmbedder;

/// The most words of a question the semantic tier takes by default (`--semantic-max-words`).
const MAX_WORDS: usize = 48;
/// The most bytes of a question the semantic tier takes.
const MAX_BYTES: usize = 1000;

/// The distinct first turns of a ShareGPT file's `bytes` (after the exact tier's whitespace rules)
/// that the semantic tier would take.
pub fn semantic_questions(bytes: &[u8]) -> Vec<String> {
    let all = FirstTurns { count: usize::MAX, min_chars: 1, max_chars: MAX_BYTES };
    let mut seen = HashSet::new();
    all.select(bytes)
        .into_iter()
        .map(|turn| normalize_text(&turn))
        .filter(|q| q.len() <= MAX_BYTES && (1..=MAX_WORDS).contains(&q.split_whitespace().count()))
        .filter(|q| seen.insert(q.clone()))
        .collect()
}

/// One question and its nearest neighbour.
#[derive(Clone, Debug)]
pub struct Neighbour {
    /// The question asked.
    pub asked: String,
    /// The nearest other question (the cached one).
    pub cached: String,
    /// Their small-embedding cosine similarity.
    pub similarity: f32,
    /// Whether the verifier accepts serving `cached`'s answer to `asked`.
    pub accepted: bool,
}

/// What a lookup of each question among all the others finds by the small embedding: its `candidates`
/// nearest other questions, the first the verifier accepts (as [`regional_node::semantic::cache`] serves it),
/// else the nearest one, refused. Questions it cannot embed are skipped.
pub fn nearest_neighbours(small: &SmallEmbedder, questions: &[String], candidates: usize) -> Vec<Neighbour> {
    let embedded: Vec<(&String, Vec<f32>)> =
        questions.iter().filter_map(|q| Some((q, small.embed(q)?))).collect();
    let mut found = Vec::with_capacity(embedded.len());
    for (i, (asked, vector)) in embedded.iter().enumerate() {
        let mut nearest: Vec<(usize, f32)> = embedded
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(j, (_, other))| (j, dot(vector, other)))
            .collect();
        let keep = candidates.max(1).min(nearest.len());
        if keep == 0 {
            continue;
        }
        nearest.select_nth_unstable_by(keep - 1, |a, b| b.1.total_cmp(&a.1));
        nearest.truncate(keep);
        nearest.sort_by(|a, b| b.1.total_cmp(&a.1));
        let neighbour = |&(j, similarity): &(usize, f32), accepted| Neighbour {
            asked: (*asked).clone(),
            cached: embedded[j].0.clone(),
            similarity,
            accepted,
        };
        let served = nearest.iter().find(|(j, _)| verify(embedded[*j].0, asked).is_ok());
        found.push(match served {
            Some(candidate) => neighbour(candidate, true),
            None => neighbour(&nearest[0], false),
        });
    }
    found
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Counts per similarity band `[floor, floor + step)`: (floor, neighbours, accepted).
pub fn by_band(neighbours: &[Neighbour], floors: &[f32]) -> Vec<(f32, usize, usize)> {
    floors
        .iter()
        .enumerate()
        .map(|(k, &floor)| {
            let ceiling = floors.get(k + 1).copied().unwrap_or(f32::INFINITY);
            let band: Vec<_> =
                neighbours.iter().filter(|n| n.similarity >= floor && n.similarity < ceiling).collect();
            (floor, band.len(), band.iter().filter(|n| n.accepted).count())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_distinct_short_first_turns_and_bands_count_verdicts() {
        let long = vec!["word"; MAX_WORDS + 1].join(" ");
        let file = format!(
            r#"[{{"conversations": [{{"from": "human", "value": "what is rust?  "}}]}},
               {{"conversations": [{{"from": "human", "value": "what is rust?"}}]}},
               {{"conversations": [{{"from": "human", "value": "{long}"}}]}},
               {{"conversations": [{{"from": "gpt", "value": "not asked"}}]}}]"#
        );
        assert_eq!(semantic_questions(file.as_bytes()), ["what is rust?"]);

        let n =
            |similarity, accepted| Neighbour { asked: "a".into(), cached: "b".into(), similarity, accepted };
        let found = [n(0.55, false), n(0.91, true), n(0.93, false), n(0.99, true)];
        assert_eq!(by_band(&found, &[0.5, 0.9, 0.95]), [(0.5, 1, 0), (0.9, 2, 1), (0.95, 1, 1)]);
    }

    #[test]
    fn a_lookup_serves_the_first_candidate_the_verifier_accepts() {
        // `server` embeds next to `laptop` and `files` far from `file`: the nearest question to the
        // first is a near miss, the paraphrase comes second.
        let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncopy\nfile\nfiles\nlaptop\nserver\n";
        let rows: [[f32; 4]; 9] = [
            [0.0; 4],
            [0.0; 4],
            [0.0; 4],
            [0.0; 4],
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.9, 0.1],
        ];
        let table = SmallEmbedder::build(4, vocab, [3; 32], rows.as_flattened()).expect("build");
        let small = SmallEmbedder::from_bytes(&table).expect("load");
        let questions: Vec<String> =
            ["copy file laptop", "copy file server", "copy files laptop"].map(String::from).into();

        let nearest_only = nearest_neighbours(&small, &questions, 1);
        assert_eq!((nearest_only[0].cached.as_str(), nearest_only[0].accepted), ("copy file server", false));

        let found = nearest_neighbours(&small, &questions, 4);
        assert_eq!((found[0].cached.as_str(), found[0].accepted), ("copy files laptop", true));
        assert!(found[0].similarity < nearest_only[0].similarity, "{found:?}");
    }
}
