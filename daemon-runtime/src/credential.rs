//! The insecure development secret: one secret the tiers present to each other as `x-mesh-secret`
//! gRPC metadata or HTTP header, when they run without TLS (see [`crate::identity`]). It is read the
//! same way by every daemon ([`TierCredential::load`]), must be at least [`MIN_SECRET_BYTES`] long, and
//! is compared over SHA-256 digests of both sides with `subtle`'s constant-time equality.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::metadata::AsciiMetadataValue;
use tonic::Request;

/// gRPC metadata key (and HTTP header) that carries the tier credential.
pub const TIER_SECRET_METADATA: &str = shared::TIER_SECRET_HEADER;

/// Environment variable the credential is read from when no file is given.
pub const TIER_SECRET_ENV: &str = "MESH_INSECURE_TIER_SECRET";

/// The shortest secret accepted: 32 bytes, a 256-bit key written as text.
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Neither a file nor the environment variable gave one.
    #[error("set {TIER_SECRET_ENV} or --insecure-tier-secret-file")]
    Missing,
    /// The secret is shorter than [`MIN_SECRET_BYTES`] once surrounding whitespace is dropped.
    #[error("the insecure tier secret must be at least {MIN_SECRET_BYTES} bytes, not {0}")]
    TooShort(usize),
    /// The secret has a character that cannot travel as gRPC metadata.
    #[error("the tier secret must be visible ASCII")]
    NotAscii,
    /// The secret's file could not be read.
    #[error("cannot read the tier secret file {path}: {source}")]
    Unreadable {
        /// The file named.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
}

/// The tier credential. Its `Debug` output is redacted so that it never reaches a log line.
#[derive(Clone)]
pub struct TierCredential {
    /// The secret's SHA-256 digest, compared in constant time with a presented secret's.
    digest: Arc<[u8; 32]>,
    /// The same secret as a gRPC metadata value, marked sensitive.
    header: AsciiMetadataValue,
}

impl TierCredential {
    /// Wraps a secret. Surrounding whitespace (a file's trailing newline) is dropped; what is left must
    /// be at least [`MIN_SECRET_BYTES`] of visible ASCII, since it travels as metadata.
    pub fn new(secret: &str) -> Result<Self, CredentialError> {
        let secret = secret.trim();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(CredentialError::TooShort(secret.len()));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(CredentialError::NotAscii);
        }
        let mut header = AsciiMetadataValue::try_from(secret).map_err(|_| CredentialError::NotAscii)?;
        header.set_sensitive(true);
        Ok(Self { digest: Arc::new(Sha256::digest(secret.as_bytes()).into()), header })
    }

    /// The credential every daemon starts with: the contents of `file` when one is given, else the
    /// [`TIER_SECRET_ENV`] environment variable.
    pub fn load(file: Option<&Path>) -> Result<Self, CredentialError> {
        let secret = match file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| CredentialError::Unreadable { path: path.to_owned(), source })?,
            None => std::env::var(TIER_SECRET_ENV).map_err(|_| CredentialError::Missing)?,
        };
        Self::new(&secret)
    }

    /// Whether `presented` (a header's or metadata's bytes) is this credential: the digests of both
    /// are compared in constant time, so neither the content nor the length leaks through timing.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        bool::from(presented.ct_eq(&*self.digest))
    }

    /// Adds the credential to an outgoing request.
    pub fn attach<T>(&self, request: &mut Request<T>) {
        request.metadata_mut().insert(TIER_SECRET_METADATA, self.header.clone());
    }

    /// A request carrying `message` and the credential.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.attach(&mut request);
        request
    }

    /// The secret as text, for an HTTP header of a call to another tier (never for a log line).
    pub fn expose(&self) -> &str {
        self.header.to_str().unwrap_or_default()
    }
}

impl fmt::Debug for TierCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TierCredential(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-development-secret-of-32-bytes!";

    #[test]
    fn only_the_right_secret_matches() {
        let secret = TierCredential::new(SECRET).expect("valid secret");
        assert!(secret.matches(SECRET.as_bytes()));
        assert!(!secret.matches(&SECRET.as_bytes()[1..]) && !secret.matches(b""));
        let request = secret.request(());
        let sent = request.metadata().get(TIER_SECRET_METADATA).expect("attached");
        assert!(secret.matches(sent.as_bytes()));
    }

    #[test]
    fn one_trimming_rule_and_validation() {
        assert!(matches!(TierCredential::new(""), Err(CredentialError::TooShort(0))));
        assert!(matches!(TierCredential::new("s3cret"), Err(CredentialError::TooShort(6))));
        assert!(matches!(TierCredential::new(&format!("{SECRET}\nbreak")), Err(CredentialError::NotAscii)));
        assert!(matches!(TierCredential::new(&format!("caf\u{e9}{SECRET}")), Err(CredentialError::NotAscii)));
        let trimmed = TierCredential::new(&format!("  {SECRET}\r\n")).expect("valid secret");
        assert!(trimmed.matches(SECRET.as_bytes()));
        assert_eq!(trimmed.expose(), SECRET);
        assert!(!format!("{trimmed:?}").contains(SECRET));
    }

    #[test]
    fn loads_from_a_file() {
        let path = std::env::temp_dir().join(format!("mesh-credential-{}", std::process::id()));
        std::fs::write(&path, format!("{SECRET}\n")).expect("write");
        let loaded = TierCredential::load(Some(&path)).expect("loads");
        assert!(loaded.matches(SECRET.as_bytes()));
        std::fs::remove_file(&path).expect("remove");
        assert!(matches!(TierCredential::load(Some(&path)), Err(CredentialError::Unreadable { .. })));
    }
}
