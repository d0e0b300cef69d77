//! Calling the regional tier: chat requests and hot-set pulls, nearest healthy node first
//! ([`crate::node_health`]), each attempt bounded by `REGIONAL_TIMEOUT_MS`, failing over on a network
//! error, a timeout or a 502/503/504.
//!
//! A deployed edge proves itself to the regional nodes with its client certificate: calls go through
//! the `REGIONAL_MTLS` binding (`mtls_certificates` in `wrangler.toml`), and no secret is sent. Without
//! the binding (`wrangler dev` cannot simulate one) the edge sends the insecure development secret,
//! `TIER_SECRET`, which a regional node admits for the edge role only.

use std::cell::RefCell;
use std::time::Duration;

use futures::future::{select, Either};
use shared::model_spec::ModelApi;
use shared::{RequestError, TENANT_HEADER, TIER_SECRET_HEADER};
use worker::js_sys::{Date, Uint8Array};
use worker::{AbortController, Delay, Fetch, Fetcher, Headers, Method, Request, RequestInit, Response};

use crate::clock::Clock;
use crate::config::Config;
use crate::error::EdgeError;
use crate::node_health::NodeHealth;

thread_local! {
    /// What this isolate has measured of the regional nodes.
    static HEALTH: RefCell<NodeHealth> = RefCell::new(NodeHealth::default());
    /// The `REGIONAL_MTLS` binding, when the worker has one.
    static MTLS: RefCell<Option<Fetcher>> = const { RefCell::new(None) };
}

/// The name of the binding that presents the edge's client certificate.
pub const MTLS_BINDING: &str = "REGIONAL_MTLS";

/// Calls to the regional tier from now on go through `binding` (the edge's client certificate), or,
/// with none, through plain `fetch` with the development secret.
pub fn use_mtls_binding(binding: Option<Fetcher>) {
    MTLS.with(|m| *m.borrow_mut() = binding);
}

fn has_mtls_binding() -> bool {
    MTLS.with(|m| m.borrow().is_some())
}

/// Statuses that mean "this node cannot answer now, another might": try the next URL.
fn is_gateway_failure(status: u16) -> bool {
    matches!(status, 502..=504)
}

/// POSTs `body` to `/v1/chat/completions` as `tenant`, proving with the tier secret that the tenant
/// header can be trusted. Returns the first answer that is not a failure; if every node failed, the last
/// gateway answer (so its `Retry-After` reaches the client), or a 502 when none answered at all. The
/// body of a streamed answer passes through unbuffered.
pub async fn post_completion(
    config: &Config,
    api: ModelApi,
    tenant: &str,
    body: &[u8],
    extra_headers: &[(&str, &str)],
) -> Result<Response, EdgeError> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set(TENANT_HEADER, tenant)?;
    for (name, value) in extra_headers {
        headers.set(name, value)?;
    }
    let path = match api {
        ModelApi::Chat => "/v1/chat/completions",
        ModelApi::Completions => "/v1/completions",
    };
    call(config, Method::Post, path, &headers, Some(body)).await
}

/// POSTs a JSON `body` to `path` of the regional tier, as the edge tier.
pub async fn post_json(config: &Config, path: &str, body: &[u8]) -> Result<Response, EdgeError> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    call(config, Method::Post, path, &headers, Some(body)).await
}

/// GETs `path` (with its query) from the regional tier, as the edge tier.
pub async fn get(config: &Config, path: &str) -> Result<Response, EdgeError> {
    call(config, Method::Get, path, &Headers::new(), None).await
}

/// The regional URLs in the order the next call will try them.
pub fn order(config: &Config) -> Vec<String> {
    HEALTH.with(|h| {
        h.borrow().order(&config.regional_urls, Clock::now_ms()).into_iter().map(str::to_owned).collect()
    })
}

async fn call(
    config: &Config,
    method: Method,
    path: &str,
    headers: &Headers,
    body: Option<&[u8]>,
) -> Result<Response, EdgeError> {
    if !has_mtls_binding() {
        headers.set(TIER_SECRET_HEADER, &config.tier_secret)?;
    }
    let order = order(config);
    let mut last_gateway_failure = None;
    for base in &order {
        let mut init = RequestInit::new();
        init.with_method(method.clone()).with_headers(headers.clone());
        if let Some(body) = body {
            init.with_body(Some(Uint8Array::from(body).into()));
        }
        let request = Request::new_with_init(&format!("{base}{path}"), &init)?;
        let sent = Date::now();
        match send_within(request, config.regional_timeout_ms).await {
            Ok(response) if is_gateway_failure(response.status_code()) => {
                worker::console_warn!(
                    "regional node {base} answered {}, trying the next",
                    response.status_code()
                );
                HEALTH.with(|h| h.borrow_mut().failed(base, Clock::now_ms()));
                last_gateway_failure = Some(response);
            }
            Ok(response) => {
                HEALTH.with(|h| h.borrow_mut().succeeded(base, Date::now() - sent));
                return Ok(response);
            }
            Err(e) => {
                worker::console_warn!("regional node {base} failed, trying the next: {e}");
                HEALTH.with(|h| h.borrow_mut().failed(base, Clock::now_ms()));
            }
        }
    }
    last_gateway_failure.ok_or_else(|| RequestError::upstream(502, "no regional node answered").into())
}

/// Sends `request` (through the mTLS binding when there is one), giving up when no response has
/// started within `timeout_ms` (a plain fetch is also aborted then; the binding's `fetch` takes no
/// signal).
async fn send_within(request: Request, timeout_ms: u64) -> Result<Response, worker::Error> {
    let controller = AbortController::default();
    let signal = controller.signal();
    let binding = MTLS.with(|m| m.borrow().clone());
    let sending = Box::pin(async move {
        match binding {
            Some(fetcher) => fetcher.fetch_request(request).await,
            None => Fetch::Request(request).send_with_signal(&signal).await,
        }
    });
    let timeout = Box::pin(Delay::from(Duration::from_millis(timeout_ms)));
    let outcome = match select(sending, timeout).await {
        Either::Left((result, _)) => Some(result),
        Either::Right(((), _)) => None,
    };
    outcome.unwrap_or_else(|| {
        controller.abort();
        Err(worker::Error::RustError(format!("no answer within {timeout_ms} ms")))
    })
}
