//! A small blocking HTTP client for the mesh's OpenAI endpoint, plain and streamed.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// The CA that `https://` URLs of this process's meshes are verified against (the latest TLS mesh
/// started sets it; plain `http://` URLs ignore it).
static MESH_CA: std::sync::Mutex<Option<Vec<u8>>> = std::sync::Mutex::new(None);

/// The certificate and key (PEM) [`agent`] presents (the latest TLS mesh's read-only `metrics` one).
static DEFAULT_CLIENT: std::sync::Mutex<Option<(Vec<u8>, Vec<u8>)>> = std::sync::Mutex::new(None);

/// Trusts `ca_pem` for the `https://` URLs of every agent made from now on.
pub fn trust_mesh_ca(ca_pem: &[u8]) {
    *MESH_CA.lock().unwrap_or_else(|p| p.into_inner()) = Some(ca_pem.to_vec());
}

/// Makes [`agent`] present `cert` and `key` (PEM) to TLS servers from now on.
pub fn present_by_default(cert: &[u8], key: &[u8]) {
    *DEFAULT_CLIENT.lock().unwrap_or_else(|p| p.into_inner()) = Some((cert.to_vec(), key.to_vec()));
}

/// An HTTP agent that returns error statuses as responses instead of errors. It trusts the mesh CA
/// given to [`trust_mesh_ca`] and presents the certificate given to [`present_by_default`], if any (a
/// tenant's client needs none; the core and the pod want one).
pub fn agent(timeout: Duration) -> ureq::Agent {
    let client = DEFAULT_CLIENT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    agent_with_certificate(timeout, client.as_ref().map(|(cert, key)| (cert.as_slice(), key.as_slice())))
}

/// The same, presenting `client` (a certificate and key, PEM) to TLS servers.
pub fn agent_with_certificate(timeout: Duration, client: Option<(&[u8], &[u8])>) -> ureq::Agent {
    use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
    let mut tls = TlsConfig::builder();
    let ca = MESH_CA.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(ca) = ca {
        let roots: Vec<_> = ureq::tls::parse_pem(&ca)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                _ => None,
            })
            .collect();
        tls = tls.root_certs(RootCerts::new_with_certs(&roots));
    }
    if let Some((cert, key)) = client {
        if let (Ok(cert), Ok(key)) = (Certificate::from_pem(cert), PrivateKey::from_pem(key)) {
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&[cert], key)));
        }
    }
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .tls_config(tls.build())
        .build()
        .into()
}

/// A complete response.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: HashMap<String, String>,
    /// The body as text.
    pub body: String,
    /// Time from sending to the end of the body.
    pub elapsed: Duration,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// The body parsed as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// `choices[0].message.content` of a chat completion.
    pub fn content(&self) -> Option<String> {
        self.json()["choices"][0]["message"]["content"].as_str().map(str::to_owned)
    }
}

/// A streamed response: every `data:` event with the time it arrived.
#[derive(Clone, Debug)]
pub struct StreamReply {
    /// HTTP status.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: HashMap<String, String>,
    /// `(time since the request was sent, data payload)` per event, in arrival order.
    pub events: Vec<(Duration, String)>,
}

impl StreamReply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// Whether the stream ended with `data: [DONE]`.
    pub fn finished(&self) -> bool {
        self.events.last().is_some_and(|(_, data)| data == "[DONE]")
    }

    /// The concatenated `delta.content` of every chunk of choice 0.
    pub fn content(&self) -> String {
        self.content_of(0)
    }

    /// The concatenated `delta.content` of every chunk of choice `index`.
    pub fn content_of(&self, index: u64) -> String {
        self.choice_deltas(index).filter_map(|c| c["delta"]["content"].as_str().map(str::to_owned)).collect()
    }

    /// The `logprobs.content` entries of choice `index`'s chunks, in order.
    pub fn logprobs_of(&self, index: u64) -> Vec<serde_json::Value> {
        self.choice_deltas(index)
            .flat_map(|c| c["logprobs"]["content"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    fn choice_deltas(&self, index: u64) -> impl Iterator<Item = serde_json::Value> + '_ {
        self.chunks()
            .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
            .filter(move |choice| choice["index"].as_u64() == Some(index))
    }

    /// The token counts of the chunks that carry them (`stream_options.include_usage`), in order.
    pub fn usages(&self) -> Vec<serde_json::Value> {
        self.chunks().filter(|c| !c["usage"].is_null()).map(|c| c["usage"].clone()).collect()
    }

    /// Events that carry some text, with their arrival times.
    pub fn content_arrivals(&self) -> Vec<Duration> {
        self.events
            .iter()
            .filter(|(_, data)| {
                serde_json::from_str::<serde_json::Value>(data)
                    .ok()
                    .and_then(|c| c["choices"][0]["delta"]["content"].as_str().map(|s| !s.is_empty()))
                    .unwrap_or(false)
            })
            .map(|(at, _)| *at)
            .collect()
    }

    fn chunks(&self) -> impl Iterator<Item = serde_json::Value> + '_ {
        self.events.iter().filter_map(|(_, data)| serde_json::from_str(data).ok())
    }
}

/// A client of one OpenAI-compatible base URL.
#[derive(Clone, Debug)]
pub struct ChatClient {
    agent: ureq::Agent,
    base_url: String,
    api_key: Option<String>,
}

impl ChatClient {
    /// A client of `base_url` (e.g. `http://127.0.0.1:8787`) sending `api_key` as a bearer token.
    pub fn new(base_url: &str, api_key: Option<&str>) -> Self {
        Self {
            agent: agent(Duration::from_secs(300)),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.map(str::to_owned),
        }
    }

    /// A POST to `path`, declared JSON unless `content_type` says otherwise.
    fn post(&self, path: &str, content_type: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let request =
            self.agent.post(format!("{}{path}", self.base_url)).header("content-type", content_type);
        match &self.api_key {
            Some(key) => request.header("authorization", format!("Bearer {key}")),
            None => request,
        }
    }

    /// `POST /v1/chat/completions` with `body` sent chunked (no `Content-Length`).
    pub fn chat_chunked(&self, body: Vec<u8>) -> anyhow::Result<Reply> {
        let started = Instant::now();
        let mut reader = std::io::Cursor::new(body);
        let mut response = self
            .post("/v1/chat/completions", "application/json")
            .send(ureq::SendBody::from_reader(&mut reader))
            .context("sending a chunked POST")?;
        let headers = header_map(response.headers());
        let body = response.body_mut().read_to_string().context("reading the reply")?;
        Ok(Reply { status: response.status().as_u16(), headers, body, elapsed: started.elapsed() })
    }

    /// `POST /v1/chat/completions` with a raw body.
    pub fn chat_raw(&self, body: &str) -> anyhow::Result<Reply> {
        self.send("/v1/chat/completions", body, &[])
    }

    /// `POST /v1/chat/completions` with `Cache-Control: only-if-cached`: a cached answer or 504.
    pub fn chat_only_if_cached(&self, body: &serde_json::Value) -> anyhow::Result<Reply> {
        self.send("/v1/chat/completions", &body.to_string(), &[("cache-control", "only-if-cached")])
    }

    /// `POST /v1/chat/completions` with extra request headers (`cache-control`, `if-none-match`...).
    pub fn chat_with_headers(
        &self,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        self.send("/v1/chat/completions", &body.to_string(), headers)
    }

    /// `POST /v1/cache/invalidate` of the answer under `key`.
    pub fn invalidate(&self, key: &str) -> anyhow::Result<Reply> {
        self.send("/v1/cache/invalidate", &serde_json::json!({ "key": key }).to_string(), &[])
    }

    /// `POST /v1/cache/invalidate` of every answer carrying the caller's cache tag `tag`, regenerating the
    /// hottest when `refresh`.
    pub fn invalidate_tag(&self, tag: &str, refresh: bool) -> anyhow::Result<Reply> {
        let body = serde_json::json!({ "tag": tag, "refresh": refresh });
        self.send("/v1/cache/invalidate", &body.to_string(), &[])
    }

    fn send(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> anyhow::Result<Reply> {
        let started = Instant::now();
        let declared = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("content-type"));
        let mut request = self.post(path, declared.map_or("application/json", |(_, value)| value));
        for (name, value) in headers.iter().filter(|(name, _)| !name.eq_ignore_ascii_case("content-type")) {
            request = request.header(*name, *value);
        }
        let mut response = request.send(body).with_context(|| format!("sending POST {path}"))?;
        let headers = header_map(response.headers());
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .with_context(|| format!("reading the reply to POST {path}"))?;
        Ok(Reply { status: response.status().as_u16(), headers, body, elapsed: started.elapsed() })
    }

    /// `POST` a JSON body to `path` (`/v1/completions`, ...).
    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> anyhow::Result<Reply> {
        self.send(path, &body.to_string(), &[])
    }

    /// `POST` a JSON body to `path` with extra request headers.
    pub fn post_json_with_headers(
        &self,
        path: &str,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        self.send(path, &body.to_string(), headers)
    }

    /// `POST /v1/chat/completions` of `body` (a streamed request), reading only the first bytes of the
    /// answer before hanging up: a client that leaves a generation. The status.
    pub fn chat_and_hang_up(&self, body: &serde_json::Value) -> anyhow::Result<u16> {
        let mut response = self.post("/v1/chat/completions", "application/json").send(&body.to_string())?;
        let status = response.status().as_u16();
        let mut first = [0u8; 16];
        let _ = std::io::Read::read(&mut response.body_mut().as_reader(), &mut first);
        Ok(status)
    }

    /// `POST /v1/chat/completions` with a JSON body.
    pub fn chat(&self, body: &serde_json::Value) -> anyhow::Result<Reply> {
        self.chat_raw(&body.to_string())
    }

    /// `POST /v1/chat/completions` with `"stream": true` added, reading events as they arrive.
    pub fn chat_stream(&self, body: &serde_json::Value) -> anyhow::Result<StreamReply> {
        self.chat_stream_with_headers(body, &[])
    }

    /// [`ChatClient::chat_stream`] with extra request headers.
    pub fn chat_stream_with_headers(
        &self,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<StreamReply> {
        self.stream_at("/v1/chat/completions", body, headers)
    }

    /// `POST` `body` with `"stream": true` added to `path`, reading events as they arrive.
    pub fn stream_at(
        &self,
        path: &str,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<StreamReply> {
        let mut body = body.clone();
        body["stream"] = serde_json::Value::Bool(true);
        let started = Instant::now();
        let mut request = self.post(path, "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send(body.to_string()).context("sending stream request")?;
        let status = response.status().as_u16();
        let headers = header_map(response.headers());
        let mut reader = BufReader::new(response.into_body().into_reader());
        let mut events = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).context("reading the event stream")? == 0 {
                break;
            }
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                events.push((started.elapsed(), data.to_owned()));
            }
        }
        Ok(StreamReply { status, headers, events })
    }

    /// `GET` a path, returning the body.
    pub fn get(&self, path: &str) -> anyhow::Result<Reply> {
        let started = Instant::now();
        let mut response = self.agent.get(format!("{}{path}", self.base_url)).call().context("GET")?;
        let headers = header_map(response.headers());
        let body = response.body_mut().read_to_string()?;
        Ok(Reply { status: response.status().as_u16(), headers, body, elapsed: started.elapsed() })
    }
}

fn header_map(headers: &ureq::http::HeaderMap) -> HashMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}
