//! The attacks of `mesh bench tenants`, each a loop on threads of its own until told to stop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mesh_harness::client::ChatClient;
use serde_json::json;

/// One attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Nobody attacks: the baseline.
    None,
    /// Invalidations of random keys as fast as the tenant's limit lets through (and past it).
    InvalidationFlood,
    /// Long streamed generations of new questions, each abandoned after its first bytes.
    HangUpFlood,
    /// New questions made of hundreds of punctuation-separated words.
    PunctuationFlood,
    /// TCP connections to the core that never start TLS, from an address of their own.
    ConnectionFlood,
}

impl Attack {
    /// Every attack, the baseline first.
    pub const ALL: [Attack; 5] = [
        Attack::None,
        Attack::InvalidationFlood,
        Attack::HangUpFlood,
        Attack::PunctuationFlood,
        Attack::ConnectionFlood,
    ];

    /// The attack's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Attack::None => "alone",
            Attack::InvalidationFlood => "invalidation_flood",
            Attack::HangUpFlood => "hang_up_flood",
            Attack::PunctuationFlood => "punctuation_flood",
            Attack::ConnectionFlood => "connection_flood",
        }
    }
}

/// What an attack sent.
#[derive(Debug, Default)]
pub struct Sent {
    /// Requests (or connections) made.
    pub attempts: AtomicU64,
    /// Of those, refused by the mesh (a 4xx or 5xx, a closed connection).
    pub refused: AtomicU64,
}

/// Where the attacker aims.
pub struct Target<'a> {
    /// The attacker tenant's client of the regional node.
    pub client: &'a ChatClient,
    /// The core node's `host:port` the regional node asks first.
    pub core_addr: std::net::SocketAddr,
}

/// Runs `attack` against `target` until `stop`; what it sent.
pub fn run(attack: Attack, target: &Target<'_>, stop: &AtomicBool) -> Sent {
    let sent = Sent::default();
    let threads = match attack {
        Attack::None => 0,
        Attack::InvalidationFlood | Attack::PunctuationFlood => 2,
        Attack::HangUpFlood => 4,
        Attack::ConnectionFlood => 1,
    };
    let counter = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let refused = match attack {
                        Attack::None => false,
                        Attack::InvalidationFlood => invalidate_random(target.client, n),
                        Attack::HangUpFlood => hang_up(target.client, n),
                        Attack::PunctuationFlood => punctuation(target.client, n),
                        Attack::ConnectionFlood => {
                            hold_connections(target.core_addr, stop, &sent);
                            continue;
                        }
                    };
                    sent.attempts.fetch_add(1, Ordering::Relaxed);
                    if refused {
                        sent.refused.fetch_add(1, Ordering::Relaxed);
                        // A refused attacker retries at once, but not in a busy loop on the same core.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
    });
    sent
}

/// Whether a reply refused the request (or none came).
fn refused(status: anyhow::Result<u16>) -> bool {
    status.map_or(true, |s| s >= 400)
}

fn invalidate_random(client: &ChatClient, n: u64) -> bool {
    let key = format!("v1:{:064x}", u128::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
    refused(client.invalidate(&key).map(|r| r.status))
}

fn hang_up(client: &ChatClient, n: u64) -> bool {
    let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 256, "stream": true,
        "messages": [{"role": "user", "content": format!("Write a long story about lighthouse number {n}.")}]});
    refused(client.chat_and_hang_up(&body))
}

fn punctuation(client: &ChatClient, n: u64) -> bool {
    let words: Vec<String> = (0..300).map(|i| format!("w{}", (n * 300 + i) % 997)).collect();
    let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 1,
        "messages": [{"role": "user", "content": format!("Which of these is first: {}?", words.join(";"))}]});
    refused(client.chat(&body).map(|r| r.status))
}

/// Opens connections to `core` from 127.0.0.9 (an attacker's address of its own) without starting
/// TLS, keeps them until the server closes them or `stop`, and opens more; each counted in `sent`.
fn hold_connections(core: std::net::SocketAddr, stop: &AtomicBool, sent: &Sent) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    runtime.block_on(async {
        let mut held = tokio::task::JoinSet::new();
        while !stop.load(Ordering::Relaxed) {
            while held.len() < 2_000 {
                sent.attempts.fetch_add(1, Ordering::Relaxed);
                let connected = async {
                    let socket = tokio::net::TcpSocket::new_v4()?;
                    socket.bind("127.0.0.9:0".parse().map_err(std::io::Error::other)?)?;
                    socket.connect(core).await
                };
                match connected.await {
                    Ok(mut stream) => {
                        held.spawn(async move {
                            let mut buf = [0u8; 1];
                            // Held until the server closes it (a refusal) or for a minute.
                            let read = tokio::io::AsyncReadExt::read(&mut stream, &mut buf);
                            tokio::time::timeout(Duration::from_secs(60), read).await.is_ok()
                        });
                    }
                    Err(_) => {
                        sent.refused.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
            if let Ok(Some(Ok(true))) =
                tokio::time::timeout(Duration::from_millis(50), held.join_next()).await
            {
                sent.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        held.abort_all();
    });
}
