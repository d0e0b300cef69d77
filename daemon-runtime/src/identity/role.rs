//! The roles a tier plays, and how a certificate names one.

use std::fmt;

/// What a caller or a server is in the mesh. A node's certificate carries its role as a DNS name
/// ([`TierRole::dns_name`]); the authorization table of every daemon is written in roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierRole {
    /// The CDN edge worker.
    Edge,
    /// A regional daemon.
    Regional,
    /// A core cluster node.
    Core,
    /// An inference pod.
    Pod,
    /// An operator (the admin CLI, the test harness).
    Admin,
    /// A read-only scraper (Prometheus, the dashboard): `/healthz` and `/metrics`, and nothing that
    /// reads answers or writes anything.
    Metrics,
}

/// The suffix every role name shares; nothing else is ever issued under it.
pub const ROLE_DOMAIN: &str = "role.mesh.internal";

impl TierRole {
    /// Every role.
    pub const ALL: [TierRole; 6] = [
        TierRole::Edge,
        TierRole::Regional,
        TierRole::Core,
        TierRole::Pod,
        TierRole::Admin,
        TierRole::Metrics,
    ];

    /// The role's short name: `edge`, `regional`, `core`, `pod`, `admin`, `metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            TierRole::Edge => "edge",
            TierRole::Regional => "regional",
            TierRole::Core => "core",
            TierRole::Pod => "pod",
            TierRole::Admin => "admin",
            TierRole::Metrics => "metrics",
        }
    }

    /// The DNS subject-alternative name that marks a certificate as this role's, e.g.
    /// `core.role.mesh.internal`. A client also asks for it as the server name, so that it only talks
    /// to a server of the role it meant to call.
    pub fn dns_name(self) -> &'static str {
        match self {
            TierRole::Edge => "edge.role.mesh.internal",
            TierRole::Regional => "regional.role.mesh.internal",
            TierRole::Core => "core.role.mesh.internal",
            TierRole::Pod => "pod.role.mesh.internal",
            TierRole::Admin => "admin.role.mesh.internal",
            TierRole::Metrics => "metrics.role.mesh.internal",
        }
    }

    /// The role with this short name.
    pub fn parse(name: &str) -> Option<TierRole> {
        TierRole::ALL.into_iter().find(|role| role.as_str() == name.trim())
    }
}

impl fmt::Display for TierRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_share_the_role_domain() {
        for role in TierRole::ALL {
            assert_eq!(TierRole::parse(role.as_str()), Some(role));
            assert_eq!(role.dns_name(), format!("{role}.{ROLE_DOMAIN}"));
        }
        assert_eq!(TierRole::parse("root"), None);
    }
}
