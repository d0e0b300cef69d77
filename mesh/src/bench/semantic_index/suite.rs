//! The suite: ShareGPT's human turns and, past those, their sentences (distinct, in file order) embedded with the edge's small embedding
//! (the space a regional node started with `--edge-table` matches in), the first N indexed, the next
//! `--queries` held out as lookups (the same held-out questions at every N). For each N: an index built
//! with the tier's own [`cosine_index`], searched for the nearest question, and a flat scan over the
//! same vectors (exact), each lookup timed alone; recall@1 is the share of lookups whose nearest
//! question the index finds (a tie in similarity counts as found).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use regional_node::semantic::embedding::cosine;
use regional_node::semantic::index::{cosine_index, partition_bytes, question_bytes};
use shared::small_embedding::SmallEmbedder;

use crate::bench::common::report::{Better, Machine, Report, Row};
use crate::bench::common::sharegpt;

/// What `mesh bench semantic-index` runs.
#[derive(Clone, Debug, clap::Args)]
pub struct SemanticIndexBenchOptions {
    /// Questions in the partition at each step, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000, 100_000])]
    pub sizes: Vec<usize>,
    /// Held-out questions looked up at each step.
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    /// Also look up with these search expansions (usearch's `expansion_search`, candidates kept while
    /// searching), comma-separated, beside the tier's own; a row set for each.
    #[arg(long, value_delimiter = ',')]
    pub expansion_search: Vec<usize>,
    /// Partitions of the across-partitions step (each its own index, as each prompt prefix and tenant
    /// gets at a regional node).
    #[arg(long, default_value_t = 1_000)]
    pub partitions: usize,
    /// Questions in each partition of that step.
    #[arg(long, default_value_t = 10)]
    pub per_partition: usize,
    /// The edge's small-embedding table (`make build` writes it).
    #[arg(long, default_value_os_t = mesh_harness::paths::edge_table())]
    pub edge_table: PathBuf,
    /// The ShareGPT file (`.ci/setup.sh models`).
    #[arg(long, default_value_os_t = mesh_harness::paths::sharegpt_json())]
    pub sharegpt: PathBuf,
    /// Set (by a signal handler) to end the run early.
    #[arg(skip = crate::stop::flag())]
    pub stop: &'static AtomicBool,
}

/// The goal of issue 49: a lookup under 5 ms at p99 at 100,000 questions.
const LOOKUP_P99_GOAL_MS: f64 = 5.0;
/// The goal of issue 49: recall@1 of at least 0.99 against the exact scan.
const RECALL_GOAL: f64 = 0.99;

/// One step's figures.
struct Step {
    size: usize,
    /// The index's search expansion for these lookups.
    expansion: usize,
    build_s: f64,
    index_bytes: usize,
    flat_bytes: usize,
    index_ms: Vec<f64>,
    scan_ms: Vec<f64>,
    recall: f64,
}

/// Runs the suite.
pub fn run(options: &SemanticIndexBenchOptions) -> anyhow::Result<Report> {
    let largest = options.sizes.iter().copied().max().context("--sizes names no size")?;
    ensure!(options.queries > 0 && largest > 0, "--sizes and --queries must be positive");
    let table = std::fs::read(&options.edge_table)
        .with_context(|| format!("reading {} (make build writes it)", options.edge_table.display()))?;
    let embedder = SmallEmbedder::from_bytes(&table).map_err(anyhow::Error::msg)?;
    let wanted = (largest + options.queries).max(options.partitions * options.per_partition);
    eprintln!("embedding {wanted} distinct ShareGPT questions ({} dimensions)", embedder.dims());
    let vectors = distinct_questions(options, &embedder, wanted)?;
    ensure!(vectors.len() >= wanted, "only {} usable questions for {wanted}", vectors.len());
    let (indexed, held_out) = vectors.split_at(largest);
    let held_out = &held_out[..options.queries];

    let mut steps = Vec::new();
    for &size in &options.sizes {
        if options.stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        for step in measure(&indexed[..size], held_out, embedder.dims(), &options.expansion_search)? {
            eprintln!(
                "{size} questions, expansion {}: built in {:.1} s; lookup p99 {:.3} ms (scan {:.3} ms), recall@1 {:.3}, {:.0} bytes a question",
                step.expansion,
                step.build_s,
                quantile(&step.index_ms, 0.99),
                quantile(&step.scan_ms, 0.99),
                step.recall,
                step.index_bytes as f64 / size as f64,
            );
            steps.push(step);
        }
    }
    let mut rows = rows(&steps);
    if options.partitions > 0 && options.per_partition > 0 {
        rows.extend(across_partitions(options, &vectors, embedder.dims())?);
    }
    Ok(Report { suite: "semantic-index".into(), machine: Machine::current(), rows })
}

/// This process's resident memory, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

/// Many small partitions, each an index of its own grown as the tier grows one (capacity doubling from
/// 16): what a question costs in resident memory there, against what the index reports and what the
/// tier's byte bound counts for it.
fn across_partitions(
    options: &SemanticIndexBenchOptions,
    vectors: &[Vec<f32>],
    dims: usize,
) -> anyhow::Result<Vec<Row>> {
    let questions = options.partitions * options.per_partition;
    ensure!(
        vectors.len() >= questions,
        "{questions} questions wanted across partitions, {} embedded",
        vectors.len()
    );
    let before = rss_bytes();
    let mut indexes = Vec::with_capacity(options.partitions);
    let mut reported = 0usize;
    for chunk in vectors[..questions].chunks(options.per_partition) {
        let index = cosine_index(dims).map_err(|e| anyhow::anyhow!("{e}"))?;
        for (label, vector) in chunk.iter().enumerate() {
            if index.size() >= index.capacity() {
                index.reserve((index.capacity() * 2).max(16)).map_err(usearch_error)?;
            }
            index.add(label as u64, vector).map_err(usearch_error)?;
        }
        reported += index.memory_usage();
        indexes.push(index);
    }
    let resident = rss_bytes().saturating_sub(before);
    // One index a partition here (the small embedding's), as the byte bound counts it.
    let counted =
        question_bytes("", "", false, Some(dims)) + partition_bytes(None) / options.per_partition as u64;
    eprintln!(
        "{} partitions of {} questions: {:.0} resident bytes a question ({:.0} reported by the indexes; the byte bound counts {counted} besides the text, its partition's share included)",
        options.partitions,
        options.per_partition,
        resident as f64 / questions as f64,
        reported as f64 / questions as f64,
    );
    drop(indexes);
    Ok(vec![Row {
        metric: format!("resident_bytes_per_question_{}x{}", options.partitions, options.per_partition),
        unit: "bytes".into(),
        better: Better::Lower,
        ours: resident as f64 / questions as f64,
        peer: "the tier's byte bound".into(),
        peer_value: counted as f64,
        goal_ratio: Some(1.0),
        limit: None,
    }])
}

/// The small embeddings of distinct texts from the file's human turns, in file order: whole turns (8 to
/// 2,000 characters) first, then, when those are too few (the file the models step installs is a
/// truncated part of ShareGPT, about 30,000 distinct turns), the turns' lines and sentences of 16 to 500
/// characters.
fn distinct_questions(
    options: &SemanticIndexBenchOptions,
    embedder: &SmallEmbedder,
    wanted: usize,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let conversations = sharegpt::conversations(&options.sharegpt, usize::MAX, 64, 1..=1_000_000)?;
    let turns: Vec<&String> = conversations.iter().flatten().collect();
    let whole = turns.iter().map(|t| t.as_str()).filter(|t| (8..=2_000).contains(&t.chars().count()));
    let pieces = turns
        .iter()
        .flat_map(|t| t.split(['\n', '.', '?', '!']))
        .map(str::trim)
        .filter(|p| (16..=500).contains(&p.chars().count()));
    let mut seen = std::collections::HashSet::new();
    let mut vectors = Vec::with_capacity(wanted);
    for text in whole.chain(pieces) {
        if vectors.len() == wanted {
            break;
        }
        if seen.insert(text) {
            if let Some(vector) = embedder.embed(text) {
                vectors.push(vector);
            }
        }
    }
    Ok(vectors)
}

/// Builds the index over `indexed` and looks every query up, with the tier's own search expansion and
/// then with each of `expansions`: a step for each.
fn measure(
    indexed: &[Vec<f32>],
    queries: &[Vec<f32>],
    dims: usize,
    expansions: &[usize],
) -> anyhow::Result<Vec<Step>> {
    let started = Instant::now();
    let index = cosine_index(dims).map_err(|e| anyhow::anyhow!("{e}"))?;
    index.reserve(indexed.len()).map_err(usearch_error)?;
    for (label, vector) in indexed.iter().enumerate() {
        index.add(label as u64, vector).map_err(usearch_error)?;
    }
    let build_s = started.elapsed().as_secs_f64();
    let mut scan_ms = Vec::with_capacity(queries.len());
    let mut exact = Vec::with_capacity(queries.len());
    for query in queries {
        let started = Instant::now();
        exact.push(nearest(indexed, query));
        scan_ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let mut steps = Vec::new();
    for expansion in std::iter::once(index.expansion_search()).chain(expansions.iter().copied()) {
        index.change_expansion_search(expansion);
        let mut index_ms = Vec::with_capacity(queries.len());
        let mut found = 0usize;
        for (query, (best, best_similarity)) in queries.iter().zip(&exact) {
            let started = Instant::now();
            let matches = index.search(query, 1).map_err(usearch_error)?;
            index_ms.push(started.elapsed().as_secs_f64() * 1e3);
            let hit = matches.keys.first().is_some_and(|&label| {
                label as usize == *best
                    || (cosine(&indexed[label as usize], query) - best_similarity).abs() < 1e-6
            });
            found += usize::from(hit);
        }
        steps.push(Step {
            size: indexed.len(),
            expansion,
            build_s,
            index_bytes: index.memory_usage(),
            flat_bytes: indexed.len() * dims * std::mem::size_of::<f32>(),
            index_ms,
            scan_ms: scan_ms.clone(),
            recall: found as f64 / queries.len() as f64,
        });
    }
    Ok(steps)
}

fn usearch_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("usearch: {error}")
}

/// The `q` quantile (0 to 1) of `values`, nearest rank.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or(0.0)
}

/// The exact nearest of `query` among `indexed`: its position and similarity.
fn nearest(indexed: &[Vec<f32>], query: &[f32]) -> (usize, f32) {
    indexed.iter().enumerate().map(|(i, v)| (i, cosine(v, query))).fold((0, f32::MIN), |best, next| {
        if next.1 > best.1 {
            next
        } else {
            best
        }
    })
}

/// A row against the exact scan.
fn against_scan(metric: String, unit: &str, better: Better, ours: f64, scan: f64) -> Row {
    Row {
        metric,
        unit: unit.into(),
        better,
        ours,
        peer: "exact scan".into(),
        peer_value: scan,
        goal_ratio: None,
        limit: None,
    }
}

fn rows(steps: &[Step]) -> Vec<Row> {
    let mut rows = Vec::new();
    for step in steps {
        let at_goal_size = step.size >= 100_000;
        let n = format!("{}_ef{}", step.size, step.expansion);
        let (index, scan) = (&step.index_ms, &step.scan_ms);
        let p99 = against_scan(
            format!("lookup_p99_ms_{n}"),
            "ms",
            Better::Lower,
            quantile(index, 0.99),
            quantile(scan, 0.99),
        );
        rows.push(Row { limit: at_goal_size.then_some(LOOKUP_P99_GOAL_MS), ..p99 });
        rows.push(against_scan(
            format!("lookup_p50_ms_{n}"),
            "ms",
            Better::Lower,
            quantile(index, 0.5),
            quantile(scan, 0.5),
        ));
        let recall = against_scan(format!("recall_at_1_{n}"), "share", Better::Higher, step.recall, 1.0);
        rows.push(Row { goal_ratio: Some(RECALL_GOAL), ..recall });
        let per_question = |bytes: usize| bytes as f64 / step.size as f64;
        rows.push(against_scan(
            format!("bytes_per_question_{n}"),
            "bytes",
            Better::Lower,
            per_question(step.index_bytes),
            per_question(step.flat_bytes),
        ));
        rows.push(against_scan(format!("build_s_{n}"), "s", Better::Lower, step.build_s, 0.0));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_scan_finds_the_nearest_and_the_index_agrees_on_a_small_set() {
        let indexed: Vec<Vec<f32>> =
            (0..200).map(|i| (0..8).map(|d| ((i * 7 + d * 13) % 17) as f32 - 8.0).collect()).collect();
        let queries: Vec<Vec<f32>> = indexed.iter().take(20).cloned().collect();
        assert_eq!(nearest(&indexed, &queries[3]).0, 3, "a stored vector is its own nearest");
        let steps = measure(&indexed, &queries, 8, &[128]).expect("measure");
        assert_eq!(steps.len(), 2, "the tier's expansion and one more");
        let step = &steps[1];
        assert_eq!(step.expansion, 128);
        assert_eq!(step.index_ms.len(), 20);
        assert!(step.recall >= 0.95, "an HNSW index over 200 vectors finds stored ones: {}", step.recall);
        assert!(step.index_bytes > 0 && step.flat_bytes == 200 * 8 * 4);
    }
}
