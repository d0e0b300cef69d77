//! The inference pod's Prometheus metrics.

use shared::metrics::{Counter, Histogram, MetricsText};

use super::load::Load;
use super::request::{FinishReason, GenerationSummary};

/// Every metric the pod exports at `/metrics`.
#[derive(Debug)]
pub struct PodMetrics {
    /// Generations that ended with `finish_reason = "stop"`.
    pub finished_stop: Counter,
    /// Generations that ended with `finish_reason = "length"`.
    pub finished_length: Counter,
    /// Requests refused before queueing (bad input, unknown model, queue full, not ready).
    pub rejected: Counter,
    /// Generations abandoned because the client went away.
    pub cancelled: Counter,
    /// Generations that failed inside the model.
    pub failed: Counter,
    /// Prompt tokens processed.
    pub prompt_tokens: Counter,
    /// Tokens generated.
    pub generated_tokens: Counter,
    /// Time spent waiting for the model.
    pub queue_seconds: Histogram,
    /// Prompt processing time.
    pub prefill_seconds: Histogram,
    /// Generation time after the first token.
    pub decode_seconds: Histogram,
    /// Arrival to first token.
    pub ttft_seconds: Histogram,
    /// Average time per output token after the first, per request.
    pub tpot_seconds: Histogram,
    /// Sequences preempted (their KV freed, to be recomputed) because blocks ran out.
    pub preempted: Counter,
    /// Tokens computed by forward steps (prefill chunks, decodes and drafts).
    pub step_tokens: Counter,
    /// Prompt tokens served from the prefix cache.
    pub cached_prompt_tokens: Counter,
    /// Speculative decoding: draft tokens proposed.
    pub draft_tokens: Counter,
    /// Speculative decoding: draft tokens accepted.
    pub accepted_draft_tokens: Counter,
}

impl Default for PodMetrics {
    fn default() -> Self {
        Self {
            finished_stop: Counter::default(),
            finished_length: Counter::default(),
            rejected: Counter::default(),
            cancelled: Counter::default(),
            failed: Counter::default(),
            prompt_tokens: Counter::default(),
            generated_tokens: Counter::default(),
            queue_seconds: Histogram::latency(),
            prefill_seconds: Histogram::latency(),
            decode_seconds: Histogram::latency(),
            ttft_seconds: Histogram::latency(),
            tpot_seconds: Histogram::latency(),
            preempted: Counter::default(),
            step_tokens: Counter::default(),
            cached_prompt_tokens: Counter::default(),
            draft_tokens: Counter::default(),
            accepted_draft_tokens: Counter::default(),
        }
    }
}

impl PodMetrics {
    /// Records a finished generation.
    pub fn record(&self, summary: &GenerationSummary) {
        match summary.finish_reason {
            FinishReason::Stop => self.finished_stop.inc(),
            FinishReason::Length => self.finished_length.inc(),
        }
        self.prompt_tokens.add(u64::from(summary.prompt_tokens));
        self.generated_tokens.add(u64::from(summary.completion_tokens));
        self.cached_prompt_tokens.add(u64::from(summary.cached_prompt_tokens));
        self.draft_tokens.add(u64::from(summary.draft_tokens));
        self.accepted_draft_tokens.add(u64::from(summary.accepted_draft_tokens));
        let t = &summary.timings;
        self.queue_seconds.observe(t.queue.as_secs_f64());
        self.prefill_seconds.observe(t.prefill.as_secs_f64());
        self.decode_seconds.observe(t.decode.as_secs_f64());
        self.ttft_seconds.observe(t.ttft.as_secs_f64());
        if summary.completion_tokens > 1 {
            self.tpot_seconds.observe(t.decode.as_secs_f64() / f64::from(summary.completion_tokens - 1));
        }
    }

    /// The OpenMetrics text exposition (`mesh_pod_*`).
    pub fn render(&self, model: &str, ready: bool, load: &Load) -> String {
        let m = &[("model", model)];
        let outcome = |o: &'static str| [("model", model), ("outcome", o)];
        let help = "Generation requests by outcome.";
        MetricsText::default()
            .gauge("mesh_pod_ready", "1 once the model is loaded.", m, f64::from(u8::from(ready)))
            .counter("mesh_pod_requests_total", help, &outcome("stop"), &self.finished_stop)
            .counter("mesh_pod_requests_total", help, &outcome("length"), &self.finished_length)
            .counter("mesh_pod_requests_total", help, &outcome("rejected"), &self.rejected)
            .counter("mesh_pod_requests_total", help, &outcome("cancelled"), &self.cancelled)
            .counter("mesh_pod_requests_total", help, &outcome("failed"), &self.failed)
            .counter("mesh_pod_prompt_tokens_total", "Prompt tokens processed.", m, &self.prompt_tokens)
            .counter("mesh_pod_generated_tokens_total", "Tokens generated.", m, &self.generated_tokens)
            .counter(
                "mesh_pod_cached_prompt_tokens_total",
                "Prompt tokens from the prefix cache.",
                m,
                &self.cached_prompt_tokens,
            )
            .counter("mesh_pod_step_tokens_total", "Tokens computed by forward steps.", m, &self.step_tokens)
            .counter("mesh_pod_preemptions_total", "Sequences preempted for KV blocks.", m, &self.preempted)
            .counter(
                "mesh_pod_draft_tokens_total",
                "Speculative draft tokens proposed.",
                m,
                &self.draft_tokens,
            )
            .counter(
                "mesh_pod_accepted_draft_tokens_total",
                "Speculative draft tokens accepted (over proposed: the acceptance rate).",
                m,
                &self.accepted_draft_tokens,
            )
            .gauge("mesh_pod_queue_depth", "Requests waiting to start.", m, load.queued() as f64)
            .gauge("mesh_pod_running", "Sequences in the running batch.", m, load.running() as f64)
            .gauge("mesh_pod_kv_free_blocks", "KV blocks free or evictable.", m, load.free_blocks() as f64)
            .gauge("mesh_pod_kv_total_blocks", "KV blocks in the pool.", m, load.total_blocks() as f64)
            .histogram("mesh_pod_queue_seconds", "Time waiting for the model.", m, &self.queue_seconds)
            .histogram("mesh_pod_prefill_seconds", "Prompt processing time.", m, &self.prefill_seconds)
            .histogram(
                "mesh_pod_decode_seconds",
                "Generation time after the first token.",
                m,
                &self.decode_seconds,
            )
            .histogram(
                "mesh_pod_ttft_seconds",
                "Time from arrival to the first token.",
                m,
                &self.ttft_seconds,
            )
            .histogram(
                "mesh_pod_tpot_seconds",
                "Time per output token after the first.",
                m,
                &self.tpot_seconds,
            )
            .finish()
    }
}
