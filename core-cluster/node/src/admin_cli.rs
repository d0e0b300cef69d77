//! `core-node admin ...`: the operator's command line over [`CoreClient`]: status, membership changes,
//! model versions, tenant policies and invalidation. Prints each answer as JSON.

use clap::{Parser, Subcommand};
use proto::core::{
    invalidate, write_outcome, write_request, BumpModelVersion, EndCanary, Invalidate, ModelVersion,
    RegisterModel, SetTenantPolicy, TenantPolicy, TenantTag,
};

use crate::model_spec_args::ModelSpecArgs;
use crate::node::{CoreError, NodeId};
use core_client::CoreClient;

/// `core-node admin`: manage a running core cluster, presenting the admin identity (its certificate
/// flags, or `MESH_INSECURE_TIER_SECRET` on a mesh without TLS).
#[derive(Debug, Parser)]
#[command(name = "core-node admin", about = "Manage a running core cluster.")]
pub struct AdminArgs {
    /// Core nodes to talk to, as `host:port`, comma-separated (any node works; the leader is found).
    #[arg(long, env = "CORE_NODES", value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// The operator's identity: the admin certificate (mutual TLS), or the insecure secret.
    #[command(flatten)]
    pub identity: daemon_runtime::IdentityArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// One admin operation.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Each node's view: leader, term, applied index, voters, learners, state digest.
    Status,
    /// Add a node as a learner (it must be running, started without --bootstrap) and wait for it to catch up.
    AddLearner {
        /// The new node's id.
        #[arg(long)]
        id: NodeId,
        /// Its Raft address (`host:port`), as the other nodes reach it.
        #[arg(long)]
        addr: String,
    },
    /// Set the voters (promotes learners); nodes named in --remove leave the cluster.
    SetVoters {
        /// The voters, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        voters: Vec<NodeId>,
        /// Nodes to remove altogether, comma-separated.
        #[arg(long, value_delimiter = ',')]
        remove: Vec<NodeId>,
    },
    /// Register a model at a version, or describe a registered one: any of the spec flags replaces the
    /// registry's whole spec of the model (delivered to every tier by the change feed, listed by
    /// `/v1/models`; its backends join those of the core nodes' flags).
    RegisterModel {
        /// The model.
        #[arg(long)]
        model: String,
        /// Its version (default: 1 for a new model; with spec flags, whichever it is at).
        #[arg(long)]
        version: Option<u64>,
        /// Its metadata.
        #[command(flatten)]
        spec: ModelSpecArgs,
    },
    /// Move a model to a new version: older entries go stale and the hottest prompts are regenerated.
    /// With --canary, put the new version on trial for that percent of requests instead (then `promote`
    /// or `rollback`).
    BumpModel {
        /// The model.
        #[arg(long)]
        model: String,
        /// The new version (default: one above the highest it has had).
        #[arg(long, default_value_t = 0)]
        version: u64,
        /// Percent of requests (1 to 99) the new version answers while on trial.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..100))]
        canary: Option<u32>,
    },
    /// Make a model's version on trial current: its answers stay, the old version's go stale and its
    /// hottest prompts are regenerated.
    Promote {
        /// The model.
        #[arg(long)]
        model: String,
    },
    /// End a model's trial without it: every tier refuses the trial version's answers from now on.
    Rollback {
        /// The model.
        #[arg(long)]
        model: String,
    },
    /// Create a tenant or replace its policy.
    SetTenant {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Largest cached answer in bytes (0: the cluster's limit).
        #[arg(long, default_value_t = 0)]
        max_value_bytes: u64,
        /// TTL of entries stored without one, in seconds (0: none).
        #[arg(long, default_value_t = 0)]
        default_ttl_s: u64,
        /// Longest TTL kept, in seconds (0: unlimited).
        #[arg(long, default_value_t = 0)]
        max_ttl_s: u64,
        /// Cache answers to sampled requests (temperature above 0 without a seed) too; by default only
        /// deterministic requests are cached, since one random sample would be served to everyone.
        #[arg(long)]
        cache_sampled: bool,
    },
    /// Invalidate one key (--tenant and --key), every answer carrying a cache tag (--tenant and --tag, with
    /// --refresh to regenerate the hottest), a tenant (--tenant), or a model version (--model, --version).
    Invalidate {
        /// The tenant (alone: all its entries).
        #[arg(long)]
        tenant: Option<String>,
        /// One key of --tenant.
        #[arg(long)]
        key: Option<String>,
        /// A cache tag of --tenant: every answer carrying it.
        #[arg(long)]
        tag: Option<String>,
        /// With --tag: regenerate the hottest answers it invalidates, in the background.
        #[arg(long, requires = "tag")]
        refresh: bool,
        /// A model (with --version).
        #[arg(long)]
        model: Option<String>,
        /// The model version.
        #[arg(long)]
        version: Option<u64>,
    },
}

fn print(value: &impl serde::Serialize) -> Result<(), CoreError> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A write's outcome as the operator reads it.
fn outcome_json(outcome: &write_outcome::Outcome) -> serde_json::Value {
    use write_outcome::Outcome;
    match outcome {
        Outcome::Stored(s) => {
            serde_json::json!({ "outcome": "stored", "key": s.key, "created_ms": s.created_ms, "ttl_s": s.ttl_s })
        }
        Outcome::Invalidated(i) => {
            serde_json::json!({
                "outcome": "invalidated", "removed": i.removed, "at_ms": i.at_ms, "refreshing": i.refreshing,
            })
        }
        Outcome::ModelVersion(m) => serde_json::json!({
            "outcome": "model_version", "model": m.model, "previous": m.previous, "version": m.version,
            "refreshing": m.refreshing,
        }),
        Outcome::CanaryStarted(c) => serde_json::json!({
            "outcome": "canary_started", "model": c.model, "current": c.current, "version": c.version,
            "percent": c.percent,
        }),
        Outcome::CanaryEnded(c) => serde_json::json!({
            "outcome": if c.promoted { "promoted" } else { "rolled_back" }, "model": c.model,
            "version": c.version, "refreshing": c.refreshing,
        }),
        Outcome::ModelRegistered(m) => {
            serde_json::json!({ "outcome": "model_registered", "model": m.model, "version": m.version })
        }
        Outcome::TenantPolicySet(t) => {
            serde_json::json!({ "outcome": "tenant_policy_set", "tenant": t.tenant, "epoch": t.epoch })
        }
        Outcome::HitsRecorded(_) => serde_json::json!({ "outcome": "hits_recorded" }),
        Outcome::Swept(s) => serde_json::json!({
            "outcome": "swept", "entries": s.entries, "requests": s.requests, "feed": s.feed
        }),
    }
}

/// How long a membership change tries the nodes `--nodes` names before it follows a refusal's leader hint.
const LEADER_SEARCH: std::time::Duration = std::time::Duration::from_secs(3);

/// The leader's address in a refusal from a node that is not the leader ("... the leader is node N at
/// ADDR"): membership changes go to the leader, which `--nodes` need not name.
fn leader_hint(error: &core_client::ClientError) -> Option<String> {
    let text = error.to_string();
    let (_, after) = text.rsplit_once("the leader is node ")?;
    let (_, addr) = after.split_once(" at ")?;
    let addr: String = addr.chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != ';').collect();
    (!addr.is_empty()).then_some(addr)
}

/// Runs `call`, which must reach the leader, on the nodes `--nodes` names for [`LEADER_SEARCH`], then on
/// the leader a refusal names.
async fn on_leader<T, F, Fut>(
    client: &CoreClient,
    identity: &daemon_runtime::IdentityArgs,
    call: F,
) -> Result<T, CoreError>
where
    F: Fn(CoreClient) -> Fut,
    Fut: std::future::Future<Output = Result<T, core_client::ClientError>>,
{
    match call(client.clone().with_timeout(LEADER_SEARCH)).await {
        Ok(reply) => Ok(reply),
        Err(e) => match leader_hint(&e) {
            Some(leader) => Ok(call(CoreClient::new(vec![leader], identity.load()?)?).await?),
            None => Err(e.into()),
        },
    }
}

/// Runs one admin command.
pub async fn run(args: AdminArgs) -> Result<(), CoreError> {
    let client = CoreClient::new(args.nodes.clone(), args.identity.load()?)?;
    let write = |command| {
        let client = client.clone();
        async move {
            let ack = client.write(&client.new_request_id(), command).await?;
            print(&serde_json::json!({
                "log_index": ack.log_index,
                "leader": ack.leader_id,
                "duplicate": ack.duplicate,
                "outcome": ack.outcome.as_ref().map(outcome_json),
            }))
        }
    };
    match args.command {
        AdminCommand::Status => {
            for addr in &args.nodes {
                match client.status(addr).await {
                    Ok(s) => print(&serde_json::json!({
                        "addr": addr, "id": s.id, "leader": s.leader_id, "term": s.term,
                        "last_log_index": s.last_log_index, "applied_index": s.applied_index,
                        "snapshot_index": s.snapshot_index, "voters": s.voters, "learners": s.learners,
                        "entries": s.entries, "state_digest": s.state_digest,
                    }))?,
                    Err(e) => print(&serde_json::json!({ "addr": addr, "error": e.to_string() }))?,
                }
            }
            Ok(())
        }
        AdminCommand::AddLearner { id, addr } => {
            let addr = &addr;
            let reply =
                on_leader(&client, &args.identity, |c| async move { c.add_learner(id, addr).await }).await?;
            print(
                &serde_json::json!({ "log_index": reply.log_index, "voters": reply.voters, "learners": reply.learners }),
            )
        }
        AdminCommand::SetVoters { voters, remove } => {
            let (voters, remove) = (&voters, &remove);
            let reply = on_leader(&client, &args.identity, |c| async move {
                c.change_membership(voters.clone(), remove.clone()).await
            })
            .await?;
            print(
                &serde_json::json!({ "log_index": reply.log_index, "voters": reply.voters, "learners": reply.learners }),
            )
        }
        AdminCommand::RegisterModel { model, version, spec } => {
            let spec = spec.spec()?;
            let version = version.unwrap_or(if spec.is_some() { 0 } else { 1 });
            let spec = spec.as_ref().map(Into::into);
            write(write_request::Command::RegisterModel(RegisterModel { model, version, spec })).await
        }
        AdminCommand::BumpModel { model, version, canary } => {
            let bump = BumpModelVersion { model, version, canary_percent: canary.unwrap_or(0) };
            write(write_request::Command::BumpModelVersion(bump)).await
        }
        AdminCommand::Promote { model } => {
            write(write_request::Command::EndCanary(EndCanary { model, promote: true })).await
        }
        AdminCommand::Rollback { model } => {
            write(write_request::Command::EndCanary(EndCanary { model, promote: false })).await
        }
        AdminCommand::SetTenant { tenant, max_value_bytes, default_ttl_s, max_ttl_s, cache_sampled } => {
            let policy = Some(TenantPolicy { max_value_bytes, default_ttl_s, max_ttl_s, cache_sampled });
            write(write_request::Command::SetTenantPolicy(SetTenantPolicy { tenant, policy })).await
        }
        AdminCommand::Invalidate { tenant, key, tag, refresh, model, version } => {
            let (scope, key_tenant) = match (tenant, key, tag, model, version) {
                (Some(tenant), Some(key), None, None, None) => (invalidate::Scope::Key(key), tenant),
                (Some(tenant), None, Some(tag), None, None) => {
                    (invalidate::Scope::Tag(TenantTag { tenant, tag }), String::new())
                }
                (Some(tenant), None, None, None, None) => (invalidate::Scope::Tenant(tenant), String::new()),
                (None, None, None, Some(model), Some(version)) => {
                    (invalidate::Scope::ModelVersion(ModelVersion { model, version }), String::new())
                }
                _ => {
                    return Err(CoreError::InvalidArgument(
                        "give --tenant and --key, --tenant and --tag, --tenant, or --model and --version"
                            .into(),
                    ))
                }
            };
            let invalidation = Invalidate { scope: Some(scope), key_tenant, refresh };
            write(write_request::Command::Invalidate(invalidation)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_leader_to_follow() {
        let error = core_client::ClientError::NoQuorum(
            "change membership did not succeed within 10s: 127.0.0.1:7102: no quorum: not the leader; the leader is node 1 at 127.0.0.1:7101".into(),
        );
        assert_eq!(leader_hint(&error).as_deref(), Some("127.0.0.1:7101"));
        assert_eq!(leader_hint(&core_client::ClientError::NoQuorum("no leader known".into())), None);
    }
}
