//! An OpenAI-compatible stream's events read as the pod's [`GenerateEvent`]s: each choice-0 content
//! delta (or text, in a text completion's chunks) a `Delta`, and `[DONE]` the `Done` that carries the finish reason, the usage (the server's, or
//! counted here when it sends none) and the timings seen from this side. A stream that says something
//! else (a chunk that is not JSON, an `error` event, `[DONE]` before any finish reason) is an error, so
//! that nothing it said is committed.

use std::time::Instant;

use proto::inference::{generate_event, GenerateDone, GenerateEvent, Timings, TokenDelta};
use serde_json::Value;
use tonic::Code;

use crate::node::error::CoreError;

/// Reads one stream's events.
#[derive(Debug)]
pub struct ChunkReader {
    /// When the request was sent.
    sent: Instant,
    /// When the first content arrived.
    first_token: Option<Instant>,
    /// Content deltas seen (the completion's length when the server reports no usage).
    deltas: u32,
    /// Prompt tokens as predicted here (used when the server reports no usage).
    prompt_estimate: u32,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    finished: bool,
}

#[derive(Debug, Clone, Copy)]
struct Usage {
    prompt_tokens: u32,
    completion_tokens: u32,
    cached_tokens: u32,
}

fn malformed(what: impl std::fmt::Display) -> CoreError {
    CoreError::Backend {
        code: Code::Internal,
        message: format!("the backend sent a malformed stream: {what}"),
    }
}

impl ChunkReader {
    /// A reader for a request sent at `sent`, whose prompt is predicted to take `prompt_estimate` tokens.
    pub fn new(sent: Instant, prompt_estimate: u32) -> Self {
        Self {
            sent,
            first_token: None,
            deltas: 0,
            prompt_estimate,
            finish_reason: None,
            usage: None,
            finished: false,
        }
    }

    /// Whether `[DONE]` has been read (and its `Done` returned).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The events one server-sent event's data makes.
    pub fn read(&mut self, data: &str) -> Result<Vec<GenerateEvent>, CoreError> {
        if self.finished {
            return Err(malformed("data after [DONE]"));
        }
        if data.trim() == "[DONE]" {
            self.finished = true;
            return Ok(vec![self.done()?]);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| malformed(format!("a chunk is not JSON ({e})")))?;
        if let Some(error) = chunk.get("error") {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
            return Err(CoreError::Backend {
                code: Code::Internal,
                message: format!("the backend failed mid-stream: {message}"),
            });
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(read_usage(usage)?);
        }
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(choices)) => choices,
            Some(other) => return Err(malformed(format!("choices is {other}"))),
        };
        let mut events = Vec::new();
        for choice in choices.iter().filter(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) {
            // A chat chunk's text is its delta's content; a text completion chunk's, its `text`.
            match choice.pointer("/delta/content").or_else(|| choice.get("text")) {
                None | Some(Value::Null) => {}
                Some(Value::String(text)) if text.is_empty() => {}
                Some(Value::String(text)) => {
                    self.first_token.get_or_insert_with(Instant::now);
                    self.deltas += 1;
                    let delta = TokenDelta { text: text.clone(), index: 0, logprobs: Vec::new() };
                    events.push(GenerateEvent { event: Some(generate_event::Event::Delta(delta)) });
                }
                Some(other) => return Err(malformed(format!("delta content is {other}"))),
            }
            match choice.get("finish_reason") {
                None | Some(Value::Null) => {}
                Some(Value::String(reason)) => self.finish_reason = Some(reason.clone()),
                Some(other) => return Err(malformed(format!("finish_reason is {other}"))),
            }
        }
        Ok(events)
    }

    fn done(&self) -> Result<GenerateEvent, CoreError> {
        let finish_reason =
            self.finish_reason.clone().ok_or_else(|| malformed("[DONE] before a finish reason"))?;
        let usage = self.usage.unwrap_or(Usage {
            prompt_tokens: self.prompt_estimate,
            completion_tokens: self.deltas,
            cached_tokens: 0,
        });
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let micros = |d: std::time::Duration| d.as_micros().min(u128::from(u64::MAX)) as u64;
        let decode_us = micros(now - first);
        let timings = Timings {
            queue_us: 0,
            prefill_us: micros(first - self.sent),
            decode_us,
            ttft_us: micros(first - self.sent),
            tpot_us: decode_us / u64::from(usage.completion_tokens.saturating_sub(1).max(1)),
        };
        let done = GenerateDone {
            finish_reason,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            timings: Some(timings),
            cached_prompt_tokens: usage.cached_tokens,
            ..Default::default()
        };
        Ok(GenerateEvent { event: Some(generate_event::Event::Done(done)) })
    }
}

fn read_usage(usage: &Value) -> Result<Usage, CoreError> {
    let count = |pointer: &str| -> Result<u32, CoreError> {
        match usage.pointer(pointer) {
            None | Some(Value::Null) => Ok(0),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| malformed(format!("usage{pointer} is {value}"))),
        }
    };
    Ok(Usage {
        prompt_tokens: count("/prompt_tokens")?,
        completion_tokens: count("/completion_tokens")?,
        cached_tokens: count("/prompt_tokens_details/cached_tokens")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(events: &[GenerateEvent]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match &e.event {
                Some(generate_event::Event::Delta(d)) => Some(d.text.clone()),
                _ => None,
            })
            .collect()
    }

    fn done_of(events: &[GenerateEvent]) -> GenerateDone {
        match events.last().and_then(|e| e.event.clone()) {
            Some(generate_event::Event::Done(done)) => done,
            other => panic!("not Done: {other:?}"),
        }
    }

    #[test]
    fn deltas_then_usage_then_done() {
        let mut reader = ChunkReader::new(Instant::now(), 9);
        let mut events = Vec::new();
        for data in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"William"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" Shakespeare."},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
            "[DONE]",
        ] {
            events.extend(reader.read(data).expect("valid"));
        }
        assert_eq!(texts(&events), ["William", " Shakespeare."]);
        let done = done_of(&events);
        assert_eq!(
            (done.finish_reason.as_str(), done.prompt_tokens, done.completion_tokens),
            ("stop", 12, 3)
        );
        assert!(reader.finished());
        assert!(reader.read("{}").is_err(), "nothing may follow [DONE]");
    }

    #[test]
    fn without_usage_the_deltas_are_counted() {
        let mut reader = ChunkReader::new(Instant::now(), 9);
        reader.read(r#"{"choices":[{"delta":{"content":"a"}}]}"#).expect("valid");
        reader.read(r#"{"choices":[{"delta":{"content":"b"},"finish_reason":"length"}]}"#).expect("valid");
        let done = done_of(&reader.read("[DONE]").expect("valid"));
        assert_eq!(
            (done.finish_reason.as_str(), done.prompt_tokens, done.completion_tokens),
            ("length", 9, 2)
        );
    }

    #[test]
    fn a_stream_that_says_something_else_is_an_error() {
        for (chunks, says) in [
            (vec!["not json"], "not JSON"),
            (vec![r#"{"error":{"message":"overloaded"}}"#], "overloaded"),
            (vec![r#"{"choices":[{"delta":{"content":"a"}}]}"#, "[DONE]"], "before a finish reason"),
            (vec![r#"{"choices":[{"delta":{"content":7}}]}"#], "delta content"),
            (vec![r#"{"choices":{}}"#], "choices is"),
            (vec![r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#], "usage"),
        ] {
            let mut reader = ChunkReader::new(Instant::now(), 1);
            let error = chunks.iter().map(|c| reader.read(c)).find_map(Result::err).expect(says);
            assert!(error.to_string().contains(says), "{says}: {error}");
        }
    }
}
