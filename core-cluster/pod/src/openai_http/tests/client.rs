//! A bare HTTP/1.1 client over a TCP stream, enough to read JSON answers and server-sent event
//! streams (chunked), and to hang up in the middle of one.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A whole response.
#[derive(Debug)]
pub(super) struct Reply {
    /// The status code.
    pub status: u16,
    /// The header block, lowercased.
    pub headers: String,
    /// The body, de-chunked.
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// Sends a request and leaves the connection open for reading.
pub(super) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

/// Sends a request and reads the whole response.
pub(super) async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> Reply {
    let mut stream = send(addr, method, path, auth, body).await;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let status = head.get(9..12).and_then(|s| s.parse().ok()).expect("a status line");
    let headers = head.to_ascii_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_owned() };
    Reply { status, headers, body }
}

/// `POST`s a JSON body.
pub(super) async fn post(addr: SocketAddr, path: &str, auth: Option<&str>, body: &str) -> Reply {
    call(addr, "POST", path, auth, body).await
}

/// `GET`s a path.
pub(super) async fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Reply {
    call(addr, "GET", path, auth, "").await
}

/// The payload of a chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").expect("a chunk ends with CRLF");
    }
    out
}
