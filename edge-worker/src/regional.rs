//! Forwarding a chat request to the regional tier, with failover across `REGIONAL_URLS`.

use shared::{RequestError, TENANT_HEADER, TIER_SECRET_HEADER};
use worker::js_sys::Uint8Array;
use worker::{Fetch, Headers, Method, Request, RequestInit, Response};

use crate::config::Config;
use crate::error::EdgeError;

/// Statuses that mean "this node cannot answer now, another might": try the next URL.
fn is_gateway_failure(status: u16) -> bool {
    matches!(status, 502..=504)
}

/// POSTs `body` to `/v1/chat/completions` on each regional URL in turn, as `tenant`, proving with the
/// tier secret that the tenant header can be trusted. Returns the first answer that is not a network
/// error or a 502/503/504; if every node failed, the last such gateway answer (so its `Retry-After`
/// reaches the client), or a 502 when none answered at all.
pub async fn post_chat(
    config: &Config,
    tenant: &str,
    body: &[u8],
    extra_headers: &[(&str, &str)],
) -> Result<Response, EdgeError> {
    let mut last_gateway_failure = None;
    for base in &config.regional_urls {
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        headers.set(TIER_SECRET_HEADER, &config.tier_secret)?;
        headers.set(TENANT_HEADER, tenant)?;
        for (name, value) in extra_headers {
            headers.set(name, value)?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::Post).with_headers(headers).with_body(Some(Uint8Array::from(body).into()));
        let request = Request::new_with_init(&format!("{base}/v1/chat/completions"), &init)?;
        match Fetch::Request(request).send().await {
            Ok(response) if is_gateway_failure(response.status_code()) => {
                worker::console_warn!(
                    "regional node {base} answered {}, trying the next",
                    response.status_code()
                );
                last_gateway_failure = Some(response);
            }
            Ok(response) => return Ok(response),
            Err(e) => worker::console_warn!("regional node {base} unreachable, trying the next: {e}"),
        }
    }
    last_gateway_failure.ok_or_else(|| RequestError::upstream(502, "no regional node answered").into())
}
