//! The mesh's edge tier: a Cloudflare Worker written in Rust (compiled to wasm32, run by workerd) that
//! answers exact repeats of OpenAI chat-completion requests from the data center's cache and relays
//! everything else to the regional tier.
//!
//! Routes: `POST /v1/chat/completions`, `GET /healthz`, `GET /v1/edge/status` (this isolate's hot set
//! and table; it also starts a hot-set pull when one is due). Every error is OpenAI-shaped JSON.
//!
//! # Layout
//! - [`entry`]: the `#[event(fetch)]` entry point, alone with its `unsafe` glue; it calls [`route`].
//! - [`chat`]: the chat-completions handler (auth, validation, L1 lookup, relay, fill).
//! - [`config`]: wrangler vars and secrets, checked on every request.
//! - [`core_view`]: the core's invalidations and model versions as this isolate knows them (pulled from
//!   the regional tier's `/v1/changes` within a bound), checked before any cached answer is served.
//! - [`l1`]: the exact-match cache in the Workers Cache API.
//! - [`recent`]: answers this isolate stored in L1 lately, kept in memory too.
//! - [`signature_checks`]: the hot entries this isolate has found signed by the core (checked at first use).
//! - [`hot_set`]: the regional tier's hot set in this isolate: exact and small-embedding semantic hits;
//!   [`dot`] its int8 (simd128) scan; [`hot_set_sync`] the bundled table, pulls and the KV copy.
//! - [`bench_scan`]: a tier-only route that times the hot-set scan in wasm for `mesh bench edge`.
//! - [`regional`]: calls to the regional tier, nearest healthy node first ([`node_health`]), with a
//!   timeout and failover.
//! - [`fill`]: when and how a regional answer becomes an edge entry.
//! - [`hit_report`]: the hits served at the edge, reported to the regional tier so they count as hotness.
//! - [`cache_control`]: reading a regional `Cache-Control` header.
//! - [`observed_stream`], [`sse`]: passing an event stream through while learning what it carried.
//! - [`respond`]: error, hit and relayed responses.
//! - [`clock`]: the edge's share of `Server-Timing`.
//! - [`error`]: [`error::EdgeError`] and its mapping to client errors.
//!
//! Architecture invariant: key derivation, normalization, auth and entry rendering come from `shared`,
//! so the edge and the regional tier always decide the same way; this crate holds only edge plumbing.
//! Architecture invariant: API keys and the tier secret are never logged.

pub mod bench_scan;
pub mod cache_control;
pub mod chat;
pub mod clock;
pub mod config;
pub mod core_view;
pub mod dot;
pub mod entry;
pub mod error;
pub mod fill;
pub mod hit_report;
pub mod hot_set;
pub mod hot_set_sync;
pub mod l1;
pub mod node_health;
pub mod observed_stream;
pub mod recent;
pub mod regional;
pub mod respond;
pub mod signature_checks;
pub mod sse;

use shared::model_spec::ModelApi;
use shared::RequestError;
use worker::{Context, Env, Method, Request, Response, Result};

use crate::clock::Clock;
use crate::config::Config;
use crate::error::EdgeError;

/// Answers one request to the worker: the routes, each tier's errors in OpenAI's shape, every answer
/// with an `x-request-id` (the caller's when a log can hold it, else a new one).
pub async fn route(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let given = req.headers().get(shared::trace::REQUEST_ID).ok().flatten();
    let request_id = match shared::trace::valid_request_id(given.as_deref()) {
        Some(id) => id.to_owned(),
        None => shared::hex::encode(&chat::random_bytes::<16>()),
    };
    let mut response = answer(req, env, ctx, &request_id).await?;
    // A response whose headers cannot be changed (one passed through as fetched) keeps the regional
    // tier's id.
    let _ = response.headers_mut().set(shared::trace::REQUEST_ID, &request_id);
    Ok(response)
}

/// Answers one request by its path; `request_id` goes on to the regional tier with a completion.
async fn answer(req: Request, env: Env, ctx: Context, request_id: &str) -> Result<Response> {
    let clock = Clock::start();
    let path = req.path();
    let outcome = match (path.as_str(), req.method()) {
        ("/healthz", Method::Get | Method::Head) => return Response::ok("ok"),
        ("/healthz", _) => return respond::error(&RequestError::method_not_allowed(), Some("GET, HEAD")),
        ("/v1/chat/completions" | "/v1/completions", Method::Post) => match read_config(&env) {
            Ok(config) => {
                let api = if path == "/v1/completions" { ModelApi::Completions } else { ModelApi::Chat };
                chat::handle(req, config, &ctx, env.kv("HOTSET").ok(), clock, api, request_id).await
            }
            Err(e) => Err(e),
        },
        ("/v1/chat/completions" | "/v1/completions", _) => {
            return respond::error(&RequestError::method_not_allowed(), Some("POST"))
        }
        // The OpenAI SDKs' `models.list()`: the regional tier's view of the core's model registry.
        ("/v1/models", Method::Get) => match read_config(&env) {
            Ok(config) => regional::get(&config, "/v1/models").await,
            Err(e) => Err(e),
        },
        ("/v1/models", _) => return respond::error(&RequestError::method_not_allowed(), Some("GET")),
        // `models.retrieve(id)`: one model, or the regional tier's 404.
        (model, Method::Get) if model.strip_prefix("/v1/models/").is_some_and(|id| !id.contains('/')) => {
            match read_config(&env) {
                Ok(config) => regional::get(&config, model).await,
                Err(e) => Err(e),
            }
        }
        ("/v1/edge/bench/scan", Method::Get) => match read_config(&env) {
            Ok(config) => bench_scan_route(&req, &config),
            Err(e) => Err(e),
        },
        ("/v1/edge/bench/verify", Method::Get) => match read_config(&env) {
            Ok(config) => bench_verify_route(&req, &config),
            Err(e) => Err(e),
        },
        ("/v1/edge/status", Method::Get) => match read_config(&env) {
            Ok(config) => status(config, &env, &ctx),
            Err(e) => Err(e),
        },
        _ => Err(RequestError::not_found(&path).into()),
    };
    match outcome {
        Ok(response) => Ok(response),
        Err(e) => {
            if !matches!(e, EdgeError::Client(_)) {
                worker::console_error!("{e}");
            }
            respond::error(&e.to_request_error(), None)
        }
    }
}

/// `GET /v1/edge/status`: what this isolate holds (no tenant data: counts, versions, the table's id).
fn status(config: Config, env: &Env, ctx: &Context) -> std::result::Result<Response, EdgeError> {
    hot_set_sync::refresh_if_due(&config, ctx, env.kv("HOTSET").ok());
    let (entries, version) =
        hot_set_sync::with_hot_set(|set| (set.len(), set.version().map(str::to_owned))).unwrap_or((0, None));
    let table = hot_set_sync::embedder().map(|t| serde_json::json!({"id": t.id(), "dims": t.dims()}));
    Ok(Response::from_json(&serde_json::json!({
        "hotset": {"entries": entries, "version": version, "refresh_s": config.hotset_refresh_s},
        "table": table,
        "semantic": config.semantic.is_some(),
        "regional_order": regional::order(&config),
    }))?)
}

/// A benchmark route's whole-number query parameter `name`, at most `max` (0 when absent); the tier
/// secret is checked first.
fn bench_params(
    req: &Request,
    config: &Config,
) -> std::result::Result<impl Fn(&str, usize) -> std::result::Result<usize, EdgeError>, EdgeError> {
    let secret = req.headers().get(shared::TIER_SECRET_HEADER)?.unwrap_or_default();
    if !shared::auth::constant_time_eq(secret.as_bytes(), config.tier_secret.as_bytes()) {
        return Err(RequestError::unauthorized("the benchmarks are for tiers: send the tier secret").into());
    }
    let url = req.url()?;
    Ok(move |name: &str, max: usize| -> std::result::Result<usize, EdgeError> {
        let value = url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        value
            .as_deref()
            .unwrap_or("0")
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| RequestError::invalid(format!("{name} must be a whole number up to {max}")).into())
    })
}

/// `GET /v1/edge/bench/verify?answers=N&check=0|1`, for tiers only ([`bench_scan::verify`]).
fn bench_verify_route(req: &Request, config: &Config) -> std::result::Result<Response, EdgeError> {
    let param = bench_params(req, config)?;
    let (answers, check) = (param("answers", bench_scan::MAX_ANSWERS)?, param("check", 1)?);
    let verified = bench_scan::verify(answers, check == 1);
    Ok(Response::from_json(&serde_json::json!({ "answers": answers, "verified": verified }))?)
}

/// `GET /v1/edge/bench/scan?entries=N&queries=Q`, for tiers only ([`bench_scan`]).
fn bench_scan_route(req: &Request, config: &Config) -> std::result::Result<Response, EdgeError> {
    let param = bench_params(req, config)?;
    let (entries, queries) =
        (param("entries", bench_scan::MAX_ENTRIES)?, param("queries", bench_scan::MAX_QUERIES)?);
    let embedder = hot_set_sync::embedder()
        .ok_or_else(|| EdgeError::Config("no small-embedding table in the bundle".into()))?;
    let matches = bench_scan::run(&embedder, entries, queries);
    Ok(Response::from_json(&serde_json::json!({
        "entries": entries, "queries": queries, "matches": matches, "dims": embedder.dims(),
    }))?)
}

/// The configuration from the worker's vars and secrets (both arrive as string bindings).
fn read_config(env: &Env) -> std::result::Result<Config, EdgeError> {
    regional::use_mtls_binding(env.service(regional::MTLS_BINDING).ok());
    Config::parse(|name| env.var(name).ok().map(|v| v.to_string())).map_err(EdgeError::Config)
}
