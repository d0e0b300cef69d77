//! A daemon's readiness and the two HTTP probes that tell it: `/livez` is 200 while the process serves,
//! `/readyz` 200 when the daemon may take traffic, else 503 with the reason. Each daemon defines its
//! [`Readiness`] once; its own port, the probe port (`--probe-listen`, plain HTTP, for probers that
//! cannot present a mesh certificate: kubelet's `httpGet` probes, a load balancer's health check), the
//! gRPC health service ([`crate::grpc_health`]) and systemd ([`crate::systemd_notify`]) all answer from
//! it. The probe port serves nothing else, so it tells a stranger only whether the daemon is up.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::http_serving::HttpLimits;

/// Whether the daemon may take traffic now, else why not.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The probes' routes, for the daemon's own router and the probe port.
pub fn router(ready: Readiness) -> axum::Router {
    axum::Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(ready)
}

async fn readyz(State(ready): State<Readiness>) -> (StatusCode, String) {
    match ready() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

/// Serves the probes on `listener` (no TLS) until the process ends, logging a failure.
pub fn spawn(listener: TcpListener, ready: Readiness) -> tokio::task::JoinHandle<()> {
    let limits = HttpLimits { max_connections: 64, max_connections_per_ip: 16, ..HttpLimits::default() };
    tokio::spawn(async move {
        let forever = std::future::pending::<()>();
        if let Err(error) = crate::http_serving::serve(listener, router(ready), limits, None, forever).await {
            tracing::error!(%error, "the probe listener stopped");
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    async fn get_status(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.expect("read");
        let status = reply.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, reply)
    }

    #[tokio::test]
    async fn readyz_follows_the_daemon_and_nothing_else_is_served() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let task = spawn(
            listener,
            Arc::new(move || if flag.load(Ordering::Relaxed) { Ok(()) } else { Err("catching up".into()) }),
        );
        assert_eq!(get_status(addr, "/livez").await.0, 200);
        let (status, reply) = get_status(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(reply.ends_with("catching up\n"), "{reply}");
        ready.store(true, Ordering::Relaxed);
        assert_eq!(get_status(addr, "/readyz").await.0, 200);
        assert_eq!(get_status(addr, "/metrics").await.0, 404);
        task.abort();
    }
}
