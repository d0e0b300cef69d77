//! The tier credential: the one secret the tiers present to each other, as `x-mesh-secret` gRPC
//! metadata or HTTP header. Every daemon reads it the same way ([`TierCredential::load`]), every
//! outgoing call attaches it ([`TierCredential::request`]) and every incoming one is checked, in
//! constant time, by [`CredentialCheck`] (gRPC) or [`TierCredential::matches`] (HTTP).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// gRPC metadata key (and HTTP header) that carries the tier credential.
pub const TIER_SECRET_METADATA: &str = shared::TIER_SECRET_HEADER;

/// Environment variable the credential is read from when no file is given.
pub const TIER_SECRET_ENV: &str = "MESH_TIER_SECRET";

/// Why a credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Neither a file nor the environment variable gave one.
    #[error("set {TIER_SECRET_ENV} or --tier-secret-file")]
    Missing,
    /// The secret is empty once surrounding whitespace is dropped.
    #[error("the tier secret is empty")]
    Empty,
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
    /// The secret's bytes, compared in constant time.
    bytes: Arc<[u8]>,
    /// The same secret as a gRPC metadata value, marked sensitive.
    header: AsciiMetadataValue,
}

impl TierCredential {
    /// Wraps a secret. Surrounding whitespace (a file's trailing newline) is dropped; what is left must
    /// be non-empty visible ASCII, since it travels as metadata.
    pub fn new(secret: &str) -> Result<Self, CredentialError> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(CredentialError::Empty);
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(CredentialError::NotAscii);
        }
        let mut header = AsciiMetadataValue::try_from(secret).map_err(|_| CredentialError::NotAscii)?;
        header.set_sensitive(true);
        Ok(Self { bytes: Arc::from(secret.as_bytes()), header })
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

    /// Whether `presented` (a header's or metadata's bytes) is this credential, in constant time.
    pub fn matches(&self, presented: &[u8]) -> bool {
        shared::auth::constant_time_eq(presented, &self.bytes)
    }

    /// Whether `metadata` carries this credential; `unauthenticated` otherwise.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let presented = metadata.get(TIER_SECRET_METADATA).map(|v| v.as_bytes()).unwrap_or_default();
        if self.matches(presented) {
            Ok(())
        } else {
            Err(Status::unauthenticated("missing or wrong tier secret"))
        }
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

    /// The interceptor that rejects incoming calls without the credential.
    pub fn interceptor(&self) -> CredentialCheck {
        CredentialCheck(self.clone())
    }
}

impl fmt::Debug for TierCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TierCredential(<redacted>)")
    }
}

/// A tonic interceptor that answers `unauthenticated` unless the call carries the tier credential.
#[derive(Clone, Debug)]
pub struct CredentialCheck(TierCredential);

impl Interceptor for CredentialCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.0.check(request.metadata())?;
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_secret_passes() {
        let secret = TierCredential::new("s3cret").expect("valid secret");
        let mut check = secret.interceptor();
        assert!(check.call(secret.request(())).is_ok());
        assert_eq!(
            check.call(Request::new(())).map_err(|s| s.code()).err(),
            Some(tonic::Code::Unauthenticated)
        );
        let other = TierCredential::new("s3cret!").expect("valid secret");
        assert!(check.call(other.request(())).is_err());
        assert!(secret.matches(b"s3cret") && !secret.matches(b"s3cre") && !secret.matches(b""));
    }

    #[test]
    fn one_trimming_rule_and_validation() {
        assert!(matches!(TierCredential::new(""), Err(CredentialError::Empty)));
        assert!(matches!(TierCredential::new(" \n"), Err(CredentialError::Empty)));
        assert!(matches!(TierCredential::new("line\nbreak"), Err(CredentialError::NotAscii)));
        assert!(matches!(TierCredential::new("caf\u{e9}"), Err(CredentialError::NotAscii)));
        let trimmed = TierCredential::new("  hunter2\r\n").expect("valid secret");
        assert!(trimmed.matches(b"hunter2"));
        assert_eq!(trimmed.expose(), "hunter2");
        assert!(!format!("{trimmed:?}").contains("hunter2"));
    }

    #[test]
    fn loads_from_a_file() {
        let path = std::env::temp_dir().join(format!("mesh-credential-{}", std::process::id()));
        std::fs::write(&path, "from-file\n").expect("write");
        let loaded = TierCredential::load(Some(&path)).expect("loads");
        assert!(loaded.matches(b"from-file"));
        std::fs::remove_file(&path).expect("remove");
        assert!(matches!(TierCredential::load(Some(&path)), Err(CredentialError::Unreadable { .. })));
    }
}
