//! Conversions between the protobuf messages and the domain types; prost types stop here.

use proto::inference as pb;

use super::generation::LoggedToken;
use super::request::{ChatMessage, GenerationRequest, Penalties, Priority, SamplingParams, Timings};
use super::worker::GenerationEvent;
use super::InferenceError;

impl TryFrom<pb::GenerateRequest> for GenerationRequest {
    type Error = InferenceError;

    fn try_from(r: pb::GenerateRequest) -> Result<Self, Self::Error> {
        let messages = r
            .messages
            .into_iter()
            .map(|m| Ok(ChatMessage { role: crate::request::parse_role(&m.role)?, content: m.content }))
            .collect::<Result<Vec<_>, InferenceError>>()?;
        let s = r.sampling.unwrap_or_default();
        Ok(Self {
            request_id: r.request_id,
            tenant: r.tenant,
            model: r.model,
            messages,
            raw_prompt: r.raw_prompt,
            sampling: SamplingParams {
                max_tokens: s.max_tokens,
                temperature: s.temperature,
                top_p: s.top_p,
                seed: s.seed,
                top_k: s.top_k,
                penalties: Penalties {
                    frequency: s.frequency_penalty,
                    presence: s.presence_penalty,
                    // Unset on the wire (0) is no penalty.
                    repetition: if s.repetition_penalty == 0.0 { 1.0 } else { s.repetition_penalty },
                },
                stop: s.stop,
                ignore_eos: s.ignore_eos,
                // Unset on the wire (0) is one choice.
                n: s.n.max(1),
                logprobs: s.logprobs.then_some(s.top_logprobs),
            },
            priority: match pb::Priority::try_from(r.priority) {
                Ok(pb::Priority::Batch) => Priority::Batch,
                Ok(pb::Priority::Interactive) => Priority::Interactive,
                Err(_) => {
                    return Err(InferenceError::InvalidRequest(format!("unknown priority {}", r.priority)))
                }
            },
            speculative: r.speculative,
        })
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl From<Timings> for pb::Timings {
    fn from(t: Timings) -> Self {
        Self {
            queue_us: micros(t.queue),
            prefill_us: micros(t.prefill),
            decode_us: micros(t.decode),
            ttft_us: micros(t.ttft),
            tpot_us: micros(t.tpot),
        }
    }
}

/// A worker event as a stream item: text and the summary are events, a failure ends the stream with a status.
impl From<GenerationEvent> for Result<pb::GenerateEvent, tonic::Status> {
    fn from(event: GenerationEvent) -> Self {
        use pb::generate_event::Event;
        let event = match event {
            GenerationEvent::Piece(piece) => Event::Delta(pb::TokenDelta {
                text: piece.text,
                index: piece.choice,
                logprobs: piece.logprobs.into_iter().map(Into::into).collect(),
            }),
            GenerationEvent::ChoiceDone { choice, finish_reason, completion_tokens } => {
                Event::ChoiceDone(pb::ChoiceDone {
                    index: choice,
                    finish_reason: finish_reason.as_str().to_owned(),
                    completion_tokens,
                })
            }
            GenerationEvent::Done(s) => Event::Done(pb::GenerateDone {
                finish_reason: s.finish_reason.as_str().to_owned(),
                prompt_tokens: s.prompt_tokens,
                completion_tokens: s.completion_tokens,
                timings: Some(s.timings.into()),
                cached_prompt_tokens: s.cached_prompt_tokens,
                draft_tokens: s.draft_tokens,
                accepted_draft_tokens: s.accepted_draft_tokens,
            }),
            GenerationEvent::Failed(e) => return Err(e.into()),
        };
        Ok(pb::GenerateEvent { event: Some(event) })
    }
}

impl From<LoggedToken> for pb::TokenLogprob {
    fn from(t: LoggedToken) -> Self {
        Self {
            token: String::from_utf8_lossy(&t.bytes).into_owned(),
            bytes: t.bytes,
            logprob: t.logprob,
            top: t
                .top
                .into_iter()
                .map(|(bytes, logprob)| pb::TopLogprob {
                    token: String::from_utf8_lossy(&bytes).into_owned(),
                    bytes,
                    logprob,
                })
                .collect(),
        }
    }
}
