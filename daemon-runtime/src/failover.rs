//! One failover channel: lazy gRPC channels to interchangeable nodes (the core cluster's), and which of
//! them to try first. Both clients of the core build on it: the regional node's (one pass over the
//! nodes behind a circuit breaker) and `core_cluster::client::CoreClient` (retries until a deadline,
//! following the leader). A node that answers becomes the one tried first; a node that fails hands
//! that place to the next one, unless another call already moved it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::Channel;

use crate::identity::{TierIdentity, TierRole};

/// Longest wait for a TCP connection to a node before the call fails over.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// HTTP/2 pings on an idle connection, so that a frozen or cut-off node is noticed even in the middle
/// of a long stream...
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// ...within this long of a ping going unanswered.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a failover channel could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// No node address was given.
    #[error("no node addresses")]
    NoNodes,
    /// An address is not a URL or `host:port`.
    #[error("node address {address:?}: {reason}")]
    BadAddress {
        /// The address given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Channels to interchangeable nodes, with the one to try first.
#[derive(Debug)]
pub struct FailoverChannel {
    /// Each node's address as given, and its channel.
    nodes: Vec<(String, Channel)>,
    /// The index of the node to try first.
    preferred: AtomicUsize,
    /// What this node presents to the core nodes.
    identity: TierIdentity,
}

impl FailoverChannel {
    /// Channels to the core nodes at `addresses` (`https://host:port` with TLS, `http://` without, or
    /// `host:port`), presenting `identity`; nothing connects until first use.
    pub fn new(addresses: &[String], identity: &TierIdentity) -> Result<Self, ChannelError> {
        if addresses.is_empty() {
            return Err(ChannelError::NoNodes);
        }
        let nodes = addresses
            .iter()
            .map(|address| Ok((address.clone(), channel(address, identity)?)))
            .collect::<Result<_, ChannelError>>()?;
        Ok(Self { nodes, preferred: AtomicUsize::new(0), identity: identity.clone() })
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none (never true of a channel [`FailoverChannel::new`] made).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node tried first: its index, its address and its channel.
    pub fn preferred(&self) -> (usize, &str, Channel) {
        self.node(self.preferred.load(Ordering::Relaxed) % self.nodes.len())
    }

    /// Every node once, the preferred one first, then the others in order after it.
    pub fn attempt_order(&self) -> impl Iterator<Item = (usize, &str, Channel)> + '_ {
        let start = self.preferred.load(Ordering::Relaxed);
        (0..self.nodes.len()).map(move |offset| self.node((start + offset) % self.nodes.len()))
    }

    /// Makes `index` the node tried first (it answered, or it is known to lead).
    pub fn prefer(&self, index: usize) {
        self.preferred.store(index % self.nodes.len(), Ordering::Relaxed);
    }

    /// After `index` failed: the next node is tried first, unless another call already moved on.
    pub fn move_past(&self, index: usize) {
        let next = (index + 1) % self.nodes.len();
        let _ = self.preferred.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A channel to `address`: the node's own when it is one of them, else a new lazy one (an operator
    /// asking one particular node).
    pub fn channel_to(&self, address: &str) -> Result<Channel, ChannelError> {
        match self.nodes.iter().find(|(known, _)| known == address) {
            Some((_, channel)) => Ok(channel.clone()),
            None => channel(address, &self.identity),
        }
    }

    /// The nodes' addresses, in order.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|(address, _)| address.as_str())
    }

    fn node(&self, index: usize) -> (usize, &str, Channel) {
        let (address, channel) = &self.nodes[index];
        (index, address, channel.clone())
    }
}

/// A lazy channel to one core node.
fn channel(address: &str, identity: &TierIdentity) -> Result<Channel, ChannelError> {
    let url = if address.contains("://") {
        address.to_owned()
    } else {
        format!("{}://{address}", identity.scheme())
    };
    let endpoint = identity
        .endpoint(&url, TierRole::Core)
        .map_err(|e| ChannelError::BadAddress { address: address.to_owned(), reason: e.to_string() })?
        .configure(|endpoint| {
            endpoint
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        });
    Ok(endpoint.connect_lazy())
}

/// Whether a failed call may succeed on another node or later: the transport failed, the node did
/// not answer in time, or it could not commit. A rejected request (invalid, unauthenticated, not
/// found, ...) fails the same everywhere. `idempotent` calls (writes under a request id, reads) also
/// retry `Aborted` and `Internal`, which a node returns when it lost leadership mid-call; a
/// generation is not retried on them, since the first node may still be generating.
pub fn worth_another_node(code: tonic::Code, idempotent: bool) -> bool {
    use tonic::Code;
    match code {
        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Cancelled => true,
        Code::Aborted | Code::Internal => idempotent,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> TierIdentity {
        TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret")
    }

    fn addresses(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect()
    }

    #[tokio::test]
    async fn the_preferred_node_goes_first_and_failures_move_past_it() {
        let channel = FailoverChannel::new(&addresses(3), &identity()).expect("channel");
        let order = |c: &FailoverChannel| c.attempt_order().map(|(i, _, _)| i).collect::<Vec<_>>();
        assert_eq!(order(&channel), [0, 1, 2]);
        channel.prefer(2);
        assert_eq!(order(&channel), [2, 0, 1]);
        assert_eq!(channel.preferred().1, "127.0.0.1:7002");
        channel.move_past(2);
        assert_eq!(channel.preferred().0, 0, "wraps around");
        channel.move_past(1);
        assert_eq!(channel.preferred().0, 0, "a stale failure does not move a newer preference");
    }

    #[tokio::test]
    async fn addresses_are_urls_or_host_and_port() {
        assert!(matches!(FailoverChannel::new(&[], &identity()), Err(ChannelError::NoNodes)));
        let channel = FailoverChannel::new(&["http://127.0.0.1:1".into(), "127.0.0.1:2".into()], &identity());
        assert_eq!(
            channel.expect("channel").addresses().collect::<Vec<_>>(),
            ["http://127.0.0.1:1", "127.0.0.1:2"]
        );
        assert!(matches!(
            FailoverChannel::new(&["not a url".into()], &identity()),
            Err(ChannelError::BadAddress { .. })
        ));
    }
}
