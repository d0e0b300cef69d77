//! Reads a chat or text completion event stream as it passes through, to learn what the client was
//! sent.
//!
//! The edge passes the regional tier's server-sent events to the client byte for byte; this reader sees
//! the same bytes and keeps the answer's text and finish reason, so that the edge fills its cache only
//! with exactly what the client received, and only when the stream ended with `data: [DONE]`.

use serde::Deserialize;
use shared::openai::Delta;

/// Largest incomplete event kept while waiting for its end; a stream that exceeds it is not cached.
const MAX_PENDING_BYTES: usize = 1 << 20;

/// The answer a complete stream carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamedAnswer {
    /// The concatenated content deltas.
    pub content: String,
    /// The finish reason of the last choice chunk.
    pub finish_reason: String,
}

/// Incremental reader of `data: ...\n\n` events.
#[derive(Debug, Default)]
pub struct SseReader {
    /// Bytes of the event not yet terminated by a blank line (carriage returns dropped).
    pending: Vec<u8>,
    /// Text so far.
    content: String,
    /// Finish reason, once a chunk carried one.
    finish_reason: Option<String>,
    /// Whether `data: [DONE]` was seen.
    done: bool,
    /// Set when the stream is not one this reader can vouch for (bad chunk, data after `[DONE]`, too big).
    broken: bool,
}

impl SseReader {
    /// Feeds the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.broken {
            return;
        }
        // SSE lines may end in CRLF; JSON escapes every control character, so a CR is only ever a line end.
        self.pending.extend(bytes.iter().copied().filter(|&b| b != b'\r'));
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            self.event(&event[..end]);
        }
        if self.pending.len() > MAX_PENDING_BYTES {
            self.broken = true;
        }
    }

    /// The answer, if the stream was complete and well formed.
    pub fn finish(self) -> Option<StreamedAnswer> {
        let complete = self.done && !self.broken && self.pending.iter().all(u8::is_ascii_whitespace);
        complete.then_some(())?;
        Some(StreamedAnswer { content: self.content, finish_reason: self.finish_reason? })
    }

    fn event(&mut self, event: &[u8]) {
        let Ok(text) = std::str::from_utf8(event) else {
            self.broken = true;
            return;
        };
        // Per the SSE format, the data lines of one event are joined with newlines; other fields
        // (`event:`, `id:`, comments) carry nothing for a chat completion.
        let data: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            return;
        }
        let data = data.join("\n");
        if self.done {
            self.broken = true;
        } else if data.trim() == "[DONE]" {
            self.done = true;
        } else {
            match serde_json::from_str::<Chunk>(&data) {
                Ok(chunk) => {
                    for choice in chunk.choices.iter().filter(|c| c.index == 0) {
                        let delta = choice.delta.as_ref().and_then(|d| d.content.as_ref());
                        if let Some(text) = delta.or(choice.text.as_ref()) {
                            self.content.push_str(text);
                        }
                        if let Some(reason) = &choice.finish_reason {
                            self.finish_reason = Some(reason.clone());
                        }
                    }
                }
                Err(_) => self.broken = true,
            }
        }
    }
}

/// One chunk of either API: a chat chunk's choices carry a `delta`, a text completion's a `text`.
#[derive(Deserialize)]
struct Chunk {
    choices: Vec<ChunkChoice>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    index: u32,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::completion::CachedCompletion;

    fn entry() -> CachedCompletion {
        let content = "Paris is the capital of France.\nIt is \"big\".".to_owned();
        CachedCompletion {
            prompt_tokens: 10,
            completion_tokens: 7,
            created_ms: 1_000_000,
            ttl_s: 60,
            ..CachedCompletion::example(format!("v1:{}", "ab".repeat(32)), content)
        }
    }

    fn read_in_pieces(stream: &[u8], piece: usize) -> Option<StreamedAnswer> {
        let mut reader = SseReader::default();
        for chunk in stream.chunks(piece) {
            reader.feed(chunk);
        }
        reader.finish()
    }

    #[test]
    fn recovers_the_answer_however_the_bytes_are_split() {
        let e = entry();
        let sse = e.to_sse(false, 1);
        for piece in [1, 2, 7, 64, sse.len()] {
            let answer = read_in_pieces(sse.as_bytes(), piece).expect("complete stream");
            assert_eq!(
                answer,
                StreamedAnswer { content: e.content.clone(), finish_reason: "stop".into() },
                "{piece}"
            );
        }
        let crlf = sse.replace('\n', "\r\n");
        assert_eq!(read_in_pieces(crlf.as_bytes(), 5).map(|a| a.content), Some(e.content));
    }

    #[test]
    fn a_text_completion_stream_reads_the_same_way() {
        use shared::completion::Rendering;
        use shared::model_spec::ModelApi;
        use shared::openai::Delivery;
        let e = entry();
        let rendering = Rendering {
            api: ModelApi::Completions,
            echo: None,
            delivery: Delivery::Stream { usage: true },
            copies: 1,
        };
        let sse = e.render(rendering);
        assert!(sse.contains("text_completion"), "{sse}");
        let answer = read_in_pieces(sse.as_bytes(), 5).expect("complete stream");
        assert_eq!(answer, StreamedAnswer { content: e.content.clone(), finish_reason: "stop".into() });
    }

    #[test]
    fn incomplete_or_malformed_streams_give_nothing() {
        let sse = entry().to_sse(true, 1);
        let without_done = sse.trim_end_matches(shared::openai::SSE_DONE);
        assert_eq!(read_in_pieces(without_done.as_bytes(), 9), None);
        let cut = &sse[..sse.len() / 2];
        assert_eq!(read_in_pieces(cut.as_bytes(), 9), None);
        let garbage = format!("data: {{not json}}\n\n{sse}");
        assert_eq!(read_in_pieces(garbage.as_bytes(), 9), None);
        let after_done = format!("{sse}data: {{}}\n\n");
        assert_eq!(read_in_pieces(after_done.as_bytes(), 9), None);
        assert_eq!(read_in_pieces(b"data: [DONE]\n\n", 3), None, "no finish reason");
    }
}
