//! `llama-server` as a [`GenTarget`]: started on a free loopback port with continuous batching and
//! parallel slots, driven over HTTP `POST /completion` with the prompt its own `/apply-template` renders
//! (the GGUF's chat template, as the pod renders it too: SmolLM2's adds a system turn when there is
//! none), greedy, streamed, and with `cache_prompt` on. Its `/tokenize` and `/detokenize` size the
//! suite's prompts. Stopped when dropped.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Deserialize;
use serde_json::json;

use crate::bench::pod::gen_target::{GenRequest, GenTarget, Generation};
use crate::bench::pod::llama_cpp::LlamaCpp;
use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// How long loading the model may take.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a request without a deadline may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// How to start one `llama-server`.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// The GGUF file.
    pub model: PathBuf,
    /// CPU threads, for both generation and batch (prompt) processing.
    pub threads: usize,
    /// Parallel slots (`-np`).
    pub slots: usize,
    /// Context of each slot; the server gets `slots * ctx_per_slot` (`-c`).
    pub ctx_per_slot: usize,
    /// More arguments (e.g. `--spec-type ngram-simple`).
    pub extra_args: Vec<String>,
}

/// A running `llama-server`.
#[derive(Debug)]
pub struct LlamaServer {
    /// The process; stopped on drop.
    process: ManagedProcess,
    /// `http://127.0.0.1:PORT`.
    base_url: String,
    /// HTTP client; error statuses are returned as responses.
    agent: ureq::Agent,
}

impl LlamaServer {
    /// Starts `llama-server` from `llama` as `spec` says, logging to `<log_dir>/<name>.log`, and waits
    /// until its model is loaded.
    pub fn start(llama: &LlamaCpp, spec: &ServerSpec, name: &str, log_dir: &Path) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new(llama.binary("llama-server"));
        command
            .arg("-m")
            .arg(&spec.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-t", &spec.threads.to_string(), "-tb", &spec.threads.to_string()])
            .args(["-np", &spec.slots.to_string()])
            .args(["-c", &(spec.slots * spec.ctx_per_slot).to_string()])
            .args(["--cont-batching", "--no-webui"])
            .args(crate::bench::pod::llama_cpp::PINNED_SETTINGS)
            .args(&spec.extra_args);
        let mut process = ManagedProcess::spawn(name, command, log_dir)?;
        let base_url = format!("http://127.0.0.1:{port}");
        process.wait_ready(&format!("{base_url}/health"), READY_TIMEOUT)?;
        Ok(Self { process, base_url, agent: mesh_harness::client::agent(REQUEST_TIMEOUT) })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// Where its output goes.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The model's token ids of `text` (no special tokens added).
    pub fn tokenize(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        #[derive(Deserialize)]
        struct Tokens {
            tokens: Vec<u32>,
        }
        let reply: Tokens = self.post_json("/tokenize", &json!({"content": text, "add_special": false}))?;
        Ok(reply.tokens)
    }

    /// The text of token ids.
    pub fn detokenize(&self, tokens: &[u32]) -> anyhow::Result<String> {
        #[derive(Deserialize)]
        struct Content {
            content: String,
        }
        let reply: Content = self.post_json("/detokenize", &json!({"tokens": tokens}))?;
        Ok(reply.content)
    }

    fn post_json<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<T> {
        let mut response = self
            .agent
            .post(format!("{}{path}", self.base_url))
            .send_json(body)
            .with_context(|| format!("POST {path} to llama-server"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().with_config().limit(64 << 20).read_to_string()?;
        if status != 200 {
            bail!("llama-server {path} answered {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("parsing llama-server's {path} reply"))
    }
}

impl GenTarget for LlamaServer {
    async fn generate(&self, request: GenRequest) -> anyhow::Result<Generation> {
        let agent = self.agent.clone();
        let base_url = self.base_url.clone();
        // ureq blocks; a blocking thread per request, as a thread-per-connection client would. The
        // template is rendered before the generation's clock starts.
        tokio::task::spawn_blocking(move || {
            let prompt = apply_template(&agent, &base_url, &request)?;
            stream_completion(&agent, &format!("{base_url}/completion"), &request, &prompt)
        })
        .await
        .context("the llama-server request thread failed")?
    }
}

/// The prompt llama-server's chat template makes of the request's messages (`POST /apply-template`).
fn apply_template(agent: &ureq::Agent, base_url: &str, request: &GenRequest) -> anyhow::Result<String> {
    #[derive(Deserialize)]
    struct Rendered {
        prompt: String,
    }
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": request.user}));
    let mut response = agent
        .post(format!("{base_url}/apply-template"))
        .send_json(json!({ "messages": messages }))
        .context("POST /apply-template to llama-server")?;
    let rendered: Rendered =
        serde_json::from_str(&response.body_mut().with_config().limit(64 << 20).read_to_string()?)
            .context("parsing llama-server's /apply-template reply")?;
    Ok(rendered.prompt)
}

/// One streamed `POST /completion`, read event by event until the final one or the deadline.
fn stream_completion(
    agent: &ureq::Agent,
    url: &str,
    request: &GenRequest,
    prompt: &str,
) -> anyhow::Result<Generation> {
    let mut generation = Generation::begin();
    let timeout = match request.deadline {
        Some(deadline) if deadline <= generation.started => {
            generation.cut = true;
            return Ok(generation);
        }
        Some(deadline) => deadline - generation.started,
        None => REQUEST_TIMEOUT,
    };
    let body = json!({
        "prompt": prompt,
        "n_predict": request.max_tokens,
        "temperature": 0.0,
        "ignore_eos": request.ignore_eos,
        "cache_prompt": true,
        "stream": true,
    });
    let sent = agent.post(url).config().timeout_global(Some(timeout)).build().send_json(&body);
    let response = match sent {
        Ok(response) => response,
        Err(ureq::Error::Timeout(_)) if request.deadline.is_some() => {
            generation.cut = true;
            generation.finished = Instant::now();
            return Ok(generation);
        }
        Err(e) => return Err(e).context("sending a completion request to llama-server"),
    };
    let status = response.status().as_u16();
    let mut reader = BufReader::new(response.into_body().into_reader());
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) if request.deadline.is_some_and(|d| Instant::now() + Duration::from_millis(50) >= d) => {
                generation.cut = true;
                break;
            }
            Err(e) => return Err(e).context("reading llama-server's event stream"),
        }
        let Some(data) = line.trim_end().strip_prefix("data: ") else {
            if status != 200 && !line.trim().is_empty() {
                bail!("llama-server answered {status}: {}", line.trim());
            }
            continue;
        };
        let event: Event = serde_json::from_str(data).with_context(|| format!("parsing the event {data}"))?;
        if let Some(error) = event.error {
            bail!("llama-server failed the request: {error}");
        }
        if !event.content.is_empty() {
            generation.arrivals.push(Instant::now());
        }
        if let Some(t) = event.timings {
            generation.cached_prompt_tokens = t.cache_n;
            generation.prompt_tokens = t.prompt_n + t.cache_n;
            generation.completion_tokens = t.predicted_n;
            generation.prefill = Duration::from_secs_f64(t.prompt_ms.max(0.0) / 1000.0);
            if t.predicted_n > 1 && t.predicted_per_second.is_finite() {
                generation.decode_tok_s = Some(t.predicted_per_second);
            }
            generation.draft_tokens = t.draft_n;
            generation.accepted_draft_tokens = t.draft_n_accepted;
        }
        if event.stop {
            break;
        }
    }
    if status != 200 {
        bail!("llama-server answered {status}");
    }
    generation.finished = Instant::now();
    Ok(generation)
}

/// One streamed event of `/completion` (only the fields read).
#[derive(Deserialize)]
struct Event {
    /// The text of this token (empty in the final event).
    #[serde(default)]
    content: String,
    /// True in the final event.
    #[serde(default)]
    stop: bool,
    /// The slot's figures, in the final event.
    timings: Option<Timings>,
    /// Why the request failed, in an error event.
    error: Option<serde_json::Value>,
}

/// llama-server's `timings` object.
#[derive(Deserialize)]
struct Timings {
    /// Prompt tokens taken from the slot's cache.
    #[serde(default)]
    cache_n: u32,
    /// Prompt tokens computed.
    #[serde(default)]
    prompt_n: u32,
    /// Milliseconds computing them.
    #[serde(default)]
    prompt_ms: f64,
    /// Tokens generated.
    #[serde(default)]
    predicted_n: u32,
    /// Generated tokens per second.
    #[serde(default)]
    predicted_per_second: f64,
    /// Speculative decoding: draft tokens proposed (absent without speculation).
    #[serde(default)]
    draft_n: u32,
    /// Speculative decoding: draft tokens accepted.
    #[serde(default)]
    draft_n_accepted: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_events_carry_the_timings() {
        let data = r#"{"content":"","stop":true,"timings":{"cache_n":1000,"prompt_n":24,"prompt_ms":120.5,
            "predicted_n":64,"predicted_ms":500.0,"predicted_per_second":128.0,"draft_n":10,"draft_n_accepted":7}}"#;
        let event: Event = serde_json::from_str(data).expect("parse");
        assert!(event.stop);
        let t = event.timings.expect("timings");
        assert_eq!(
            (t.cache_n, t.prompt_n, t.predicted_n, t.draft_n, t.draft_n_accepted),
            (1000, 24, 64, 10, 7)
        );
        let token: Event = serde_json::from_str(r#"{"content":" the","stop":false}"#).expect("parse");
        assert!(!token.stop && token.timings.is_none() && token.error.is_none());
        let failed: Event =
            serde_json::from_str(r#"{"error":{"code":400,"message":"too long"}}"#).expect("parse");
        assert!(failed.error.is_some());
    }
}
