//! Serving a daemon's HTTP routes with the bounds a public listener needs: a client must send its
//! request headers within [`HttpLimits::header_read_timeout`] (slowloris), a connection on which
//! nothing moves in either direction for [`HttpLimits::idle_timeout`] is closed (a client that
//! stops reading its stream, or sends nothing more), and at most [`HttpLimits::max_connections`] are
//! served at once (more wait in the kernel's accept queue, not in this process).
//!
//! With a TLS acceptor, the handshake must also finish within the header-read time, and each request
//! carries the peer's verified role ([`PeerRole`]) for the routes' authorization.
//!
//! On shutdown the listener closes at once; connections in flight get [`DRAIN`] to finish.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;

use crate::identity::{role_of, PeerRole};

/// How long connections in flight may take to finish once shutdown begins.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Longest a connection may go with no byte read or written.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then drains. With `tls`,
/// every connection is a TLS one and its requests carry the peer's [`PeerRole`].
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
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
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, a connection reset before it was accepted: keep serving.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let stream = IdleTimeout::new(stream, limits.idle_timeout);
        let (builder, watcher, router, tls) =
            (builder.clone(), graceful.watcher(), router.clone(), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => serve_connection(&builder, watcher, stream, router).await,
                Some(acceptor) => match handshake(&acceptor, stream, limits.header_read_timeout).await {
                    Ok((stream, peer)) => {
                        serve_connection(&builder, watcher, stream, router.layer(axum::Extension(peer))).await
                    }
                    Err(error) => Err(error),
                },
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the drain time were dropped");
    }
    Ok(())
}

/// Serves one connection's requests with `router` until it closes or shutdown drains it.
async fn serve_connection<S>(
    builder: &Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
    router: axum::Router,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router);
    watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned()).await
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

/// A TCP stream that fails with `TimedOut` once nothing has been read or written for `idle`.
struct IdleTimeout {
    inner: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleTimeout {
    fn new(inner: TcpStream, idle: Duration) -> Self {
        Self { inner, idle, deadline: Box::pin(tokio::time::sleep(idle)) }
    }

    /// Progress was made: the idle time starts again.
    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// Nothing could move: an error once the idle time is over.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "connection idle"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => self.stalled(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                self.moved();
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn started(limits: HttpLimits) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
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
}
