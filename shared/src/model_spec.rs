//! What the registry knows about a model beyond its version: its context length, its price, the APIs it
//! serves, and its pool of backends (our pods and OpenAI-compatible servers, each with its capacity).
//!
//! The core's registry holds one [`ModelSpec`] per model (set by `core-node admin register-model` or a
//! config file), the change feed carries every change of it to the regional nodes and the edge, and
//! `/v1/models` lists it beside OpenAI's fields. Prices are integers (micro-dollars per million tokens)
//! so every replica compares and hashes them exactly.

use serde::{Deserialize, Serialize};

/// The most backends one model's pool may list.
pub const MAX_POOL_BACKENDS: usize = 32;

/// An API a model answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// `/v1/chat/completions`: messages in, an assistant message out (instruction-tuned models).
    Chat,
    /// `/v1/completions`: a prompt continued as text (base models).
    Completions,
}

impl ModelApi {
    /// The API's name in flags and in `/v1/models` (`chat`, `completions`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Completions => "completions",
        }
    }
}

impl std::str::FromStr for ModelApi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "chat" => Ok(Self::Chat),
            "completions" => Ok(Self::Completions),
            other => Err(format!("unknown API {other:?} (chat or completions)")),
        }
    }
}

/// How the core calls a backend of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolBackendKind {
    /// One of our inference pods, over gRPC (`http://host:port`).
    Pod,
    /// An OpenAI-compatible server (`http(s)://host:port/v1`, the API base).
    Openai,
}

/// One backend of a model's pool.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolBackend {
    /// How it is called.
    pub kind: PoolBackendKind,
    /// Where: a pod's gRPC URL, or an OpenAI-compatible server's API base.
    pub url: String,
    /// Generations it takes at once from one core node; 0 means as many as it accepts.
    #[serde(default)]
    pub capacity: u32,
    /// The server's own name for the model (OpenAI-compatible only; empty means the registry's name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub upstream_model: String,
    /// A file on each core host holding the API key sent as a bearer token (never the key itself).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_file: String,
    /// A PEM CA file on each core host trusted for `https://` instead of the system's roots.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_file: String,
    /// The model version it serves (a canary's trial on new weights); 0: every version that has no
    /// backends of its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl std::str::FromStr for PoolBackend {
    type Err = String;

    /// `KIND=URL[;capacity=N][;upstream_model=NAME][;key_file=PATH][;ca=PATH][;version=V]`, `KIND` being
    /// `pod` or `openai`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(';').map(str::trim);
        let head = parts.next().unwrap_or_default();
        let (kind, url) = head.split_once('=').ok_or_else(|| format!("backend {s:?}: expected KIND=URL"))?;
        let kind = match kind.trim() {
            "pod" => PoolBackendKind::Pod,
            "openai" => PoolBackendKind::Openai,
            other => return Err(format!("backend {s:?}: unknown kind {other:?} (pod or openai)")),
        };
        let mut backend = PoolBackend {
            kind,
            url: url.trim().trim_end_matches('/').to_owned(),
            capacity: 0,
            upstream_model: String::new(),
            key_file: String::new(),
            ca_file: String::new(),
            version: 0,
        };
        for option in parts.filter(|p| !p.is_empty()) {
            let (name, value) = option
                .split_once('=')
                .ok_or_else(|| format!("backend {s:?}: {option:?} is not NAME=VALUE"))?;
            let value = value.trim().to_owned();
            match name.trim() {
                "capacity" => {
                    backend.capacity =
                        value.parse().map_err(|_| format!("backend {s:?}: capacity is not an integer"))?
                }
                "upstream_model" => backend.upstream_model = value,
                "key_file" => backend.key_file = value,
                "ca" => backend.ca_file = value,
                "version" => {
                    backend.version =
                        value.parse().map_err(|_| format!("backend {s:?}: version is not an integer"))?
                }
                other => return Err(format!("backend {s:?}: unknown option {other:?}")),
            }
        }
        backend.validate()?;
        Ok(backend)
    }
}

impl PoolBackend {
    /// Refuses a backend the core could not call.
    pub fn validate(&self) -> Result<(), String> {
        let url = &self.url;
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 2048 {
            return Err(format!("backend URL {url:?} must be http:// or https:// (at most 2048 bytes)"));
        }
        if self.kind == PoolBackendKind::Pod
            && !(self.upstream_model.is_empty() && self.key_file.is_empty() && self.ca_file.is_empty())
        {
            return Err(format!(
                "pod backend {url:?}: upstream_model, key_file and ca are for openai backends"
            ));
        }
        if [&self.upstream_model, &self.key_file, &self.ca_file].iter().any(|v| v.len() > 1024) {
            return Err(format!("backend {url:?}: an option is longer than 1024 bytes"));
        }
        Ok(())
    }
}

/// A model's metadata in the registry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The longest prompt plus answer it takes, in tokens; 0 when unknown.
    #[serde(default)]
    pub context_length: u32,
    /// Price of prompt tokens, micro-dollars per million tokens (for budgets).
    #[serde(default)]
    pub input_micro_usd_per_mtok: u64,
    /// Price of generated tokens, micro-dollars per million tokens.
    #[serde(default)]
    pub output_micro_usd_per_mtok: u64,
    /// The APIs it answers, sorted; empty means chat only.
    #[serde(default)]
    pub apis: Vec<ModelApi>,
    /// Its backends, beside those a core node's flags give it.
    #[serde(default)]
    pub backends: Vec<PoolBackend>,
}

impl ModelSpec {
    /// The APIs the model answers (chat when none is listed).
    pub fn served_apis(&self) -> Vec<ModelApi> {
        if self.apis.is_empty() {
            vec![ModelApi::Chat]
        } else {
            self.apis.clone()
        }
    }

    /// Whether the model answers `api`.
    pub fn serves(&self, api: ModelApi) -> bool {
        self.served_apis().contains(&api)
    }

    /// The spec in its canonical form (APIs sorted and unique), or why it is refused.
    pub fn validated(mut self) -> Result<Self, String> {
        self.apis.sort_unstable();
        self.apis.dedup();
        if self.context_length > 100_000_000 {
            return Err(format!("context length {} is past 100,000,000 tokens", self.context_length));
        }
        if self.backends.len() > MAX_POOL_BACKENDS {
            return Err(format!("a pool holds at most {MAX_POOL_BACKENDS} backends"));
        }
        for backend in &self.backends {
            backend.validate()?;
        }
        let mut seen: Vec<(PoolBackendKind, &str)> = Vec::new();
        for backend in &self.backends {
            let id = (backend.kind, backend.url.as_str());
            if seen.contains(&id) {
                return Err(format!("backend {:?} is listed twice", backend.url));
            }
            seen.push(id);
        }
        Ok(self)
    }

    /// The model's metadata as `/v1/models` adds it to OpenAI's fields (no key or CA paths).
    pub fn openai_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let per_mtok = |micros: u64| micros as f64 / 1e6;
        let pool: Vec<serde_json::Value> = self
            .backends
            .iter()
            .map(|b| serde_json::json!({"kind": b.kind, "url": b.url, "capacity": b.capacity}))
            .collect();
        let mut fields = serde_json::Map::new();
        let apis: Vec<&str> = self.served_apis().into_iter().map(ModelApi::as_str).collect();
        fields.insert("apis".into(), apis.into());
        if self.context_length > 0 {
            fields.insert("context_length".into(), self.context_length.into());
        }
        fields.insert(
            "pricing".into(),
            serde_json::json!({
                "input_usd_per_mtok": per_mtok(self.input_micro_usd_per_mtok),
                "output_usd_per_mtok": per_mtok(self.output_micro_usd_per_mtok),
            }),
        );
        fields.insert("backends".into(), pool.into());
        fields
    }
}

/// Parses a price in dollars per million tokens (`0.15`) into micro-dollars.
pub fn parse_usd_per_mtok(text: &str) -> Result<u64, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("price {text:?} is not a number"))?;
    if !value.is_finite() || !(0.0..=1e9).contains(&value) {
        return Err(format!("price {text:?} must be between 0 and 1e9 dollars per million tokens"));
    }
    Ok((value * 1e6).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_parses_with_its_options_and_refuses_what_it_cannot_be() {
        let backend: PoolBackend = "openai=https://api.example/v1/;capacity=8;upstream_model=gpt;key_file=/k"
            .parse()
            .expect("valid");
        assert_eq!(backend.kind, PoolBackendKind::Openai);
        assert_eq!((backend.url.as_str(), backend.capacity), ("https://api.example/v1", 8));
        assert_eq!((backend.upstream_model.as_str(), backend.key_file.as_str()), ("gpt", "/k"));
        let pod: PoolBackend = "pod=http://127.0.0.1:7301".parse().expect("valid");
        assert_eq!((pod.kind, pod.capacity, pod.version), (PoolBackendKind::Pod, 0, 0));
        let trial: PoolBackend = "pod=http://127.0.0.1:7302;version=3".parse().expect("valid");
        assert_eq!(trial.version, 3);
        for bad in [
            "grpc=http://x",
            "pod=ftp://x",
            "pod",
            "pod=http://x;capacity=lots",
            "pod=http://x;key_file=/k",
            "openai=http://x;colour=red",
            "pod=http://x;version=next",
        ] {
            assert!(bad.parse::<PoolBackend>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_spec_is_canonical_and_lists_what_a_client_may_see() {
        let backend: PoolBackend = "openai=http://x/v1;key_file=/secret".parse().expect("valid");
        let spec = ModelSpec {
            context_length: 8192,
            input_micro_usd_per_mtok: parse_usd_per_mtok("0.15").expect("price"),
            output_micro_usd_per_mtok: parse_usd_per_mtok("0.6").expect("price"),
            apis: vec![ModelApi::Completions, ModelApi::Chat, ModelApi::Completions],
            backends: vec![backend.clone()],
        }
        .validated()
        .expect("valid");
        assert_eq!(spec.apis, [ModelApi::Chat, ModelApi::Completions]);
        let fields = serde_json::Value::Object(spec.openai_fields());
        assert_eq!(fields["apis"], serde_json::json!(["chat", "completions"]));
        assert_eq!(fields["pricing"]["input_usd_per_mtok"], 0.15);
        assert_eq!(fields["context_length"], 8192);
        assert!(!fields.to_string().contains("secret"), "key paths stay private: {fields}");
        let twice = ModelSpec { backends: vec![backend.clone(), backend], ..Default::default() };
        assert!(twice.validated().is_err());
        assert!(ModelSpec::default().serves(ModelApi::Chat));
        assert!(!ModelSpec::default().serves(ModelApi::Completions));
        assert!(parse_usd_per_mtok("NaN").is_err() && parse_usd_per_mtok("-1").is_err());
    }
}
