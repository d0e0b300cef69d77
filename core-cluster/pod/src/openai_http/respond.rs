//! A generation's events as OpenAI answers, in the shape the request's [`Rendering`] asks for: one
//! `chat.completion` or `text_completion`, or server-sent chunks (`chat.completion.chunk`: a role chunk,
//! the text as it is decoded, a finish chunk; `text_completion`: the echoed prompt when `echo`, the text,
//! a finish chunk), then the usage chunk when asked for, and `data: [DONE]`. The chunks are rendered with
//! `shared`'s [`StreamHead`] so every tier's chunks look alike; `echo` puts the prompt before a text
//! completion's answer, whole or streamed.
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
use shared::completion::{Rendering, StreamHead};
use shared::model_spec::ModelApi;
use shared::openai::{AssistantMessage, ChatCompletion, Choice, Delivery, Usage, SSE_DONE};
use shared::text_completion::TextCompletion;
use shared::RequestError;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;

use crate::generation::GenerationEvent;
use crate::request::GenerationSummary;
use crate::InferenceError;

/// `Content-Type` of server-sent events.
pub const EVENT_STREAM: &str = "text/event-stream";

/// What every part of one answer carries, and how it is written.
#[derive(Clone, Debug)]
pub struct Head {
    /// The completion id (`chatcmpl-...`, or `cmpl-...` for a text completion), also the generation's
    /// request id.
    pub id: String,
    /// Unix seconds.
    pub created: i64,
    /// The served model's name.
    pub model: String,
    /// Chat or text completion.
    pub api: ModelApi,
    /// The prompt a text completion's answer starts with (`echo`).
    pub echo: Option<String>,
    /// JSON or server-sent events.
    pub delivery: Delivery,
}

impl Head {
    /// The head of the answer `rendering` asks for (one choice: this API serves no copies).
    pub fn new(id: String, created: i64, model: String, rendering: Rendering<'_>) -> Self {
        Self {
            id,
            created,
            model,
            api: rendering.api,
            echo: rendering.echo.map(str::to_owned),
            delivery: rendering.delivery,
        }
    }

    fn rendering(&self) -> Rendering<'_> {
        Rendering { api: self.api, echo: self.echo.as_deref(), delivery: self.delivery, copies: 1 }
    }

    fn stream_head(&self) -> StreamHead<'_> {
        StreamHead::rendered(&self.id, self.created, &self.model, self.rendering())
    }
}

/// The answer in the way `head` says: whole or streamed.
pub async fn answer(
    head: Head,
    events: UnboundedReceiver<GenerationEvent>,
) -> Result<Response, RequestError> {
    match head.delivery {
        Delivery::Whole => whole(head, events).await,
        Delivery::Stream { usage } => stream(head, events, usage).await,
    }
}

/// The answer as one `chat.completion` or `text_completion`.
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
            GenerationEvent::Done(summary) => return Ok(completion(head, content, &summary)),
            GenerationEvent::Failed(e) => return Err(e.into()),
        }
    }
    Err(ended_early().into())
}

/// The finished answer's body, in its API's shape.
fn completion(head: Head, content: String, summary: &GenerationSummary) -> Response {
    let finish_reason = summary.finish_reason.as_str();
    match head.api {
        ModelApi::Chat => {
            let choice = Choice {
                index: 0,
                message: AssistantMessage { role: "assistant".to_owned(), content },
                finish_reason: finish_reason.to_owned(),
                logprobs: None,
            };
            Json(ChatCompletion {
                id: head.id,
                object: "chat.completion".to_owned(),
                created: head.created,
                model: head.model,
                choices: vec![choice],
                usage: usage(summary),
            })
            .into_response()
        }
        ModelApi::Completions => {
            let text = head.echo.unwrap_or_default() + &content;
            let mut whole =
                TextCompletion::of_text(&head.id, head.created, &head.model, text, Some(finish_reason));
            whole.usage = Some(usage(summary));
            Json(whole).into_response()
        }
    }
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
    // A chat stream opens with the role; a text completion's with its echoed prompt, or nothing.
    let opening = Some(head.stream_head().role_chunk(0)).filter(|chunk| !chunk.is_empty());
    let rest = UnboundedReceiverStream::new(events);
    let chunks = tokio_stream::once(first)
        .chain(rest)
        .filter_map(move |event| render(&head, event, with_usage))
        .map(Ok::<_, Infallible>);
    let body = Body::from_stream(tokio_stream::iter(opening.map(Ok)).chain(chunks));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{FinishReason, Timings};

    fn summary() -> GenerationSummary {
        GenerationSummary {
            finish_reason: FinishReason::Length,
            prompt_tokens: 5,
            completion_tokens: 2,
            timings: Timings::default(),
            cached_prompt_tokens: 0,
            draft_tokens: 0,
            accepted_draft_tokens: 0,
        }
    }

    fn head(api: ModelApi, echo: Option<&str>) -> Head {
        let rendering = Rendering { api, echo, delivery: Delivery::Whole, copies: 1 };
        Head::new("cmpl-1".into(), 7, "m".into(), rendering)
    }

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    #[tokio::test]
    async fn a_text_completion_is_written_after_its_echoed_prompt() {
        let plain = body(completion(head(ModelApi::Completions, None), " Paris".into(), &summary())).await;
        assert_eq!(
            plain,
            serde_json::json!({
                "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m",
                "choices": [{"text": " Paris", "index": 0, "logprobs": null, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            })
        );
        let echoed = completion(head(ModelApi::Completions, Some("Capital:")), " Paris".into(), &summary());
        assert_eq!(body(echoed).await["choices"][0]["text"], "Capital: Paris");
        // The chat shape ignores what only a text completion has.
        let chat = body(completion(head(ModelApi::Chat, None), "Paris".into(), &summary())).await;
        assert_eq!(
            (chat["object"].as_str(), chat["choices"][0]["message"]["content"].as_str()),
            (Some("chat.completion"), Some("Paris"))
        );

        let echoing = head(ModelApi::Completions, Some("Capital:"));
        let opening = echoing.stream_head().role_chunk(0);
        assert!(opening.contains(r#""text":"Capital:""#), "{opening}");
        assert!(head(ModelApi::Completions, None).stream_head().role_chunk(0).is_empty());
    }
}
