//! TLS material that follows its files, so certificates rotate without a restart.
//!
//! A daemon reads its CA, certificate and key once at start ([`LiveTls::load`]) and again whenever
//! [`spawn_reloader`] sees them change (it looks every `--tls-reload-secs`, and at once on SIGHUP, as
//! `systemctl reload` sends). A changed set is used only when it parses, its key is private and its
//! certificate names the same role as before; otherwise the daemon keeps what it has and logs why (a
//! certificate written before its key is simply picked up on the next look).
//!
//! What a reload changes: every TLS handshake from then on, both ways. A listener's acceptor and a
//! channel's dialer ([`super::dialer`]) take the current configuration per connection, so new
//! connections present the new certificate and trust the new CA file; connections already open keep
//! the session they authenticated. Rotating to a new CA therefore goes in three steps, each picked up
//! without a restart: a CA file holding both CAs everywhere, then certificates of the new CA, then the
//! new CA alone.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::{ClientConfig, ServerConfig};
use sha2::Digest as _;

use super::tls::{read, refuse_shared_key};
use super::{ClientAuth, IdentityError, TierRole, TlsFiles, TlsMaterial};

/// A node's TLS configurations, rebuilt from its files when they change.
pub struct LiveTls {
    files: TlsFiles,
    current: RwLock<Arc<Configs>>,
}

impl std::fmt::Debug for LiveTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTls").field("files", &self.files).finish_non_exhaustive()
    }
}

/// Everything built from one reading of the files.
pub(super) struct Configs {
    role: TierRole,
    fingerprint: String,
    /// The SHA-256 of the three files' bytes, to tell a change from a look that found none.
    digest: [u8; 32],
    required: Arc<ServerConfig>,
    optional: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl Configs {
    fn build(read: &Read) -> Result<Self, IdentityError> {
        let [ca, chain, key] = &read.pems;
        let material = TlsMaterial::from_pem(ca, chain, key)?;
        Ok(Self {
            role: material.role(),
            fingerprint: material.fingerprint(),
            digest: read.digest,
            required: material.server_config(ClientAuth::Required)?,
            optional: material.server_config(ClientAuth::Optional)?,
            client: material.client_config()?,
        })
    }

    /// The server configuration of a listener that treats client certificates as `client_auth` says.
    pub(super) fn server(&self, client_auth: ClientAuth) -> Arc<ServerConfig> {
        match client_auth {
            ClientAuth::Required => Arc::clone(&self.required),
            ClientAuth::Optional => Arc::clone(&self.optional),
        }
    }

    /// The client configuration of calls to other tiers.
    pub(super) fn client(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.client)
    }
}

/// A listener's TLS: an acceptor of the node's material as it is when each connection arrives.
#[derive(Clone, Debug)]
pub struct ServerTls {
    tls: Arc<LiveTls>,
    client_auth: ClientAuth,
}

impl ServerTls {
    pub(super) fn new(tls: Arc<LiveTls>, client_auth: ClientAuth) -> Self {
        Self { tls, client_auth }
    }

    /// The acceptor for the next connection.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.tls.current().server(self.client_auth))
    }
}

/// What one look at the files found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The files are as they were.
    Unchanged,
    /// They changed, and the node now presents the certificate with this fingerprint.
    Reloaded {
        /// [`TlsMaterial::fingerprint`] of the new certificate.
        fingerprint: String,
    },
}

impl LiveTls {
    /// Reads the files (refusing a key others may read) and builds the configurations.
    pub fn load(files: TlsFiles) -> Result<Self, IdentityError> {
        let configs = Configs::build(&Read::files(&files)?)?;
        Ok(Self { files, current: RwLock::new(Arc::new(configs)) })
    }

    /// The role this node's certificate names (the same for the node's whole life).
    pub fn role(&self) -> TierRole {
        self.current().role
    }

    /// The fingerprint of the certificate the node presents now.
    pub fn fingerprint(&self) -> String {
        self.current().fingerprint.clone()
    }

    pub(super) fn current(&self) -> Arc<Configs> {
        Arc::clone(&self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Looks at the files once: rebuilds the configurations when they changed. A set that does not
    /// load, or whose certificate names another role, is refused and the current one kept.
    pub fn reload(&self) -> Result<Reload, IdentityError> {
        let current = self.current();
        let read = Read::files(&self.files)?;
        if read.digest == current.digest {
            return Ok(Reload::Unchanged);
        }
        let configs = Configs::build(&read)?;
        if configs.role != current.role {
            return Err(IdentityError::Tls(format!(
                "the new certificate names the {} role, this node is {}: kept the old one",
                configs.role, current.role
            )));
        }
        let fingerprint = configs.fingerprint.clone();
        *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(configs);
        Ok(Reload::Reloaded { fingerprint })
    }
}

/// One reading of the three files: their bytes, and a digest to tell a change by.
struct Read {
    /// The CA, the certificate chain and the key, as read.
    pems: [Vec<u8>; 3],
    /// The SHA-256 of the three, each preceded by its length.
    digest: [u8; 32],
}

impl Read {
    /// Reads the files, refusing a key others may read before reading it.
    fn files(files: &TlsFiles) -> Result<Self, IdentityError> {
        refuse_shared_key(&files.key)?;
        let pems = [read(&files.ca)?, read(&files.cert)?, read(&files.key)?];
        let mut hasher = sha2::Sha256::new();
        for bytes in &pems {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        Ok(Self { pems, digest: hasher.finalize().into() })
    }
}

/// Looks at `tls`'s files every `every` (never when `None`) and on each SIGHUP, for the daemon's life.
pub fn spawn_reloader(tls: Arc<LiveTls>, every: Option<Duration>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .inspect_err(|error| tracing::warn!(%error, "cannot listen for SIGHUP"))
            .ok();
        let mut ticks = every.map(|every| {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks
        });
        loop {
            let why = tokio::select! {
                Some(_) = async { Some(ticks.as_mut()?.tick().await) } => "timer",
                Some(()) = async { hangups.as_mut()?.recv().await } => "SIGHUP",
                // Neither a timer nor a signal to wait for.
                else => return,
            };
            match tls.reload() {
                Ok(Reload::Unchanged) if why == "SIGHUP" => {
                    tracing::info!("SIGHUP: the TLS files are unchanged");
                }
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Reloaded { fingerprint }) => {
                    tracing::info!(%fingerprint, trigger = why, "TLS certificate and CA reloaded");
                }
                Err(error) => tracing::warn!(%error, trigger = why, "TLS files not reloaded"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate naming `role`, and its key, as PEM: it serves as the CA file too
    /// (loading checks names and parses; chains are checked in handshakes).
    fn self_signed(role: TierRole) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec![role.dns_name().to_owned()]).expect("params");
        (params.self_signed(&key).expect("cert").pem(), key.serialize_pem())
    }

    fn write(files: &TlsFiles, (cert, key): &(String, String)) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(&files.ca, cert).expect("ca");
        std::fs::write(&files.cert, cert).expect("cert");
        std::fs::write(&files.key, key).expect("key");
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    #[test]
    fn only_a_change_that_loads_and_keeps_the_role_is_taken() {
        let dir = std::env::temp_dir().join(format!("mesh-live-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files =
            TlsFiles { ca: dir.join("ca.pem"), cert: dir.join("node.pem"), key: dir.join("node.key") };
        write(&files, &self_signed(TierRole::Regional));
        let tls = LiveTls::load(files.clone()).expect("load");
        let first = tls.fingerprint();
        assert_eq!(tls.reload().expect("look"), Reload::Unchanged);

        write(&files, &self_signed(TierRole::Regional));
        let Reload::Reloaded { fingerprint } = tls.reload().expect("reload") else { panic!("not reloaded") };
        assert_ne!(fingerprint, first);
        assert_eq!(tls.fingerprint(), fingerprint);

        std::fs::write(&files.cert, self_signed(TierRole::Regional).0).expect("cert");
        assert!(tls.reload().is_err(), "a certificate written before its key is not taken yet");
        write(&files, &self_signed(TierRole::Admin));
        assert!(tls.reload().is_err(), "a certificate of another role is refused");
        std::fs::write(&files.key, "half-written").expect("key");
        assert!(tls.reload().is_err(), "a key that does not parse is refused");
        assert_eq!((tls.role(), tls.fingerprint()), (TierRole::Regional, fingerprint), "kept");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_key_others_may_read_is_refused_before_it_is_parsed() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("mesh-tls-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key = dir.join("node.key");
        std::fs::write(&key, "not even a key").expect("write");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let files = TlsFiles { ca: dir.join("ca.pem"), cert: dir.join("node.pem"), key: key.clone() };
        assert!(matches!(
            LiveTls::load(files.clone()),
            Err(IdentityError::KeyReadableByOthers { mode: 0o644, .. })
        ));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // Private now: the next complaint is the missing CA file.
        assert!(matches!(LiveTls::load(files.clone()), Err(IdentityError::Unreadable { .. })));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
