//! Abuse of a regional node's listener by one client, while another keeps being served: a client that
//! never finishes its headers (slowloris), one that sends its headers and then drips its body, and long
//! questions that share a long prefix (which embed alike and would keep the semantic verifier busy). A
//! client that asks for a long generation and hangs up stops it at every tier: the regional node drops
//! the flight, the core cancels it (nothing committed) and the pod frees its place in the batch, so
//! asking and hanging up cannot fill the pods outside the tenant's admission budget.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use mesh_harness::client::ChatClient;
use mesh_harness::poll::poll_every;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 8,
           "messages": [{"role": "user", "content": question}]})
}

/// Reads until the server closes the connection (or 10 s pass); what it sent.
fn read_until_closed(stream: &mut TcpStream) -> String {
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The sum of the samples of `name` (with `label` in their labels) on the `/metrics` page at `base_url`.
fn metric_at(mesh: &Mesh, base_url: &str, name: &str, label: &str) -> Option<f64> {
    let text = mesh.get_text(base_url, "/metrics").ok()?;
    let samples = text.lines().filter(|l| l.starts_with(name) && l.contains(label));
    Some(samples.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum())
}

/// The value of the first line of the node's `/metrics` that starts with `name`, if it answers.
fn metric(client: &ChatClient, name: &str) -> Option<f64> {
    let metrics = client.get("/metrics").ok()?.body;
    metrics.lines().find(|l| l.starts_with(name))?.rsplit(' ').next()?.parse().ok()
}

#[test]
fn slow_clients_are_cut_off_and_long_questions_are_bounded_while_others_are_served() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-abuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: ["--http-header-timeout-ms", "500", "--http-body-timeout-ms", "800"]
            .map(String::from)
            .to_vec(),
        ..MeshSpec::local(&dir)
    })?;
    let client = mesh.regional_client(0);
    let addr = mesh.regional_url(0).trim_start_matches("http://").to_owned();
    let question = request("What is the capital of Sweden?");
    assert_eq!(client.chat(&question)?.status, 200);

    // Slowloris: a request line and then a byte of header now and then, never the blank line.
    let mut slow = TcpStream::connect(&addr)?;
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")?;
    let started = Instant::now();
    let dripper = std::thread::spawn(move || {
        for _ in 0..30 {
            // Deliberate: the attack is one byte every 100 ms.
            std::thread::sleep(Duration::from_millis(100));
            if slow.write_all(b"x").is_err() {
                break;
            }
        }
        slow
    });
    // Meanwhile another client is served.
    let served = client.chat(&question)?;
    assert_eq!((served.status, served.header("x-cache")), (200, Some("HIT-REGIONAL")));
    let mut slow = dripper.join().expect("dripper");
    read_until_closed(&mut slow);
    let cut_after = started.elapsed();
    assert!(cut_after < Duration::from_secs(4), "the slowloris client was held {cut_after:?}");

    // Headers sent, then the body dripped: 408 within the body deadline.
    let mut drip = TcpStream::connect(&addr)?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{{",
        mesh.api_key()
    );
    drip.write_all(head.as_bytes())?;
    let started = Instant::now();
    let writer = {
        let mut drip = drip.try_clone()?;
        std::thread::spawn(move || {
            for _ in 0..40 {
                // Deliberate: the attack is one byte every 100 ms.
                std::thread::sleep(Duration::from_millis(100));
                if drip.write_all(b" ").is_err() {
                    break;
                }
            }
        })
    };
    let answer = read_until_closed(&mut drip);
    let _ = writer.join();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());

    // A streaming client that reads the first words and hangs up: the node stops following that
    // generation, the core cancels it and commits nothing, the pod frees its place.
    let mut streaming = TcpStream::connect(&addr)?;
    let story = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 400,
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]});
    let mut streamed = story.clone();
    streamed["stream"] = json!(true);
    let body = streamed.to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        mesh.api_key(),
        body.len()
    );
    streaming.write_all(head.as_bytes())?;
    let mut first = [0u8; 512];
    let read = streaming.read(&mut first)?;
    assert!(String::from_utf8_lossy(&first[..read]).starts_with("HTTP/1.1 200"));
    drop(streaming);
    let what = "the node dropping a generation nobody reads";
    poll_every(Duration::from_millis(100), Duration::from_secs(10), what, || {
        Ok(metric(&client, "mesh_regional_flights_abandoned_total").filter(|count| *count >= 1.0))
    })?;
    let (core, pod) = (mesh.core_url(0), mesh.pod_url());
    poll_every(
        Duration::from_millis(100),
        Duration::from_secs(10),
        "the core and the pod cancelling it",
        || {
            let core_cancelled = metric_at(&mesh, &core, "mesh_core_completions_cancelled_total", "");
            let pod_cancelled = metric_at(&mesh, &pod, "mesh_pod_requests_total", "outcome=\"cancelled\"");
            Ok((core_cancelled >= Some(1.0) && pod_cancelled >= Some(1.0)).then_some(()))
        },
    )?;
    let again = client.chat(&story)?;
    assert_eq!(again.header("x-cache"), Some("MISS"), "an abandoned generation is not committed");

    // Long questions with a long shared prefix: answered (by exact keys only), each within a bound,
    // while the node's other requests keep their latency.
    let prefix = "Please consider the following background carefully before you answer. ".repeat(20);
    let mut slowest = Duration::ZERO;
    for ending in ["What is 2 + 2?", "What is 3 + 3?"] {
        let started = Instant::now();
        let reply = client.chat(&request(&format!("{prefix}{ending}")))?;
        slowest = slowest.max(started.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-cache"), Some("MISS"), "a long question is never a paraphrase hit");
    }
    let started = Instant::now();
    assert_eq!(client.chat(&question)?.header("x-cache"), Some("HIT-REGIONAL"));
    let hit = started.elapsed();
    println!("abuse: slowloris cut after {cut_after:?}; long questions at most {slowest:?}; a hit after them {hit:?}");
    assert!(slowest < Duration::from_secs(60) && hit < Duration::from_secs(2), "{slowest:?} / {hit:?}");
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
