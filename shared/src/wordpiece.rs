//! BERT's uncased WordPiece tokenizer (all-MiniLM-L6-v2's), without the `tokenizers` crate, so that the
//! edge (wasm) and the regional tier split text into the same vocabulary ids.
//!
//! As `BertNormalizer` + `BertPreTokenizer` + `WordPiece` in the model's `tokenizer.json`:
//! - normalize: drop control characters and U+FFFD, map whitespace to spaces, put spaces around CJK
//!   ideographs, lowercase, and strip accents (canonical decomposition, then drop nonspacing marks);
//! - pre-tokenize: split on whitespace, and make every punctuation character a word of its own;
//! - WordPiece: greedy longest match from the start of each word, later pieces prefixed `##`; a word
//!   longer than 100 characters, or one a piece cannot cover, becomes `[UNK]`.

use std::collections::HashMap;

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization as _;

/// Longest word WordPiece splits.
const MAX_WORD_CHARS: usize = 100;

/// A WordPiece vocabulary.
#[derive(Clone, Debug)]
pub struct WordPiece {
    ids: HashMap<String, u32>,
    unk: u32,
    cls: u32,
    sep: u32,
}

impl WordPiece {
    /// Reads `vocab.txt` (one token per line, the line number is its id).
    pub fn from_vocab(text: &str) -> Result<Self, String> {
        let ids: HashMap<String, u32> =
            text.lines().enumerate().map(|(i, token)| (token.to_owned(), i as u32)).collect();
        let id =
            |token: &str| ids.get(token).copied().ok_or_else(|| format!("the vocabulary has no {token}"));
        Ok(Self { unk: id("[UNK]")?, cls: id("[CLS]")?, sep: id("[SEP]")?, ids })
    }

    /// Tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the vocabulary is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The ids of `text`, without `[CLS]`/`[SEP]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for word in pre_tokenize(&normalize(text)) {
            self.push_word(&word, &mut out);
        }
        out
    }

    /// The ids of `text` between `[CLS]` and `[SEP]`, as the model sees it.
    pub fn encode_with_specials(&self, text: &str) -> Vec<u32> {
        let mut out = vec![self.cls];
        out.extend(self.encode(text));
        out.push(self.sep);
        out
    }

    fn push_word(&self, word: &str, out: &mut Vec<u32>) {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while start < end {
                let from = chars[start].0;
                let to = chars.get(end).map_or(word.len(), |c| c.0);
                let piece = &word[from..to];
                let id = if start > 0 { self.ids.get(&format!("##{piece}")) } else { self.ids.get(piece) };
                if let Some(&id) = id {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => pieces.push(id),
                None => {
                    out.push(self.unk);
                    return;
                }
            }
            start = end;
        }
        out.extend(pieces);
    }
}

/// BERT's uncased normalization; see the module docs.
pub fn normalize(text: &str) -> String {
    let mut cleaned = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\0' || c == '\u{fffd}' || is_control(c) {
            continue;
        }
        if is_cjk(c) {
            cleaned.push(' ');
            cleaned.push(c);
            cleaned.push(' ');
        } else if c.is_whitespace() {
            cleaned.push(' ');
        } else {
            cleaned.push(c);
        }
    }
    cleaned.to_lowercase().nfd().filter(|c| !is_combining_mark(*c)).collect()
}

/// Words: split on whitespace, each punctuation character a word of its own.
pub fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for chunk in text.split_whitespace() {
        let mut word = String::new();
        for c in chunk.chars() {
            if is_punctuation(c) {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                words.push(c.to_string());
            } else {
                word.push(c);
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words
}

/// Control characters as BERT counts them (tab, newline and carriage return are whitespace instead).
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_control()
}

/// ASCII symbols count as punctuation (as in BERT), besides Unicode's punctuation.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || (!c.is_ascii() && unicode_punctuation(c))
}

/// Unicode's general category P* for the common non-ASCII ranges (general punctuation, CJK symbols,
/// fullwidth forms, Latin-1 punctuation).
fn unicode_punctuation(c: char) -> bool {
    matches!(c as u32,
        0x00A1 | 0x00A7 | 0x00AB | 0x00B6 | 0x00B7 | 0x00BB | 0x00BF
        | 0x2010..=0x2027 | 0x2030..=0x2043 | 0x2045..=0x2051 | 0x2053..=0x205E
        | 0x3001..=0x3003 | 0x3008..=0x3011 | 0x3014..=0x301F
        | 0xFF01..=0xFF03 | 0xFF05..=0xFF0A | 0xFF0C..=0xFF0F | 0xFF1A | 0xFF1B | 0xFF1F | 0xFF20
        | 0xFF3B..=0xFF3D | 0xFF3F | 0xFF5B | 0xFF5D | 0xFF5F..=0xFF65)
}

/// CJK unified ideographs (the blocks BERT puts spaces around).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> WordPiece {
        let tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "hello", "!", "cafe", ","];
        WordPiece::from_vocab(&tokens.join("\n")).expect("vocab")
    }

    #[test]
    fn splits_words_into_the_longest_pieces_and_marks_the_unknown() {
        let wp = vocab();
        assert_eq!(wp.encode("unaffable"), vec![4, 5, 6]);
        assert_eq!(wp.encode("Hello, CAFÉ!"), vec![7, 10, 9, 8]);
        assert_eq!(wp.encode("unknownword"), vec![1]);
        assert_eq!(wp.encode_with_specials("hello"), vec![2, 7, 3]);
    }

    #[test]
    fn normalizes_as_bert_does() {
        assert_eq!(normalize("Héllo\tWörld\u{0}"), "hello world");
        assert_eq!(pre_tokenize("don't stop."), vec!["don", "'", "t", "stop", "."]);
        assert_eq!(normalize("中文"), " 中  文 ");
    }
}
