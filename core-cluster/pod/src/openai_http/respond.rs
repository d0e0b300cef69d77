//! A generation's events as OpenAI answers: one `chat.completion`, or `chat.completion.chunk` server-sent
//! events (a role chunk, the text as it is decoded, a finish chunk, the usage chunk when asked for, and
//! `data: [DONE]`), rendered with `shared`'s types so every tier's chunks look alike.
//!
//! Both wait for the generation's first event before they answer, so a generation the step loop refuses
//! (its queue full) gets its own status rather than a 200 with an error inside. Once a stream has begun,
//! a failure is sent as an OpenAI error event before `[DONE]`, as vLLM does. Dropping the events'
//! receiver, which hyper does when the client goes away, cancels the generation at its next token.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::completion::StreamHead;
use shared::openai::{AssistantMessage, ChatCompletion, Choice, Usage, SSE_DONE};
use shared::RequestError;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;

use crate::generation::GenerationEvent;
use crate::request::GenerationSummary;
use crate::InferenceError;

/// `Content-Type` of server-sent events.
pub const EVENT_STREAM: &str = "text/event-stream";

/// What every part of one answer carries.
#[derive(Clone, Debug)]
pub struct Head {
    /// The completion id (`chatcmpl-...`), also the generation's request id.
    pub id: String,
    /// Unix seconds.
    pub created: i64,
    /// The served model's name.
    pub model: String,
}

impl Head {
    fn stream_head(&self) -> StreamHead<'_> {
        StreamHead { id: &self.id, created: self.created, model: &self.model }
    }
}

/// The answer as one `chat.completion`.
pub async fn whole(
    head: Head,
    mut events: UnboundedReceiver<GenerationEvent>,
) -> Result<Response, RequestError> {
    let mut content = String::new();
    while let Some(event) = events.recv().await {
        match event {
            GenerationEvent::Piece(piece) => content.push_str(&piece.text),
            // One choice is asked for; its end is the `Done` that follows.
            GenerationEvent::ChoiceDone { .. } => {}
            GenerationEvent::Done(summary) => {
                let choice = Choice {
                    index: 0,
                    message: AssistantMessage { role: "assistant".to_owned(), content },
                    finish_reason: summary.finish_reason.as_str().to_owned(),
                    logprobs: None,
                };
                let completion = ChatCompletion {
                    id: head.id,
                    object: "chat.completion".to_owned(),
                    created: head.created,
                    model: head.model,
                    choices: vec![choice],
                    usage: usage(&summary),
                };
                return Ok(Json(completion).into_response());
            }
            GenerationEvent::Failed(e) => return Err(e.into()),
        }
    }
    Err(ended_early().into())
}

/// The answer as server-sent chunks, ending with the usage chunk when `with_usage`, then `[DONE]`.
pub async fn stream(
    head: Head,
    mut events: UnboundedReceiver<GenerationEvent>,
    with_usage: bool,
) -> Result<Response, RequestError> {
    let first = match events.recv().await {
        Some(GenerationEvent::Failed(e)) => return Err(e.into()),
        Some(event) => event,
        None => return Err(ended_early().into()),
    };
    let role = head.stream_head().role_chunk(0);
    let rest = UnboundedReceiverStream::new(events);
    let chunks = tokio_stream::once(first)
        .chain(rest)
        .filter_map(move |event| render(&head, event, with_usage))
        .map(Ok::<_, Infallible>);
    let body = Body::from_stream(tokio_stream::once(Ok(role)).chain(chunks));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// The server-sent events one engine event becomes, if any.
fn render(head: &Head, event: GenerationEvent, with_usage: bool) -> Option<String> {
    let sse = head.stream_head();
    match event {
        // A piece may carry tokens and no text (a character not complete yet).
        GenerationEvent::Piece(piece) if piece.text.is_empty() => None,
        GenerationEvent::Piece(piece) => Some(sse.content_chunk(0, &piece.text, None)),
        GenerationEvent::ChoiceDone { .. } => None,
        GenerationEvent::Done(summary) => {
            let mut out = sse.finish_chunk(0, summary.finish_reason.as_str());
            if with_usage {
                out.push_str(&sse.usage_chunk(usage(&summary)));
            }
            out.push_str(SSE_DONE);
            Some(out)
        }
        GenerationEvent::Failed(e) => {
            let error = RequestError::from(e);
            Some(format!("data: {}\n\n{SSE_DONE}", error.to_json()))
        }
    }
}

fn usage(summary: &GenerationSummary) -> Usage {
    Usage {
        prompt_tokens: summary.prompt_tokens,
        completion_tokens: summary.completion_tokens,
        total_tokens: summary.prompt_tokens.saturating_add(summary.completion_tokens),
    }
}

/// The events ended without a `Done`: the step loop stopped under the generation.
fn ended_early() -> InferenceError {
    InferenceError::Internal("the step loop stopped before the generation finished".into())
}
