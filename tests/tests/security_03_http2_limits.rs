//! The limits of a regional node's public listener hold over HTTP/2, through the real binary: a
//! connection with no request in flight is closed after the idle time although keep-alive PINGs and
//! their ACKs keep moving bytes, and a streamed answer whose client holds its flow-control window at
//! zero drops its connection after the write timeout (it would otherwise pin the handler and the
//! flight's log). Another client is served meanwhile.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

/// An HTTP/2 connection (prior knowledge, cleartext) to `addr` whose streams get `window` bytes: the
/// handle to send requests, and the connection's driver, done when the server closes it.
async fn connect(
    addr: &str,
    window: u32,
) -> anyhow::Result<(h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>)> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let (client, connection) = h2::client::Builder::new().initial_window_size(window).handshake(tcp).await?;
    Ok((client, tokio::spawn(connection)))
}

/// How long the server took to close the connection `driver` drives (at most `limit`).
async fn closed_within(
    driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    tokio::time::timeout(limit, driver).await.ok().map(|_| started.elapsed())
}

#[test]
fn idle_and_unread_http2_connections_are_closed() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-http2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: ["--http-idle-timeout-s", "2", "--http-write-timeout-s", "1"]
            .map(String::from)
            .to_vec(),
        ..MeshSpec::local(&dir)
    })?;
    let addr = mesh.regional_url(0).trim_start_matches("http://").to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (idle_for, unread_for) = runtime.block_on(async {
        // One request, then nothing: closed once idle, PINGs and all.
        let (client, driver) = connect(&addr, 65_535).await?;
        let mut client = client.ready().await?;
        let request = tonic::codegen::http::Request::get(format!("http://{addr}/healthz")).body(())?;
        let (response, _) = client.send_request(request, true)?;
        let mut body = response.await?.into_body();
        while let Some(chunk) = body.data().await {
            chunk?;
        }
        let idle_for = closed_within(driver, Duration::from_secs(10)).await;
        drop(client);

        // A streamed answer to a client whose window stays shut: dropped after the write timeout.
        let (client, driver) = connect(&addr, 0).await?;
        let mut client = client.ready().await?;
        let question = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 200, "stream": true,
            "messages": [{"role": "user", "content": "Tell me a long story about a patient lighthouse keeper."}]});
        let request = tonic::codegen::http::Request::post(format!("http://{addr}/v1/chat/completions"))
            .header("authorization", format!("Bearer {}", mesh.api_key()))
            .header("content-type", "application/json")
            .body(())?;
        let (response, mut send) = client.send_request(request, false)?;
        send.send_data(Bytes::from(question.to_string()), true)?;
        let response = response.await?;
        anyhow::ensure!(response.status() == 200, "{:?}", response.status());
        let unread_for = closed_within(driver, Duration::from_secs(10)).await;
        drop(client);
        Ok::<_, anyhow::Error>((idle_for, unread_for))
    })?;
    println!("http2: an idle connection closed after {idle_for:?}, an unread stream's after {unread_for:?}");
    assert!(idle_for.is_some_and(|d| d >= Duration::from_secs(1)), "the idle connection: {idle_for:?}");
    assert!(unread_for.is_some(), "a stream with a shut window pinned its connection");
    // Others are served throughout.
    let reply = mesh.regional_client(0).chat(&json!({"model": "smollm2-135m-instruct", "temperature": 0,
        "max_tokens": 4, "messages": [{"role": "user", "content": "Say hi."}]}))?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
