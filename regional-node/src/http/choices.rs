//! The shape of an answer: how many choices, whether each is the one generated answer copied (greedy
//! decoding), and whether log-probabilities ride along. An answer that is not just its entry (several
//! sampled choices, or log-probabilities) is gathered from its flight's pieces.

use shared::normalize::Sampling;
use shared::openai::{AssistantMessage, ChatCompletion, Choice, ChoiceLogprobs, TokenLogprob};
use shared::RequestError;

use crate::flight::{FlightItem, Outcome, Subscription};

/// How a request's answer is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Choices asked for (`n`).
    pub choices: u32,
    /// How many choices each generated answer is rendered as (`n` when greedy, else 1).
    pub copies: u32,
    /// Whether the tokens' log-probabilities are asked for.
    pub logprobs: bool,
}

impl Shape {
    /// The shape `sampling` asks for.
    pub fn of(sampling: &Sampling) -> Self {
        Self { choices: sampling.n, copies: sampling.copies(), logprobs: sampling.logprobs.is_some() }
    }

    /// Whether the answer is its entry, rendered [`Shape::copies`] times.
    pub fn is_entry(self) -> bool {
        !self.logprobs && self.generated() == 1
    }

    /// Answers generated.
    pub fn generated(self) -> u32 {
        self.choices / self.copies.max(1)
    }

    /// The choices a piece of generated answer `choice` is rendered as.
    pub fn indexes_of(self, choice: u32) -> std::ops::Range<u32> {
        if self.generated() == 1 {
            0..self.copies
        } else {
            choice..choice + 1
        }
    }
}

/// Every generated answer's text, log-probabilities and end, read from a flight to its landing.
#[derive(Debug)]
pub struct Gathered {
    texts: Vec<String>,
    logprobs: Vec<Vec<TokenLogprob>>,
    ends: Vec<Option<String>>,
    /// The landing: the entry (choice 0, usage over every choice), `X-Cache` and timing.
    pub outcome: Outcome,
}

impl Gathered {
    /// Reads `subscription` until the flight lands.
    pub async fn gather(subscription: &mut Subscription, shape: Shape) -> Result<Self, RequestError> {
        let generated = shape.generated() as usize;
        let mut texts = vec![String::new(); generated];
        let mut logprobs = vec![Vec::new(); generated];
        let mut ends = vec![None; generated];
        while let Some(item) = subscription.next().await {
            match item {
                FlightItem::Delta(piece) => {
                    let i = piece.choice as usize;
                    if let Some(text) = texts.get_mut(i) {
                        text.push_str(&piece.text);
                    }
                    if let (Some(list), Some(more)) = (logprobs.get_mut(i), &piece.logprobs) {
                        list.extend(more.iter().cloned());
                    }
                }
                FlightItem::ChoiceEnd { choice, finish_reason } => {
                    if let Some(end) = ends.get_mut(choice as usize) {
                        *end = Some(finish_reason.to_string());
                    }
                }
                FlightItem::Landed(outcome) => return Ok(Self { texts, logprobs, ends, outcome: outcome? }),
            }
        }
        Err(RequestError::upstream(502, "the answer's flight ended without one"))
    }

    /// The JSON completion of `shape`'s choices.
    pub fn to_response(&self, shape: Shape) -> ChatCompletion {
        let entry = &self.outcome.entry;
        let choices = (0..shape.choices)
            .map(|index| {
                let source = if shape.generated() == 1 { 0 } else { index as usize };
                Choice {
                    index,
                    message: AssistantMessage {
                        role: "assistant".to_owned(),
                        content: self.texts.get(source).cloned().unwrap_or_default(),
                    },
                    finish_reason: self
                        .ends
                        .get(source)
                        .cloned()
                        .flatten()
                        .unwrap_or_else(|| entry.finish_reason.clone()),
                    logprobs: shape.logprobs.then(|| ChoiceLogprobs {
                        content: self.logprobs.get(source).cloned().unwrap_or_default(),
                    }),
                }
            })
            .collect();
        ChatCompletion {
            id: entry.completion_id(),
            object: "chat.completion".to_owned(),
            created: entry.created_ms / 1000,
            model: entry.model.clone(),
            choices,
            usage: entry.usage(shape.copies),
        }
    }
}

#[cfg(test)]
mod tests {
    use shared::normalize::Sampling;

    use super::*;

    #[test]
    fn greedy_choices_copy_one_answer_and_sampled_ones_stand_alone() {
        let greedy = Shape::of(&Sampling { n: 3, ..Sampling::greedy(8) });
        assert_eq!((greedy.generated(), greedy.indexes_of(0)), (1, 0..3));
        assert!(greedy.is_entry());
        let sampled = Shape::of(&Sampling { n: 3, temperature: 0.8, ..Sampling::greedy(8) });
        assert_eq!((sampled.generated(), sampled.indexes_of(2)), (3, 2..3));
        assert!(!sampled.is_entry());
        let logged = Shape::of(&Sampling { logprobs: Some(2), ..Sampling::greedy(8) });
        assert!(!logged.is_entry(), "log-probabilities are not in the entry");
    }
}
