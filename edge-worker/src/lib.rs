//! The mesh's edge tier: a Cloudflare Worker written in Rust (compiled to wasm32, run by workerd) that
//! answers exact repeats of OpenAI chat-completion requests from the data center's cache and relays
//! everything else to the regional tier.
//!
//! Routes: `POST /v1/chat/completions`, `GET /healthz`. Every error is OpenAI-shaped JSON.
//!
//! # Layout
//! - [`chat`]: the chat-completions handler (auth, validation, L1 lookup, relay, fill).
//! - [`config`]: wrangler vars and secrets, checked on every request.
//! - [`l1`]: the exact-match cache in the Workers Cache API.
//! - [`regional`]: forwarding to the regional tier with failover.
//! - [`fill`]: when and how a regional answer becomes an edge entry.
//! - [`cache_control`]: reading a regional `Cache-Control` header.
//! - [`observed_stream`], [`sse`]: passing an event stream through while learning what it carried.
//! - [`respond`]: error, hit and relayed responses.
//! - [`clock`]: the edge's share of `Server-Timing`.
//! - [`error`]: [`error::EdgeError`] and its mapping to client errors.
//!
//! Architecture invariant: key derivation, normalization, auth and entry rendering come from `shared`,
//! so the edge and the regional tier always decide the same way; this crate holds only edge plumbing.
//! Architecture invariant: API keys and the tier secret are never logged.

// `#[event(fetch)]` expands to wasm-bindgen glue that contains `unsafe` blocks.
#![allow(unsafe_code)]

pub mod cache_control;
pub mod chat;
pub mod clock;
pub mod config;
pub mod error;
pub mod fill;
pub mod l1;
pub mod observed_stream;
pub mod regional;
pub mod respond;
pub mod sse;

use shared::RequestError;
use worker::{event, Context, Env, Method, Request, Response, Result};

use crate::clock::Clock;
use crate::config::Config;
use crate::error::EdgeError;

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let clock = Clock::start();
    let path = req.path();
    let outcome = match (path.as_str(), req.method()) {
        ("/healthz", Method::Get | Method::Head) => return Response::ok("ok"),
        ("/healthz", _) => return respond::error(&RequestError::method_not_allowed(), Some("GET, HEAD")),
        ("/v1/chat/completions", Method::Post) => match read_config(&env) {
            Ok(config) => chat::handle(req, config, &ctx, clock).await,
            Err(e) => Err(e),
        },
        ("/v1/chat/completions", _) => {
            return respond::error(&RequestError::method_not_allowed(), Some("POST"))
        }
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

/// The configuration from the worker's vars and secrets (both arrive as string bindings).
fn read_config(env: &Env) -> std::result::Result<Config, EdgeError> {
    Config::parse(|name| env.var(name).ok().map(|v| v.to_string())).map_err(EdgeError::Config)
}
