//! [`SignatureChecks`]: which hot entries this isolate has found signed by the core, so that each is
//! checked once, when it is first about to be served.

use std::collections::HashSet;

use shared::answer_signature::{fingerprint, AnswerVerifier, SignatureError};
use shared::completion::CachedCompletion;

/// Signatures remembered as checked before the memory is cleared and checks start again.
const MAX_CHECKED: usize = 50_000;

/// Fingerprints ([`fingerprint`]: the signed fields and the signature) of entries found to be the core's.
#[derive(Debug, Default)]
pub struct SignatureChecks {
    checked: HashSet<[u8; 32]>,
}

impl SignatureChecks {
    /// Whether `entry` carries the core's signature: remembered once checked.
    pub fn check(
        &mut self,
        verifier: &AnswerVerifier,
        entry: &CachedCompletion,
    ) -> Result<(), SignatureError> {
        let print = fingerprint(entry);
        if self.checked.contains(&print) {
            return Ok(());
        }
        verifier.verify(entry)?;
        if self.checked.len() >= MAX_CHECKED {
            self.checked.clear();
        }
        self.checked.insert(print);
        Ok(())
    }

    /// Signatures remembered.
    pub fn len(&self) -> usize {
        self.checked.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.checked.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::answer_signature::AnswerSigner;

    #[test]
    fn a_signed_entry_is_checked_once_and_a_forged_or_redated_one_never_passes() {
        let signer = AnswerSigner::from_seed([5; 32]);
        let verifier = signer.verifier();
        let mut checks = SignatureChecks::default();
        let mut good = CachedCompletion { created_ms: 1_000, ..CachedCompletion::example("v1:k", "Oslo.") };
        signer.sign(&mut good);
        assert_eq!(checks.check(&verifier, &good), Ok(()));
        assert_eq!((checks.len(), checks.check(&verifier, &good)), (1, Ok(())), "remembered");
        let planted = CachedCompletion::example("v1:k", "Bergen.");
        assert_eq!(checks.check(&verifier, &planted), Err(SignatureError::Missing));
        let redated = CachedCompletion { created_ms: 9_000, ..good.clone() };
        // Its signature was found good for other fields: a re-dated copy still fails.
        assert_eq!(checks.check(&verifier, &redated), Err(SignatureError::Invalid));
    }
}
