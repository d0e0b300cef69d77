//! The pod suite's prompts, the same for both systems: ShareGPT first turns for the concurrency phases;
//! windows of that real text, sized in the model's tokens, as the 512-token prefill prompts and the
//! 1,024-token system prompts (each window distinct from the others, so that no cache shares them); a
//! request that makes the model write long; and an input-grounded task for speculative decoding.

use anyhow::{bail, Context as _};

use crate::bench::pod::llama_server::LlamaServer;

/// ChatML tokens around a lone user message: `<|im_start|>user\n` and
/// `<|im_end|>\n<|im_start|>assistant\n`.
const USER_TURN_OVERHEAD: usize = 8;
/// ChatML tokens around a system message: `<|im_start|>system\n` and `<|im_end|>\n`.
const SYSTEM_TURN_OVERHEAD: usize = 5;

/// Makes a small instruct model write at length.
pub const LONG_WRITING: &str =
    "Write a long story, at least 1,000 words, about a lighthouse keeper who finds a \
message in a bottle. Describe every day of his week in detail, with dialogue.";

/// The questions asked after a long system prompt: the first (cold) and the second (prefix cached).
pub const PREFIX_QUESTIONS: [&str; 2] =
    ["In one sentence, what are the notes above about?", "List three keywords from the notes above."];

/// The input-grounded task: most of the answer is a copy of the prompt, which prompt-lookup speculation
/// can draft.
pub const GROUNDED_TASK: &str = "Repeat this code exactly, but rename variable x to y:\n\n";

/// About 300 tokens of code that uses `x` throughout.
pub const GROUNDED_CODE: &str = r#"def summarize(readings):
    """Return the mean, spread and outliers of a list of sensor readings."""
    if not readings:
        return None
    total = 0.0
    for x in readings:
        total += x
    mean = total / len(readings)
    spread = 0.0
    for x in readings:
        spread += (x - mean) ** 2
    spread = (spread / len(readings)) ** 0.5
    outliers = []
    for index, x in enumerate(readings):
        if abs(x - mean) > 2 * spread:
            outliers.append((index, x))
    smallest = min(x for x in readings)
    largest = max(x for x in readings)
    return {
        "mean": round(mean, 3),
        "spread": round(spread, 3),
        "range": (smallest, largest),
        "outliers": outliers,
    }


def normalize(readings):
    """Scale readings to the interval [0, 1]."""
    low = min(readings)
    high = max(readings)
    width = high - low or 1.0
    return [(x - low) / width for x in readings]
"#;

/// How large the sized prompts are, in tokens of the model (template included).
#[derive(Clone, Copy, Debug)]
pub struct PromptSizes {
    /// The prefill prompt (a lone user message).
    pub prefill_tokens: usize,
    /// The shared prefix (a system message).
    pub prefix_tokens: usize,
    /// How many distinct prompts of each size.
    pub reps: usize,
}

/// Every prompt the suite sends.
#[derive(Clone, Debug)]
pub struct Prompts {
    /// ShareGPT first turns, for the concurrency phases.
    pub turns: Vec<String>,
    /// Distinct user messages of about [`PromptSizes::prefill_tokens`] tokens with their template.
    pub prefill: Vec<String>,
    /// Distinct system messages of about [`PromptSizes::prefix_tokens`] tokens with their template.
    pub prefixes: Vec<String>,
    /// [`GROUNDED_TASK`] followed by [`GROUNDED_CODE`].
    pub grounded: String,
    /// Room for the grounded answer: the code's tokens and a margin.
    pub grounded_max_tokens: u32,
}

impl Prompts {
    /// Builds the prompts from ShareGPT `turns`, sizing them with `server`'s tokenizer (the model's own).
    pub fn build(server: &LlamaServer, turns: Vec<String>, sizes: PromptSizes) -> anyhow::Result<Self> {
        let prefill_len = sizes.prefill_tokens.saturating_sub(USER_TURN_OVERHEAD).max(1);
        let prefix_len = sizes.prefix_tokens.saturating_sub(SYSTEM_TURN_OVERHEAD).max(1);
        let needed = (prefill_len + prefix_len) * sizes.reps;
        // From the last turns backwards: the concurrency phases send the first ones, and a prompt that
        // shares a prefix with a sized one would find it cached.
        let corpus = turns.iter().rev().map(String::as_str).collect::<Vec<_>>().join("\n\n");
        let tokens = server.tokenize(&corpus).context("tokenizing the ShareGPT text")?;
        if tokens.len() < needed {
            bail!("the ShareGPT turns hold {} tokens; the prompts need {needed}", tokens.len());
        }
        let mut windows = tokens.chunks_exact(prefill_len).take(sizes.reps);
        let prefill = windows.by_ref().map(|w| server.detokenize(w)).collect::<anyhow::Result<Vec<_>>>()?;
        let rest = &tokens[prefill_len * sizes.reps..];
        let prefixes = rest
            .chunks_exact(prefix_len)
            .take(sizes.reps)
            .map(|w| server.detokenize(w))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let code_tokens = server.tokenize(GROUNDED_CODE)?.len();
        Ok(Self {
            turns,
            prefill,
            prefixes,
            grounded: format!("{GROUNDED_TASK}{GROUNDED_CODE}"),
            grounded_max_tokens: u32::try_from(code_tokens + 32).unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grounded_code_uses_x_throughout() {
        assert!(GROUNDED_CODE.matches(" x ").count() + GROUNDED_CODE.matches("(x ").count() >= 8);
        // About 300 tokens: at roughly 3-4 characters per token of code.
        assert!((900..=1400).contains(&GROUNDED_CODE.len()), "{}", GROUNDED_CODE.len());
    }
}
