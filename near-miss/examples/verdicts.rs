//! Records the verifier's verdict on every labelled pair, both ways round, and the p50 time of one
//! verification: a baseline that a structural change to the verifier must reproduce pair by pair.
//!
//! `cargo run -p near-miss --release --example verdicts > verdicts.txt` prints one line per pair
//! (`file:line`, then `ok` or `err` for `verify(a, b)` and for `verify(b, a)`), and the timing on
//! stderr. With `--reasons`, each line also carries the two refusals' reasons.

use std::time::Instant;

use near_miss::verify;

/// The labelled development sets, relative to the crate (the frozen test set is left out on purpose).
const SETS: [&str; 5] = [
    "semantic_pairs.jsonl",
    "pairs_written_a.jsonl",
    "pairs_written_b.jsonl",
    "pairs_written_c.jsonl",
    "pairs_written_d.jsonl",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data");
    let mut pairs = Vec::new();
    for set in SETS {
        let text = std::fs::read_to_string(format!("{dir}/{set}"))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let pair: serde_json::Value = serde_json::from_str(line)?;
            let field = |key: &str| pair[key].as_str().unwrap_or_default().to_string();
            pairs.push((format!("{set}:{}", i + 1), field("a"), field("b")));
        }
    }
    let reasons = std::env::args().any(|arg| arg == "--reasons");
    let verdict = |verdict: Result<(), near_miss::NearMiss>| match verdict {
        Ok(()) => "ok".to_string(),
        Err(why) if reasons => format!("err\t{why}"),
        Err(_) => "err".to_string(),
    };
    for (at, a, b) in &pairs {
        println!("{at}\t{}\t{}", verdict(verify(a, b)), verdict(verify(b, a)));
    }
    let rounds = std::env::args().filter_map(|n| n.parse().ok()).next().unwrap_or(5);
    let mut times = Vec::with_capacity(pairs.len() * 2 * rounds);
    for _ in 0..rounds {
        for (_, a, b) in &pairs {
            for (x, y) in [(a, b), (b, a)] {
                let start = Instant::now();
                let verdict = verify(x, y);
                times.push(start.elapsed().as_nanos());
                std::hint::black_box(verdict).ok();
            }
        }
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    eprintln!(
        "{} pairs, {} timed verifications: p50 {:.1} us, p90 {:.1} us, p99 {:.1} us",
        pairs.len(),
        times.len(),
        at(0.5),
        at(0.9),
        at(0.99)
    );
    Ok(())
}
