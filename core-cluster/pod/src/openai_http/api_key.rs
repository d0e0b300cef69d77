//! The key that guards the OpenAI API (`--openai-api-key-file`).
//!
//! The key is read once at start-up and held only as its SHA-256 digest, in the same table type the
//! regional tier authenticates clients with ([`TenantKeys`]), so a presented key is compared in constant
//! time and the key itself is never kept, printed or logged.

use std::fmt;
use std::path::{Path, PathBuf};

use shared::auth::TenantKeys;
use shared::RequestError;

/// The one tenant name the table holds; callers of the pod's OpenAI API are one tenant.
const KEY_HOLDER: &str = "openai-api";

/// The API key every `/v1/*` request must present as `Authorization: Bearer <key>`.
#[derive(Clone)]
pub struct ApiKey {
    /// The key's digest.
    keys: TenantKeys,
}

/// Why the key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    /// The file could not be read.
    #[error("cannot read the OpenAI API key file {path}: {source}")]
    Unreadable {
        /// The file named.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The file holds nothing but whitespace.
    #[error("the OpenAI API key file {0} is empty")]
    Empty(PathBuf),
}

impl ApiKey {
    /// A key from its text; surrounding whitespace (a file's trailing newline) is dropped. `None` when
    /// nothing is left.
    pub fn new(key: &str) -> Option<Self> {
        let key = key.trim();
        (!key.is_empty()).then(|| Self { keys: TenantKeys::single(KEY_HOLDER, key) })
    }

    /// The key held in `path`.
    pub fn from_file(path: &Path) -> Result<Self, ApiKeyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ApiKeyError::Unreadable { path: path.to_owned(), source })?;
        Self::new(&text).ok_or_else(|| ApiKeyError::Empty(path.to_owned()))
    }

    /// Checks an `Authorization` header value: a 401 unless it is `Bearer <this key>`.
    pub fn authorize(&self, authorization: Option<&str>) -> Result<(), RequestError> {
        self.keys.authenticate(authorization).map(|_| ())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_key_file_and_checks_bearer_headers() {
        let dir = std::env::temp_dir().join(format!("pod-api-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("key");
        std::fs::write(&file, "sk-pod-test\n").expect("write");
        let key = ApiKey::from_file(&file).expect("a key");
        assert_eq!(key.authorize(Some("Bearer sk-pod-test")), Ok(()));
        for wrong in [None, Some("Bearer sk-pod-tes"), Some("Bearer sk-pod-test2"), Some("sk-pod-test")] {
            let refused = key.authorize(wrong).map_err(|e| (e.status, e.code));
            assert_eq!(refused, Err((401, Some("invalid_api_key"))), "{wrong:?}");
        }
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");

        std::fs::write(&file, " \n").expect("write");
        assert!(matches!(ApiKey::from_file(&file), Err(ApiKeyError::Empty(_))));
        let missing = ApiKey::from_file(&dir.join("absent"));
        assert!(matches!(missing, Err(ApiKeyError::Unreadable { .. })));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
