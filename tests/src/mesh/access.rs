//! How tests and the tool reach a running mesh: its size, each node's URL, clients with the
//! development key, the logs, and the regional nodes' status endpoints (`/v1/replication`, `/v1/hotset`).

use std::path::PathBuf;
use std::time::Duration;

use super::Mesh;
use crate::client::ChatClient;

impl Mesh {
    /// Core nodes in the mesh.
    pub fn core_nodes(&self) -> usize {
        self.spec.core_nodes
    }

    /// Regional nodes in the mesh.
    pub fn regional_nodes(&self) -> usize {
        self.spec.regional_nodes
    }

    /// The replication gRPC URL of regional node `index` (direct, not through a fault proxy).
    pub fn regional_peer_url(&self, index: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.regional_peers[index])
    }

    /// `https` when the mesh runs TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.spec.tls {
            "https"
        } else {
            "http"
        }
    }

    /// Base URL of the inference pod (gRPC and `/healthz`).
    pub fn pod_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.pod)
    }

    /// Base URL of core node `index` (gRPC and `/healthz`).
    pub fn core_url(&self, index: usize) -> String {
        format!("{}://{}:{}", self.scheme(), self.core_listen_ip(index), self.ports.cores[index])
    }

    /// Base URL of regional node `index`.
    pub fn regional_url(&self, index: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.regionals[index])
    }

    /// Base URL of the edge, if it runs.
    pub fn edge_url(&self) -> Option<String> {
        self.spec.edge.then(|| format!("http://127.0.0.1:{}", self.ports.edge))
    }

    /// The development API key.
    pub fn api_key(&self) -> &str {
        &self.spec.api_key
    }

    /// A client of the mesh's public endpoint (the edge, else the first regional node) with the dev key.
    pub fn client(&self) -> ChatClient {
        let url = self.edge_url().unwrap_or_else(|| self.regional_url(0));
        ChatClient::new(&url, Some(&self.spec.api_key))
    }

    /// A client of regional node `index` with the dev key.
    pub fn regional_client(&self, index: usize) -> ChatClient {
        ChatClient::new(&self.regional_url(index), Some(&self.spec.api_key))
    }

    /// A client of regional node `index` with another API key (one of `other_tenants`).
    pub fn regional_client_with_key(&self, index: usize, api_key: &str) -> ChatClient {
        ChatClient::new(&self.regional_url(index), Some(api_key))
    }

    /// A client of the mesh's public endpoint with another API key (one of `other_tenants`).
    pub fn client_with_key(&self, api_key: &str) -> ChatClient {
        let url = self.edge_url().unwrap_or_else(|| self.regional_url(0));
        ChatClient::new(&url, Some(api_key))
    }

    /// The development tenant's name.
    pub fn tenant(&self) -> &str {
        &self.spec.tenant
    }

    /// The served models, `name@version,...`.
    pub fn models(&self) -> &str {
        &self.spec.models
    }

    /// Each running process: its name in the logs, its process id (which is also its process group's)
    /// and the data directory it would keep (which may not exist: the pod keeps none).
    pub fn processes(&self) -> Vec<(String, u32, PathBuf)> {
        let all = self.pod.iter().chain(self.cores.iter().flatten()).chain(self.regionals.iter().flatten());
        all.chain(self.edge.iter())
            .map(|p| (p.name().to_owned(), p.pid(), self.spec.data_dir.join(p.name())))
            .collect()
    }

    /// A core client of every core node, with the tier secret (call inside a tokio runtime).
    pub fn core_client(&self) -> anyhow::Result<core_client::CoreClient> {
        let addrs = (0..self.core_nodes())
            .map(|i| self.core_url(i).trim_start_matches("http://").to_owned())
            .collect();
        let identity = daemon_runtime::identity::TierIdentity::insecure_secret(self.tier_secret())?;
        Ok(core_client::CoreClient::new(addrs, identity)?)
    }

    /// `GET <path>` of `base_url` as text (`/metrics`, say).
    pub fn get_text(&self, base_url: &str, path: &str) -> anyhow::Result<String> {
        let reply = crate::client::agent(Duration::from_secs(5)).get(format!("{base_url}{path}")).call()?;
        Ok(reply.into_body().read_to_string()?)
    }

    /// Where the processes' logs are.
    pub fn log_dir(&self) -> PathBuf {
        self.spec.data_dir.join("logs")
    }

    /// `GET /v1/replication` of regional node `index`: its replicated state and peer links.
    pub fn replication_status(&self, index: usize) -> anyhow::Result<serde_json::Value> {
        let reply = crate::client::agent(Duration::from_secs(5))
            .get(format!("{}/v1/replication", self.regional_url(index)))
            .call()?;
        Ok(serde_json::from_reader(reply.into_body().into_reader())?)
    }

    /// `GET /v1/hotset` of regional node `index` (with the tier secret unless `secret` says otherwise),
    /// `since` a version or none: the status and the JSON body.
    pub fn hotset(
        &self,
        index: usize,
        since: Option<&str>,
        secret: Option<&str>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let mut url = format!("{}/v1/hotset", self.regional_url(index));
        if let Some(since) = since {
            url.push_str(&format!("?since={since}"));
        }
        let mut request = crate::client::agent(Duration::from_secs(10)).get(url);
        if let Some(secret) = secret.or(Some(self.secret.as_str())).filter(|s| !s.is_empty()) {
            request = request.header(shared::TIER_SECRET_HEADER, secret);
        }
        let mut reply = request.call()?;
        let status = reply.status().as_u16();
        Ok((status, serde_json::from_reader(reply.body_mut().as_reader())?))
    }
}
