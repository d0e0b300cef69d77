//! Free loopback ports.

use std::net::TcpListener;

/// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
