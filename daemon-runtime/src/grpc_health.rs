//! The standard gRPC health service (`grpc.health.v1.Health`, as load balancers and `grpc-health-probe`
//! call it), answering from the daemon's [`Readiness`] (what its `/readyz` says): `SERVING` when it may
//! take traffic, else `NOT_SERVING`. It knows the overall server (`""`) and each service name it is given;
//! `Check` of any other name is `NOT_FOUND`, and `Watch` sends `SERVICE_UNKNOWN` for it, as the
//! protocol says. `Watch` sends the status at once and again whenever it changes (looked at every
//! [`WATCH_EVERY`]).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tonic::{Request, Response, Status};
pub use tonic_health::pb::health_check_response::ServingStatus;
pub use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::probes::Readiness;

/// How often a `Watch` looks at the readiness.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The service; see [`server`].
#[derive(Clone)]
pub struct HealthService {
    services: Arc<[String]>,
    ready: Readiness,
}

/// The health service for a server carrying `services` (their full gRPC names), ready when `ready` says.
pub fn server(services: &[&str], ready: Readiness) -> HealthServer<HealthService> {
    let services = services.iter().map(|s| (*s).to_owned()).collect();
    HealthServer::new(HealthService { services, ready })
}

impl HealthService {
    /// The status of `service`, `None` for a name this server does not carry.
    fn status(&self, service: &str) -> Option<ServingStatus> {
        let known = service.is_empty() || self.services.iter().any(|s| s == service);
        known.then(|| if (self.ready)().is_ok() { ServingStatus::Serving } else { ServingStatus::NotServing })
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse { status: status.into() }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        match self.status(service) {
            Some(status) => Ok(Response::new(answer(status))),
            None => Err(Status::not_found(format!("no service {service:?} here"))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        let changes =
            futures::stream::unfold((self.clone(), service, None), |(this, service, last)| async move {
                loop {
                    let status = this.status(&service).unwrap_or(ServingStatus::ServiceUnknown);
                    if last != Some(status) {
                        return Some((Ok(answer(status)), (this, service, Some(status))));
                    }
                    tokio::time::sleep(WATCH_EVERY).await;
                }
            });
        Ok(Response::new(Box::pin(changes)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::StreamExt as _;

    use super::*;

    fn service(ready: Arc<AtomicBool>) -> HealthService {
        let ready: Readiness =
            Arc::new(move || if ready.load(Ordering::Relaxed) { Ok(()) } else { Err("not yet".into()) });
        HealthService { services: Arc::from(vec!["mesh.Test".to_owned()]), ready }
    }

    fn ask(name: &str) -> Request<HealthCheckRequest> {
        Request::new(HealthCheckRequest { service: name.to_owned() })
    }

    #[tokio::test]
    async fn check_follows_readiness_and_refuses_unknown_names() {
        let ready = Arc::new(AtomicBool::new(false));
        let health = service(ready.clone());
        let status = |r: Response<HealthCheckResponse>| r.into_inner().status;
        assert_eq!(
            status(health.check(ask("")).await.expect("a known service")),
            ServingStatus::NotServing as i32
        );
        ready.store(true, Ordering::Relaxed);
        assert_eq!(
            status(health.check(ask("")).await.expect("a known service")),
            ServingStatus::Serving as i32
        );
        assert_eq!(
            status(health.check(ask("mesh.Test")).await.expect("a known service")),
            ServingStatus::Serving as i32
        );
        assert_eq!(
            health.check(ask("mesh.Other")).await.expect_err("an unknown service").code(),
            tonic::Code::NotFound
        );
    }

    #[tokio::test]
    async fn watch_sends_the_status_then_each_change() {
        let ready = Arc::new(AtomicBool::new(true));
        let health = service(ready.clone());
        let mut changes = health.watch(ask("mesh.Test")).await.expect("a watch").into_inner();
        let next = |item: Option<Result<HealthCheckResponse, Status>>| {
            item.expect("a status").expect("no error").status
        };
        assert_eq!(next(changes.next().await), ServingStatus::Serving as i32);
        ready.store(false, Ordering::Relaxed);
        assert_eq!(next(changes.next().await), ServingStatus::NotServing as i32);
        let mut unknown = health.watch(ask("mesh.Other")).await.expect("a watch").into_inner();
        assert_eq!(next(unknown.next().await), ServingStatus::ServiceUnknown as i32);
    }
}
