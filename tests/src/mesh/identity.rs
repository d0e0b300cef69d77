//! How the mesh's daemons know each other: a development CA and one certificate per node when the mesh
//! runs TLS, else a random shared secret between tiers (which regional nodes of a TLS mesh also take,
//! for the local edge).

use std::collections::HashMap;
use std::process::Command;

use daemon_runtime::identity::TlsFiles;

use super::{Mesh, MeshSpec};
use crate::certs::DevCa;

impl Mesh {
    /// The TLS files of node `name` (`pod`, `core-1`, `regional-1`, `edge`, `admin`), when the mesh
    /// runs TLS.
    pub fn tls_files(&self, name: &str) -> Option<&TlsFiles> {
        self.certs.get(name)
    }

    /// The mesh's CA, when it runs TLS.
    pub fn ca(&self) -> Option<&DevCa> {
        self.ca.as_ref()
    }

    /// The shared secret between tiers of this mesh.
    pub fn tier_secret(&self) -> &str {
        &self.secret
    }

    /// The identity daemon `name` starts with: its TLS files, or the insecure secret. Regional nodes
    /// of a TLS mesh get the secret too, for the local edge.
    pub(super) fn give_identity(&self, command: &mut Command, name: &str) {
        match self.certs.get(name) {
            Some(files) => {
                command.envs(crate::certs::env(files));
                // Core nodes sign the answers they hand out; regional nodes check peers' answers.
                let answer_keys = crate::certs::answer_keys(files);
                if name.starts_with("core") {
                    command.env("MESH_ANSWER_SIGNING_KEY", &answer_keys.private);
                }
                // The edge (`wrangler dev`) presents no client certificate: it reaches the regional nodes
                // by the secret, which they admit beside TLS only when told to.
                if name.starts_with("regional") {
                    command.env("MESH_ANSWER_PUBLIC_KEY", &answer_keys.public);
                    command.env("MESH_INSECURE_TIER_SECRET", &self.secret);
                    command.env("MESH_EDGE_SECRET_BESIDE_TLS", "true");
                }
            }
            None => {
                command.env("MESH_INSECURE_TIER_SECRET", &self.secret);
            }
        }
    }
}

/// The development CA and every node's certificate of a TLS mesh, in `<data_dir>/certs`; the
/// harness's own clients trust the CA from now on, and present the read-only `metrics` certificate
/// (`prometheus`) where no other is named (the core and the pod want one for `/healthz`).
pub(super) fn mesh_certs(spec: &MeshSpec) -> anyhow::Result<(Option<DevCa>, HashMap<String, TlsFiles>)> {
    use daemon_runtime::TierRole;
    let mut nodes = vec![("inference-pod".to_owned(), TierRole::Pod), ("edge".to_owned(), TierRole::Edge)];
    nodes.push(("admin".to_owned(), TierRole::Admin));
    nodes.push(("prometheus".to_owned(), TierRole::Metrics));
    nodes.extend((0..spec.core_nodes).map(|i| (format!("core-{}", Mesh::core_id(i)), TierRole::Core)));
    nodes.extend((0..spec.regional_nodes).map(|i| (format!("regional-{}", i + 1), TierRole::Regional)));
    let dir = spec.data_dir.join("certs");
    let (ca, files) = crate::certs::write_mesh_certs(&dir, &nodes)?;
    crate::client::trust_mesh_ca(ca.pem().as_bytes());
    if let Some((_, prometheus)) = files.iter().find(|(name, _)| name == "prometheus") {
        crate::client::present_by_default(
            &std::fs::read(&prometheus.cert)?,
            &std::fs::read(&prometheus.key)?,
        );
    }
    Ok((Some(ca), files.into_iter().collect()))
}

/// 32 random bytes as hex, from the operating system.
pub(super) fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(shared::hex::encode(&bytes))
}
