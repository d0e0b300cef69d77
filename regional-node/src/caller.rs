//! Who is calling: a client with a tenant API key, or the edge, which already checked the key and names
//! the tenant. The edge proves itself by its certificate (mutual TLS) or, in development, by the
//! insecure secret ([`daemon_runtime::identity`]).

use axum::http::HeaderMap;
use daemon_runtime::{PeerRole, TierIdentity, TierRole};
use shared::auth::TenantKeys;
use shared::{RequestError, TENANT_HEADER, TIER_SECRET_HEADER};

/// Resolves the tenant of a request.
///
/// A request over a connection with the edge's certificate, or with an `x-mesh-secret` header, is a
/// tier request: the caller must be the edge (a wrong secret is a 401, another role a 403, never a
/// fallback to the API key) and `x-mesh-tenant` names the tenant. Any other request is a client's:
/// `Authorization: Bearer <key>` must match the tenant key table.
pub fn resolve_tenant(
    headers: &HeaderMap,
    peer: Option<&PeerRole>,
    tenants: &TenantKeys,
    identity: &TierIdentity,
) -> Result<String, RequestError> {
    let edge_certificate = matches!(peer, Some(PeerRole(Some(TierRole::Edge))));
    if edge_certificate || headers.contains_key(TIER_SECRET_HEADER) {
        require_edge(headers, peer, identity)?;
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

/// Admits only the edge (the regional node's rows of the authorization table for the hot set and the
/// change feed): 401 without a tier identity, 403 for another role.
pub fn require_edge(
    headers: &HeaderMap,
    peer: Option<&PeerRole>,
    identity: &TierIdentity,
) -> Result<(), RequestError> {
    let secret = headers.get(TIER_SECRET_HEADER).map(|v| v.as_bytes());
    match identity.caller(peer, secret) {
        Some(caller) if caller.may(&[TierRole::Edge]) => Ok(()),
        Some(caller) => Err(RequestError::forbidden(format!("{caller:?} may not make this call"))),
        None => Err(RequestError::unauthorized("this route is for the edge: present its certificate")),
    }
}

/// Refuses a caller of an operator's route (`/metrics`, `/v1/replication`: tenant names, peer URLs)
/// that presents no mesh certificate, when the node runs TLS. Any role may read them (the `metrics`
/// one is for scrapers); in insecure development mode (loopback only) they are open.
pub fn require_mesh_certificate(
    peer: Option<&PeerRole>,
    identity: &TierIdentity,
) -> Result<(), RequestError> {
    match peer {
        _ if !identity.is_tls() => Ok(()),
        Some(PeerRole(Some(_))) => Ok(()),
        _ => Err(RequestError::unauthorized(
            "this route names tenants and peers: present a mesh certificate (the metrics role is enough)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const SECRET: &str = "a-development-secret-of-32-bytes!";

    fn identity() -> TierIdentity {
        TierIdentity::insecure_secret(SECRET).expect("credential")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        map
    }

    fn status(result: Result<String, RequestError>) -> Result<String, u16> {
        result.map_err(|e| e.status)
    }

    #[test]
    fn tenants_come_from_keys_or_from_a_trusted_tier() {
        let keys = TenantKeys::single("dev", "sk-dev");
        let resolve =
            |h: &HeaderMap, peer: Option<&PeerRole>| status(resolve_tenant(h, peer, &keys, &identity()));
        assert_eq!(resolve(&headers(&[("authorization", "Bearer sk-dev")]), None), Ok("dev".into()));
        assert_eq!(resolve(&headers(&[("authorization", "Bearer no")]), None), Err(401));
        assert_eq!(resolve(&headers(&[]), None), Err(401));
        let tier = headers(&[("x-mesh-secret", SECRET), ("x-mesh-tenant", "acme")]);
        assert_eq!(resolve(&tier, None), Ok("acme".into()));
        let forged = headers(&[
            ("x-mesh-secret", "guess"),
            ("x-mesh-tenant", "acme"),
            ("authorization", "Bearer sk-dev"),
        ]);
        assert_eq!(resolve(&forged, None), Err(401));
        assert_eq!(resolve(&headers(&[("x-mesh-secret", SECRET)]), None), Err(400));
    }

    #[test]
    fn the_edge_certificate_names_tenants_and_other_roles_do_not() {
        let keys = TenantKeys::single("dev", "sk-dev");
        let resolve =
            |h: &HeaderMap, peer: Option<&PeerRole>| status(resolve_tenant(h, peer, &keys, &identity()));
        let edge = PeerRole(Some(TierRole::Edge));
        assert_eq!(resolve(&headers(&[("x-mesh-tenant", "acme")]), Some(&edge)), Ok("acme".into()));
        // A regional node's certificate is a client like any other: its tenant comes from its key.
        let regional = PeerRole(Some(TierRole::Regional));
        let named = headers(&[("x-mesh-tenant", "acme"), ("authorization", "Bearer sk-dev")]);
        assert_eq!(resolve(&named, Some(&regional)), Ok("dev".into()));
        let hotset =
            |peer: PeerRole| require_edge(&headers(&[]), Some(&peer), &identity()).map_err(|e| e.status);
        assert_eq!(hotset(edge), Ok(()));
        assert_eq!(hotset(regional), Err(403));
        assert_eq!(hotset(PeerRole(None)), Err(401));
    }
}
