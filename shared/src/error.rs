//! Client-facing errors in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`).

use serde::Serialize;

/// An error to return to a client: an HTTP status and an OpenAI-shaped body.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct RequestError {
    /// HTTP status code.
    pub status: u16,
    /// OpenAI's error `type`, e.g. `invalid_request_error`.
    pub kind: &'static str,
    /// OpenAI's error `code`, e.g. `invalid_api_key`, `model_not_found`.
    pub code: Option<&'static str>,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// Human-readable explanation.
    pub message: String,
    /// Seconds after which a retry may succeed (sent as `Retry-After`), for 429 and 503.
    pub retry_after_s: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl RequestError {
    fn new(status: u16, kind: &'static str, code: Option<&'static str>, message: impl Into<String>) -> Self {
        Self { status, kind, code, param: None, message: message.into(), retry_after_s: None }
    }

    /// 400: the body is not a valid request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", None, message)
    }

    /// 400 naming the offending parameter.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self { param: Some(param.to_owned()), ..Self::invalid(message) }
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "invalid_request_error", Some("invalid_api_key"), message)
    }

    /// 408: the request did not arrive in time.
    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(408, "invalid_request_error", Some("request_timeout"), message)
    }

    /// 403: the caller is known but may not make this call.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "permission_error", Some("forbidden"), message)
    }

    /// 404: the model is not served here.
    pub fn model_not_found(model: &str) -> Self {
        Self {
            param: Some("model".into()),
            ..Self::new(
                404,
                "invalid_request_error",
                Some("model_not_found"),
                format!("the model `{model}` does not exist or is not served by this mesh"),
            )
        }
    }

    /// 413: the body is larger than [`crate::MAX_REQUEST_BYTES`].
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            Some("request_too_large"),
            format!("request body exceeds {limit} bytes"),
        )
    }

    /// 404: no such route.
    pub fn not_found(path: &str) -> Self {
        Self::new(404, "invalid_request_error", Some("not_found"), format!("no route for {path}"))
    }

    /// 404: no cache entry under the key for this tenant.
    pub fn key_not_found(message: impl Into<String>) -> Self {
        Self::new(404, "invalid_request_error", Some("key_not_found"), message)
    }

    /// 405: the route exists with another method.
    pub fn method_not_allowed() -> Self {
        Self::new(405, "invalid_request_error", Some("method_not_allowed"), "method not allowed")
    }

    /// 502/503: the next tier could not answer.
    pub fn upstream(status: u16, message: impl Into<String>) -> Self {
        Self::new(status, "server_error", Some("upstream_unavailable"), message)
    }

    /// 429: the tier is at capacity; retry after `retry_after_s` seconds.
    pub fn overloaded(message: impl Into<String>, retry_after_s: u64) -> Self {
        Self::new(429, "rate_limit_error", Some("overloaded"), message).with_retry_after(retry_after_s)
    }

    /// The same error, telling the client when to retry.
    pub fn with_retry_after(self, seconds: u64) -> Self {
        Self { retry_after_s: Some(seconds.max(1)), ..self }
    }

    /// 504: the request allowed only a cached answer and there is none (`Cache-Control: only-if-cached`).
    pub fn gateway_timeout(message: impl Into<String>) -> Self {
        Self::new(504, "invalid_request_error", Some("not_cached"), message)
    }

    /// 500: a fault of ours.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", None, message)
    }

    /// The OpenAI-shaped JSON body.
    pub fn to_json(&self) -> String {
        let body = Body {
            error: Detail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        };
        serde_json::to_string(&body).unwrap_or_else(|_| {
            String::from(
                r#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openai_shape() {
        let json: serde_json::Value =
            serde_json::from_str(&RequestError::invalid_param("messages", "must not be empty").to_json())
                .expect("json");
        assert_eq!(json["error"]["type"], "invalid_request_error");
        assert_eq!(json["error"]["param"], "messages");
        assert_eq!(json["error"]["message"], "must not be empty");
        assert!(json["error"]["code"].is_null());
    }
}
