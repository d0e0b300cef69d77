//! `mesh certs`: a development CA and each node's certificate and key.

use std::path::PathBuf;

use anyhow::Context as _;

/// What `mesh certs` makes.
#[derive(Debug, clap::Args)]
pub struct CertsArgs {
    /// Where `ca.pem`, `ca.key`, each node's `<name>.pem` and `<name>.key`, and the cluster's
    /// answer-signing key (`answer-signing.key` for the core nodes, `answer-signing.pub` for regional
    /// nodes and the edge) go.
    #[arg(long, default_value = ".cache/mesh/certs")]
    pub dir: PathBuf,
    /// The nodes, as `name=role` (roles: edge, regional, core, pod, admin, metrics), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "edge=edge,regional-1=regional,regional-2=regional,core-1=core,core-2=core,core-3=core,inference-pod=pod,admin=admin,prometheus=metrics"
    )]
    pub nodes: Vec<String>,
    /// Issue fresh certificates and keys for `--nodes` from the CA already in `--dir`, written over
    /// theirs; the CA and the answer-signing key stay. Running daemons take them without a restart
    /// (within `--tls-reload-secs`, or at once on SIGHUP).
    #[arg(long)]
    pub renew: bool,
}

/// Runs `mesh certs`: writes the files and prints each node's TLS flags.
pub fn run(args: &CertsArgs) -> anyhow::Result<()> {
    let nodes = args
        .nodes
        .iter()
        .map(|node| {
            let (name, role) = node.split_once('=').context("a node is name=role")?;
            let role = daemon_runtime::TierRole::parse(role)
                .with_context(|| format!("{role:?} is not a mesh role"))?;
            Ok((name.trim().to_owned(), role))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let written = if args.renew {
        mesh_harness::certs::renew_node_certs(&args.dir, &nodes)?
    } else {
        mesh_harness::certs::write_mesh_certs(&args.dir, &nodes)?.1
    };
    for (name, files) in written {
        println!(
            "{name}: --tls-ca {} --tls-cert {} --tls-key {}",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
    }
    let answer_keys = mesh_harness::certs::AnswerKeyFiles::in_dir(&args.dir);
    println!(
        "core nodes: --answer-signing-key {}\nregional nodes: --answer-public-key {}\nedge: ANSWER_PUBLIC_KEY={}",
        answer_keys.private.display(),
        answer_keys.public.display(),
        answer_keys.public_hex()?
    );
    Ok(())
}
