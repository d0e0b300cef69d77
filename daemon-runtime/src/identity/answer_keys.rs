//! The answer-signing key files ([`shared::answer_signature`]): the core's private seed (owner-only, as a
//! TLS key) and the public key every regional node is given. `mesh certs` writes both beside the CA.

use std::path::Path;

use shared::answer_signature::{AnswerSigner, AnswerVerifier};

use super::tls::refuse_shared_key;
use super::IdentityError;

/// The signer in `path` (64 hex digits of seed); a file its group or others may read is refused.
pub fn load_answer_signer(path: &Path) -> Result<AnswerSigner, IdentityError> {
    refuse_shared_key(path)?;
    AnswerSigner::from_hex(&read(path)?)
        .map_err(|source| IdentityError::AnswerKey { path: path.to_owned(), source })
}

/// The verifier of the public key in `path` (64 hex digits).
pub fn load_answer_verifier(path: &Path) -> Result<AnswerVerifier, IdentityError> {
    AnswerVerifier::from_hex(&read(path)?)
        .map_err(|source| IdentityError::AnswerKey { path: path.to_owned(), source })
}

fn read(path: &Path) -> Result<String, IdentityError> {
    std::fs::read_to_string(path)
        .map_err(|source| IdentityError::Unreadable { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn key_files_load_and_a_shared_or_malformed_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("answer-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let signer = AnswerSigner::from_seed([4; 32]);
        let (private, public) = (dir.join("answer-signing.key"), dir.join("answer-signing.pub"));
        std::fs::write(&private, signer.seed_hex()).expect("write");
        std::fs::write(&public, format!("{}\n", signer.public_hex())).expect("write");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(load_answer_signer(&private), Err(IdentityError::KeyReadableByOthers { .. })));
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let loaded = load_answer_signer(&private).expect("signer");
        assert_eq!(loaded.verifier(), load_answer_verifier(&public).expect("verifier"));
        std::fs::write(&public, "not a key").expect("write");
        assert!(matches!(load_answer_verifier(&public), Err(IdentityError::AnswerKey { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
