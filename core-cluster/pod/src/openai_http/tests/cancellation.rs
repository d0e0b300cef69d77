//! A client that hangs up stops its generation.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt as _;

use super::client::send;
use super::{question, Pod, CHAT, MODEL};

const STORY: &str = "Write a very long story about a dragon who learns to cook, chapter by chapter.";

/// Waits until the pod counts `cancelled` cancelled generations.
async fn wait_for_cancelled(pod: &Pod, cancelled: u32) {
    let line = format!("mesh_pod_requests_total{{model=\"{MODEL}\",outcome=\"cancelled\"}} {cancelled}\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pod.metrics().await.contains(&line) {
        assert!(Instant::now() < deadline, "the generation was not cancelled: {}", pod.metrics().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_stops_its_generation() {
    let pod = Pod::start(None).await;

    // Mid-stream: read until the text has begun, then hang up.
    let mut stream = send(pod.addr, "POST", CHAT, None, &question(STORY, 2000, r#","stream":true"#)).await;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(r#""content":"#) {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "the stream ended before any text: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    drop(stream);
    wait_for_cancelled(&pod, 1).await;

    // Waiting for a whole answer: hang up before it is ready.
    let stream = send(pod.addr, "POST", CHAT, None, &question(STORY, 2000, "")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(stream);
    wait_for_cancelled(&pod, 2).await;

    let metrics = pod.metrics().await;
    for finished in ["stop", "length"] {
        let line = format!("mesh_pod_requests_total{{model=\"{MODEL}\",outcome=\"{finished}\"}} 0\n");
        assert!(metrics.contains(&line), "no generation ran to its end: {metrics}");
    }
    pod.stop().await;
}
