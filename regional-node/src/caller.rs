//! Who is calling: a client with a tenant API key, or a trusted tier (the edge) that already checked the
//! key and names the tenant, proven by the shared secret.

use axum::http::HeaderMap;
use proto::TierCredential;
use shared::auth::TenantKeys;
use shared::{RequestError, TENANT_HEADER, TIER_SECRET_HEADER};

/// Resolves the tenant of a request.
///
/// With an `x-mesh-secret` header the caller must be a tier holding the shared secret, and
/// `x-mesh-tenant` names the tenant; a wrong secret is a 401 (never a fallback to the API key). Without
/// it, `Authorization: Bearer <key>` must match the tenant key table.
pub fn resolve_tenant(
    headers: &HeaderMap,
    tenants: &TenantKeys,
    tier: &TierCredential,
) -> Result<String, RequestError> {
    if let Some(secret) = headers.get(TIER_SECRET_HEADER) {
        if !tier.matches(secret.as_bytes()) {
            return Err(RequestError::unauthorized("invalid tier secret"));
        }
        let tenant = headers
            .get(TENANT_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|t| {
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            .ok_or_else(|| {
                RequestError::invalid(format!("a tier request needs a valid {TENANT_HEADER} header"))
            })?;
        return Ok(tenant.to_owned());
    }
    let authorization = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    tenants.authenticate(authorization).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier_credential() -> TierCredential {
        TierCredential::new("s3").expect("credential")
    }
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        map
    }

    #[test]
    fn tenants_come_from_keys_or_from_a_trusted_tier() {
        let keys = TenantKeys::single("dev", "sk-dev");
        assert_eq!(
            resolve_tenant(&headers(&[("authorization", "Bearer sk-dev")]), &keys, &tier_credential()),
            Ok("dev".into())
        );
        assert_eq!(
            resolve_tenant(&headers(&[("authorization", "Bearer no")]), &keys, &tier_credential())
                .map_err(|e| e.status),
            Err(401)
        );
        assert_eq!(resolve_tenant(&headers(&[]), &keys, &tier_credential()).map_err(|e| e.status), Err(401));
        let tier = headers(&[("x-mesh-secret", "s3"), ("x-mesh-tenant", "acme")]);
        assert_eq!(resolve_tenant(&tier, &keys, &tier_credential()), Ok("acme".into()));
        let forged = headers(&[
            ("x-mesh-secret", "guess"),
            ("x-mesh-tenant", "acme"),
            ("authorization", "Bearer sk-dev"),
        ]);
        assert_eq!(resolve_tenant(&forged, &keys, &tier_credential()).map_err(|e| e.status), Err(401));
        let no_tenant = headers(&[("x-mesh-secret", "s3")]);
        assert_eq!(resolve_tenant(&no_tenant, &keys, &tier_credential()).map_err(|e| e.status), Err(400));
    }
}
