//! Channels to other tiers that take this node's TLS material as it is when each connection opens, so
//! a reloaded certificate or CA ([`super::live_tls`]) serves every reconnect without rebuilding the
//! channels that hold them.
//!
//! tonic's own TLS fixes its configuration when a channel is built; here the channel's connector
//! dials TCP and runs the handshake itself, asking for the called role's name as the server name. The
//! channel's URI is the peer's `https://` URL with the scheme tonic dials by (`http`): tonic then
//! leaves the stream to the connector rather than adding TLS of its own, and requests still name the
//! `https` origin.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use super::live_tls::LiveTls;
use super::TierRole;

/// An endpoint of a peer tier, ready to be tuned (timeouts, keep-alive) and connected.
#[derive(Debug, Clone)]
pub struct PeerEndpoint {
    endpoint: Endpoint,
    dialer: Option<TlsDialer>,
}

impl PeerEndpoint {
    /// Without TLS: tonic dials `endpoint` itself.
    pub(super) fn plain(endpoint: Endpoint) -> Self {
        Self { endpoint, dialer: None }
    }

    /// With TLS: `endpoint` names the peer with the `http` scheme (the connector adds TLS) and
    /// `https` as its origin.
    pub(super) fn tls(endpoint: Endpoint, tls: Arc<LiveTls>, target: TierRole) -> Self {
        Self { endpoint, dialer: Some(TlsDialer { tls, target, local_address: None }) }
    }

    /// Applies tonic's own settings (timeouts, keep-alive, message sizes) to the endpoint.
    pub fn configure(self, settings: impl FnOnce(Endpoint) -> Endpoint) -> Self {
        Self { endpoint: settings(self.endpoint), ..self }
    }

    /// Connections leave from `address` (none: the system picks).
    pub fn local_address(self, address: Option<IpAddr>) -> Self {
        let dialer = self.dialer.map(|dialer| TlsDialer { local_address: address, ..dialer });
        Self { endpoint: self.endpoint.local_address(address), dialer }
    }

    /// A channel that connects on first use and reconnects after failures.
    pub fn connect_lazy(&self) -> Channel {
        match &self.dialer {
            Some(dialer) => self.endpoint.connect_with_connector_lazy(dialer.clone()),
            None => self.endpoint.connect_lazy(),
        }
    }

    /// A channel connected now.
    pub async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        match &self.dialer {
            Some(dialer) => self.endpoint.connect_with_connector(dialer.clone()).await,
            None => self.endpoint.connect().await,
        }
    }
}

/// Dials TCP and runs the TLS handshake with the node's current client configuration.
#[derive(Clone)]
struct TlsDialer {
    tls: Arc<LiveTls>,
    target: TierRole,
    local_address: Option<IpAddr>,
}

impl std::fmt::Debug for TlsDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsDialer").field("target", &self.target).finish_non_exhaustive()
    }
}

type Dialing = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tonic::codegen::Service<Uri> for TlsDialer {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Dialing;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Dialing {
        let dialer = self.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| io::Error::other(format!("{uri}: no host")))?;
            let port = uri.port_u16().unwrap_or(443);
            let tcp = dial(host.trim_matches(['[', ']']), port, dialer.local_address).await?;
            let name = ServerName::try_from(dialer.target.dns_name()).map_err(io::Error::other)?;
            let config = dialer.tls.current().client();
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A TCP connection to the first of `host`'s addresses that answers, from `local_address` when given.
async fn dial(host: &str, port: u16, local_address: Option<IpAddr>) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
    for addr in tokio::net::lookup_host((host, port)).await? {
        match connect_from(addr, local_address).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(error) => last = error,
        }
    }
    Err(last)
}

async fn connect_from(addr: SocketAddr, local_address: Option<IpAddr>) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if let Some(local) = local_address {
        socket.bind(SocketAddr::new(local, 0))?;
    }
    socket.connect(addr).await
}
