//! Two tenants on one mesh of two regional nodes: neither is served the other's answers, and one cannot
//! learn whether the other holds an answer, nor drop it, through `POST /v1/cache/invalidate` (at the
//! node that holds the copy, or at the other one, whose tombstone would reach every peer), nor flood
//! the core with invalidations.

use mesh_harness::client::Reply;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 16,
           "messages": [{"role": "user", "content": question}]})
}

/// The pod's count of prompt tokens served from its prefix cache.
fn cached_prompt_tokens(mesh: &Mesh) -> anyhow::Result<f64> {
    let agent = mesh_harness::client::agent(std::time::Duration::from_secs(5));
    let text = agent.get(format!("{}/metrics", mesh.pod_url())).call()?.into_body().read_to_string()?;
    text.lines()
        .filter(|line| line.contains("cached_prompt_tokens_total") && !line.starts_with('#'))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
        .ok_or_else(|| anyhow::anyhow!("no cached prompt tokens metric"))
}

fn x_cache(reply: &Reply) -> &str {
    reply.header("x-cache").unwrap_or_default()
}

#[test]
fn tenants_share_nothing_and_cannot_probe_each_other() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-tenants-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        regional_nodes: 2,
        edge: false,
        other_tenants: vec![("acme".into(), "sk-acme".into())],
        regional_args: ["--invalidation-burst", "4", "--invalidations-per-s", "0.01"]
            .map(String::from)
            .to_vec(),
        ..MeshSpec::local(&dir)
    })?;
    let (dev, acme) = (mesh.client(), mesh.client_with_key("sk-acme"));

    let question = request("What is the capital of Norway?");
    let first = dev.chat(&question)?;
    assert_eq!((first.status, x_cache(&first)), (200, "MISS"), "{}", first.body);
    let dev_key = first.header("x-cache-key").expect("a key").to_owned();
    assert_eq!(x_cache(&dev.chat(&question)?), "HIT-REGIONAL");

    // The same question from the other tenant is its own: generated, never dev's answer, exactly or
    // as a paraphrase.
    let theirs = acme.chat(&question)?;
    assert_eq!((theirs.status, x_cache(&theirs)), (200, "MISS"), "{:?}", theirs.headers);
    assert_ne!(theirs.header("x-cache-key"), Some(dev_key.as_str()));
    let paraphrase = acme.chat(&request("What's the capital of Norway?"))?;
    assert_ne!(paraphrase.header("x-cache-matched-key"), Some(dev_key.as_str()), "{:?}", paraphrase.headers);

    // Invalidating dev's key as acme answers as a key nobody holds does, and dev's answer stays.
    let probe = acme.invalidate(&dev_key)?;
    let nobody = acme.invalidate(&format!("v1:{}", "0".repeat(64)))?;
    assert_eq!((probe.status, nobody.status), (200, 200), "{} / {}", probe.body, nobody.body);
    let shape = |reply: &Reply| -> anyhow::Result<serde_json::Value> {
        let mut body: serde_json::Value = serde_json::from_str(&reply.body)?;
        for varying in ["key", "invalidated_at_ms"] {
            body.as_object_mut().map(|o| o.remove(varying));
        }
        Ok(body)
    };
    assert_eq!(
        shape(&probe)?,
        shape(&nobody)?,
        "the reply must not tell whether another tenant holds the key"
    );
    let still = dev.chat(&question)?;
    assert_eq!(x_cache(&still), "HIT-REGIONAL", "another tenant dropped dev's answer: {:?}", still.headers);
    assert_eq!(still.content(), first.content());
    // The same probe at the other regional node, whose exact cache holds no copy: nothing changes there
    // or at the first node (no cutoff of acme's covers dev's answer, no tombstone of acme's replicates).
    let acme_at_two = mesh_harness::client::ChatClient::new(&mesh.regional_url(1), Some("sk-acme"));
    assert_eq!(acme_at_two.invalidate(&dev_key)?.status, 200);
    // Deliberate: a tombstone, had one been written, reaches the peer within this.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let at_one = dev.chat(&question)?;
    assert_eq!(x_cache(&at_one), "HIT-REGIONAL", "a tombstone dropped dev's copy: {:?}", at_one.headers);
    let at_two = mesh.regional_client(1).chat(&question)?;
    assert!(x_cache(&at_two).starts_with("HIT"), "dev's answer refused at node 2: {:?}", at_two.headers);
    assert_eq!(at_two.content(), first.content());

    // The pod's prefix cache is salted by tenant: a long prompt dev sent saves acme no prefill.
    let long = format!("{} Which of these words is longest?", "alpha beta gamma delta epsilon ".repeat(60));
    assert_eq!(dev.chat(&request(&long))?.status, 200);
    let before = cached_prompt_tokens(&mesh)?;
    let theirs = acme.chat(&request(&long))?;
    assert_eq!((theirs.status, x_cache(&theirs)), (200, "MISS"));
    let reused = cached_prompt_tokens(&mesh)? - before;
    println!("prefix cache: {reused} of acme's prompt tokens came from the cache");
    assert!(reused < 64.0, "acme reused {reused} prompt tokens of dev's prefix");
    // The control: dev's own next prompt with the same long start does reuse it.
    let before = cached_prompt_tokens(&mesh)?;
    let own = format!("{} Which of these words is shortest?", "alpha beta gamma delta epsilon ".repeat(60));
    assert_eq!(dev.chat(&request(&own))?.status, 200);
    let own_reused = cached_prompt_tokens(&mesh)? - before;
    assert!(own_reused >= 128.0, "the same tenant's prefix is reused ({own_reused} tokens)");

    // Invalidations are writes at the core: a tenant past its burst waits, the others do not.
    let nobody_key = format!("v1:{}", "1".repeat(64));
    let flood: Vec<u16> =
        (0..3).map(|_| acme.invalidate(&nobody_key).map(|r| r.status)).collect::<Result<_, _>>()?;
    assert_eq!(flood, [200, 200, 429], "a burst of 4 per tenant");
    let limited = acme.invalidate(&nobody_key)?;
    assert_eq!(limited.status, 429);
    assert!(limited.header("retry-after").is_some(), "{:?}", limited.headers);

    // The owner can.
    let own = dev.invalidate(&dev_key)?;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&own.body)?["removed_at_core"], 1);
    assert_eq!(x_cache(&dev.chat(&question)?), "MISS");
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
