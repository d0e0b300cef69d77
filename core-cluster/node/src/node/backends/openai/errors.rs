//! An OpenAI-compatible server's refusals as the core's errors. What another backend (or a later try)
//! may not share is `Unavailable` or `ResourceExhausted`, so the pool moves on; a request the server
//! judged bad is the caller's `InvalidArgument`. The server's own message is kept, shortened.

use reqwest::StatusCode;
use serde_json::Value;
use tonic::Code;

use crate::node::error::CoreError;

/// The longest piece of a server's error message kept.
const MESSAGE_CHARS: usize = 300;

/// The error an HTTP status (with its body) from the server stands for.
pub fn from_status(status: StatusCode, body: &str) -> CoreError {
    let said = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message").or_else(|| v.get("error")).or_else(|| v.get("message")).cloned()
        })
        .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned());
    let said: String = said.chars().take(MESSAGE_CHARS).collect();
    let code = match status.as_u16() {
        400 | 413 | 422 => {
            return CoreError::InvalidArgument(format!("the model backend refused the request: {said}"))
        }
        408 | 429 => Code::ResourceExhausted,
        401 | 403 => {
            return CoreError::Backend {
                code: Code::Unavailable,
                message: format!("the backend refused the mesh's API key ({status}): {said}"),
            }
        }
        _ => Code::Unavailable,
    };
    CoreError::Backend { code, message: format!("the backend answered {status}: {said}") }
}

/// Whether a refusal with this status is worth another try at the same backend, before the first token:
/// it was busy or failed, not refusing the request or the mesh's key.
pub fn worth_retrying(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// A transport failure (connect, TLS, a cut connection) as the core's error.
pub fn from_transport(error: &reqwest::Error) -> CoreError {
    let what =
        if error.is_connect() { "cannot connect to the backend" } else { "the backend's connection failed" };
    // reqwest's Display names the URL but never the headers, so the API key cannot leak here.
    CoreError::Backend { code: Code::Unavailable, message: format!("{what}: {error}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_what_the_pool_and_the_caller_act_on() {
        let openai_error = r#"{"error":{"message":"context too long","type":"invalid_request_error"}}"#;
        match from_status(StatusCode::BAD_REQUEST, openai_error) {
            CoreError::InvalidArgument(message) => {
                assert!(message.ends_with("context too long"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        for (status, code) in [
            (StatusCode::TOO_MANY_REQUESTS, Code::ResourceExhausted),
            (StatusCode::INTERNAL_SERVER_ERROR, Code::Unavailable),
            (StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
            (StatusCode::UNAUTHORIZED, Code::Unavailable),
            (StatusCode::NOT_FOUND, Code::Unavailable),
        ] {
            let error = from_status(status, "plain text");
            assert!(
                matches!(&error, CoreError::Backend { code: c, .. } if *c == code),
                "{status}: {error:?}"
            );
        }
        assert!(worth_retrying(StatusCode::TOO_MANY_REQUESTS) && worth_retrying(StatusCode::BAD_GATEWAY));
        assert!(!worth_retrying(StatusCode::UNAUTHORIZED) && !worth_retrying(StatusCode::BAD_REQUEST));
        let long = "x".repeat(5000);
        assert!(from_status(StatusCode::BAD_GATEWAY, &long).to_string().len() < 400);
    }
}
