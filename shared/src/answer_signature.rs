//! Answers authenticated by the core: the core signs every committed answer it hands out with the
//! cluster's Ed25519 key; regional nodes verify what peers replicate to them and the edge verifies what it
//! takes from the hot set and from fills, each with the public half. A region can relay an answer, never
//! forge one, move it to another key or tenant, or re-date it.
//!
//! What is signed ([`signed_message`]): the key, tenant, model and version, the finish reason, the token
//! counts, the ETag, the creation time at the core, the TTL, a SHA-256 digest of the content, and the
//! question it answers in its semantic partition when the core knows it (it derives both from the
//! request it generated for), so a region cannot re-file a signed answer under another question for
//! the semantic tiers either, and its cache tags, so that none can strip a tag to escape its
//! invalidation.
//!
//! Ed25519 signatures are deterministic (RFC 8032), so every core node holding the key signs an answer
//! the same way, whichever node a regional node asked.
//!
//! Key files: the signing key is 32 bytes of seed as hex (owner-only, the core nodes'); the public key is
//! 32 bytes as hex (every regional node's and the edge's `ANSWER_PUBLIC_KEY`).

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::completion::CachedCompletion;
use crate::hex;

/// Separates this use of the key from any other.
const DOMAIN: &[u8] = b"llm-cache-mesh answer v1\0";

/// Why an answer or a key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The answer carries no signature.
    #[error("the answer is not signed")]
    Missing,
    /// The signature is not 64 bytes of hex.
    #[error("the signature is not 128 hex digits")]
    Malformed,
    /// The signature does not match the answer under the cluster's key.
    #[error("the signature does not match the answer")]
    Invalid,
    /// A key is not 32 bytes of hex, or not a valid Ed25519 point.
    #[error("bad answer-signing key: {0}")]
    BadKey(&'static str),
}

/// The core's half: signs answers.
#[derive(Clone)]
pub struct AnswerSigner {
    key: SigningKey,
}

impl std::fmt::Debug for AnswerSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnswerSigner(public {})", self.public_hex())
    }
}

impl AnswerSigner {
    /// A signer from a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self { key: SigningKey::from_bytes(&seed) }
    }

    /// A signer from a key file's text: the seed as 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self, SignatureError> {
        Ok(Self::from_seed(thirty_two(text)?))
    }

    /// The seed as hex: a key file's content.
    pub fn seed_hex(&self) -> String {
        hex::encode(self.key.as_bytes())
    }

    /// The public key as hex: what regional nodes and the edge are given.
    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    /// The verifier of this signer's answers.
    pub fn verifier(&self) -> AnswerVerifier {
        AnswerVerifier { key: self.key.verifying_key() }
    }

    /// Sets `entry.signature` to the signature of its signed fields.
    pub fn sign(&self, entry: &mut CachedCompletion) {
        let signature = self.key.sign(&signed_message(entry));
        entry.signature = hex::encode(&signature.to_bytes());
    }
}

/// The tiers' half: checks answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerVerifier {
    key: VerifyingKey,
}

impl AnswerVerifier {
    /// A verifier from the public key as 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self, SignatureError> {
        let key = VerifyingKey::from_bytes(&thirty_two(text)?)
            .map_err(|_| SignatureError::BadKey("not an Ed25519 public key"))?;
        if key.is_weak() {
            return Err(SignatureError::BadKey("a weak (small-order) public key"));
        }
        Ok(Self { key })
    }

    /// Whether `entry` carries the core's signature over its signed fields. Strict verification: no
    /// malleable or small-order signature passes.
    pub fn verify(&self, entry: &CachedCompletion) -> Result<(), SignatureError> {
        if entry.signature.is_empty() {
            return Err(SignatureError::Missing);
        }
        let bytes: [u8; 64] =
            hex::decode(&entry.signature).and_then(|b| b.try_into().ok()).ok_or(SignatureError::Malformed)?;
        self.key
            .verify_strict(&signed_message(entry), &Signature::from_bytes(&bytes))
            .map_err(|_| SignatureError::Invalid)
    }
}

fn thirty_two(text: &str) -> Result<[u8; 32], SignatureError> {
    hex::decode(text.trim())
        .and_then(|b| b.try_into().ok())
        .ok_or(SignatureError::BadKey("not 64 hex digits"))
}

/// A digest of `entry`'s signed fields and its signature: two entries with one fingerprint say the same
/// thing under the same signature, so a check of one vouches for the other.
pub fn fingerprint(entry: &CachedCompletion) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(signed_message(entry));
    hasher.update(entry.signature.as_bytes());
    hasher.finalize().into()
}

/// The bytes signed for `entry`: every field that decides what a client is served and for how long,
/// each length-prefixed, so no two answers share a message.
pub fn signed_message(entry: &CachedCompletion) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOMAIN.len() + 256 + entry.key.len());
    out.extend_from_slice(DOMAIN);
    for text in [&entry.key, &entry.tenant, &entry.model, &entry.finish_reason, &entry.etag] {
        out.extend_from_slice(&(text.len() as u64).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&entry.model_version.to_be_bytes());
    out.extend_from_slice(&entry.prompt_tokens.to_be_bytes());
    out.extend_from_slice(&entry.completion_tokens.to_be_bytes());
    out.extend_from_slice(&entry.created_ms.to_be_bytes());
    out.extend_from_slice(&entry.ttl_s.to_be_bytes());
    out.extend_from_slice(&Sha256::digest(entry.content.as_bytes()));
    match &entry.question {
        None => out.push(0),
        Some(question) => {
            out.push(1);
            for text in [&question.partition, &question.text] {
                out.extend_from_slice(&(text.len() as u64).to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
    // Only when there are any, so that untagged answers sign as they always did.
    if !entry.tags.is_empty() {
        out.extend_from_slice(b"tags");
        out.extend_from_slice(&(entry.tags.len() as u64).to_be_bytes());
        for tag in &entry.tags {
            out.extend_from_slice(&(tag.len() as u64).to_be_bytes());
            out.extend_from_slice(tag.as_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> AnswerSigner {
        AnswerSigner::from_seed([7; 32])
    }

    fn signed() -> CachedCompletion {
        let mut entry = CachedCompletion::example("v1:k", "Paris.");
        signer().sign(&mut entry);
        entry
    }

    #[test]
    fn a_signed_answer_verifies_and_any_change_to_a_signed_field_breaks_it() {
        let verifier = AnswerVerifier::from_hex(&signer().public_hex()).expect("public key");
        let entry = signed();
        assert_eq!(verifier.verify(&entry), Ok(()));
        // The question is signed too: one attached or changed afterwards breaks the signature.
        let asked = crate::completion::AnsweredQuestion { partition: "p".into(), text: "q".into() };
        let refiled = CachedCompletion { question: Some(asked.clone()), ..entry.clone() };
        assert_eq!(verifier.verify(&refiled), Err(SignatureError::Invalid));
        let mut with_question = CachedCompletion { question: Some(asked), ..entry.clone() };
        signer().sign(&mut with_question);
        assert_eq!(verifier.verify(&with_question), Ok(()));
        let other = crate::completion::AnsweredQuestion { partition: "p".into(), text: "another".into() };
        assert_eq!(
            verifier.verify(&CachedCompletion { question: Some(other), ..with_question }),
            Err(SignatureError::Invalid)
        );
        let changed: Vec<(CachedCompletion, &str)> = vec![
            (CachedCompletion { key: "v1:other".into(), ..entry.clone() }, "key"),
            (CachedCompletion { tenant: "other".into(), ..entry.clone() }, "tenant"),
            (CachedCompletion { model: "other".into(), ..entry.clone() }, "model"),
            (CachedCompletion { model_version: entry.model_version + 1, ..entry.clone() }, "version"),
            (CachedCompletion { content: "Lyon.".into(), ..entry.clone() }, "content"),
            (CachedCompletion { finish_reason: "length".into(), ..entry.clone() }, "finish"),
            (CachedCompletion { completion_tokens: 9, ..entry.clone() }, "tokens"),
            (CachedCompletion { etag: "\"x\"".into(), ..entry.clone() }, "etag"),
            (CachedCompletion { created_ms: entry.created_ms + 1, ..entry.clone() }, "re-dated"),
            (CachedCompletion { ttl_s: entry.ttl_s + 60, ..entry.clone() }, "ttl"),
            (CachedCompletion { tags: vec!["stock:AAPL".into()], ..entry.clone() }, "a tag added"),
        ];
        for (entry, field) in changed {
            assert_eq!(verifier.verify(&entry), Err(SignatureError::Invalid), "{field}");
        }
        assert_eq!(
            verifier.verify(&CachedCompletion { signature: String::new(), ..entry.clone() }),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verifier.verify(&CachedCompletion { signature: "zz".into(), ..entry.clone() }),
            Err(SignatureError::Malformed)
        );
        let other = AnswerSigner::from_seed([8; 32]).verifier();
        assert_eq!(other.verify(&entry), Err(SignatureError::Invalid), "another cluster's key");
        let mut tagged = CachedCompletion { tags: vec!["a".into(), "b".into()], ..entry.clone() };
        signer().sign(&mut tagged);
        assert_eq!(verifier.verify(&tagged), Ok(()));
        let stripped = CachedCompletion { tags: vec!["b".into()], ..tagged };
        assert_eq!(verifier.verify(&stripped), Err(SignatureError::Invalid), "a tag stripped");
    }

    #[test]
    fn signing_is_deterministic_and_keys_round_trip_through_their_files() {
        assert_eq!(signed().signature, signed().signature, "every core node signs alike");
        let again = AnswerSigner::from_hex(&format!("{}\n", signer().seed_hex())).expect("seed file");
        assert_eq!(again.public_hex(), signer().public_hex());
        assert_eq!(again.verifier(), signer().verifier());
        assert!(matches!(AnswerSigner::from_hex("abc"), Err(SignatureError::BadKey(_))));
        assert!(matches!(AnswerVerifier::from_hex(&"00".repeat(32)), Err(SignatureError::BadKey(_))));
    }
}
