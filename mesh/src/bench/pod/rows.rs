//! The pod suite's figures and the rows of its report: each ours/llama.cpp, with the goal ratios the
//! issue sets (single-stream decode >= 1.0x llama.cpp, output tokens/s at 16 concurrent >= 1.5x, TTFT
//! behind a cached prefix <= 0.2x a cold one) and the memory-bandwidth ceiling of single-stream decode.

use crate::bench::common::bandwidth::Bandwidth;
use crate::bench::common::report::{Better, Row};
use crate::bench::pod::gen_phases::SideFigures;
use crate::bench::pod::gen_target::Generation;
use crate::bench::pod::llama_cpp::LlamaBench;

/// The concurrency whose output tokens/s has a goal.
pub const GOAL_CONCURRENCY: usize = 16;
/// Goal of single-stream decode, ours/llama.cpp.
pub const GOAL_DECODE: f64 = 1.0;
/// Goal of output tokens/s at [`GOAL_CONCURRENCY`], ours/llama.cpp.
pub const GOAL_THROUGHPUT: f64 = 1.5;
/// Goal of our TTFT behind a cached prefix over a cold one.
pub const GOAL_CACHED_OVER_COLD: f64 = 0.2;

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct PodFigures {
    /// How the report names llama.cpp.
    pub peer: String,
    /// Prompt tokens of the prefill test.
    pub prefill_tokens: u32,
    /// Tokens of the shared system prompt.
    pub prefix_tokens: u32,
    /// The memory copy of this run.
    pub bandwidth: Bandwidth,
    /// Weight bytes one decode step of llama.cpp reads (the GGUF's tensor bytes).
    pub peer_bytes_per_token: u64,
    /// Weight bytes one decode step of ours reads (`HealthReply.weight_bytes_per_token`; 0 if unknown).
    pub our_bytes_per_token: u64,
    /// `llama-bench`'s prefill and decode.
    pub llama_bench: LlamaBench,
    /// llama-server through every phase.
    pub peer_side: SideFigures,
    /// llama-server on the grounded task without speculation.
    pub peer_grounded: Generation,
    /// llama-server with n-gram (prompt lookup) speculation on the grounded task.
    pub peer_grounded_spec: Generation,
    /// Our pod through every phase.
    pub our_side: SideFigures,
    /// Our pod on the grounded task with speculation off.
    pub our_grounded: Generation,
    /// Our pod on the grounded task with speculation on.
    pub our_grounded_spec: Generation,
}

impl PodFigures {
    /// The single-stream ceiling of our decode: bandwidth over our weight bytes per token (llama.cpp's
    /// when the pod does not report its own).
    fn our_ceiling(&self) -> f64 {
        let bytes =
            if self.our_bytes_per_token > 0 { self.our_bytes_per_token } else { self.peer_bytes_per_token };
        self.bandwidth.ceiling_tok_s(bytes)
    }

    /// The report's rows.
    pub fn rows(&self) -> Vec<Row> {
        let bench_peer = format!("{} llama-bench", self.peer);
        let server_peer = format!("{} llama-server", self.peer);
        let ceiling = Some(self.our_ceiling());
        let (ours, peer) = (&self.our_side, &self.peer_side);
        let mut rows = vec![
            row(&format!("prefill_tok_s_p{}", self.prefill_tokens), "tok/s", Better::Higher).values(
                ours.prefill_tok_s(),
                &bench_peer,
                self.llama_bench.prefill_tok_s,
            ),
            row("decode_tok_s_single", "tok/s", Better::Higher)
                .values(ours.decode.decode_rate(), &bench_peer, self.llama_bench.decode_tok_s)
                .goal(GOAL_DECODE)
                .limit(ceiling),
            row("decode_tok_s_single_server", "tok/s", Better::Higher)
                .values(ours.decode.decode_rate(), &server_peer, peer.decode.decode_rate())
                .limit(ceiling),
            row(&format!("decode_tok_s_ctx{}", self.prefix_tokens), "tok/s", Better::Higher).values(
                ours.long_decode.decode_rate(),
                &server_peer,
                peer.long_decode.decode_rate(),
            ),
            row("weight_mb_per_token", "MB", Better::Lower).values(
                self.our_bytes_per_token as f64 / 1e6,
                &format!("{} (GGUF tensor bytes)", self.peer),
                self.peer_bytes_per_token as f64 / 1e6,
            ),
            row("decode_ceiling_tok_s", "tok/s", Better::Higher).values(
                self.bandwidth.ceiling_tok_s(self.our_bytes_per_token),
                &self.peer,
                self.bandwidth.ceiling_tok_s(self.peer_bytes_per_token),
            ),
        ];
        for (o, p) in ours.throughput.iter().zip(&peer.throughput) {
            let r = row(&format!("output_tok_s_c{}", o.clients), "tok/s", Better::Higher).values(
                o.output_tok_s,
                &server_peer,
                p.output_tok_s,
            );
            rows.push(if o.clients == GOAL_CONCURRENCY { r.goal(GOAL_THROUGHPUT) } else { r });
        }
        let prefix = self.prefix_tokens;
        rows.extend([
            row(&format!("ttft_cold_ms_prefix{prefix}"), "ms", Better::Lower).values(
                ours.ttft_cold_ms(),
                &server_peer,
                peer.ttft_cold_ms(),
            ),
            row(&format!("ttft_cached_ms_prefix{prefix}"), "ms", Better::Lower).values(
                ours.ttft_cached_ms(),
                &server_peer,
                peer.ttft_cached_ms(),
            ),
            // Ours against ours: the ratio is cached/cold, which is what the goal bounds.
            row("ttft_cached_over_cold", "ms", Better::Lower)
                .values(ours.ttft_cached_ms(), "ours, cold prefix", ours.ttft_cold_ms())
                .goal(GOAL_CACHED_OVER_COLD),
            row("spec_decode_tok_s_grounded", "tok/s", Better::Higher).values(
                self.our_grounded_spec.decode_rate(),
                &format!("{server_peer} ngram-simple"),
                self.peer_grounded_spec.decode_rate(),
            ),
            row("spec_speedup_grounded", "x", Better::Higher).values(
                speedup(&self.our_grounded_spec, &self.our_grounded),
                &format!("{server_peer} ngram-simple on/off"),
                speedup(&self.peer_grounded_spec, &self.peer_grounded),
            ),
            row("spec_acceptance_grounded", "fraction", Better::Higher).values(
                self.our_grounded_spec.acceptance(),
                &format!("{server_peer} ngram-simple"),
                self.peer_grounded_spec.acceptance(),
            ),
        ]);
        rows
    }
}

/// Decode rate with speculation over without (0 when unknown).
fn speedup(on: &Generation, off: &Generation) -> f64 {
    let off = off.decode_rate();
    if off > 0.0 {
        on.decode_rate() / off
    } else {
        0.0
    }
}

/// A row with no figures yet.
fn row(metric: &str, unit: &str, better: Better) -> Row {
    Row {
        metric: metric.into(),
        unit: unit.into(),
        better,
        ours: 0.0,
        peer: String::new(),
        peer_value: 0.0,
        goal_ratio: None,
        limit: None,
    }
}

/// Builder steps on [`Row`] that keep [`PodFigures::rows`] readable.
trait RowExt {
    fn values(self, ours: f64, peer: &str, peer_value: f64) -> Self;
    fn goal(self, ratio: f64) -> Self;
    fn limit(self, limit: Option<f64>) -> Self;
}

impl RowExt for Row {
    fn values(self, ours: f64, peer: &str, peer_value: f64) -> Self {
        Row { ours, peer: peer.into(), peer_value, ..self }
    }

    fn goal(self, ratio: f64) -> Self {
        Row { goal_ratio: Some(ratio), ..self }
    }

    fn limit(self, limit: Option<f64>) -> Self {
        Row { limit: limit.filter(|l| *l > 0.0), ..self }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::common::throughput::Throughput;

    fn generation(decode_tok_s: f64, latency_ms: u64, drafts: (u32, u32)) -> Generation {
        let mut g = Generation::begin();
        g.finished = g.started + Duration::from_millis(latency_ms);
        g.decode_tok_s = Some(decode_tok_s);
        g.prompt_tokens = 512;
        g.prefill = Duration::from_secs(2);
        (g.draft_tokens, g.accepted_draft_tokens) = drafts;
        g
    }

    fn side(decode: f64, cold_ms: u64, cached_ms: u64, tok_s: &[(usize, f64)]) -> SideFigures {
        let throughput = tok_s
            .iter()
            .map(|&(clients, output_tok_s)| Throughput {
                clients,
                sent: 1,
                output_tok_s,
                completed: 1,
                cut: 0,
                errors: 0,
                first_error: None,
                ttft_p50: Duration::ZERO,
                ttft_p99: Duration::ZERO,
            })
            .collect();
        SideFigures {
            decode: generation(decode, 1000, (0, 0)),
            prefill: vec![generation(0.0, 2000, (0, 0))],
            cold: vec![generation(0.0, cold_ms, (0, 0))],
            cached: vec![generation(0.0, cached_ms, (0, 0))],
            throughput,
            long_decode: generation(decode / 2.0, 1000, (0, 0)),
        }
    }

    fn figures() -> PodFigures {
        PodFigures {
            peer: "llama.cpp b1".into(),
            prefill_tokens: 512,
            prefix_tokens: 1024,
            bandwidth: Bandwidth { bytes_per_s: 16e9, threads: 2 },
            peer_bytes_per_token: 100_000_000,
            our_bytes_per_token: 0,
            llama_bench: LlamaBench { prefill_tok_s: 200.0, decode_tok_s: 120.0 },
            peer_side: side(110.0, 5000, 200, &[(8, 150.0), (16, 160.0)]),
            peer_grounded: generation(100.0, 0, (0, 0)),
            peer_grounded_spec: generation(150.0, 0, (100, 60)),
            our_side: side(132.0, 4000, 400, &[(8, 200.0), (16, 320.0)]),
            our_grounded: generation(130.0, 0, (0, 0)),
            our_grounded_spec: generation(260.0, 0, (100, 80)),
        }
    }

    fn find<'a>(rows: &'a [Row], metric: &str) -> &'a Row {
        rows.iter().find(|r| r.metric == metric).unwrap_or_else(|| panic!("no row {metric}"))
    }

    #[test]
    fn goals_sit_on_the_rows_the_issue_names() {
        let rows = figures().rows();
        let decode = find(&rows, "decode_tok_s_single");
        assert_eq!(decode.goal_ratio, Some(GOAL_DECODE));
        assert!((decode.ratio() - 1.1).abs() < 1e-9);
        // The pod reported no weight bytes: the ceiling falls back to the GGUF's, 16 GB/s / 100 MB.
        assert_eq!(decode.limit, Some(160.0));
        let c16 = find(&rows, "output_tok_s_c16");
        assert_eq!((c16.goal_ratio, c16.ratio()), (Some(GOAL_THROUGHPUT), 2.0));
        assert_eq!(find(&rows, "output_tok_s_c8").goal_ratio, None);
        let cached = find(&rows, "ttft_cached_over_cold");
        assert_eq!((cached.better, cached.goal_ratio, cached.ratio()), (Better::Lower, Some(0.2), 0.1));
        assert_eq!(find(&rows, "ttft_cold_ms_prefix1024").ratio(), 0.8);
        assert!((find(&rows, "decode_tok_s_ctx1024").ratio() - 1.2).abs() < 1e-9);
        assert_eq!(find(&rows, "prefill_tok_s_p512").ours, 256.0);
    }

    #[test]
    fn speculation_rows_compare_speedups_and_acceptance() {
        let rows = figures().rows();
        assert_eq!(find(&rows, "spec_speedup_grounded").ours, 2.0);
        assert_eq!(find(&rows, "spec_speedup_grounded").peer_value, 1.5);
        assert_eq!(find(&rows, "spec_acceptance_grounded").ours, 0.8);
        assert_eq!(find(&rows, "spec_decode_tok_s_grounded").ratio(), 260.0 / 150.0);
        let ceiling = find(&rows, "decode_ceiling_tok_s");
        assert_eq!((ceiling.ours, ceiling.peer_value), (0.0, 160.0));
    }
}
