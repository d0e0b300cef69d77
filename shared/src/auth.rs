//! API keys and the shared secret between tiers.
//!
//! Client API keys are never stored: tiers hold a table of `tenant = sha256(key)` pairs and compare digests
//! in constant time. The table is written as `tenant:hexdigest` pairs separated by commas, e.g.
//! `dev:5e88...,acme:9f86...`.

use sha2::{Digest, Sha256};

use crate::{hex, RequestError};

/// Compares two byte strings in time that depends only on their lengths, not on where they differ
/// (`subtle`'s constant-time equality, which the optimiser cannot turn into an early exit).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    bool::from(subtle::ConstantTimeEq::ct_eq(a, b))
}

/// The SHA-256 digest of an API key, as stored in a [`TenantKeys`] table.
pub fn hash_api_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Tenants and the digests of their API keys.
#[derive(Clone, Debug, Default)]
pub struct TenantKeys {
    /// (tenant, sha256 of the key) pairs; a tenant may have several keys.
    entries: Vec<(String, [u8; 32])>,
}

impl TenantKeys {
    /// Parses `tenant:hexdigest,tenant:hexdigest`. Whitespace around items is ignored.
    pub fn parse(table: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for item in table.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (tenant, digest) = item.split_once(':').ok_or_else(|| {
                format!("key table item without ':': {tenant_hint}", tenant_hint = redact(item))
            })?;
            let tenant = tenant.trim();
            if tenant.is_empty()
                || !tenant.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!("invalid tenant name {tenant:?}"));
            }
            let digest = hex::decode(digest.trim())
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| format!("tenant {tenant}: key digest is not 64 hex characters"))?;
            entries.push((tenant.to_owned(), digest));
        }
        Ok(Self { entries })
    }

    /// A table with one tenant and one plain-text key (hashed here), for development setups.
    pub fn single(tenant: &str, key: &str) -> Self {
        Self { entries: vec![(tenant.to_owned(), hash_api_key(key))] }
    }

    /// Number of keys in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tenant that owns `key`. Every entry is compared, so timing does not reveal which one matched.
    pub fn tenant_for_key(&self, key: &str) -> Option<&str> {
        let digest = hash_api_key(key);
        let mut found = None;
        for (tenant, stored) in &self.entries {
            if constant_time_eq(stored, &digest) && found.is_none() {
                found = Some(tenant.as_str());
            }
        }
        found
    }

    /// Resolves an `Authorization` header value (`Bearer <key>`) to its tenant, or a 401 error.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<&str, RequestError> {
        let header = authorization.ok_or_else(|| {
            RequestError::unauthorized("missing API key: send `Authorization: Bearer <key>`")
        })?;
        let key = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| RequestError::unauthorized("the Authorization header must be `Bearer <key>`"))?;
        self.tenant_for_key(key).ok_or_else(|| RequestError::unauthorized("incorrect API key provided"))
    }
}

fn redact(item: &str) -> String {
    item.chars().take(4).chain("...".chars()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn key_table_resolves_tenants() {
        let table = format!(
            "dev:{},acme:{}",
            hex::encode(&hash_api_key("sk-dev")),
            hex::encode(&hash_api_key("sk-acme"))
        );
        let keys = TenantKeys::parse(&table).expect("valid table");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.tenant_for_key("sk-dev"), Some("dev"));
        assert_eq!(keys.tenant_for_key("sk-acme"), Some("acme"));
        assert_eq!(keys.tenant_for_key("sk-other"), None);
        assert_eq!(keys.authenticate(Some("Bearer sk-acme")).ok(), Some("acme"));
        assert_eq!(keys.authenticate(Some("Bearer nope")).map_err(|e| e.status), Err(401));
        assert_eq!(keys.authenticate(None).map_err(|e| e.status), Err(401));
        assert_eq!(keys.authenticate(Some("Basic abc")).map_err(|e| e.status), Err(401));
    }

    #[test]
    fn key_table_rejects_bad_items() {
        assert!(TenantKeys::parse("dev").is_err());
        assert!(TenantKeys::parse("dev:abcd").is_err());
        assert!(TenantKeys::parse(&format!("bad tenant:{}", "0".repeat(64))).is_err());
        assert!(TenantKeys::parse("").expect("empty table is valid").is_empty());
    }
}
