//! A regional node under overload and without its core: generations beyond the admission budget and
//! queue get 429 with `Retry-After`; with the core down, an expired answer is served within the stale
//! grace (`X-Cache: STALE`), anything else gets 503, and after a few failures the circuit breaker opens
//! (calls fail at once) until a probe finds the core back.

use std::ops::ControlFlow::{Break, Continue};
use std::time::{Duration, Instant};

use mesh_harness::poll::poll_reporting;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

fn question(text: &str, max_tokens: u32) -> Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": text}]})
}

fn metric(mesh: &Mesh, name: &str) -> anyhow::Result<f64> {
    let text = mesh_harness::client::agent(Duration::from_secs(5))
        .get(format!("{}/metrics", mesh.regional_url(0)))
        .call()?
        .into_body()
        .read_to_string()?;
    let line = text.lines().find(|l| l.starts_with(name)).ok_or_else(|| anyhow::anyhow!("no {name}"))?;
    Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
}

#[test]
fn overload_gets_429_and_a_core_outage_serves_stale_then_opens_the_breaker() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-overload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = [
        "--ttl-volatile-s",
        "2",
        "--ttl-default-s",
        "2",
        "--ttl-stable-s",
        "2",
        "--admission-budget",
        "100",
        "--admission-queue",
        "1",
        "--breaker-failures",
        "3",
        "--breaker-open-ms",
        "2000",
        "--stale-grace-s",
        "600",
    ];
    let mut mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: flags.iter().map(|f| (*f).to_owned()).collect(),
        ..MeshSpec::local(&dir)
    })?;

    // Six different 64-token generations at once: a budget of 100 runs one, queues one, refuses the rest.
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let client = mesh.regional_client(0);
            std::thread::spawn(move || {
                client.chat(&question(&format!("Write a short poem about the number {i}."), 64))
            })
        })
        .collect();
    let replies =
        threads.into_iter().map(|t| t.join().expect("thread")).collect::<anyhow::Result<Vec<_>>>()?;
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    println!("six concurrent generations: {statuses:?}");
    assert!(statuses.contains(&200) && statuses.contains(&429), "{statuses:?}");
    for reply in replies.iter().filter(|r| r.status == 429) {
        let retry_after: u64 = reply.header("retry-after").unwrap_or("0").parse()?;
        assert!(retry_after >= 1, "{:?}", reply.headers);
        assert_eq!(reply.json()["error"]["code"], "overloaded", "{}", reply.body);
    }
    assert!(metric(&mesh, "mesh_regional_admission_refused_total")? >= 1.0);

    // An answer expires (TTL 2 s); the core goes down; the expired answer is served as STALE.
    let q = question("Name a primary colour.", 8);
    let fresh = mesh.regional_client(0).chat(&q)?;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    // Deliberate: the answer's 2 s TTL must pass (with a margin) before the core goes down.
    std::thread::sleep(Duration::from_millis(2_500));
    mesh.kill_core(0);
    let stale = mesh.regional_client(0).chat(&q)?;
    assert_eq!(stale.status, 200, "{}", stale.body);
    assert_eq!(stale.header("x-cache"), Some("STALE"));
    assert_eq!(stale.content(), fresh.content());

    // Nothing to serve: 503 with Retry-After; after three such failures the breaker opens.
    for i in 0..3 {
        let reply = mesh.regional_client(0).chat(&question(&format!("Name a country, take {i}."), 8))?;
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert!(reply.header("retry-after").is_some());
    }
    assert_eq!(metric(&mesh, "mesh_regional_core_breaker_state")?, 2.0, "open");
    let started = Instant::now();
    let fast = mesh.regional_client(0).chat(&question("Name a mountain.", 8))?;
    assert_eq!(fast.status, 503);
    assert!(fast.body.contains("circuit open"), "{}", fast.body);
    println!("a call with the breaker open failed in {:?}", started.elapsed());
    assert!(mesh.regional_client(0).chat(&q)?.header("x-cache") == Some("STALE"), "stale still served");

    // The core comes back; once the breaker half-opens, a probe closes it and generation resumes.
    mesh.start_all()?;
    poll_reporting(Duration::from_millis(500), Duration::from_secs(60), "the region recovering", || {
        let reply = mesh.regional_client(0).chat(&question("Name a mountain.", 8))?;
        Ok(if reply.status == 200 { Break(()) } else { Continue(format!("{} {}", reply.status, reply.body)) })
    })?;
    assert_eq!(metric(&mesh, "mesh_regional_core_breaker_state")?, 0.0, "closed again");
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
