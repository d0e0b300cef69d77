//! Incremental detokenization: token bytes in, complete UTF-8 text out.
//!
//! A byte-level BPE token can end in the middle of a multi-byte character (emoji are often split over
//! two or three tokens), so bytes are held until they form whole characters. Nothing is ever emitted
//! as a replacement character because of where a token boundary fell.

/// Accumulates token bytes and releases the longest complete UTF-8 prefix.
#[derive(Debug, Default)]
pub struct IncrementalDecoder {
    /// Bytes of an unfinished character, waiting for the tokens that complete it.
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token's bytes; returns the text that is now complete (possibly empty).
    ///
    /// Bytes that can never be valid UTF-8 (the model may generate any byte sequence) become
    /// U+FFFD; an incomplete sequence at the end is kept for the next token.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Invalid bytes: replace them and go on.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        // An unfinished character at the end: keep it.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Bytes held back for an unfinished character. Dropped when generation stops mid-character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_split_characters_until_complete() {
        let crab = "🦀".as_bytes();
        let mut d = IncrementalDecoder::new();
        assert_eq!(d.push(b"a "), "a ");
        assert_eq!(d.push(&crab[..1]), "");
        assert_eq!(d.push(&crab[1..3]), "");
        assert_eq!(d.push(&[crab[3], b'!']), "🦀!");
        assert!(d.pending().is_empty());
    }

    #[test]
    fn replaces_invalid_bytes_but_keeps_an_unfinished_tail() {
        let mut d = IncrementalDecoder::new();
        assert_eq!(d.push(&[b'x', 0xFF, b'y', 0xE6]), "x\u{FFFD}y");
        assert_eq!(d.pending(), &[0xE6]);
        assert_eq!(d.push(&[0x9D, 0xB1]), "東");
    }
}
