//! Serving a daemon's HTTP routes with the bounds a public listener needs:
//!
//! - a client must send its request headers within [`HttpLimits::header_read_timeout`] (slowloris);
//! - a connection with no request in flight for [`HttpLimits::idle_timeout`] is closed, over HTTP/2 too
//!   (keep-alive PINGs do not count as activity), and one on which no byte moves for that long is
//!   dropped ([`idle_timeout`]);
//! - a response whose client does not take its data within [`HttpLimits::write_timeout`] (an HTTP/2
//!   flow-control window held at zero, a socket nobody reads) drops its connection ([`activity`]);
//! - at most [`HttpLimits::max_connections`] are served at once (more wait in the kernel's accept
//!   queue, not in this process), and at most [`HttpLimits::max_connections_per_ip`] from one address
//!   (more are closed at once, [`per_ip`]).
//!
//! With a TLS acceptor, the handshake must also finish within the header-read time, and each request
//! carries the peer's verified role ([`PeerRole`]) for the routes' authorization.
//!
//! On shutdown the listener closes at once; connections in flight get [`DRAIN`] to finish.

mod activity;
mod idle_timeout;
mod per_ip;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use self::activity::{Activity, Verdict};
use self::idle_timeout::IdleTimeout;
use self::per_ip::PerIp;
use crate::identity::{role_of, PeerRole, ServerTls};

/// The address a request's connection came from, in every request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// How long connections in flight may take to finish once shutdown begins.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Longest a connection may go with no request in flight, or with no byte read or written.
    pub idle_timeout: Duration,
    /// Longest a response may wait for its client to take data it has ready.
    pub write_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one address.
    pub max_connections_per_ip: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_ip: 1024,
        }
    }
}

impl HttpLimits {
    /// How often a connection's watchdog looks at it.
    fn watch_every(&self) -> Duration {
        (self.idle_timeout.min(self.write_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_secs(1))
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then drains. With `tls`,
/// every connection is a TLS one (accepted with the node's TLS material as it is then) and its
/// requests carry the peer's [`PeerRole`].
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: HttpLimits,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let max_connections = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let permits = Arc::new(Semaphore::new(max_connections));
    let per_ip = PerIp::new(limits.max_connections_per_ip);
    let (stopping, stopping_rx) = watch::channel(false);
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.idle_timeout / 2)
        .keep_alive_timeout(limits.idle_timeout / 4);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, a connection reset before it was accepted: keep serving.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(ip_slot) = per_ip.admit(peer.ip()) else {
            tracing::debug!(peer = %peer.ip(), "closed a connection past the per-address limit");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stream = IdleTimeout::new(stream, limits.idle_timeout);
        let router = router.clone().layer(axum::Extension(PeerAddr(peer)));
        let (builder, stopping, tls) = (builder.clone(), stopping_rx.clone(), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => serve_connection(&builder, stopping, stream, router, limits).await,
                Some(tls) => match handshake(&tls.acceptor(), stream, limits.header_read_timeout).await {
                    Ok((stream, peer)) => {
                        serve_connection(
                            &builder,
                            stopping,
                            stream,
                            router.layer(axum::Extension(peer)),
                            limits,
                        )
                        .await
                    }
                    Err(error) => Err(error),
                },
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop((permit, ip_slot));
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a permit until it ends: all of them back means every connection is done.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN, permits.acquire_many(all)).await.is_err() {
        tracing::warn!("connections still open after the drain time were dropped");
    }
    Ok(())
}

/// Serves one connection's requests with `router` until it closes, goes idle, stalls on a client that
/// does not read, or shutdown drains it.
async fn serve_connection<S>(
    builder: &Builder<TokioExecutor>,
    mut stopping: watch::Receiver<bool>,
    stream: S,
    router: axum::Router,
    limits: HttpLimits,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new();
    let router = router.layer(axum::middleware::from_fn_with_state(Arc::clone(&activity), activity::track));
    let connection =
        builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(connection);
    let mut watch = tokio::time::interval(limits.watch_every());
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => return served,
            changed = stopping.changed(), if !closing => {
                if changed.is_err() || *stopping.borrow() {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
            _ = watch.tick() => match activity.verdict(limits.idle_timeout, limits.write_timeout) {
                Verdict::Stuck => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "a client did not take its response").into());
                }
                Verdict::Idle if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                Verdict::Idle | Verdict::Busy => {}
            },
        }
    }
}

/// The TLS handshake, within `deadline`, and the role the peer's certificate proves (none when it
/// presented no certificate, where the listener allows that).
async fn handshake(
    acceptor: &TlsAcceptor,
    stream: IdleTimeout,
    deadline: Duration,
) -> Result<(tokio_rustls::server::TlsStream<IdleTimeout>, PeerRole), Box<dyn std::error::Error + Send + Sync>>
{
    let stream = tokio::time::timeout(deadline, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake too slow"))??;
    let peer = match stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()) {
        // The chain was verified against the mesh CA during the handshake; the leaf names the role.
        Some(leaf) => {
            PeerRole(Some(role_of(leaf).map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?))
        }
        None => PeerRole(None),
    };
    Ok((stream, peer))
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use axum::body::{Body, Bytes};
    use futures::StreamExt as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn started(limits: HttpLimits) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        // `/endless`: a response that always has more data for its client.
        let endless = || async {
            let chunk = Bytes::from_static(&[b'x'; 1024]);
            Body::from_stream(futures::stream::repeat(chunk).map(Ok::<_, io::Error>))
        };
        let router = axum::Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route("/endless", axum::routing::get(endless));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, router, limits, None, async move {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    async fn get(addr: std::net::SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        answer
    }

    /// Reads until the server closes the connection; how long that took.
    async fn closed_after(mut stream: TcpStream) -> Duration {
        let started = StdInstant::now();
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => {}
                Err(_) => panic!("the server kept the connection open"),
            }
        }
    }

    #[tokio::test]
    async fn slow_headers_and_idle_connections_are_closed_and_others_served() {
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
            max_connections: 8,
            ..HttpLimits::default()
        };
        let (addr, _stop) = started(limits).await;
        // Slowloris: headers started, never finished; a byte now and then keeps the connection busy
        // but not its headers.
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET / HTTP/1.1\r\n").await.expect("write");
        let dripping = tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if slow.write_all(b"x").await.is_err() {
                    break;
                }
            }
            slow
        });
        // An idle connection that never sends anything.
        let idle = TcpStream::connect(addr).await.expect("connect");
        assert!(get(addr).await.contains("200 OK"), "others are served meanwhile");
        let idle_for = closed_after(idle).await;
        assert!(idle_for < Duration::from_secs(3), "{idle_for:?}");
        let slow = dripping.await.expect("drip");
        let slow_for = closed_after(slow).await;
        assert!(slow_for < Duration::from_secs(3), "{slow_for:?}");
    }

    #[tokio::test]
    async fn connections_past_the_limit_wait_and_are_served_when_one_closes() {
        let limits = HttpLimits {
            max_connections: 1,
            idle_timeout: Duration::from_millis(500),
            ..HttpLimits::default()
        };
        let (addr, _stop) = started(limits).await;
        let holder = TcpStream::connect(addr).await.expect("connect");
        // The only slot is taken: the next request waits until the holder is closed as idle.
        let started = StdInstant::now();
        assert!(get(addr).await.contains("200 OK"));
        assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
        drop(holder);
    }

    /// An HTTP/2 connection to `addr` whose streams get a flow-control window of `window` bytes: the
    /// handle to send requests, and the connection's driver (done when the server closes it).
    async fn h2_client(
        addr: std::net::SocketAddr,
        window: u32,
    ) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (client, connection) =
            h2::client::Builder::new().initial_window_size(window).handshake(tcp).await.expect("handshake");
        (client, tokio::spawn(connection))
    }

    async fn h2_get(client: &mut h2::client::SendRequest<Bytes>, path: &str) -> h2::RecvStream {
        let request = axum::http::Request::get(format!("http://x{path}")).body(()).expect("request");
        let ready = client.clone().ready().await.expect("ready");
        *client = ready;
        let (response, _) = client.send_request(request, true).expect("send");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 200);
        response.into_body()
    }

    #[tokio::test]
    async fn an_http2_connection_kept_alive_by_pings_is_closed_once_idle() {
        // Keep-alive PINGs every 300 ms and their ACKs move bytes all along.
        let limits = HttpLimits { idle_timeout: Duration::from_millis(600), ..HttpLimits::default() };
        let (addr, _stop) = started(limits).await;
        let (mut client, driver) = h2_client(addr, 65_535).await;
        let mut body = h2_get(&mut client, "/").await;
        while let Some(chunk) = body.data().await {
            chunk.expect("data");
        }
        let started = StdInstant::now();
        let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
        assert!(ended.is_ok(), "the idle HTTP/2 connection was kept open");
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "closed before it was idle: {:?}",
            started.elapsed()
        );
        drop(client);
    }

    #[tokio::test]
    async fn a_response_its_client_never_takes_drops_the_connection() {
        let limits = HttpLimits {
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_millis(500),
            ..HttpLimits::default()
        };
        let (addr, _stop) = started(limits).await;
        // A window of zero: the server may send headers, never data.
        let (mut client, driver) = h2_client(addr, 0).await;
        let _unread = h2_get(&mut client, "/endless").await;
        let started = StdInstant::now();
        let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
        assert!(ended.is_ok(), "a stream with a shut window pinned its connection");
        println!("a zero-window stream's connection dropped after {:?}", started.elapsed());
        // A client that reads is served meanwhile and after.
        assert!(get(addr).await.contains("200 OK"));
    }

    #[tokio::test]
    async fn connections_past_the_per_address_limit_are_closed() {
        let limits = HttpLimits { max_connections_per_ip: 1, ..HttpLimits::default() };
        let (addr, _stop) = started(limits).await;
        let holder = TcpStream::connect(addr).await.expect("connect");
        // Deliberate: the holder is accepted before the next one connects.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let refused = TcpStream::connect(addr).await.expect("connect");
        let closed = closed_after(refused).await;
        assert!(closed < Duration::from_secs(1), "{closed:?}");
        drop(holder);
        // Deliberate: the server sees the holder go before the next request.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(get(addr).await.contains("200 OK"), "its slot came back");
    }
}
