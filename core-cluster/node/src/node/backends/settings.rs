//! What configures the OpenAI-compatible backends: one `--openai-backend` value per server, and the
//! timeouts and retries they share.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// One OpenAI-compatible server, as `--openai-backend` gives it:
/// `MODEL=URL[;key_file=PATH][;ca=PATH][;upstream_model=NAME]`.
///
/// `URL` is the server's API base (`http://127.0.0.1:8080/v1`); generations go to
/// `URL/chat/completions`. `key_file` holds the API key sent as `Authorization: Bearer` (read at start,
/// never logged); `ca` is a PEM CA certificate trusted for `https://` in place of the system's roots;
/// `upstream_model` is the name the server knows the model by (default: `MODEL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiBackendSpec {
    /// The model, as the mesh names it.
    pub model: String,
    /// The API base URL.
    pub url: String,
    /// The file holding the API key.
    pub key_file: Option<PathBuf>,
    /// The CA certificate to trust instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// The model's name at the server.
    pub upstream_model: String,
}

impl std::str::FromStr for OpenAiBackendSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.split(';').map(str::trim);
        let head = parts.next().unwrap_or_default();
        let (model, url) = head
            .split_once('=')
            .ok_or_else(|| format!("{head:?} is not MODEL=URL"))
            .map(|(m, u)| (m.trim().to_owned(), u.trim().trim_end_matches('/').to_owned()))?;
        if model.is_empty() {
            return Err(format!("{head:?} names no model"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("backend URL {url:?} must start with http:// or https://"));
        }
        let mut spec =
            OpenAiBackendSpec { upstream_model: model.clone(), model, url, key_file: None, ca: None };
        for option in parts.filter(|p| !p.is_empty()) {
            let (name, value) =
                option.split_once('=').ok_or_else(|| format!("{option:?} is not name=value"))?;
            let value = value.trim();
            match name.trim() {
                "key_file" => spec.key_file = Some(PathBuf::from(value)),
                "ca" => spec.ca = Some(PathBuf::from(value)),
                "upstream_model" => spec.upstream_model = value.to_owned(),
                other => {
                    return Err(format!("unknown backend option {other:?} (key_file, ca, upstream_model)"))
                }
            }
        }
        Ok(spec)
    }
}

/// Which lighter model answers for a model that cannot (`--fallback-models`), and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackPolicy {
    /// Model -> its fallback.
    pub models: BTreeMap<String, String>,
    /// Fall back before trying when every backend's predicted time to first token is longer than this.
    pub ttft_target: Option<Duration>,
}

impl FallbackPolicy {
    /// The policy from `PRIMARY=FALLBACK` pairs and a time-to-first-token target in ms (0: none).
    pub fn new(pairs: &[(String, String)], ttft_target_ms: u64) -> Result<Self, String> {
        let mut models = BTreeMap::new();
        for (model, fallback) in pairs {
            if model == fallback {
                return Err(format!("{model} cannot be its own fallback"));
            }
            if models.insert(model.clone(), fallback.clone()).is_some() {
                return Err(format!("{model} has two fallbacks"));
            }
        }
        let ttft_target = (ttft_target_ms > 0).then(|| Duration::from_millis(ttft_target_ms));
        Ok(Self { models, ttft_target })
    }

    /// `model`'s fallback, if it has one.
    pub fn fallback_for(&self, model: &str) -> Option<&str> {
        self.models.get(model).map(String::as_str)
    }
}

/// Parses one `PRIMARY=FALLBACK` item of `--fallback-models`.
pub fn parse_fallback(item: &str) -> Result<(String, String), String> {
    let (model, fallback) =
        item.split_once('=').ok_or_else(|| format!("{item:?} is not PRIMARY=FALLBACK"))?;
    let (model, fallback) = (model.trim(), fallback.trim());
    if model.is_empty() || fallback.is_empty() {
        return Err(format!("{item:?} names no model"));
    }
    Ok((model.to_owned(), fallback.to_owned()))
}

/// How a generation picks among the backends of its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Routing {
    /// Where it is predicted to finish first (queued work and its own at the measured rates).
    #[default]
    PredictedTime,
    /// Each in turn (for comparison).
    RoundRobin,
}

/// The timeouts and retries of every OpenAI-compatible backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAiTimeouts {
    /// How long connecting (TCP and TLS) may take.
    pub connect: Duration,
    /// How long the server may take to send the first token once asked.
    pub first_token: Duration,
    /// Attempts after the first, made only before any token has come (with jittered backoff).
    pub retries: u32,
}

impl Default for OpenAiTimeouts {
    fn default() -> Self {
        Self { connect: Duration::from_secs(2), first_token: Duration::from_secs(30), retries: 2 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_is_model_equals_url_with_options() {
        let spec: OpenAiBackendSpec =
            "gemma=https://models.example/v1/;key_file=/run/key; ca=/etc/ca.pem;upstream_model=gemma-3"
                .parse()
                .expect("parses");
        assert_eq!(
            spec,
            OpenAiBackendSpec {
                model: "gemma".into(),
                url: "https://models.example/v1".into(),
                key_file: Some("/run/key".into()),
                ca: Some("/etc/ca.pem".into()),
                upstream_model: "gemma-3".into(),
            }
        );
        let plain: OpenAiBackendSpec = "m=http://127.0.0.1:8080/v1".parse().expect("parses");
        assert_eq!((plain.upstream_model.as_str(), plain.key_file), ("m", None));
    }

    #[test]
    fn fallbacks_are_pairs_of_other_models() {
        let pairs = vec![parse_fallback("big = small").expect("pair")];
        let policy = FallbackPolicy::new(&pairs, 1500).expect("policy");
        assert_eq!(policy.fallback_for("big"), Some("small"));
        assert_eq!(policy.fallback_for("small"), None);
        assert_eq!(policy.ttft_target, Some(Duration::from_millis(1500)));
        assert_eq!(FallbackPolicy::new(&pairs, 0).expect("policy").ttft_target, None);
        assert!(parse_fallback("big").is_err() && parse_fallback("=small").is_err());
        assert!(FallbackPolicy::new(&[("a".into(), "a".into())], 0).is_err());
        assert!(FallbackPolicy::new(&[("a".into(), "b".into()), ("a".into(), "c".into())], 0).is_err());
    }

    #[test]
    fn malformed_backends_are_refused_with_the_reason() {
        for (bad, says) in [
            ("=http://127.0.0.1/v1", "names no model"),
            ("m", "is not MODEL=URL"),
            ("m=127.0.0.1:8080", "must start with http"),
            ("m=http://h/v1;colour=blue", "unknown backend option"),
            ("m=http://h/v1;key_file", "is not name=value"),
        ] {
            let error = bad.parse::<OpenAiBackendSpec>().expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
