//! Server-sent events as an OpenAI-compatible server streams them: bytes in, whole events' `data`
//! out. An event ends at a blank line; its `data:` lines join with newlines; comments (`:`) and other
//! fields are skipped. Lines may end in `\n` or `\r\n` and may arrive split anywhere.

/// The most bytes one event may take before the stream counts as malformed.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Decodes a stream of server-sent events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The current event's data lines so far.
    data: Option<String>,
}

/// A stream that is not server-sent events.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event longer than [`MAX_EVENT_BYTES`].
    #[error("an event longer than {MAX_EVENT_BYTES} bytes")]
    TooLong,
    /// A line that is not UTF-8.
    #[error("a line that is not UTF-8")]
    NotUtf8,
}

impl SseDecoder {
    /// Takes the next bytes; returns the data of each event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                if self.line.len() + self.data.as_ref().map_or(0, String::len) > MAX_EVENT_BYTES {
                    return Err(SseError::TooLong);
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
            if line.is_empty() {
                events.extend(self.data.take());
            } else if let Some(value) = line.strip_prefix("data:") {
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_blank_lines_however_the_bytes_are_split() {
        let stream =
            b": a comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let mut events = decoder.push(&stream[..split]).expect("valid");
            events.extend(decoder.push(&stream[split..]).expect("valid"));
            assert_eq!(events, ["{\"a\":1}", "one\ntwo", "[DONE]"], "split at {split}");
        }
    }

    #[test]
    fn an_unending_event_and_broken_text_are_errors() {
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(&vec![b'x'; MAX_EVENT_BYTES + 1]), Err(SseError::TooLong));
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"data: \xff\xfe\n"), Err(SseError::NotUtf8));
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"data: no blank line yet\n"), Ok(Vec::new()));
    }
}
