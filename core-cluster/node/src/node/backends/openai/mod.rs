//! An OpenAI-compatible server as a backend: each generation is one streamed `POST
//! {url}/chat/completions` (`{url}/completions` for a text completion), read as the pod's events. Before the first token a failed call is tried
//! again (after a jittered backoff) and a server that sends nothing within the first-token timeout has
//! failed; after it, the stream is relayed as it comes and dropping it (the caller left) closes the
//! connection, which is how the server learns to stop. Health is a `GET {url}/models`.
//!
//! # Layout
//! - [`request`]: the body sent, and the parameters refused rather than dropped.
//! - [`sse`]: server-sent events, bytes in, events' data out.
//! - [`chunks`]: the stream's chunks as [`GenerateEvent`]s.
//! - [`errors`]: the server's refusals and transport failures as the core's errors.

pub mod chunks;
pub mod errors;
pub mod request;
pub mod sse;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::StreamExt;
use proto::inference::{GenerateEvent, GenerateRequest};
use reqwest::header::{HeaderValue, AUTHORIZATION};
use shared::trace::TraceParent;
use tonic::{Code, Status};

use self::chunks::ChunkReader;
use self::sse::SseDecoder;
use super::settings::{OpenAiBackendSpec, OpenAiTimeouts};
use super::EventStream;
use crate::node::error::CoreError;

/// How long a health probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The first retry's backoff; each later one doubles it, and each is jittered by up to half again.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A client of one OpenAI-compatible server.
pub struct OpenAiClient {
    spec: OpenAiBackendSpec,
    http: reqwest::Client,
    /// `Bearer <key>`, marked sensitive so that no debug output shows it.
    authorization: Option<HeaderValue>,
    timeouts: OpenAiTimeouts,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("model", &self.spec.model)
            .field("url", &self.spec.url)
            .field("has_key", &self.authorization.is_some())
            .finish()
    }
}

impl OpenAiClient {
    /// A client of the server `spec` names, reading its API key and CA certificate now.
    pub fn new(spec: &OpenAiBackendSpec, timeouts: OpenAiTimeouts) -> Result<Self, CoreError> {
        let config =
            |what: String| CoreError::Config(format!("backend {} for {}: {what}", spec.url, spec.model));
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .connect_timeout(timeouts.connect)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(ca) = &spec.ca {
            let pem =
                std::fs::read(ca).map_err(|e| config(format!("cannot read the CA {}: {e}", ca.display())))?;
            let certificate = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| config(format!("the CA {}: {e}", ca.display())))?;
            builder = builder.tls_built_in_root_certs(false).add_root_certificate(certificate);
        }
        let http = builder.build().map_err(|e| config(e.to_string()))?;
        let authorization = match &spec.key_file {
            None => None,
            Some(path) => {
                let key = std::fs::read_to_string(path)
                    .map_err(|e| config(format!("cannot read the API key file {}: {e}", path.display())))?;
                let key = key.trim();
                if key.is_empty() {
                    return Err(config(format!("the API key file {} is empty", path.display())));
                }
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    config(format!("the API key in {} is not a header value", path.display()))
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Self { spec: spec.clone(), http, authorization, timeouts })
    }

    /// Whether this server serves `model` (as the mesh names it).
    pub fn serves(&self, model: &str) -> bool {
        self.spec.model.eq_ignore_ascii_case(model)
    }

    /// Starts a generation: its first events have arrived when this returns.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        trace: &TraceParent,
    ) -> Result<EventStream, CoreError> {
        let body = request::body(&request, &self.spec.upstream_model)?;
        let url = format!("{}/{}", self.spec.url, request::path(&request));
        let prompt_estimate = super::prediction::predicted_work(&request).prompt;
        let prompt_estimate = u32::try_from(prompt_estimate).unwrap_or(u32::MAX);
        let mut backoff = FIRST_BACKOFF;
        for attempt in 0.. {
            match self.start(&url, &body, trace, prompt_estimate).await {
                Ok(stream) => return Ok(stream),
                Err((error, retry)) if retry && attempt < self.timeouts.retries => {
                    let jittered = backoff.mul_f64(1.0 + fastrand::f64() * 0.5);
                    tracing::info!(backend = %self.spec.url, attempt, error = %error, backoff_ms = jittered.as_millis() as u64, "backend failed before the first token; trying again");
                    tokio::time::sleep(jittered).await;
                    backoff *= 2;
                }
                Err((error, _)) => return Err(error),
            }
        }
        unreachable!("the loop returns")
    }

    /// One try: the call, then its events up to the first that says anything, within the first-token
    /// timeout. An error comes with whether another try may succeed.
    async fn start(
        &self,
        url: &str,
        body: &serde_json::Value,
        trace: &TraceParent,
        prompt_estimate: u32,
    ) -> Result<EventStream, (CoreError, bool)> {
        let sent = Instant::now();
        let deadline = tokio::time::Instant::from_std(sent + self.timeouts.first_token);
        let late = || {
            let message = format!("no first token within {} ms", self.timeouts.first_token.as_millis());
            (CoreError::Backend { code: Code::Unavailable, message }, true)
        };
        let mut call = self.http.post(url).header(shared::trace::TRACEPARENT, trace.header()).json(body);
        if let Some(authorization) = &self.authorization {
            call = call.header(AUTHORIZATION, authorization.clone());
        }
        let response = tokio::time::timeout_at(deadline, call.send())
            .await
            .map_err(|_| late())?
            .map_err(|e| (errors::from_transport(&e), true))?;
        let status = response.status();
        if !status.is_success() {
            let text = tokio::time::timeout_at(deadline, response.text()).await.ok().and_then(Result::ok);
            return Err((
                errors::from_status(status, &text.unwrap_or_default()),
                errors::worth_retrying(status),
            ));
        }
        let mut relay = Relay {
            bytes: Box::pin(response.bytes_stream()),
            decoder: SseDecoder::default(),
            reader: ChunkReader::new(sent, prompt_estimate),
            pending: VecDeque::new(),
            ended: false,
        };
        while relay.pending.is_empty() && !relay.ended {
            tokio::time::timeout_at(deadline, relay.fill()).await.map_err(|_| late())?;
        }
        // A failure before anything was said: a cut connection is worth another try, a malformed
        // answer or an error the server sent is not.
        if let Some(Err(_)) = relay.pending.front() {
            if let Some(Err(error)) = relay.pending.pop_front() {
                let retry = matches!(error, CoreError::Backend { code: Code::Unavailable, .. });
                return Err((error, retry));
            }
        }
        Ok(Box::pin(futures::stream::unfold(relay, |mut relay| async move {
            loop {
                if let Some(item) = relay.pending.pop_front() {
                    return Some((item.map_err(status_of), relay));
                }
                if relay.ended {
                    return None;
                }
                relay.fill().await;
            }
        })))
    }

    /// Whether the server answers `GET {url}/models`.
    pub async fn probe(&self) -> bool {
        let mut call = self.http.get(format!("{}/models", self.spec.url)).timeout(PROBE_TIMEOUT);
        if let Some(authorization) = &self.authorization {
            call = call.header(AUTHORIZATION, authorization.clone());
        }
        matches!(call.send().await, Ok(response) if response.status().is_success())
    }
}

/// A backend's failure as its stream's status, its message as the backend's own (the core's error
/// adds its prefix once, where it is reported).
fn status_of(error: CoreError) -> Status {
    match error {
        CoreError::Backend { code, message } => Status::new(code, message),
        other => Status::from(other),
    }
}

/// The stream being relayed: its bytes, their decoding, and the events read but not yet passed on.
struct Relay {
    bytes: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    decoder: SseDecoder,
    reader: ChunkReader,
    pending: VecDeque<Result<GenerateEvent, CoreError>>,
    /// No more events: `Done` or an error is the last one pending.
    ended: bool,
}

impl Relay {
    /// Reads the next bytes into events; after `Done`, a failure, or the end of the bytes, `ended`.
    async fn fill(&mut self) {
        let fail = |relay: &mut Relay, error: CoreError| {
            relay.pending.push_back(Err(error));
            relay.ended = true;
        };
        match self.bytes.next().await {
            None => fail(
                self,
                CoreError::Backend {
                    code: Code::Unavailable,
                    message: "the backend's stream ended before [DONE]".into(),
                },
            ),
            Some(Err(e)) => fail(self, errors::from_transport(&e)),
            Some(Ok(bytes)) => match self.decoder.push(&bytes) {
                Err(e) => fail(
                    self,
                    CoreError::Backend {
                        code: Code::Internal,
                        message: format!("the backend's stream: {e}"),
                    },
                ),
                Ok(events) => {
                    for data in events {
                        match self.reader.read(&data) {
                            Ok(read) => self.pending.extend(read.into_iter().map(Ok)),
                            Err(e) => return fail(self, e),
                        }
                        if self.reader.finished() {
                            self.ended = true;
                            return;
                        }
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
