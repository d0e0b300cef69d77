//! Invalidation propagation: how long after the core acknowledged an invalidation each tier of a running
//! mesh stops serving the answer (the edge, every regional node, every core node), for one key, a cache
//! tag, a whole tenant, and a model version (a bump). `mesh bench propagation` (the `mesh` tool) runs it at length; the process test
//! `mesh_01_one_truth` runs a short version and checks the documented bounds.
//!
//! Each answer is first made hot everywhere (an edge hit, a cached answer at every regional node, an
//! entry on every core node), then invalidated, then every tier is probed until it refuses:
//! - the edge: the question with `Cache-Control: only-if-cached` is no longer an edge hit;
//! - a regional node: the same request to it is no longer answered with the old answer (its own
//!   cache, the semantic tier and the core lookup behind it all count);
//! - a core node: a local read of the key there finds nothing.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use core_client::{Consistency, CoreClient};
use daemon_runtime::TierIdentity;
use serde_json::{json, Value};

use crate::client::ChatClient;
use crate::mesh::Mesh;
use crate::paths;
use crate::poll::poll_every;

/// Longest wait for one tier to refuse an answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// One answer made hot everywhere.
#[derive(Clone, Debug)]
pub struct Warmed {
    /// The request.
    pub body: Value,
    /// Its cache key.
    pub key: String,
    /// The ETag of the answer every tier holds.
    pub etag: String,
    /// Its cache tags (`X-Cache-Tags`), empty for none.
    pub tags: String,
}

impl Warmed {
    /// Asks `client` for this answer, with `Cache-Control: only-if-cached` when `cached_only`.
    pub fn ask(&self, client: &ChatClient, cached_only: bool) -> anyhow::Result<crate::client::Reply> {
        let mut headers = Vec::new();
        if cached_only {
            headers.push(("cache-control", "only-if-cached"));
        }
        if !self.tags.is_empty() {
            headers.push((shared::cache_tags::CACHE_TAGS_HEADER, self.tags.as_str()));
        }
        client.chat_with_headers(&self.body, &headers)
    }
}

/// Per tier, the milliseconds from an acknowledgement to that tier's first refusal.
#[derive(Clone, Debug, Default)]
pub struct Propagation {
    /// `key`, `tenant` or `model version`.
    pub scope: String,
    /// Tier name and its samples, in the mesh's order (edge, regional nodes, core nodes).
    pub tiers: Vec<(String, Vec<f64>)>,
}

impl Propagation {
    /// p50 and p99 of every tier's samples, and the largest sample of all.
    pub fn summary(&self) -> Vec<(String, usize, f64, f64)> {
        self.tiers
            .iter()
            .map(|(tier, samples)| (tier.clone(), samples.len(), pct(samples, 0.50), pct(samples, 0.99)))
            .collect()
    }

    /// The slowest tier's p99 (the time until every tier refuses, at the 99th percentile bound).
    pub fn worst_p99(&self) -> f64 {
        self.summary().iter().map(|(_, _, _, p99)| *p99).fold(0.0, f64::max)
    }

    /// A table of the figures.
    pub fn table(&self) -> String {
        let mut out =
            format!("invalidation propagation, scope {}: ms from the acknowledgement\n", self.scope);
        out += &format!("  {:<12} {:>7} {:>9} {:>9}\n", "tier", "samples", "p50", "p99");
        for (tier, n, p50, p99) in self.summary() {
            out += &format!("  {tier:<12} {n:>7} {p50:>9.1} {p99:>9.1}\n");
        }
        out
    }
}

fn pct(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// What can serve an answer, and how to ask it.
enum Probe {
    Edge(ChatClient),
    Regional(ChatClient),
    Core(CoreClient),
}

struct Tier {
    name: String,
    probe: Probe,
}

/// The tiers of `mesh`, each with a client that asks it alone.
pub struct Tiers {
    tiers: Vec<Tier>,
    tenant: String,
    runtime: tokio::runtime::Runtime,
}

impl Tiers {
    /// Every tier of `mesh`: the edge (when it runs), each regional node, each core node.
    pub fn of(mesh: &Mesh, tenant: &str) -> anyhow::Result<Self> {
        let mut tiers = Vec::new();
        if mesh.edge_url().is_some() {
            tiers.push(Tier { name: "edge".into(), probe: Probe::Edge(mesh.client()) });
        }
        for i in 0..mesh.regional_nodes() {
            tiers.push(Tier {
                name: format!("regional-{i}"),
                probe: Probe::Regional(mesh.regional_client(i)),
            });
        }
        let secret = TierIdentity::insecure_secret(mesh.tier_secret())?;
        // Several probe threads block on it at once.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        // The clients' channels belong to this runtime.
        let _entered = runtime.enter();
        for i in 0..mesh.core_nodes() {
            let addr = mesh.core_url(i).trim_start_matches("http://").to_owned();
            let client = CoreClient::new(vec![addr], secret.clone())?.with_timeout(Duration::from_secs(2));
            tiers.push(Tier { name: format!("core-{i}"), probe: Probe::Core(client) });
        }
        drop(_entered);
        Ok(Self { tiers, tenant: tenant.to_owned(), runtime })
    }

    /// These tiers without the one named `name` (a core node removed from the cluster, say, which keeps
    /// its frozen state and is no longer asked).
    pub fn without(mut self, name: &str) -> Self {
        self.tiers.retain(|tier| tier.name != name);
        self
    }

    /// Whether `tier` still serves `answer`.
    fn serves(&self, tier: &Tier, answer: &Warmed) -> anyhow::Result<bool> {
        Ok(match &tier.probe {
            Probe::Edge(client) => {
                let reply = answer.ask(client, true)?;
                reply.header("x-cache") == Some("HIT-EDGE")
            }
            Probe::Regional(client) => {
                let reply = answer.ask(client, true)?;
                reply.status == 200 && reply.header("etag") == Some(answer.etag.as_str())
            }
            Probe::Core(client) => {
                let read = self.runtime.block_on(client.read(&self.tenant, &answer.key, Consistency::Local));
                read.map(|entry| entry.is_some_and(|e| e.etag == answer.etag)).unwrap_or(false)
            }
        })
    }

    /// Makes `body` hot at every tier: generated once, then an edge hit, cached at every regional node
    /// and stored on every core node.
    pub fn warm(&self, body: Value) -> anyhow::Result<Warmed> {
        self.warm_tagged(body, "")
    }

    /// [`warm`](Self::warm) for a request with the cache tags `tags` (an `X-Cache-Tags` value).
    pub fn warm_tagged(&self, body: Value, tags: &str) -> anyhow::Result<Warmed> {
        let mut answer = Warmed { key: String::new(), etag: String::new(), tags: tags.to_owned(), body };
        let first = self
            .tiers
            .iter()
            .find_map(|t| match &t.probe {
                Probe::Edge(client) | Probe::Regional(client) => Some(answer.ask(client, false)),
                Probe::Core(_) => None,
            })
            .context("a mesh without an HTTP tier")??;
        ensure!(first.status == 200, "warming: {} {}", first.status, first.body);
        answer.key = first.header("x-cache-key").unwrap_or_default().to_owned();
        answer.etag = first.header("etag").unwrap_or_default().to_owned();
        // One time limit for warming every tier, one after another.
        let deadline = Instant::now() + PROBE_TIMEOUT;
        for tier in &self.tiers {
            let left = deadline.saturating_duration_since(Instant::now());
            let what = format!("{} serving {}", tier.name, answer.key);
            poll_every(Duration::from_millis(20), left, &what, || {
                if let Probe::Edge(client) | Probe::Regional(client) = &tier.probe {
                    // A plain request fills the tier (an edge fill, a regional copy of the core's entry).
                    let reply = answer.ask(client, false)?;
                    ensure!(reply.status == 200, "warming {}: {}", tier.name, reply.body);
                }
                Ok(self.serves(tier, &answer)?.then_some(()))
            })?;
        }
        Ok(answer)
    }

    /// Probes every tier for every one of `answers`, each pair from a thread of its own, until the tier
    /// refuses it; per tier, the milliseconds from `acked` to the moment it refused the last of them.
    pub fn until_refused(&self, answers: &[Warmed], acked: Instant) -> anyhow::Result<Vec<(String, f64)>> {
        std::thread::scope(|scope| {
            let probes: Vec<Vec<_>> = self
                .tiers
                .iter()
                .map(|tier| {
                    answers
                        .iter()
                        .map(|answer| scope.spawn(move || self.probe_until_refused(tier, answer, acked)))
                        .collect()
                })
                .collect();
            probes
                .into_iter()
                .zip(&self.tiers)
                .map(|(threads, tier)| {
                    let mut last = 0.0f64;
                    for thread in threads {
                        let ms = thread
                            .join()
                            .map_err(|_| anyhow::anyhow!("the probe of {} panicked", tier.name))??;
                        last = last.max(ms);
                    }
                    Ok((tier.name.clone(), last))
                })
                .collect()
        })
    }

    /// When `tier` first refused `answer`: the start of the refusing probe, in ms after `acked` (probes
    /// run back to back, so the switch happened between the start of the last probe that was served
    /// and the end of this one). Fails [`PROBE_TIMEOUT`] after `acked`.
    fn probe_until_refused(&self, tier: &Tier, answer: &Warmed, acked: Instant) -> anyhow::Result<f64> {
        let left = PROBE_TIMEOUT.saturating_sub(acked.elapsed());
        let what = format!("{} refusing {}", tier.name, answer.key);
        poll_every(Duration::from_millis(1), left, &what, || {
            let started = acked.elapsed().as_secs_f64() * 1000.0;
            Ok((!self.serves(tier, answer)?).then_some(started))
        })
    }
}

fn question(text: &str) -> Value {
    json!({"model": shared::models::DEFAULT_MODELS.split('@').next().unwrap_or_default(), "temperature": 0,
           "max_tokens": 6, "messages": [{"role": "user", "content": text}]})
}

fn add(propagation: &mut Propagation, samples: Vec<(String, f64)>) {
    for (tier, ms) in samples {
        match propagation.tiers.iter_mut().find(|(t, _)| *t == tier) {
            Some((_, all)) => all.push(ms),
            None => propagation.tiers.push((tier, vec![ms])),
        }
    }
}

/// `rounds` keys, each made hot, invalidated through `invalidator` (`POST /v1/cache/invalidate`), and
/// probed until every tier refuses it.
pub fn keys(
    tiers: &Tiers,
    invalidator: &ChatClient,
    rounds: usize,
    tag: &str,
) -> anyhow::Result<Propagation> {
    let mut propagation = Propagation { scope: "key".into(), ..Default::default() };
    for i in 0..rounds {
        let answer = tiers.warm(question(&format!("Name one word about {tag} number {i}.")))?;
        let reply = invalidator.invalidate(&answer.key)?;
        let acked = Instant::now();
        ensure!(reply.status == 200, "invalidate: {} {}", reply.status, reply.body);
        add(&mut propagation, tiers.until_refused(std::slice::from_ref(&answer), acked)?);
    }
    Ok(propagation)
}

/// `rounds` times: `answers` answers carrying one cache tag made hot (with one answer of another tag and
/// one without tags beside them), the tag invalidated through `invalidator` (`POST /v1/cache/invalidate`
/// with `{"tag": ...}`), and every tier probed until it refuses all of the tag's answers. Returns the
/// propagation and the answers the invalidations did not cover, for the caller to check they are still
/// served.
pub fn tag(
    tiers: &Tiers,
    invalidator: &ChatClient,
    rounds: usize,
    answers: usize,
    label: &str,
) -> anyhow::Result<(Propagation, Vec<Warmed>)> {
    let mut propagation = Propagation { scope: "tag".into(), ..Default::default() };
    let mut bystanders = Vec::new();
    let slug: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    for round in 0..rounds {
        let tag = format!("news:{slug}-{round}");
        let warmed: Vec<Warmed> = (0..answers)
            .map(|i| {
                let tags = format!("{tag}, region:eu-{i}");
                tiers.warm_tagged(
                    question(&format!("Tell one word about {label} topic {round} item {i}.")),
                    &tags,
                )
            })
            .collect::<anyhow::Result<_>>()?;
        let other = format!("news:{slug}-other-{round}");
        bystanders.push(
            tiers.warm_tagged(question(&format!("One word about {label} other topic {round}.")), &other)?,
        );
        bystanders.push(tiers.warm(question(&format!("One word about {label} untagged topic {round}.")))?);
        let reply = invalidator.invalidate_tag(&tag, false)?;
        let acked = Instant::now();
        ensure!(reply.status == 200, "invalidate the tag: {} {}", reply.status, reply.body);
        add(&mut propagation, tiers.until_refused(&warmed, acked)?);
    }
    Ok((propagation, bystanders))
}

/// `rounds` times: `answers` answers of the tenant made hot, the tenant invalidated at the core
/// (`core-node admin invalidate --tenant`), and every tier probed until it refuses all of them.
pub fn tenant(
    mesh: &Mesh,
    tiers: &Tiers,
    rounds: usize,
    answers: usize,
    tag: &str,
) -> anyhow::Result<Propagation> {
    let mut propagation = Propagation { scope: "tenant".into(), ..Default::default() };
    for round in 0..rounds {
        let warmed: Vec<Warmed> = (0..answers)
            .map(|i| tiers.warm(question(&format!("Say one word about {tag} round {round} item {i}."))))
            .collect::<anyhow::Result<_>>()?;
        admin(mesh, &["invalidate", "--tenant", &tiers.tenant])?;
        let acked = Instant::now();
        add(&mut propagation, tiers.until_refused(&warmed, acked)?);
    }
    Ok(propagation)
}

/// `rounds` times: an answer made hot, its model bumped to a new version (`core-node admin
/// bump-model`), and every tier probed until it refuses the old version's answer.
pub fn model_version(mesh: &Mesh, tiers: &Tiers, rounds: usize, tag: &str) -> anyhow::Result<Propagation> {
    let mut propagation = Propagation { scope: "model version".into(), ..Default::default() };
    let model = shared::models::DEFAULT_MODELS.split('@').next().unwrap_or_default().to_owned();
    for round in 0..rounds {
        let answer = tiers.warm(question(&format!("Give one word about {tag} version round {round}.")))?;
        admin(mesh, &["bump-model", "--model", &model])?;
        let acked = Instant::now();
        add(&mut propagation, tiers.until_refused(std::slice::from_ref(&answer), acked)?);
    }
    Ok(propagation)
}

/// Runs `core-node admin <args>` against the mesh's core nodes; returns once the core acknowledged.
pub fn admin(mesh: &Mesh, args: &[&str]) -> anyhow::Result<()> {
    let nodes: Vec<String> =
        (0..mesh.core_nodes()).map(|i| mesh.core_url(i).trim_start_matches("http://").to_owned()).collect();
    let out = std::process::Command::new(paths::binary("core-node"))
        .args(["admin", "--nodes", &nodes.join(",")])
        .args(args)
        .env("MESH_INSECURE_TIER_SECRET", mesh.tier_secret())
        .output()?;
    ensure!(out.status.success(), "core-node admin {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}
