//! Driving one system of the end-to-end suite: conversations of the mix replayed turn by turn over the
//! OpenAI streaming API (the system's own answers become the assistant turns), by clients in a closed
//! loop or at Poisson arrivals (an open loop), and what each turn did.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bench::common::load::percentile;
use crate::bench::e2e::workload::{normalize, SplitMix, Workload};
use mesh_harness::client::ChatClient;

/// The model every request names.
pub const MODEL: &str = "smollm2-135m-instruct";

/// A system under test, as its clients reach it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `http://127.0.0.1:PORT` of its OpenAI API.
    pub base_url: String,
    /// Bearer token, if it wants one.
    pub api_key: Option<String>,
    /// Sent with every request (the cache-off mesh sends `cache-control: no-cache, no-store`).
    pub headers: Vec<(String, String)>,
}

impl Endpoint {
    fn client(&self) -> ChatClient {
        ChatClient::new(&self.base_url, self.api_key.as_deref())
    }

    fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
}

/// What one turn did.
#[derive(Clone, Debug)]
pub struct Turn {
    /// HTTP status; 0 for a 200 whose stream broke off.
    pub status: u16,
    /// Until the first content.
    pub ttft: Option<Duration>,
    /// Until the end of the stream.
    pub total: Duration,
    /// Content events (one per generated token as both servers stream).
    pub chunks: usize,
    /// `x-cache` when it names a cache hit.
    pub hit: Option<String>,
    /// Whether these messages had never been sent to this system before (after normalisation): a hit
    /// on such a turn is a semantic one.
    pub first_ask: bool,
    /// The messages sent.
    pub messages: Vec<Value>,
    /// The answer's text.
    pub answer: String,
}

/// When a phase ends.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Start conversations for this long.
    Elapsed(Duration),
    /// Start this many conversations.
    Conversations(usize),
}

/// How conversations arrive in a phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// This many clients in a closed loop: each starts its next conversation when its last one ends, so
    /// a slower system is sent less.
    Closed(usize),
    /// Conversations start at Poisson arrivals at this mean rate per second, however many are still in
    /// flight (an open loop: what users of a service do).
    Open(f64),
}

impl Default for Load {
    fn default() -> Self {
        Self::Closed(0)
    }
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed(clients) => write!(f, "c={clients}"),
            Self::Open(per_s) => write!(f, "{per_s}/s"),
        }
    }
}

/// One phase: conversations of the workload from `offset`, arriving as `load` says.
pub struct Phase<'a> {
    /// The system.
    pub endpoint: &'a Endpoint,
    /// The mix.
    pub workload: &'a Workload,
    /// Index of the first conversation.
    pub offset: usize,
    /// How conversations arrive.
    pub load: Load,
    /// When to stop starting conversations.
    pub until: Until,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Set to end early.
    pub stop: &'a AtomicBool,
}

/// Every turn of a phase and how long it took.
pub struct PhaseRun {
    /// How conversations arrived.
    pub load: Load,
    /// Every turn, in no particular order.
    pub turns: Vec<Turn>,
    /// From the start until the last turn ended.
    pub elapsed: Duration,
    /// The first error other than a 429, if any.
    pub first_error: Option<String>,
}

impl Phase<'_> {
    /// Runs the phase; `asked` holds the normalised messages this system has been sent so far.
    pub fn run(&self, asked: &Mutex<HashSet<String>>) -> PhaseRun {
        let started = Instant::now();
        let first_error = Mutex::new(None);
        let next = AtomicUsize::new(0);
        // One conversation, its turns added to `turns`.
        let converse = |client: &ChatClient, index: usize, turns: &mut Vec<Turn>| {
            let conversation = &self.workload.conversations[index % self.workload.conversations.len()];
            if let Err(error) = self.replay(client, conversation, asked, turns) {
                first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(format!("{error:#}"));
            }
        };
        let turns: Vec<Turn> = std::thread::scope(|scope| {
            let handles: Vec<_> = match self.load {
                Load::Closed(clients) => {
                    let next = &next;
                    (0..clients)
                        .map(|_| {
                            scope.spawn(move || {
                                let client = self.endpoint.client();
                                let mut turns = Vec::new();
                                while let Some(index) = self.claim(next, started) {
                                    converse(&client, index, &mut turns);
                                }
                                turns
                            })
                        })
                        .collect()
                }
                Load::Open(per_s) => {
                    let mut handles = Vec::new();
                    let mut gaps = poisson_gaps(2026 ^ self.offset as u64, per_s);
                    let mut at = Duration::ZERO;
                    while let Some(index) = self.arrival(handles.len(), at) {
                        std::thread::sleep((started + at).saturating_duration_since(Instant::now()));
                        handles.push(scope.spawn(move || {
                            let mut turns = Vec::new();
                            converse(&self.endpoint.client(), index, &mut turns);
                            turns
                        }));
                        at = at.saturating_add(gaps.next().unwrap_or(Duration::MAX));
                    }
                    handles
                }
            };
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        let first_error = first_error.into_inner().unwrap_or_else(|p| p.into_inner());
        PhaseRun { load: self.load, turns, elapsed: started.elapsed(), first_error }
    }

    /// The conversation of the open loop's arrival number `n`, due `at` after the start, if the phase
    /// is not over by then.
    fn arrival(&self, n: usize, at: Duration) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let more = match self.until {
            Until::Elapsed(window) => at < window,
            Until::Conversations(count) => n < count,
        };
        more.then_some(self.offset + n)
    }

    fn claim(&self, next: &AtomicUsize, started: Instant) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        let more = match self.until {
            Until::Elapsed(window) => started.elapsed() < window,
            Until::Conversations(count) => n < count,
        };
        more.then_some(self.offset + n)
    }

    fn replay(
        &self,
        client: &ChatClient,
        conversation: &[String],
        asked: &Mutex<HashSet<String>>,
        turns: &mut Vec<Turn>,
    ) -> anyhow::Result<()> {
        let mut messages: Vec<Value> = Vec::new();
        for user in conversation {
            messages.push(json!({"role": "user", "content": user}));
            let body = json!({"model": MODEL, "temperature": 0, "max_tokens": self.max_tokens, "messages": messages});
            let key = normalize(&Value::Array(messages.clone()).to_string());
            let first_ask = asked.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
            let reply = client.chat_stream_with_headers(&body, &self.endpoint.header_pairs())?;
            let arrivals = reply.content_arrivals();
            let answer = reply.content();
            let hit = reply.header("x-cache").filter(|x| x.starts_with("HIT")).map(str::to_owned);
            let ok = reply.status == 200 && reply.finished();
            turns.push(Turn {
                status: if reply.status == 200 && !ok { 0 } else { reply.status },
                ttft: arrivals.first().copied(),
                total: reply.events.last().map_or(Duration::ZERO, |(at, _)| *at),
                chunks: arrivals.len(),
                hit,
                first_ask,
                messages: messages.clone(),
                answer: answer.clone(),
            });
            if !ok {
                // A refused or broken turn ends the conversation: there is no answer to go on from. A
                // refused client waits as Retry-After says (at most 2 s), as a polite client would.
                anyhow::ensure!(reply.status == 429, "status {}: {}", reply.status, answer);
                let wait = reply.header("retry-after").and_then(|v| v.parse::<f64>().ok()).unwrap_or(1.0);
                std::thread::sleep(Duration::from_secs_f64(wait.clamp(0.0, 2.0)));
                return Ok(());
            }
            messages.push(json!({"role": "assistant", "content": answer}));
        }
        Ok(())
    }
}

/// The gaps between the arrivals of a Poisson process at `per_s` a second: exponential, seeded.
fn poisson_gaps(seed: u64, per_s: f64) -> impl Iterator<Item = Duration> {
    let mut draws = SplitMix(seed);
    std::iter::repeat_with(move || Duration::from_secs_f64(-(1.0 - draws.unit()).ln() / per_s.max(1e-3)))
}

/// One phase's figures.
#[derive(Clone, Debug, Default)]
pub struct StepFigures {
    /// How conversations arrived.
    pub load: Load,
    /// Turns answered in full (200, stream finished).
    pub answered: usize,
    /// Refused with 429 (admission).
    pub shed: usize,
    /// Turns that failed otherwise.
    pub failed: usize,
    /// Answered turns per second.
    pub per_s: f64,
    /// Time to first token, p50.
    pub ttft_p50: Duration,
    /// Time to first token, p99.
    pub ttft_p99: Duration,
    /// End-to-end latency, p50.
    pub e2e_p50: Duration,
    /// End-to-end latency, p99.
    pub e2e_p99: Duration,
    /// Mean time per output token of generated answers.
    pub tpot: Duration,
    /// Share of answered turns served from a cache.
    pub cached: f64,
    /// Answered turns by `x-cache` tier.
    pub by_tier: BTreeMap<String, usize>,
    /// Share of answer tokens served from a cache instead of generated.
    pub tokens_avoided: f64,
}

impl PhaseRun {
    /// The figures; `generated` maps an answer's text to the tokens it took to generate (learned from
    /// misses), for the tokens a hit avoided.
    pub fn figures(&self, generated: &HashMap<String, usize>) -> StepFigures {
        let answered: Vec<&Turn> = self.turns.iter().filter(|t| t.status == 200).collect();
        let sorted = |f: &dyn Fn(&Turn) -> Option<Duration>| {
            let mut v: Vec<Duration> = answered.iter().filter_map(|t| f(t)).collect();
            v.sort_unstable();
            v
        };
        let ttft = sorted(&|t| t.ttft);
        let e2e = sorted(&|t| Some(t.total));
        let decode: Vec<Duration> = answered
            .iter()
            .filter(|t| t.hit.is_none() && t.chunks > 1)
            .filter_map(|t| Some((t.total.checked_sub(t.ttft?)?) / (t.chunks as u32 - 1)))
            .collect();
        let mut by_tier = BTreeMap::new();
        let (mut tokens, mut avoided) = (0usize, 0usize);
        for turn in &answered {
            *by_tier.entry(turn.hit.clone().unwrap_or_else(|| "MISS".into())).or_insert(0) += 1;
            let n = generated.get(&turn.answer).copied().unwrap_or(turn.chunks.max(1));
            tokens += n;
            if turn.hit.is_some() {
                avoided += n;
            }
        }
        let hits = answered.iter().filter(|t| t.hit.is_some()).count();
        StepFigures {
            load: self.load,
            answered: answered.len(),
            shed: self.turns.iter().filter(|t| t.status == 429).count(),
            failed: self.turns.iter().filter(|t| t.status != 200 && t.status != 429).count(),
            per_s: answered.len() as f64 / self.elapsed.as_secs_f64().max(1e-9),
            ttft_p50: percentile(&ttft, 0.5),
            ttft_p99: percentile(&ttft, 0.99),
            e2e_p50: percentile(&e2e, 0.5),
            e2e_p99: percentile(&e2e, 0.99),
            tpot: if decode.is_empty() {
                Duration::ZERO
            } else {
                decode.iter().sum::<Duration>() / decode.len() as u32
            },
            cached: hits as f64 / answered.len().max(1) as f64,
            by_tier,
            tokens_avoided: avoided as f64 / tokens.max(1) as f64,
        }
    }
}

/// Learns the tokens of each generated answer from `turns` (misses only).
pub fn learn_generated(turns: &[Turn], generated: &mut HashMap<String, usize>) {
    for turn in turns.iter().filter(|t| t.status == 200 && t.hit.is_none()) {
        generated.insert(turn.answer.clone(), turn.chunks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_gaps_average_the_inverse_rate_and_vary() {
        let gaps: Vec<Duration> = poisson_gaps(7, 4.0).take(20_000).collect();
        let mean = gaps.iter().sum::<Duration>().as_secs_f64() / gaps.len() as f64;
        assert!((mean - 0.25).abs() < 0.01, "mean gap {mean}");
        // Exponential: about e^-1 of the gaps are longer than the mean.
        let long = gaps.iter().filter(|g| g.as_secs_f64() > 0.25).count() as f64 / gaps.len() as f64;
        assert!((long - (-1.0f64).exp()).abs() < 0.02, "{long}");
    }
}
