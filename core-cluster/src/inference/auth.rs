//! The tier secret check on every gRPC call into the pod.

use std::sync::Arc;

use proto::TIER_SECRET_METADATA;
use shared::auth::constant_time_eq;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::TierSecret;

/// Rejects calls whose `x-mesh-secret` metadata is missing or wrong, in constant time.
#[derive(Clone)]
pub struct TierAuth {
    /// The secret callers must present.
    secret: Arc<TierSecret>,
}

impl TierAuth {
    /// An interceptor that expects `secret`.
    pub fn new(secret: TierSecret) -> Self {
        Self { secret: Arc::new(secret) }
    }
}

impl Interceptor for TierAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get(TIER_SECRET_METADATA) {
            Some(given) if constant_time_eq(given.as_bytes(), self.secret.expose()) => Ok(request),
            _ => Err(Status::unauthenticated("missing or wrong tier secret")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(secret: Option<&'static str>) -> Result<Request<()>, Status> {
        let mut request = Request::new(());
        if let Some(s) = secret {
            request.metadata_mut().insert(TIER_SECRET_METADATA, s.parse().expect("ascii"));
        }
        TierAuth::new(TierSecret::new("s3cret")).call(request)
    }

    #[test]
    fn checks_the_secret() {
        assert!(call(Some("s3cret")).is_ok());
        assert_eq!(
            call(Some("s3cret!")).map(|_| ()).expect_err("wrong secret").code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(call(None).map(|_| ()).expect_err("no secret").code(), tonic::Code::Unauthenticated);
    }
}
