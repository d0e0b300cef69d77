//! The shared secret between tiers: attached to every outgoing gRPC call, checked on every incoming one.

use std::fmt;
use std::sync::Arc;

use proto::TIER_SECRET_METADATA;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::error::CoreError;

/// The tier secret. Its `Debug` output is redacted so that it never reaches a log line.
#[derive(Clone)]
pub struct TierSecret {
    /// The secret's bytes, compared in constant time.
    bytes: Arc<[u8]>,
    /// The same secret as a gRPC metadata value, marked sensitive.
    header: AsciiMetadataValue,
}

impl TierSecret {
    /// Wraps a secret; it must be non-empty visible ASCII (it travels as gRPC metadata).
    pub fn new(secret: &str) -> Result<Self, CoreError> {
        if secret.is_empty() {
            return Err(CoreError::Config("the tier secret is empty".into()));
        }
        let mut header = AsciiMetadataValue::try_from(secret)
            .map_err(|_| CoreError::Config("the tier secret must be visible ASCII".into()))?;
        header.set_sensitive(true);
        Ok(Self { bytes: Arc::from(secret.as_bytes()), header })
    }

    /// Whether `metadata` carries this secret.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), CoreError> {
        let presented = metadata.get(TIER_SECRET_METADATA).map(|v| v.as_bytes()).unwrap_or_default();
        if shared::auth::constant_time_eq(presented, &self.bytes) {
            Ok(())
        } else {
            Err(CoreError::Unauthenticated)
        }
    }

    /// Adds the secret to an outgoing request.
    pub fn attach<T>(&self, request: &mut Request<T>) {
        request.metadata_mut().insert(TIER_SECRET_METADATA, self.header.clone());
    }

    /// A request carrying `message` and the secret.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.attach(&mut request);
        request
    }

    /// The interceptor that rejects incoming calls without the secret.
    pub fn interceptor(&self) -> SecretCheck {
        SecretCheck(self.clone())
    }
}

impl fmt::Debug for TierSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TierSecret(<redacted>)")
    }
}

/// A tonic interceptor that answers `unauthenticated` unless the call carries the tier secret.
#[derive(Clone, Debug)]
pub struct SecretCheck(TierSecret);

impl Interceptor for SecretCheck {
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
        let secret = TierSecret::new("s3cret").expect("valid secret");
        let mut check = secret.interceptor();
        assert!(check.call(secret.request(())).is_ok());
        assert_eq!(
            check.call(Request::new(())).map_err(|s| s.code()).err(),
            Some(tonic::Code::Unauthenticated)
        );
        let other = TierSecret::new("other").expect("valid secret");
        assert!(check.call(other.request(())).is_err());
    }

    #[test]
    fn secrets_are_validated_and_never_printed() {
        assert!(TierSecret::new("").is_err());
        assert!(TierSecret::new("line\nbreak").is_err());
        let secret = TierSecret::new("s3cret").expect("valid secret");
        assert!(!format!("{secret:?}").contains("s3cret"));
    }
}
