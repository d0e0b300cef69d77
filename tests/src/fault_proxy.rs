//! A fault-injecting TCP proxy. It forwards every accepted connection to one target and copies bytes both
//! ways; a switchable [`Rule`] decides, by the connection's source IP, which connections may pass. Changing
//! the rule also cuts the open connections the new rule blocks, so a partition takes effect at once (a
//! blocked connection is accepted and closed straight away, which peers see as a refused connection).
//!
//! The proxy runs on a runtime thread of its own, so it works the same from a plain `#[test]`, from a
//! `#[tokio::test]` and from a synchronous harness; dropping it stops that thread and cuts every connection.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

/// Which connections may pass, by their source IP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Rule {
    /// Every connection passes.
    #[default]
    Open,
    /// Connections from these source IPs are refused; the others pass.
    BlockSources(HashSet<IpAddr>),
    /// No connection passes.
    BlockAll,
}

impl Rule {
    /// Whether a connection from `source` may pass.
    pub fn allows(&self, source: IpAddr) -> bool {
        match self {
            Rule::Open => true,
            Rule::BlockSources(blocked) => !blocked.contains(&source),
            Rule::BlockAll => false,
        }
    }
}

/// Counters of what the proxy did, for test output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections let through since the start.
    pub forwarded: u64,
    /// Connections refused by the rule since the start.
    pub refused: u64,
    /// Open connections cut by a rule change since the start.
    pub cut: u64,
    /// Connections open now.
    pub open: usize,
}

/// One forwarded connection: where it came from and how to cut it.
struct Connection {
    source: IpAddr,
    abort: AbortHandle,
}

/// What the accept loop and the controlling thread share.
#[derive(Default)]
struct State {
    rule: Rule,
    connections: HashMap<u64, Connection>,
    next_id: u64,
    stats: ProxyStats,
}

/// A running proxy from [`FaultProxy::addr`] to [`FaultProxy::target`].
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("rule", &lock(&self.state).rule)
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1` at a free port, forwarding to `target`, with every connection allowed.
    pub fn start(target: SocketAddr) -> std::io::Result<Self> {
        Self::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), target)
    }

    /// Starts a proxy listening on `listen` (port 0 for a free one), forwarding to `target`.
    pub fn bind(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (shutdown, stopped) = oneshot::channel();
        let loop_state = Arc::clone(&state);
        let thread =
            std::thread::Builder::new().name(format!("fault-proxy-{}", addr.port())).spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => accept_loop(listener, target, loop_state, stopped).await,
                        Err(e) => eprintln!("fault proxy {addr}: cannot register the listener: {e}"),
                    }
                });
            })?;
        Ok(Self { addr, target, state, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// The address the proxy listens on (what peers should dial).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address every connection is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The current rule.
    pub fn rule(&self) -> Rule {
        lock(&self.state).rule.clone()
    }

    /// Replaces the rule and cuts every open connection the new rule blocks.
    pub fn set_rule(&self, rule: Rule) {
        let mut state = lock(&self.state);
        state.rule = rule;
        let State { rule, connections, stats, .. } = &mut *state;
        connections.retain(|_, connection| {
            let keep = rule.allows(connection.source);
            if !keep {
                connection.abort.abort();
                stats.cut += 1;
            }
            keep
        });
    }

    /// Refuses (and cuts) connections from these source IPs; the others pass.
    pub fn set_blocked_sources(&self, sources: HashSet<IpAddr>) {
        self.set_rule(if sources.is_empty() { Rule::Open } else { Rule::BlockSources(sources) });
    }

    /// Refuses (and cuts) every connection.
    pub fn block_all(&self) {
        self.set_rule(Rule::BlockAll);
    }

    /// Lets every connection pass again.
    pub fn heal(&self) {
        self.set_rule(Rule::Open);
    }

    /// What the proxy has done so far.
    pub fn stats(&self) -> ProxyStats {
        let state = lock(&self.state);
        ProxyStats { open: state.connections.len(), ..state.stats }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until `stopped` fires, then cuts every open one.
async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    state: Arc<Mutex<State>>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((inbound, peer)) => admit(&state, inbound, peer.ip(), target),
                // Out of file descriptors or a connection reset before accept: back off a little.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    for (_, connection) in lock(&state).connections.drain() {
        connection.abort.abort();
    }
}

/// Forwards one accepted connection if the rule allows its source, else closes it at once.
fn admit(state: &Arc<Mutex<State>>, mut inbound: TcpStream, source: IpAddr, target: SocketAddr) {
    // The rule is checked and the connection registered under one lock, so a concurrent rule change
    // either refuses it here or finds it registered and cuts it.
    let mut guard = lock(state);
    if !guard.rule.allows(source) {
        guard.stats.refused += 1;
        return;
    }
    guard.stats.forwarded += 1;
    let id = guard.next_id;
    guard.next_id += 1;
    let task_state = Arc::clone(state);
    let task = tokio::spawn(async move {
        if let Ok(mut outbound) = TcpStream::connect(target).await {
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        }
        lock(&task_state).connections.remove(&id);
    });
    guard.connections.insert(id, Connection { source, abort: task.abort_handle() });
}

/// Locks the shared state; a panic elsewhere while holding it leaves consistent data, so poison is ignored.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read as _, Write as _};
    use std::net::TcpStream as StdStream;

    use super::*;

    /// A blocking echo server on 127.0.0.1; its thread lives as long as the test process.
    fn echo_server() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind echo server");
        let addr = listener.local_addr().expect("echo server address");
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(addr: SocketAddr) -> StdStream {
        let stream = StdStream::connect(addr).expect("connect to the proxy");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        stream
    }

    /// Sends `text` and reads the echo back.
    fn round_trip(stream: &mut StdStream, text: &str) -> std::io::Result<String> {
        stream.write_all(text.as_bytes())?;
        let mut buf = vec![0u8; text.len()];
        stream.read_exact(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Whether the connection is closed: a read ends (EOF or reset) rather than timing out.
    fn is_closed(stream: &mut StdStream) -> bool {
        let _ = stream.write_all(b"x");
        let mut buf = [0u8; 16];
        match stream.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    #[test]
    fn forwards_both_directions() {
        let proxy = FaultProxy::start(echo_server()).expect("start proxy");
        let mut stream = connect(proxy.addr());
        assert_eq!(round_trip(&mut stream, "hello").expect("echo"), "hello");
        assert_eq!(round_trip(&mut stream, "again").expect("echo"), "again");
        assert_eq!(proxy.stats().forwarded, 1);
    }

    #[test]
    fn blocking_cuts_open_connections_and_refuses_new_ones_until_healed() {
        let proxy = FaultProxy::start(echo_server()).expect("start proxy");
        let mut open = connect(proxy.addr());
        assert_eq!(round_trip(&mut open, "before").expect("echo"), "before");

        proxy.block_all();
        assert!(is_closed(&mut open), "an open connection survived block_all");
        let mut refused = connect(proxy.addr());
        assert!(is_closed(&mut refused), "a new connection passed a blocking rule");
        let stats = proxy.stats();
        assert_eq!((stats.cut, stats.refused, stats.open), (1, 1, 0), "{stats:?}");

        proxy.heal();
        let mut healed = connect(proxy.addr());
        assert_eq!(round_trip(&mut healed, "after").expect("echo after heal"), "after");
    }

    #[test]
    fn blocking_other_sources_leaves_this_one_alone() {
        let proxy = FaultProxy::start(echo_server()).expect("start proxy");
        let mut open = connect(proxy.addr());
        proxy.set_blocked_sources(HashSet::from([IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]));
        assert_eq!(round_trip(&mut open, "still").expect("echo"), "still");
        let mut fresh = connect(proxy.addr());
        assert_eq!(round_trip(&mut fresh, "new").expect("echo"), "new");
        assert_eq!(proxy.stats().cut, 0);
    }

    #[tokio::test]
    async fn rules_match_the_source_ip_from_an_async_test() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let proxy = FaultProxy::start(echo_server()).expect("start proxy");
        let addr = proxy.addr();
        let from = |ip: [u8; 4]| async move {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind(SocketAddr::new(IpAddr::from(ip), 0)).expect("bind source ip");
            socket.connect(addr).await.expect("connect")
        };
        let mut a = from([127, 0, 0, 21]).await;
        let mut b = from([127, 0, 0, 22]).await;
        proxy.set_blocked_sources(HashSet::from([IpAddr::from([127, 0, 0, 21])]));

        let mut buf = [0u8; 4];
        let cut = tokio::time::timeout(Duration::from_secs(5), a.read(&mut buf)).await.expect("a is cut");
        assert!(matches!(cut, Ok(0) | Err(_)), "the blocked source's connection is still open: {cut:?}");
        b.write_all(b"pong").await.expect("write b");
        b.read_exact(&mut buf).await.expect("read b");
        assert_eq!(&buf, b"pong");
        drop(proxy);
    }
}
