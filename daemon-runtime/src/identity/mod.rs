//! Who a tier is, and who may call it: one [`TierIdentity`] per daemon, read the same way by every
//! daemon ([`IdentityArgs`]), and one interceptor ([`RoleCheck`]) and HTTP check
//! ([`TierIdentity::caller`]) that enforce each daemon's authorization table.
//!
//! **Mutual TLS** (the default of `mesh up`): every node holds a certificate of the mesh CA that names
//! its [`TierRole`]. Servers verify clients against the CA and read the role from the certificate;
//! clients verify servers against the CA and ask for the role they meant to call as the server name.
//! The files are read again when they change ([`live_tls`]): certificates rotate without a restart.
//!
//! **Insecure development mode**: without TLS files, every tier holds one shared secret of at least
//! 32 bytes (`MESH_INSECURE_TIER_SECRET`), presented as `x-mesh-secret` and standing for every tier
//! role. With TLS files the secret, when one is set too, admits only the edge role: the local Workers
//! runtime cannot present a client certificate (a deployed edge presents one through its
//! `mtls_certificates` binding).

mod answer_keys;
mod dialer;
pub mod live_tls;
mod role;
mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tonic::service::Interceptor;
use tonic::transport::Endpoint;
use tonic::{Request, Status};

pub use answer_keys::{load_answer_signer, load_answer_verifier};
pub use dialer::PeerEndpoint;
pub use live_tls::{LiveTls, ServerTls};
pub use role::{TierRole, ROLE_DOMAIN};
pub use tls::{role_of, ClientAuth, TlsFiles, TlsMaterial};

use crate::credential::{CredentialError, TierCredential};

/// Why an identity could not be had.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Neither TLS files nor an insecure secret were given.
    #[error("give --tls-ca, --tls-cert and --tls-key (mutual TLS), or MESH_INSECURE_TIER_SECRET (insecure development mode)")]
    Missing,
    /// Some TLS files were named, not all three.
    #[error("--tls-ca, --tls-cert and --tls-key go together")]
    PartialTls,
    /// Insecure development mode asked to listen where other machines reach.
    #[error("insecure development mode serves loopback addresses only, not {addr}: give --tls-ca, --tls-cert and --tls-key to listen there")]
    InsecureBeyondLoopback {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Unreadable {
        /// The file named.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The key file may be read by its group or others.
    #[error("the key file {path} may be read by others (mode {mode:o}); chmod 600 it")]
    KeyReadableByOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A certificate or key is malformed or unusable.
    #[error("TLS: {0}")]
    Tls(String),
    /// An answer-signing key file is malformed.
    #[error("{path}: {source}")]
    AnswerKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: shared::answer_signature::SignatureError,
    },
    /// The insecure secret is unusable.
    #[error(transparent)]
    Secret(#[from] CredentialError),
    /// A peer URL's scheme does not match the mode (`https://` with TLS, `http://` without).
    #[error("{url}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The flags every daemon reads its identity from (flattened into each daemon's own flags).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct IdentityArgs {
    /// The mesh CA's certificate (PEM), the only issuer trusted for peers; with --tls-cert and
    /// --tls-key, every hop of this daemon runs mutual TLS.
    #[arg(long, env = "MESH_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate chain (PEM), issued by `mesh certs` for one role.
    #[arg(long, env = "MESH_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM); refused when its group or others may read it.
    #[arg(long, env = "MESH_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// How often, in seconds, the TLS files are read again; a changed set (a renewed certificate, a
    /// new CA file) serves every new connection from then on, without a restart. SIGHUP reads them at
    /// once. 0: only on SIGHUP.
    #[arg(long, env = "MESH_TLS_RELOAD_SECS", default_value_t = 30)]
    pub tls_reload_secs: u64,
    /// File holding the insecure development secret (otherwise `MESH_INSECURE_TIER_SECRET`), at least
    /// 32 bytes. Without TLS it stands for every tier; with TLS it admits only the edge.
    #[arg(long, env = "MESH_INSECURE_TIER_SECRET_FILE")]
    pub insecure_tier_secret_file: Option<PathBuf>,
    /// With TLS, also admit the edge by the insecure secret, for an edge that cannot present a client
    /// certificate (`wrangler dev`); without this flag a secret beside TLS is ignored.
    #[arg(long, env = "MESH_EDGE_SECRET_BESIDE_TLS")]
    pub edge_secret_beside_tls: bool,
}

impl IdentityArgs {
    /// The TLS files, when all three are named.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, IdentityError> {
        match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => {
                Ok(Some(TlsFiles { ca: ca.clone(), cert: cert.clone(), key: key.clone() }))
            }
            (None, None, None) => Ok(None),
            _ => Err(IdentityError::PartialTls),
        }
    }

    /// Reads the identity: TLS when the files are named (plus the insecure edge secret when one is set
    /// and --edge-secret-beside-tls allows it), else the insecure secret.
    pub fn load(&self) -> Result<TierIdentity, IdentityError> {
        let secret = match TierCredential::load(self.insecure_tier_secret_file.as_deref()) {
            Ok(secret) => Some(secret),
            Err(CredentialError::Missing) => None,
            Err(other) => return Err(other.into()),
        };
        let identity = match self.tls_files()? {
            Some(files) => {
                let secret = edge_secret_beside_tls(secret, self.edge_secret_beside_tls);
                let reload_every =
                    (self.tls_reload_secs > 0).then(|| Duration::from_secs(self.tls_reload_secs));
                TierIdentity::tls(LiveTls::load(files)?, secret).reloading_every(reload_every)
            }
            None => TierIdentity::insecure(secret.ok_or(IdentityError::Missing)?),
        };
        if identity.tls.is_none() {
            tracing::warn!("insecure development mode: no TLS, one shared secret stands for every tier");
        }
        Ok(identity)
    }
}

/// The secret a TLS daemon admits the edge by: the one set, when `allowed`; otherwise none (a secret set
/// anyway is ignored, with a warning).
fn edge_secret_beside_tls(secret: Option<TierCredential>, allowed: bool) -> Option<TierCredential> {
    if secret.is_some() && !allowed {
        tracing::warn!(
            "an insecure tier secret is set beside TLS and ignored (--edge-secret-beside-tls admits the edge by it)"
        );
    }
    secret.filter(|_| allowed)
}

/// Who called: a role proven by a certificate, or the insecure secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A peer whose certificate names this role (or the edge, by the insecure secret beside TLS).
    TierRole(TierRole),
    /// Insecure development mode: the shared secret, which stands for every tier.
    AnyTier,
}

impl Caller {
    /// Whether this caller may make a call open to `allowed`.
    pub fn may(self, allowed: &[TierRole]) -> bool {
        match self {
            Caller::TierRole(role) => allowed.contains(&role),
            Caller::AnyTier => true,
        }
    }
}

/// The verified role of a TLS connection's peer, put on each request it carries by
/// [`crate::http_serving`]; `None` when the peer presented no certificate (allowed on listeners with
/// [`ClientAuth::Optional`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRole(pub Option<TierRole>);

/// A daemon's identity: what it presents, and how it recognises callers.
#[derive(Clone)]
pub struct TierIdentity {
    tls: Option<Arc<LiveTls>>,
    /// How often the TLS files are read again ([`Self::spawn_tls_reloader`]).
    reload_every: Option<Duration>,
    secret: Option<TierCredential>,
}

impl std::fmt::Debug for TierIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierIdentity")
            .field("role", &self.role())
            .field("insecure_secret", &self.secret.is_some())
            .finish()
    }
}

impl TierIdentity {
    /// Mutual TLS with `material`; `edge_secret`, when given, also admits the edge by the secret.
    pub fn tls(material: LiveTls, edge_secret: Option<TierCredential>) -> Self {
        Self { tls: Some(Arc::new(material)), reload_every: None, secret: edge_secret }
    }

    /// Insecure development mode: one shared secret for every tier.
    pub fn insecure(secret: TierCredential) -> Self {
        Self { tls: None, reload_every: None, secret: Some(secret) }
    }

    /// The same, reading its TLS files again every `every` once [`Self::spawn_tls_reloader`] runs.
    pub fn reloading_every(self, every: Option<Duration>) -> Self {
        Self { reload_every: every, ..self }
    }

    /// With TLS, the task that reads the files again every `--tls-reload-secs` and on SIGHUP, for the
    /// daemon's life; `None` without TLS.
    pub fn spawn_tls_reloader(&self) -> Option<tokio::task::JoinHandle<()>> {
        let tls = Arc::clone(self.tls.as_ref()?);
        Some(live_tls::spawn_reloader(tls, self.reload_every))
    }

    /// Insecure development mode from the secret's text (tests and tools).
    pub fn insecure_secret(secret: &str) -> Result<Self, IdentityError> {
        Ok(Self::insecure(TierCredential::new(secret)?))
    }

    /// This node's role when it runs TLS.
    pub fn role(&self) -> Option<TierRole> {
        self.tls.as_ref().map(|tls| tls.role())
    }

    /// Whether hops run TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Refuses to serve on `addr` in insecure development mode unless it is a loopback address: one
    /// shared secret sent in the clear must not guard a port other machines reach.
    pub fn check_listen(&self, addr: std::net::SocketAddr) -> Result<(), IdentityError> {
        if self.is_tls() || addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(IdentityError::InsecureBeyondLoopback { addr })
        }
    }

    /// The URL scheme of this mode's peers: `https` with TLS, `http` without.
    pub fn scheme(&self) -> &'static str {
        if self.is_tls() {
            "https"
        } else {
            "http"
        }
    }

    /// The TLS of a listener, when TLS is on: each connection is accepted with the material current
    /// when it arrives.
    pub fn acceptor(&self, client_auth: ClientAuth) -> Result<Option<ServerTls>, IdentityError> {
        Ok(self.tls.as_ref().map(|tls| ServerTls::new(Arc::clone(tls), client_auth)))
    }

    /// An endpoint for calling a server of role `target` at `url`; with TLS, each connection it opens
    /// presents this node's current certificate and checks the server's against the current CA file.
    /// The URL's scheme must match the mode.
    pub fn endpoint(&self, url: &str, target: TierRole) -> Result<PeerEndpoint, IdentityError> {
        let bad = |why: &str| IdentityError::Url { url: url.to_owned(), why: why.to_owned() };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(&format!("this node's peers are {}:// URLs", self.scheme())));
        };
        if scheme != self.scheme() {
            return Err(bad(&format!("this node's peers are {}:// URLs", self.scheme())));
        }
        let endpoint = |url: String| Endpoint::from_shared(url).map_err(|e| bad(&e.to_string()));
        match &self.tls {
            Some(tls) => {
                let origin =
                    url.parse().map_err(|e: tonic::codegen::http::uri::InvalidUri| bad(&e.to_string()))?;
                let dialed = endpoint(format!("http://{rest}"))?.origin(origin);
                Ok(PeerEndpoint::tls(dialed, Arc::clone(tls), target))
            }
            None => Ok(PeerEndpoint::plain(endpoint(url.to_owned())?)),
        }
    }

    /// Adds what an outgoing gRPC call presents beyond the connection: the secret, in insecure mode.
    pub fn attach<T>(&self, request: &mut Request<T>) {
        if self.tls.is_none() {
            if let Some(secret) = &self.secret {
                secret.attach(request);
            }
        }
    }

    /// A request carrying `message` and what [`Self::attach`] adds.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.attach(&mut request);
        request
    }

    /// The secret for an HTTP header of a call to another tier, in insecure mode only.
    pub fn insecure_header(&self) -> Option<&str> {
        self.secret.as_ref().filter(|_| self.tls.is_none()).map(TierCredential::expose)
    }

    /// Who made a call, from the connection's [`PeerRole`] and a presented secret (an `x-mesh-secret`
    /// header's bytes); `None` when it proves no tier at all.
    pub fn caller(&self, peer: Option<&PeerRole>, presented_secret: Option<&[u8]>) -> Option<Caller> {
        if let Some(PeerRole(Some(role))) = peer {
            return Some(Caller::TierRole(*role));
        }
        let secret = self.secret.as_ref()?;
        if !secret.matches(presented_secret?) {
            return None;
        }
        Some(if self.tls.is_some() { Caller::TierRole(TierRole::Edge) } else { Caller::AnyTier })
    }

    /// Checks a gRPC call against `allowed`: `unauthenticated` without a tier identity,
    /// `permission_denied` for a role not allowed.
    pub fn check<T>(&self, request: &Request<T>, allowed: &[TierRole]) -> Result<Caller, Status> {
        let presented = request.metadata().get(crate::TIER_SECRET_METADATA).map(|v| v.as_bytes());
        let caller = self.caller(request.extensions().get::<PeerRole>(), presented).ok_or_else(|| {
            Status::unauthenticated("no tier identity: a client certificate of the mesh CA is needed")
        })?;
        if caller.may(allowed) {
            Ok(caller)
        } else {
            Err(Status::permission_denied(format!("{caller:?} may not make this call")))
        }
    }

    /// The interceptor that admits only callers of `allowed` roles.
    pub fn interceptor(&self, allowed: &'static [TierRole]) -> RoleCheck {
        RoleCheck { identity: self.clone(), allowed }
    }
}

/// A tonic interceptor that admits only the roles a service's row of the authorization table names.
#[derive(Clone, Debug)]
pub struct RoleCheck {
    identity: TierIdentity,
    allowed: &'static [TierRole],
}

impl Interceptor for RoleCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.identity.check(&request, self.allowed)?;
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-development-secret-of-32-bytes!";

    #[test]
    fn insecure_secret_stands_for_every_tier() {
        let identity = TierIdentity::insecure_secret(SECRET).expect("secret");
        let mut check = identity.interceptor(&[TierRole::Core]);
        assert!(check.call(identity.request(())).is_ok());
        let missing = check.call(Request::new(())).map_err(|s| s.code()).err();
        assert_eq!(missing, Some(tonic::Code::Unauthenticated));
        let other = TierIdentity::insecure_secret("another-development-secret-32-bytes").expect("secret");
        assert!(check.call(other.request(())).is_err());
    }

    #[test]
    fn beside_tls_the_secret_counts_only_when_a_flag_allows_it() {
        let secret = || Some(TierCredential::new(SECRET).expect("secret"));
        assert!(edge_secret_beside_tls(secret(), false).is_none(), "ignored by default");
        assert!(edge_secret_beside_tls(secret(), true).is_some());
        assert!(edge_secret_beside_tls(None, true).is_none());
    }

    #[test]
    fn a_certified_role_passes_only_its_rows() {
        let identity = TierIdentity::insecure_secret(SECRET).expect("secret");
        let mut request = Request::new(());
        request.extensions_mut().insert(PeerRole(Some(TierRole::Edge)));
        let mut core_only = identity.interceptor(&[TierRole::Core]);
        let denied = core_only.call(request).map_err(|s| s.code()).err();
        assert_eq!(denied, Some(tonic::Code::PermissionDenied));
        let mut request = Request::new(());
        request.extensions_mut().insert(PeerRole(Some(TierRole::Core)));
        assert!(core_only.call(request).is_ok());
    }

    #[test]
    fn insecure_mode_listens_on_loopback_only() {
        let identity = TierIdentity::insecure_secret(SECRET).expect("secret");
        assert!(identity.check_listen("127.0.0.11:7100".parse().expect("addr")).is_ok());
        assert!(identity.check_listen("[::1]:7100".parse().expect("addr")).is_ok());
        let everywhere = identity.check_listen("0.0.0.0:7100".parse().expect("addr"));
        assert!(matches!(everywhere, Err(IdentityError::InsecureBeyondLoopback { .. })));
    }

    #[test]
    fn urls_must_match_the_mode() {
        let identity = TierIdentity::insecure_secret(SECRET).expect("secret");
        assert!(identity.endpoint("http://127.0.0.1:1", TierRole::Core).is_ok());
        assert!(matches!(
            identity.endpoint("https://127.0.0.1:1", TierRole::Core),
            Err(IdentityError::Url { .. })
        ));
    }
}
