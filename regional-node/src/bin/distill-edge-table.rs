//! `distill-edge-table MODEL_DIR [DIMS,...]` (work in progress): distils per-token vectors from
//! all-MiniLM-L6-v2 and prints how the small embedding's hit decisions agree with the full model's on
//! the labelled pairs, for each reduced dimension.

use std::path::PathBuf;

use regional_node::edge_table::{
    evaluate, principal_components, project, similarity, small_embedding, token_vectors,
};
use regional_node::embedding::{SentenceEmbedder, EMBEDDING_DIM};
use shared::wordpiece::WordPiece;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next().ok_or_else(|| anyhow::anyhow!("usage: distill-edge-table MODEL_DIR [DIMS,...]"))?,
    );
    let dims: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "32,64,96,128".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let embedder = SentenceEmbedder::load(&dir)?;
    let wordpiece = WordPiece::from_vocab(&std::fs::read_to_string(dir.join("vocab.txt"))?)
        .map_err(anyhow::Error::msg)?;
    let cls = wordpiece.encode_with_specials("")[0];
    let sep = wordpiece.encode_with_specials("")[1];
    let started = std::time::Instant::now();
    let vectors = token_vectors(&embedder, wordpiece.len(), cls, sep)?;
    eprintln!("token vectors: {} in {:.1}s", wordpiece.len(), started.elapsed().as_secs_f64());
    let pairs_text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/semantic_pairs.jsonl"),
    )?;
    let pairs: Vec<(String, String, bool)> = pairs_text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|p| {
            (
                p["a"].as_str().unwrap_or_default().to_owned(),
                p["b"].as_str().unwrap_or_default().to_owned(),
                p["label"] == "hit",
            )
        })
        .collect();
    let mut full = Vec::new();
    for (a, b, _) in &pairs {
        let e = embedder.embed(&[a, b])?;
        full.push(similarity(&e[0], &e[1]));
    }
    let thresholds = [0.85, 0.90, 0.92, 0.94, 0.96];
    for &k in &dims {
        let (mean, components) = principal_components(&vectors, EMBEDDING_DIM, k);
        let mut table = project(&vectors, &mean, &components, EMBEDDING_DIM);
        // Zipf weighting (model2vec's): a token's weight grows with the log of its rank in the
        // vocabulary, which BERT's vocab.txt lists roughly by frequency after the special tokens.
        if std::env::var_os("NO_ZIPF").is_none() {
            for (id, row) in table.chunks_mut(k).enumerate() {
                let weight = ((1 + id) as f32).ln();
                row.iter_mut().for_each(|x| *x *= weight);
            }
        }
        let scored: Vec<(f32, f32, bool)> = pairs
            .iter()
            .zip(&full)
            .map(|((a, b, hit), &f)| {
                let sa = small_embedding(&table, k, &wordpiece.encode(a));
                let sb = small_embedding(&table, k, &wordpiece.encode(b));
                (f, similarity(&sa, &sb), *hit)
            })
            .collect();
        for agreement in evaluate(&scored, &thresholds) {
            println!(
                "dims {k:>3} threshold {:.2}: agree {}/{} ({:.3}), precision {:.3}, recall {:.3}",
                agreement.threshold,
                agreement.agree,
                agreement.pairs,
                agreement.agree as f64 / agreement.pairs as f64,
                agreement.precision,
                agreement.recall
            );
        }
    }
    Ok(())
}
