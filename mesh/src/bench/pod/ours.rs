//! Our side of the pod suite: an `inference-pod` process on a free loopback port with a random tier
//! secret, and its gRPC client as a [`GenTarget`] (greedy `Generate` streams, timings from the final
//! `GenerateDone`) plus `Health` (the weight bytes one decode step reads). Stopped when dropped.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use proto::inference as pb;
use proto::inference::inference_pod_client::InferencePodClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::bench::pod::gen_target::{GenRequest, GenTarget, Generation};
use mesh_harness::paths;
use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// How long loading the model may take.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The environment variable the pod reads its CPU thread count from (`--threads`).
pub const THREADS_ENV: &str = "MESH_POD_THREADS";

/// How to start the pod.
#[derive(Clone, Debug)]
pub struct PodSpec {
    /// CPU threads for the model's kernels (passed as [`THREADS_ENV`]).
    pub threads: usize,
    /// Most requests that may wait (`MESH_POD_MAX_QUEUE`); above the suite's highest concurrency.
    pub max_queue: usize,
    /// More command-line arguments (e.g. KV cache or speculation settings).
    pub extra_args: Vec<String>,
}

/// A running `inference-pod` (no `Debug`: it holds the tier secret).
pub struct Pod {
    /// The process; stopped on drop.
    process: ManagedProcess,
    /// `http://127.0.0.1:PORT` (gRPC and `/healthz`).
    url: String,
    /// The tier secret it was started with.
    secret: String,
}

impl Pod {
    /// Starts `target/release/inference-pod` (or `MESH_BIN_DIR`'s) on the SmolLM2 GGUF and waits until
    /// its model is loaded.
    pub fn start(spec: &PodSpec, log_dir: &std::path::Path) -> anyhow::Result<Self> {
        let port = free_port()?;
        let secret = random_secret()?;
        let mut command = Command::new(paths::binary("inference-pod"));
        command
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--model-path")
            .arg(paths::smollm2_gguf())
            .args(&spec.extra_args)
            .env(THREADS_ENV, spec.threads.to_string())
            .env("MESH_POD_MAX_QUEUE", spec.max_queue.to_string())
            .env("MESH_INSECURE_TIER_SECRET", &secret);
        let mut process = ManagedProcess::spawn("inference-pod", command, log_dir)?;
        let url = format!("http://127.0.0.1:{port}");
        process.wait_ready(&format!("{url}/healthz"), READY_TIMEOUT)?;
        Ok(Self { process, url, secret })
    }

    /// Where its output goes.
    pub fn log_path(&self) -> &std::path::Path {
        self.process.log_path()
    }

    /// A gRPC client of this pod, for the model it serves.
    pub async fn connect(&self) -> anyhow::Result<PodClient> {
        let channel =
            Channel::from_shared(self.url.clone())?.connect().await.context("connecting to the pod")?;
        let mut client = PodClient {
            client: InferencePodClient::new(channel),
            secret: self.secret.parse().context("the tier secret is not ASCII")?,
            model: String::new(),
        };
        client.model = client.health().await?.model;
        Ok(client)
    }
}

/// A gRPC client of one pod (no `Debug`: it holds the tier secret).
#[derive(Clone)]
pub struct PodClient {
    /// The generated client (its channel multiplexes concurrent calls).
    client: InferencePodClient<Channel>,
    /// `x-mesh-secret`.
    secret: MetadataValue<Ascii>,
    /// The model name requests carry.
    model: String,
}

impl PodClient {
    /// `Health`: model, load, KV blocks, weight bytes per token.
    pub async fn health(&self) -> anyhow::Result<pb::HealthReply> {
        let reply = self.client.clone().health(self.authed(pb::HealthRequest {})).await?;
        Ok(reply.into_inner())
    }

    fn authed<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(daemon_runtime::TIER_SECRET_METADATA, self.secret.clone());
        request
    }

    fn request(&self, request: &GenRequest) -> pb::GenerateRequest {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let mut messages = Vec::new();
        if let Some(system) = &request.system {
            messages.push(pb::ChatMessage { role: "system".into(), content: system.clone() });
        }
        messages.push(pb::ChatMessage { role: "user".into(), content: request.user.clone() });
        pb::GenerateRequest {
            request_id: format!("bench-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            tenant: "bench".into(),
            model: self.model.clone(),
            messages,
            sampling: Some(pb::Sampling {
                max_tokens: request.max_tokens,
                temperature: 0.0,
                top_p: 1.0,
                seed: None,
                stop: Vec::new(),
                ignore_eos: request.ignore_eos,
                ..Default::default()
            }),
            priority: pb::Priority::Interactive as i32,
            speculative: request.speculative,
            raw_prompt: false,
            tags: Vec::new(),
            model_version: 0,
        }
    }
}

impl GenTarget for PodClient {
    async fn generate(&self, request: GenRequest) -> anyhow::Result<Generation> {
        let mut generation = Generation::begin();
        let deadline = request.deadline.map(tokio::time::Instant::from_std);
        let mut client = self.client.clone();
        let call = client.generate(self.authed(self.request(&request)));
        let mut stream = match within(deadline, call).await {
            Some(reply) => reply.context("Generate")?.into_inner(),
            None => return Ok(cut(generation)),
        };
        loop {
            let event = match within(deadline, stream.message()).await {
                Some(event) => event.context("reading the Generate stream")?,
                // Dropping the stream cancels the call.
                None => return Ok(cut(generation)),
            };
            match event.and_then(|e| e.event) {
                Some(pb::generate_event::Event::Delta(delta)) => {
                    if !delta.text.is_empty() {
                        generation.arrivals.push(Instant::now());
                    }
                }
                Some(pb::generate_event::Event::Done(done)) => {
                    record(&mut generation, &done);
                    break;
                }
                Some(pb::generate_event::Event::ChoiceDone(_)) => anyhow::bail!("one choice was asked for"),
                None => anyhow::bail!("the Generate stream ended without a Done event"),
            }
        }
        generation.finished = Instant::now();
        Ok(generation)
    }
}

/// `future`, or `None` when `deadline` passes first.
async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

fn cut(mut generation: Generation) -> Generation {
    generation.cut = true;
    generation.finished = Instant::now();
    generation
}

/// Copies the pod's counts and timings into `generation`.
fn record(generation: &mut Generation, done: &pb::GenerateDone) {
    generation.prompt_tokens = done.prompt_tokens;
    generation.cached_prompt_tokens = done.cached_prompt_tokens;
    generation.completion_tokens = done.completion_tokens;
    generation.draft_tokens = done.draft_tokens;
    generation.accepted_draft_tokens = done.accepted_draft_tokens;
    let timings = done.timings.unwrap_or_default();
    generation.prefill = Duration::from_micros(timings.prefill_us);
    generation.decode_tok_s = if timings.tpot_us > 0 {
        Some(1e6 / timings.tpot_us as f64)
    } else if done.completion_tokens > 1 && timings.decode_us > 0 {
        // The decode time covers the steps after the first token, which prefill produced.
        Some(f64::from(done.completion_tokens - 1) * 1e6 / timings.decode_us as f64)
    } else {
        None
    };
}

/// 32 random bytes as hex, from the operating system.
fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(shared::hex::encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rate_comes_from_tpot_else_from_the_decode_time() {
        let mut g = Generation::begin();
        let done = |tpot_us, decode_us| pb::GenerateDone {
            completion_tokens: 11,
            timings: Some(pb::Timings { decode_us, tpot_us, ..Default::default() }),
            ..Default::default()
        };
        record(&mut g, &done(0, 100_000));
        assert_eq!(g.decode_tok_s, Some(100.0));
        record(&mut g, &done(8_000, 100_000));
        assert_eq!(g.decode_tok_s, Some(125.0));
        record(&mut g, &done(0, 0));
        assert_eq!(g.decode_tok_s, None);
    }
}
