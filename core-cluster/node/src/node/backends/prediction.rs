//! What a generation will take on a backend: its work in tokens (prompt and output), and the backend's
//! measured rates, so that a request goes where it is predicted to finish first.
//!
//! Two rates are measured. A request's own rates (prefill and decode tokens per second, as its answer's
//! timings report them) say how long it takes once it runs. The backend's throughput (output tokens
//! finished per second of wall time while it was busy) says how fast it works through what is queued,
//! whatever it does inside: a batching pod finishes many requests at once, so its throughput is many
//! times one request's decode rate, while a server with one slot finishes them one after another, at
//! one request's rate. A request is predicted to finish after its own prefill and the longer of its own
//! decode and the draining of everything queued there with it, at that throughput.

use std::sync::Mutex;
use std::time::Instant;

use proto::inference::{GenerateDone, GenerateRequest};

/// Prompt tokens per byte of message text, roughly (byte-level BPE on English).
const TOKENS_PER_BYTE: f64 = 0.3;
/// Output tokens assumed when a request sets no `max_tokens`.
const DEFAULT_OUTPUT_TOKENS: u64 = 256;
/// Rates assumed for a backend not yet measured (a small CPU model's order of magnitude); measured
/// rates replace them after its first answer.
const PRIOR: Rates = Rates { prefill_tokens_per_s: 1_000.0, decode_tokens_per_s: 30.0 };
/// Weight of each new measurement in the moving average.
const ALPHA: f64 = 0.2;
/// Weight of each new throughput sample (one per finished generation: many, and noisy).
const THROUGHPUT_ALPHA: f64 = 0.1;

/// A generation's work in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Prompt tokens (estimated from the messages' bytes).
    pub prompt: u64,
    /// Output tokens (its `max_tokens`).
    pub output: u64,
}

impl Work {
    /// Both parts.
    pub fn total(self) -> u64 {
        self.prompt + self.output
    }
}

/// What `request` is predicted to cost: its prompt, estimated from its bytes, and its output.
pub fn predicted_work(request: &GenerateRequest) -> Work {
    let bytes: usize = request.messages.iter().map(|m| m.content.len() + m.role.len() + 4).sum();
    let output = match request.sampling.as_ref().map_or(0, |s| u64::from(s.max_tokens)) {
        0 => DEFAULT_OUTPUT_TOKENS,
        n => n,
    };
    Work { prompt: (bytes as f64 * TOKENS_PER_BYTE) as u64, output }
}

/// A backend's speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Prompt tokens it computes a second, for one request.
    pub prefill_tokens_per_s: f64,
    /// Tokens it generates a second, for one request.
    pub decode_tokens_per_s: f64,
}

/// A backend's measured rates: a moving average over its answers' timings, and its throughput.
#[derive(Debug, Default)]
pub struct MeasuredRates {
    measured: Mutex<Option<Rates>>,
    throughput: Mutex<Throughput>,
}

/// Output tokens finished per busy second, from the time between finished generations.
#[derive(Debug, Default)]
struct Throughput {
    last_finish: Option<Instant>,
    output_tokens_per_s: Option<f64>,
}

impl MeasuredRates {
    /// The rates now (the prior until a first measurement).
    pub fn now(&self) -> Rates {
        self.measured.lock().ok().and_then(|m| *m).unwrap_or(PRIOR)
    }

    /// Whether any answer has been measured.
    pub fn is_measured(&self) -> bool {
        self.measured.lock().map(|m| m.is_some()).unwrap_or(false)
    }

    /// Takes one answer's timings into the average. Parts too short to time (under a millisecond) or
    /// without tokens are skipped.
    pub fn observe(&self, done: &GenerateDone) {
        let Some(timings) = done.timings.as_ref() else { return };
        let computed_prompt = done.prompt_tokens.saturating_sub(done.cached_prompt_tokens);
        let rate =
            |tokens: u32, us: u64| (tokens > 0 && us >= 1_000).then(|| f64::from(tokens) * 1e6 / us as f64);
        let prefill = rate(computed_prompt, timings.prefill_us.max(timings.ttft_us));
        let decode = rate(done.completion_tokens.saturating_sub(1), timings.decode_us);
        let Ok(mut measured) = self.measured.lock() else { return };
        let mut rates = measured.unwrap_or(PRIOR);
        let first = measured.is_none();
        let blend = |old: f64, new: Option<f64>| match new {
            Some(new) if first => new,
            Some(new) => old + ALPHA * (new - old),
            None => old,
        };
        rates.prefill_tokens_per_s = blend(rates.prefill_tokens_per_s, prefill);
        rates.decode_tokens_per_s = blend(rates.decode_tokens_per_s, decode);
        if prefill.is_some() || decode.is_some() {
            *measured = Some(rates);
        }
    }

    /// Takes one finished generation (`output_tokens` long, at `now`) into the throughput: its tokens
    /// over the time since the previous one finished or, when the backend was idle in between, since it
    /// became busy (`busy_since`).
    pub fn observe_finish(&self, output_tokens: u32, busy_since: Option<Instant>, now: Instant) {
        let Ok(mut throughput) = self.throughput.lock() else { return };
        let since = match (throughput.last_finish, busy_since) {
            (Some(last), Some(busy)) => Some(last.max(busy)),
            (last, busy) => last.or(busy),
        };
        throughput.last_finish = Some(now);
        let Some(since) = since else { return };
        let seconds = now.saturating_duration_since(since).as_secs_f64();
        if output_tokens == 0 || seconds < 1e-3 {
            return;
        }
        let sample = f64::from(output_tokens) / seconds;
        throughput.output_tokens_per_s = Some(match throughput.output_tokens_per_s {
            Some(old) => old + THROUGHPUT_ALPHA * (sample - old),
            None => sample,
        });
    }

    /// Output tokens the backend finishes per busy second, once measured.
    pub fn throughput(&self) -> Option<f64> {
        self.throughput.lock().ok().and_then(|t| t.output_tokens_per_s)
    }

    /// Microseconds until `own` would be done here behind `queued`: its prefill, then the longer of its
    /// own decode and the draining of the queue with it at the backend's throughput (before that is
    /// measured: the queue's and its own work one after another at one request's rates).
    pub fn predicted_us(&self, queued: Work, own: Work) -> u64 {
        let rates = self.now();
        let seconds = match self.throughput() {
            Some(throughput) => {
                own.prompt as f64 / rates.prefill_tokens_per_s.max(1e-3)
                    + (own.output as f64 / rates.decode_tokens_per_s.max(1e-3))
                        .max((queued.output + own.output) as f64 / throughput.max(1e-3))
            }
            None => sequential_seconds(rates, queued, own),
        };
        (seconds * 1e6).min(u64::MAX as f64) as u64
    }

    /// Microseconds until `own`'s first token here behind `queued`, at one request's rates.
    pub fn predicted_ttft_us(&self, queued: Work, own_prompt: u64) -> u64 {
        let seconds = sequential_seconds(self.now(), queued, Work { prompt: own_prompt, output: 0 });
        (seconds * 1e6).min(u64::MAX as f64) as u64
    }
}

/// `queued` and `own` one after another at one request's `rates`, in seconds.
fn sequential_seconds(rates: Rates, queued: Work, own: Work) -> f64 {
    (queued.prompt + own.prompt) as f64 / rates.prefill_tokens_per_s.max(1e-3)
        + (queued.output + own.output) as f64 / rates.decode_tokens_per_s.max(1e-3)
}

impl MeasuredRates {}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::{ChatMessage, Sampling, Timings};

    fn done(prompt: u32, completion: u32, prefill_ms: u64, decode_ms: u64) -> GenerateDone {
        GenerateDone {
            prompt_tokens: prompt,
            completion_tokens: completion,
            timings: Some(Timings {
                prefill_us: prefill_ms * 1000,
                decode_us: decode_ms * 1000,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn work_is_the_prompt_estimate_and_the_output_asked() {
        let request = |text: &str, max_tokens: u32| GenerateRequest {
            messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
            sampling: Some(Sampling { max_tokens, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(predicted_work(&request("hi", 64)).output, 64);
        assert_eq!(predicted_work(&request("hi", 0)).output, DEFAULT_OUTPUT_TOKENS);
        assert!(predicted_work(&request(&"word ".repeat(200), 64)).prompt > 250);
    }

    #[test]
    fn the_first_answer_sets_the_rates_and_later_ones_move_them() {
        let rates = MeasuredRates::default();
        assert!(!rates.is_measured());
        assert_eq!(rates.now(), PRIOR);
        rates.observe(&done(100, 51, 100, 1000));
        assert_eq!(rates.now(), Rates { prefill_tokens_per_s: 1000.0, decode_tokens_per_s: 50.0 });
        rates.observe(&done(100, 11, 100, 1000));
        let decode = rates.now().decode_tokens_per_s;
        assert!((decode - 42.0).abs() < 1e-9, "50 moved a fifth of the way to 10: {decode}");
        rates.observe(&done(0, 0, 0, 0));
        assert!((rates.now().decode_tokens_per_s - 42.0).abs() < 1e-9, "nothing to time, nothing changes");
    }

    #[test]
    fn a_faster_backend_predicts_sooner_until_its_queue_outweighs_its_speed() {
        let (fast, slow) = (MeasuredRates::default(), MeasuredRates::default());
        fast.observe(&done(100, 101, 50, 1000));
        slow.observe(&done(100, 26, 100, 1000));
        let own = Work { prompt: 50, output: 64 };
        assert!(fast.predicted_us(Work::default(), own) < slow.predicted_us(Work::default(), own));
        let queued = Work { prompt: 500, output: 64 * 5 };
        assert!(fast.predicted_us(queued, own) > slow.predicted_us(Work::default(), own));
    }

    #[test]
    fn throughput_is_tokens_per_busy_second_and_a_batching_backend_drains_its_queue_faster() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        // One slot: 32 tokens every 400 ms, busy throughout.
        let one_slot = MeasuredRates::default();
        one_slot.observe(&done(20, 33, 10, 355));
        for i in 1..=5 {
            one_slot.observe_finish(32, Some(t0), at(400 * i));
        }
        let single = one_slot.throughput().expect("measured");
        assert!((single - 80.0).abs() < 1.0, "{single}");
        // Batching: the same decode rate per request, but eight finish in each 400 ms.
        let batching = MeasuredRates::default();
        batching.observe(&done(20, 33, 10, 355));
        for i in 1..=40 {
            batching.observe_finish(32, Some(t0), at(50 * i));
        }
        assert!(batching.throughput().expect("measured") > 5.0 * single);
        let (queued, own) = (Work { prompt: 80, output: 8 * 32 }, Work { prompt: 10, output: 32 });
        assert!(batching.predicted_us(queued, own) < one_slot.predicted_us(queued, own));
        // Idle time between generations is not counted: busy again at 10 s, done 400 ms later.
        one_slot.observe_finish(32, Some(at(10_000)), at(10_400));
        assert!((one_slot.throughput().expect("measured") - 80.0).abs() < 1.0);
        // An idle backend still takes its own decode's time, whatever its throughput.
        assert!(batching.predicted_us(Work::default(), own) >= 32 * 1_000_000 / 100);
    }
}
