//! Output tokens/s under N concurrent requests: [`closed_loop`] clients, each sending ShareGPT first
//! turns one after another, for a fixed window. Requests still running when the window closes are cut
//! there, and only the tokens that arrived inside the window count, so neither the ramp-down nor a long
//! last request skews the figure.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bench::common::load::{closed_loop, percentile};
use crate::bench::pod::gen_target::{GenRequest, GenTarget, Generation};

/// What one concurrency level measured.
#[derive(Clone, Debug)]
pub struct Throughput {
    /// Concurrent clients.
    pub clients: usize,
    /// Requests sent (each took the next prompt).
    pub sent: usize,
    /// Tokens generated inside the window per second of the window, over all clients.
    pub output_tok_s: f64,
    /// Requests that finished inside the window.
    pub completed: usize,
    /// Requests cut at the window's end.
    pub cut: usize,
    /// Requests that failed.
    pub errors: u64,
    /// The first failure, for the report.
    pub first_error: Option<String>,
    /// Median time to the first token of the requests that got one.
    pub ttft_p50: Duration,
    /// 99th percentile of the same.
    pub ttft_p99: Duration,
}

/// One concurrency level to run.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Concurrent clients.
    pub clients: usize,
    /// Index of the first prompt sent (phases take disjoint prompts, so that no cache carries one
    /// phase's prompts into the next).
    pub first_prompt: usize,
    /// Most tokens of each answer.
    pub max_tokens: u32,
    /// The measured window.
    pub window: Duration,
}

/// Runs `phase.clients` closed-loop clients for the window, each request a prompt of `prompts` (client
/// `c`'s request `s` takes prompt `first_prompt + s * clients + c`, modulo their number, so both systems
/// get the same ones) answered greedily, each with `max_tokens` tokens (the end of the turn ignored).
pub async fn concurrent<T: GenTarget>(
    target: Arc<T>,
    prompts: Arc<Vec<String>>,
    phase: &Phase,
    stop: &'static AtomicBool,
) -> Throughput {
    let Phase { clients, first_prompt, max_tokens, window } = *phase;
    let done: Arc<Mutex<Vec<Generation>>> = Arc::default();
    let from = Instant::now();
    let to = from + window;
    let sink = Arc::clone(&done);
    let result = closed_loop(clients, window, stop, move |client, seq| {
        let target = Arc::clone(&target);
        let sink = Arc::clone(&sink);
        let index = (first_prompt + seq as usize * clients + client) % prompts.len().max(1);
        // Past the end of the turn, so that both systems write `max_tokens` tokens for every prompt.
        let request = GenRequest {
            user: prompts.get(index).cloned().unwrap_or_default(),
            max_tokens,
            ignore_eos: true,
            deadline: Some(to),
            ..GenRequest::default()
        };
        async move {
            let generation = target.generate(request).await?;
            sink.lock().map_err(|_| anyhow::anyhow!("a client panicked"))?.push(generation);
            anyhow::Ok(())
        }
    })
    .await;
    let generations = std::mem::take(&mut *done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    summarize(clients, &generations, from, to, result.errors, result.first_error)
}

/// The figures of the generations of one window `[from, to)`.
fn summarize(
    clients: usize,
    generations: &[Generation],
    from: Instant,
    to: Instant,
    errors: u64,
    first_error: Option<String>,
) -> Throughput {
    let tokens: f64 = generations.iter().map(|g| g.tokens_between(from, to)).sum();
    let mut ttfts: Vec<Duration> =
        generations.iter().filter(|g| !g.arrivals.is_empty()).map(Generation::ttft).collect();
    ttfts.sort_unstable();
    Throughput {
        clients,
        sent: generations.len() + errors as usize,
        output_tok_s: tokens / to.saturating_duration_since(from).as_secs_f64().max(1e-9),
        completed: generations.iter().filter(|g| !g.cut).count(),
        cut: generations.iter().filter(|g| g.cut).count(),
        errors,
        first_error,
        ttft_p50: percentile(&ttfts, 0.5),
        ttft_p99: percentile(&ttfts, 0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request with `max_tokens` tokens, one per 2 ms, after 5 ms of "prefill".
    struct Steady;

    impl GenTarget for Steady {
        async fn generate(&self, request: GenRequest) -> anyhow::Result<Generation> {
            let mut g = Generation::begin();
            tokio::time::sleep(Duration::from_millis(5)).await;
            for _ in 0..request.max_tokens {
                if request.deadline.is_some_and(|d| Instant::now() >= d) {
                    g.cut = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                g.arrivals.push(Instant::now());
            }
            if !g.cut {
                g.completion_tokens = request.max_tokens;
            }
            g.finished = Instant::now();
            Ok(g)
        }
    }

    #[tokio::test]
    async fn counts_the_tokens_inside_the_window() {
        static NEVER: AtomicBool = AtomicBool::new(false);
        let prompts = Arc::new(vec!["a".to_owned(), "b".to_owned()]);
        let phase = Phase { clients: 4, first_prompt: 1, max_tokens: 20, window: Duration::from_millis(300) };
        let t = concurrent(Arc::new(Steady), prompts, &phase, &NEVER).await;
        assert_eq!(t.clients, 4);
        assert_eq!(t.errors, 0);
        assert!(t.completed >= 4, "{t:?}");
        assert_eq!(t.sent, t.completed + t.cut);
        // 4 clients at up to 500 tokens/s each, minus the prefill gaps and timer slack.
        assert!(t.output_tok_s > 400.0 && t.output_tok_s <= 2000.0, "{t:?}");
        assert!(t.ttft_p50 >= Duration::from_millis(7), "{t:?}");
    }
}
