//! What one forward step computes: runs of new tokens from several sequences.

/// The new tokens of one sequence in a step.
#[derive(Debug, Clone, Copy)]
pub struct BatchSequence<'a> {
    /// Tokens whose KV this step computes and writes (a prefill chunk, a decoded token, or a
    /// decoded token followed by draft tokens to verify).
    pub tokens: &'a [u32],
    /// Position of `tokens[0]` in the sequence; positions before it are already in the cache.
    pub start: usize,
    /// The sequence's block table, covering at least `start + tokens.len()` positions.
    pub table: &'a [u32],
    /// How many of the trailing rows need logits: 0 for a prefill chunk that is not the last,
    /// 1 for a finished prefill or a decode, `1 + k` to verify `k` draft tokens.
    pub logits: usize,
}

/// One forward step's input.
#[derive(Debug, Clone, Default)]
pub struct Batch<'a> {
    /// The sequences, in the order their logits come back.
    pub sequences: Vec<BatchSequence<'a>>,
}

impl<'a> Batch<'a> {
    /// Adds a sequence's run.
    pub fn push(&mut self, sequence: BatchSequence<'a>) {
        self.sequences.push(sequence);
    }

    /// Tokens in the step.
    pub fn tokens(&self) -> usize {
        self.sequences.iter().map(|s| s.tokens.len()).sum()
    }

    /// Rows of logits the step returns.
    pub fn logit_rows(&self) -> usize {
        self.sequences.iter().map(|s| s.logits.min(s.tokens.len())).sum()
    }
}
