//! The canary's audits: a share of the trial's greedy generations (`--canary-audit-percent`) is generated
//! again on the current version, in the background and stored nowhere, and the two answers are compared
//! (the same text, whitespace aside). Each arm's agreement shows in `/metrics`, and the judge rolls a
//! trial back when it falls below `--canary-min-agreement`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::inference::{generate_event, GenerateRequest};

use crate::node::backends;
use crate::node::context::NodeContext;
use crate::node::error::CoreError;

/// Trial generations seen, for spreading the audited share evenly.
static TRIAL_GENERATIONS: AtomicU64 = AtomicU64::new(0);
/// Longest silence from the backend during an audit.
const IDLE: Duration = Duration::from_secs(60);

/// Audits `generate`'s `answer` in the background when `generate` is a greedy generation of a model's
/// version on trial and it falls in the audited share.
pub fn maybe_audit(node: &Arc<NodeContext>, generate: &GenerateRequest, answer: &str) {
    let percent = u64::from(node.canary_rule.audit_percent.min(100));
    let greedy = generate.sampling.as_ref().is_none_or(|s| s.temperature == 0.0 || s.seed.is_some());
    if percent == 0 || !greedy {
        return;
    }
    let Some((_, current, _)) = node
        .state
        .canaries()
        .into_iter()
        .find(|(m, _, trial)| *m == generate.model && *trial == generate.model_version)
    else {
        return;
    };
    if TRIAL_GENERATIONS.fetch_add(1, Ordering::Relaxed) % 100 >= percent {
        return;
    }
    let (node, trial) = (Arc::clone(node), generate.clone());
    let on_current = GenerateRequest {
        request_id: format!("{}-audit", generate.request_id),
        model_version: current,
        ..generate.clone()
    };
    let answer = answer.to_owned();
    tokio::spawn(async move {
        match generated_text(&node, on_current).await {
            Ok(current_answer) => {
                let agreed = same_answer(&answer, &current_answer);
                node.arms.record_audit(&trial.model, trial.model_version, agreed);
                tracing::debug!(model = %trial.model, trial = trial.model_version, agreed, "canary audit");
            }
            Err(error) => tracing::warn!(%error, "a canary audit failed; not counted"),
        }
    });
}

/// The text choice 0 of `generate` comes to.
async fn generated_text(node: &NodeContext, generate: GenerateRequest) -> Result<String, CoreError> {
    let trace = daemon_runtime::trace_context::continue_or_start(None);
    let (_, mut stream, _in_flight) = node.backends.generate(generate, &trace).await?;
    let mut text = String::new();
    loop {
        let Some(event) = backends::next_event(&mut stream, IDLE).await? else {
            return Err(CoreError::NoBackend("the backend's stream ended without Done".into()));
        };
        match event.event {
            Some(generate_event::Event::Delta(delta)) if delta.index == 0 => text.push_str(&delta.text),
            Some(generate_event::Event::Done(_)) => return Ok(text),
            _ => {}
        }
    }
}

/// Whether two answers say the same, whitespace aside.
fn same_answer(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_agree_when_only_their_whitespace_differs() {
        assert!(same_answer("Paris is  the capital.\n", " Paris is the capital."));
        assert!(!same_answer("Paris is the capital.", "Lyon is the capital."));
    }
}
