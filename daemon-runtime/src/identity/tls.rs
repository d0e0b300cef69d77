//! A node's TLS material: the mesh's CA, the node's certificate chain and key, read from files; the
//! rustls configurations built from them; and the role a peer's certificate proves. (The material a
//! running daemon holds follows its files: [`super::live_tls`].)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, DnsName, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sha2::Digest as _;

use super::{IdentityError, TierRole};

/// The three files of a node's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The mesh CA's certificate (PEM): the only issuer trusted for peers.
    pub ca: PathBuf,
    /// This node's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// This node's private key (PEM); refused when its group or others may read it.
    pub key: PathBuf,
}

/// Whether a listener demands a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Every client presents a certificate of the mesh CA (the core's and the pod's listeners: only
    /// tiers, operators and scrapers call them, so a stranger cannot hold a connection slot past the
    /// handshake).
    Required,
    /// A client may present one; one that does not is a client with an API key (the regional node's
    /// HTTP listener, which also serves the OpenAI API to tenants).
    Optional,
}

/// A node's loaded TLS identity.
pub struct TlsMaterial {
    role: TierRole,
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").field("role", &self.role).finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Parses and checks PEM bytes (a daemon reads them from its files with
    /// [`super::LiveTls::load`]): the chain is issued for exactly one role, and everything parses.
    pub fn from_pem(ca_pem: &[u8], chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, IdentityError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| IdentityError::Tls(format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(ca.map_err(|e| bad("the CA file", &e))?).map_err(|e| bad("the CA certificate", &e))?;
        }
        if roots.is_empty() {
            return Err(IdentityError::Tls("the CA file holds no certificate".into()));
        }
        let chain = CertificateDer::pem_slice_iter(chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("the certificate file", &e))?;
        let leaf = chain.first().ok_or_else(|| IdentityError::Tls("the certificate file is empty".into()))?;
        let role = role_of(leaf)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("the key file", &e))?;
        Ok(Self { role, roots: Arc::new(roots), chain, key })
    }

    /// The role this node's certificate names.
    pub fn role(&self) -> TierRole {
        self.role
    }

    /// The first 16 hex digits of the SHA-256 of this node's certificate, as logs name it.
    pub fn fingerprint(&self) -> String {
        let digest = sha2::Sha256::digest(self.chain[0].as_ref());
        shared::hex::encode(&digest[..8])
    }

    /// The server side: this node's chain, peers verified against the mesh CA, HTTP/2 and HTTP/1.1
    /// offered by ALPN.
    pub fn server_config(&self, client_auth: ClientAuth) -> Result<Arc<ServerConfig>, IdentityError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&self.roots), Arc::clone(&provider));
        let verifier = match client_auth {
            ClientAuth::Required => verifier,
            ClientAuth::Optional => verifier.allow_unauthenticated(),
        }
        .build()
        .map_err(|e| IdentityError::Tls(format!("client verifier: {e}")))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| IdentityError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| IdentityError::Tls(format!("this node's certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The client side of a gRPC call: the mesh CA as the only root, this node's certificate as the
    /// client's, HTTP/2 by ALPN. (The dialer asks for the called role's name as the server name.)
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, IdentityError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| IdentityError::Tls(e.to_string()))?
            .with_root_certificates(Arc::clone(&self.roots))
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| IdentityError::Tls(format!("this node's certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The role a verified peer certificate names. A certificate naming none, or more than one, proves no
/// role.
pub fn role_of(cert: &CertificateDer<'_>) -> Result<TierRole, IdentityError> {
    let parsed = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| IdentityError::Tls(format!("unreadable certificate: {e}")))?;
    let mut named = TierRole::ALL.into_iter().filter(|role| {
        DnsName::try_from(role.dns_name())
            .map(|name| parsed.verify_is_valid_for_subject_name(&ServerName::DnsName(name)).is_ok())
            .unwrap_or(false)
    });
    match (named.next(), named.next()) {
        (Some(role), None) => Ok(role),
        (None, _) => Err(IdentityError::Tls("the certificate names no mesh role".into())),
        (Some(_), Some(_)) => Err(IdentityError::Tls("the certificate names more than one mesh role".into())),
    }
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>, IdentityError> {
    std::fs::read(path).map_err(|source| IdentityError::Unreadable { path: path.to_owned(), source })
}

/// A key file its group or others may read is refused, as ssh refuses one.
pub(super) fn refuse_shared_key(path: &Path) -> Result<(), IdentityError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)
            .map_err(|source| IdentityError::Unreadable { path: path.to_owned(), source })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(IdentityError::KeyReadableByOthers { path: path.to_owned(), mode: mode & 0o777 });
        }
    }
    Ok(())
}
