//! What the core's answer signature costs natively: signing and checking a 1 KiB answer.

use std::time::{Duration, Instant};

use shared::answer_signature::AnswerSigner;
use shared::completion::CachedCompletion;

use super::load::percentile;

/// Microseconds to sign and to check one 1 KiB answer, medians of `rounds` (each round re-dates the
/// answer, so no signature repeats).
pub fn sign_and_verify_us(rounds: u32) -> anyhow::Result<(f64, f64)> {
    let signer = AnswerSigner::from_seed(*b"mesh bench: answer signatures!!!");
    let verifier = signer.verifier();
    let content = "An answer of about one kibibyte. ".repeat(32);
    let mut entry = CachedCompletion {
        key: format!("v1:{}", "ab".repeat(32)),
        tenant: "bench".into(),
        model: "smollm2-135m-instruct".into(),
        model_version: 1,
        etag: CachedCompletion::etag_of(&content, "stop"),
        content,
        finish_reason: "stop".into(),
        prompt_tokens: 40,
        completion_tokens: 240,
        created_ms: 1_800_000_000_000,
        ttl_s: 86_400,
        question: None,
        signature: String::new(),
        tags: Vec::new(),
    };
    let (mut sign, mut verify) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        entry.created_ms += 1;
        let started = Instant::now();
        signer.sign(&mut entry);
        sign.push(started.elapsed());
        let started = Instant::now();
        verifier.verify(&entry).map_err(|e| anyhow::anyhow!("a fresh signature failed: {e}"))?;
        verify.push(started.elapsed());
    }
    sign.sort_unstable();
    verify.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok((us(percentile(&sign, 0.5)), us(percentile(&verify, 0.5))))
}
