//! A development certificate authority for the mesh (`mesh certs`, and every TLS mesh the harness
//! starts): one CA, and per node a certificate naming its role ([`daemon_runtime::TierRole::dns_name`]) plus
//! `localhost` and the loopback addresses, usable as a server's and as a client's certificate. Keys are
//! written readable by their owner only, as the daemons demand.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use daemon_runtime::identity::TlsFiles;
use daemon_runtime::TierRole;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

/// How long a certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From the start of last year to the end of next year.
    Current,
    /// Expired years ago (for tests that it is refused).
    Expired,
}

/// A development CA: its certificate and the key that signs node certificates.
pub struct DevCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    key_pem: String,
}

impl std::fmt::Debug for DevCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DevCa(<key redacted>)")
    }
}

/// A node's certificate and key, as PEM.
#[derive(Clone)]
pub struct NodeCert {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCert(<key redacted>)")
    }
}

/// The name `mesh certs` gives its CA.
pub const MESH_CA_NAME: &str = "llm-cache-mesh development CA";

impl DevCa {
    /// A new CA named `name`, with a fresh key.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let key = KeyPair::generate()?;
        let params = ca_params(name)?;
        let pem = params.self_signed(&key)?.pem();
        let key_pem = key.serialize_pem();
        Ok(Self { issuer: Issuer::new(params, key), pem, key_pem })
    }

    /// The CA `mesh certs` wrote to `dir` (`ca.pem`, `ca.key`), to issue more certificates under: the
    /// key must be the certificate's, and the certificate must be named [`MESH_CA_NAME`].
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .with_context(|| format!("reading {}", dir.join(name).display()))
        };
        let (pem, key_pem) = (read("ca.pem")?, read("ca.key")?);
        let key = KeyPair::from_pem(&key_pem).context("ca.key")?;
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).context("ca.pem holds no certificate")?;
        let holds = |part: &[u8]| der.windows(part.len()).any(|window| window == part);
        anyhow::ensure!(holds(key.public_key_raw()), "ca.key is not the key of ca.pem");
        anyhow::ensure!(holds(MESH_CA_NAME.as_bytes()), "ca.pem is not a CA `mesh certs` made");
        Ok(Self { issuer: Issuer::new(ca_params(MESH_CA_NAME)?, key), pem, key_pem })
    }

    /// The CA's certificate (PEM).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A certificate for node `name` in `role`.
    pub fn issue(&self, name: &str, role: TierRole, validity: Validity) -> anyhow::Result<NodeCert> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![role.dns_name().to_owned(), "localhost".to_owned()])?;
        params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.subject_alt_names.push(SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        params.distinguished_name.push(DnType::CommonName, name);
        params.distinguished_name.push(DnType::OrganizationalUnitName, role.as_str());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        set_window(&mut params, validity);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(NodeCert { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// Writes `ca.pem` and `ca.key` (owner-only) to `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("ca.pem"), &self.pem)?;
        write_private(&dir.join("ca.key"), &self.key_pem)
    }
}

impl NodeCert {
    /// Writes `<name>.pem` and `<name>.key` (owner-only) to `dir`, beside the CA's `ca.pem`: the
    /// files a daemon is started with.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<TlsFiles> {
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, &self.cert_pem)?;
        write_private(&files.key, &self.key_pem)?;
        Ok(files)
    }
}

/// The cluster's answer-signing key files in `dir` ([`shared::answer_signature`]): the core nodes'
/// private seed and the public key regional nodes and the edge check answers with.
#[derive(Clone, Debug)]
pub struct AnswerKeyFiles {
    /// `answer-signing.key` (owner-only).
    pub private: PathBuf,
    /// `answer-signing.pub`.
    pub public: PathBuf,
}

impl AnswerKeyFiles {
    /// The files' places in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self { private: dir.join("answer-signing.key"), public: dir.join("answer-signing.pub") }
    }

    /// A fresh key pair from the operating system's randomness, written to the files.
    pub fn generate(dir: &Path) -> anyhow::Result<Self> {
        let mut seed = [0u8; 32];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut seed)?;
        let signer = shared::answer_signature::AnswerSigner::from_seed(seed);
        let files = Self::in_dir(dir);
        write_private(&files.private, &format!("{}\n", signer.seed_hex()))?;
        std::fs::write(&files.public, format!("{}\n", signer.public_hex()))?;
        Ok(files)
    }

    /// The public key as hex (the edge's `ANSWER_PUBLIC_KEY`).
    pub fn public_hex(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(&self.public)?.trim().to_owned())
    }
}

/// The certificates of a mesh: the CA and one per node, written to `dir`, and the cluster's
/// answer-signing key beside them; `nodes` pairs each node's name with its role. Returns the CA and each
/// node's files, in the order given.
#[allow(clippy::type_complexity)]
pub fn write_mesh_certs(
    dir: &Path,
    nodes: &[(String, TierRole)],
) -> anyhow::Result<(DevCa, Vec<(String, TlsFiles)>)> {
    let ca = DevCa::new(MESH_CA_NAME)?;
    ca.write(dir)?;
    AnswerKeyFiles::generate(dir)?;
    let files = issue_all(&ca, dir, nodes)?;
    Ok((ca, files))
}

/// Fresh certificates and keys for `nodes`, issued by the CA already in `dir` ([`DevCa::open`]) and
/// written over theirs; the CA and the answer-signing key stay. Running daemons pick them up without
/// a restart (`--tls-reload-secs`, SIGHUP).
pub fn renew_node_certs(dir: &Path, nodes: &[(String, TierRole)]) -> anyhow::Result<Vec<(String, TlsFiles)>> {
    issue_all(&DevCa::open(dir)?, dir, nodes)
}

fn issue_all(
    ca: &DevCa,
    dir: &Path,
    nodes: &[(String, TierRole)],
) -> anyhow::Result<Vec<(String, TlsFiles)>> {
    nodes
        .iter()
        .map(|(name, role)| {
            let files = ca.issue(name, *role, Validity::Current)?.write(dir, name)?;
            Ok((name.clone(), files))
        })
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("writing certificates to {}", dir.display()))
}

/// A CA certificate's parameters: it signs node certificates only (no intermediates).
fn ca_params(name: &str) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_window(&mut params, Validity::Current);
    Ok(params)
}

/// The environment variables that give a daemon these files.
pub fn env(files: &TlsFiles) -> [(&'static str, PathBuf); 3] {
    [
        ("MESH_TLS_CA", files.ca.clone()),
        ("MESH_TLS_CERT", files.cert.clone()),
        ("MESH_TLS_KEY", files.key.clone()),
    ]
}

/// The answer-signing key files beside `files`' CA.
pub fn answer_keys(files: &TlsFiles) -> AnswerKeyFiles {
    AnswerKeyFiles::in_dir(files.ca.parent().unwrap_or(Path::new(".")))
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(path)?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

/// The validity window, in whole calendar years around the system clock's year.
fn set_window(params: &mut CertificateParams, validity: Validity) {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let year = 1970 + (since_epoch.as_secs() / 31_556_952) as i32;
    let (from, to) = match validity {
        Validity::Current => (year - 1, year + 1),
        Validity::Expired => (year - 6, year - 5),
    };
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(to, 12, 31);
}
