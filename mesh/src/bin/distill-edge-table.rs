//! `distill-edge-table MODEL_DIR OUT [--dims N] [--evaluate]`: builds the edge's small-embedding table
//! (`shared::small_embedding`) from the all-MiniLM-L6-v2 files in `MODEL_DIR` and writes it to `OUT`,
//! recording the SHA-256 of the model files. Does nothing when `OUT` already holds a table of the same
//! model and dimension. With `--evaluate` it then prints how often the table's hit decisions agree with
//! the full model's on the labelled pairs (`near-miss/data/semantic_pairs.jsonl`), with their precision
//! and recall.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use mesh_tool::semantic::edge_table::{evaluate, principal_components, project, token_vectors, zipf_weight};
use near_miss::verify;
use regional_node::semantic::embedding::{cosine, SentenceEmbedder, EMBEDDING_DIM};
use sha2::{Digest as _, Sha256};
use shared::small_embedding::{cosine_i8, SmallEmbedder};
use shared::wordpiece::WordPiece;

const USAGE: &str = "usage: distill-edge-table MODEL_DIR OUT [--dims N] [--evaluate]";
/// The dimension when `--dims` is not given: 64 agreed with the full model as often as 128 on the
/// labelled pairs and keeps the table near 2 MB (the worker bundle's limit is 3 MiB gzipped).
const DEFAULT_DIMS: usize = 64;

fn main() -> anyhow::Result<()> {
    let mut positional = Vec::new();
    let (mut dims, mut run_evaluation) = (DEFAULT_DIMS, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dims" => dims = args.next().context(USAGE)?.parse().context("--dims must be a number")?,
            "--evaluate" => run_evaluation = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [dir, out] = positional.as_slice() else { bail!(USAGE) };
    let vocab = std::fs::read_to_string(dir.join("vocab.txt")).context("reading vocab.txt")?;
    let source = source_hash(dir, &vocab)?;
    let current = std::fs::read(out).ok().and_then(|bytes| SmallEmbedder::from_bytes(&bytes).ok());
    let table = match current.filter(|t| t.source() == source && t.dims() == dims) {
        Some(table) => {
            println!("edge table {} is up to date ({} dims, id {})", out.display(), dims, table.id());
            table
        }
        None => build(dir, out, &vocab, source, dims)?,
    };
    if run_evaluation {
        print_agreement(dir, &table)?;
    }
    Ok(())
}

/// SHA-256 over the weights and the vocabulary the table is distilled from.
fn source_hash(dir: &Path, vocab: &str) -> anyhow::Result<[u8; 32]> {
    let weights = std::fs::read(dir.join("model.safetensors")).context("reading model.safetensors")?;
    let mut hasher = Sha256::new();
    hasher.update(Sha256::digest(&weights));
    hasher.update(Sha256::digest(vocab.as_bytes()));
    Ok(hasher.finalize().into())
}

fn build(
    dir: &Path,
    out: &Path,
    vocab: &str,
    source: [u8; 32],
    dims: usize,
) -> anyhow::Result<SmallEmbedder> {
    let started = std::time::Instant::now();
    let embedder = SentenceEmbedder::load(dir)?;
    let wordpiece = WordPiece::from_vocab(vocab).map_err(anyhow::Error::msg)?;
    let specials = wordpiece.encode_with_specials("");
    let vectors = token_vectors(&embedder, wordpiece.len(), specials[0], specials[1])?;
    let (mean, components) = principal_components(&vectors, EMBEDDING_DIM, dims);
    let mut rows = project(&vectors, &mean, &components, EMBEDDING_DIM);
    for (id, row) in rows.chunks_mut(dims).enumerate() {
        let weight = zipf_weight(id);
        row.iter_mut().for_each(|x| *x *= weight);
    }
    let bytes = SmallEmbedder::build(dims, vocab, source, &rows).map_err(anyhow::Error::msg)?;
    let table = SmallEmbedder::from_bytes(&bytes).map_err(anyhow::Error::msg)?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let partial = out.with_extension("partial");
    std::fs::write(&partial, &bytes)?;
    std::fs::rename(&partial, out)?;
    println!(
        "edge table {}: {} tokens x {} dims, {} bytes, id {}, built in {:.1} s",
        out.display(),
        wordpiece.len(),
        dims,
        bytes.len(),
        table.id(),
        started.elapsed().as_secs_f64()
    );
    Ok(table)
}

/// Prints the agreement of the table's decisions with the full model's at the semantic thresholds.
fn print_agreement(dir: &Path, table: &SmallEmbedder) -> anyhow::Result<()> {
    let embedder = SentenceEmbedder::load(dir)?;
    let pairs_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../near-miss/data/semantic_pairs.jsonl");
    let pairs = mesh_tool::semantic::eval::read_pairs(&pairs_path)?;
    let mut scored = Vec::with_capacity(pairs.len());
    let mut verified = Vec::with_capacity(pairs.len());
    for pair in &pairs {
        let full = embedder.embed(&[pair.a.as_str(), pair.b.as_str()])?;
        let small = match (table.embed_i8(&pair.a), table.embed_i8(&pair.b)) {
            (Some(a), Some(b)) => cosine_i8(&a, &b),
            _ => 0.0,
        };
        scored.push((cosine(&full[0], &full[1]), small, pair.label == "hit"));
        verified.push(verify(&pair.a, &pair.b).is_ok());
    }
    println!(
        "small embedding ({} dims, table {}) against all-MiniLM-L6-v2 on {} labelled pairs:",
        table.dims(),
        table.id(),
        pairs.len()
    );
    println!("| threshold | agreement | small precision | small recall | + verifier precision | + verifier recall |");
    // What the edge serves: above the threshold AND accepted by the near-miss verifier.
    let gated: Vec<(f32, f32, bool)> = scored
        .iter()
        .zip(&verified)
        .map(|(&(full, small, hit), &ok)| (full, if ok { small } else { -1.0 }, hit))
        .collect();
    let thresholds = [0.80, 0.85, 0.90, 0.92, 0.94, 0.96];
    for (a, v) in evaluate(&scored, &thresholds).iter().zip(evaluate(&gated, &thresholds)) {
        println!(
            "| {:.2} | {}/{} ({:.3}) | {:.3} | {:.3} | {:.3} | {:.3} |",
            a.threshold,
            a.agree,
            a.pairs,
            a.agree as f64 / a.pairs as f64,
            a.precision,
            a.recall,
            v.precision,
            v.recall
        );
    }
    Ok(())
}
