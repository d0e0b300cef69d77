//! Splits a question into the words the verifier compares: numbers, negators, relation markers,
//! function words and content words.
//!
//! The kinds come from [`crate::vocabulary`] and the numbers from `numbers.rs`; `first`, `list`,
//! `name` and `enumerate` change kind with their neighbours.

use crate::numbers::{join_number_words, join_percents, number};
use crate::vocabulary::{self, Tag};

/// What a word is to the verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WordKind {
    /// A quantity, normalized (`"1,000"` and `"thousand"` are `1000`; `"3rd"` and `"third"` are `3rd`).
    Number(String),
    /// A word that negates (`not`, `no`, `never`, `without`, ...; `n't` is split off as `not`).
    Negator,
    /// A preposition that orders a relation (`from`, `to`, `into`, `than`, `before`, `after`, `by`):
    /// the content word after it plays a role that must not swap.
    Marker,
    /// An article, pronoun, auxiliary, question word or politeness word: carries no content.
    Function,
    /// Anything else: the words whose meaning must be the same on both sides.
    Content,
}

/// One word of a text, lowercased, with its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word as written, lowercased (`"c++"`, `"node.js"`, `"3.5"`).
    pub text: String,
    /// What it is.
    pub kind: WordKind,
}

/// The words of `text`, in order.
pub fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let pieces: Vec<String> = raw_tokens(text)
        .iter()
        .enumerate()
        .map(|(i, raw)| lowercase(raw, i == 0))
        .flat_map(|raw| expand_contraction(&raw))
        .collect();
    for piece in join_percents(join_number_words(rewrite_phrases(pieces))) {
        let kind = classify(&piece);
        let text = if kind == WordKind::Marker { vocabulary::spelling(&piece).to_string() } else { piece };
        out.push(Word { text, kind });
    }
    mark_request_verb(&mut out);
    mark_first_as_adverb(&mut out);
    out
}

/// `first` with no determiner before it and no noun after it says when (`who first discovered
/// penicillin`, `invest or pay debt first`), not which one: a function word. `the first book`, `sum of
/// first 100 numbers` and `first aid` keep their ordinal. A word after it that ends in `-ed` is taken
/// for a verb.
fn mark_first_as_adverb(words: &mut [Word]) {
    for at in 0..words.len() {
        if words[at].text != "first" {
            continue;
        }
        let after_determiner =
            at.checked_sub(1).is_some_and(|b| vocabulary::is(&words[b].text, Tag::Determiner));
        let before_noun = words.get(at + 1).is_some_and(|next| match next.kind {
            WordKind::Number(_) => true,
            WordKind::Content => !next.text.ends_with("ed"),
            _ => false,
        });
        if !after_determiner && !before_noun {
            words[at].kind = WordKind::Function;
        }
    }
}

/// Makes the first word of an imperative a function word when it asks for an answer as `give` and
/// `tell` do ([`Tag::RequestVerb`]: `list the seven continents`, `name the largest ocean`); elsewhere
/// it is a noun (`a list on commas`, `the name of the largest ocean`).
fn mark_request_verb(words: &mut [Word]) {
    let Some(at) = words.iter().position(|w| !vocabulary::is(&w.text, Tag::BeforeImperative)) else {
        return;
    };
    let noun = words.get(at + 1).is_some_and(|next| next.text == "of" || next.text == "for");
    if vocabulary::is(&words[at].text, Tag::RequestVerb) && words[at].kind == WordKind::Content && !noun {
        words[at].kind = WordKind::Function;
    }
}

/// A token lowercased, except that `US` and `U.S.` in capitals name the country, not the pronoun `us`,
/// and a capital letter inside a sentence is a symbol (`from A to Z`, `plan B`), not the article.
fn lowercase(token: &str, first: bool) -> String {
    match token {
        "US" | "U.S" => "usa".into(),
        "A" if !first => as_symbol("a"),
        other => other.to_lowercase(),
    }
}

/// Replaces multiword names and quantities written in words by the word or digits that stand for
/// them ([`crate::equivalents`]): `new york city` is `nyc`, `half an hour` is `30 minutes`.
fn rewrite_phrases(pieces: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(pieces.len());
    let mut i = 0;
    while i < pieces.len() {
        let found = crate::equivalents::multiword_names_from(&pieces[i]).iter().find(|(phrase, _)| {
            pieces.len() - i >= phrase.len() && phrase.iter().zip(&pieces[i..]).all(|(p, w)| p == w)
        });
        match found {
            Some((phrase, with)) => {
                out.extend(with.iter().map(|w| w.to_string()));
                i += phrase.len();
            }
            None => {
                out.push(pieces[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// Splits on anything that cannot be inside a word. Kept inside: letters, digits, `+` and `#`
/// (`c++`, `c#`), an apostrophe between letters (`don't`), and `.`, `,`, `:` or `/` between two
/// alphanumerics (`node.js`, `3.5`, `1,000`, `10:30`, `24/7`). Hyphens split (`12-day` is `12 day`,
/// as it is when written apart), and so does a number from its unit (`10kg` is `10 kg`).
fn raw_tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, &c) in chars.iter().enumerate() {
        let between = |allowed: bool| {
            allowed
                && i > 0
                && chars[i - 1].is_alphanumeric()
                && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric())
        };
        // Looked for only around a symbol, so that splitting stays linear in the text.
        let after_digit =
            || chars[..i].iter().rev().find(|p| !p.is_whitespace()).is_some_and(char::is_ascii_digit);
        let before_digit =
            || chars[i + 1..].iter().find(|n| !n.is_whitespace()).is_some_and(char::is_ascii_digit);
        let symbol = match c {
            '%' if after_digit() => Some("%"),
            // `3-4` is as often a range as a difference; `3 - 4` is a difference.
            '-' if !chars.get(i + 1).is_some_and(|n| n.is_whitespace()) => None,
            _ => operator(c).filter(|_| after_digit() && before_digit()),
        };
        if let Some(symbol) = symbol {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            tokens.push(symbol.into());
            continue;
        }
        let keep = c.is_alphanumeric()
            || ((c == '+' || c == '#') && !current.is_empty())
            || between(c == '\'' || c == '’')
            || between(matches!(c, '.' | ',' | ':' | '/'));
        let unit_after_number = c.is_alphabetic()
            && current.chars().all(|d| d.is_ascii_digit() || d == '.' || d == ',')
            && !current.is_empty()
            && !is_ordinal_suffix(&chars[i..]);
        if keep && unit_after_number {
            tokens.push(std::mem::take(&mut current));
            start = i;
            current.push(c);
        } else if keep {
            if current.is_empty() {
                start = i;
            }
            current.push(if c == '’' { '\'' } else { c });
        } else if !current.is_empty() {
            let quoted = start > 0 && QUOTES.contains(&chars[start - 1]) && QUOTES.contains(&c);
            tokens.push(mentioned(std::mem::take(&mut current), quoted));
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// The word an arithmetic operator between two numbers is read as (`17 + 28` is `17 plus 28`).
fn operator(c: char) -> Option<&'static str> {
    match c {
        '+' => Some("plus"),
        '-' | '−' => Some("minus"),
        '*' | '×' => Some("times"),
        '÷' => Some("divided"),
        '^' => Some("power"),
        _ => None,
    }
}

/// Quotation marks around a word that is mentioned rather than used.
const QUOTES: [char; 6] = ['"', '\'', '`', '“', '”', '‘'];

/// A grammar word in quotes is the subject of the question (`a comma before "which"` / `... before
/// "that"`), so it is kept in its quotes, which make it a content word.
fn mentioned(token: String, quoted: bool) -> String {
    if !quoted {
        return token;
    }
    let lower = token.to_lowercase();
    let grammar =
        vocabulary::tags(&lower).iter().any(|t| matches!(t, Tag::Function | Tag::Marker | Tag::Negator));
    if grammar {
        as_symbol(&token)
    } else {
        token
    }
}

/// A word kept as a symbol: in quotes, which the vocabulary does not hold, so it is a content word that aligns only
/// with itself.
fn as_symbol(word: &str) -> String {
    format!("\"{word}\"")
}

/// Whether the letters at the start of `rest` are an ordinal's suffix (`3rd`, `10th`).
fn is_ordinal_suffix(rest: &[char]) -> bool {
    let letters: String = rest.iter().take_while(|c| c.is_alphabetic()).collect::<String>().to_lowercase();
    matches!(letters.as_str(), "st" | "nd" | "rd" | "th")
}

/// `don't` -> `do not`, `can't` -> `can not`, `it's` -> `it is`, `john's` -> `john`.
fn expand_contraction(token: &str) -> Vec<String> {
    let Some((stem, suffix)) = token.rsplit_once('\'') else { return vec![token.to_string()] };
    match suffix {
        "t" if stem.ends_with('n') => {
            let base = match stem {
                "can" => "can",
                "won" => "will",
                "shan" => "shall",
                _ => stem.strip_suffix('n').unwrap_or(stem),
            };
            vec![base.to_string(), "not".to_string()]
        }
        "s" | "" => vec![stem.to_string()],
        "re" => vec![stem.to_string(), "are".to_string()],
        "ve" => vec![stem.to_string(), "have".to_string()],
        "ll" => vec![stem.to_string(), "will".to_string()],
        "d" => vec![stem.to_string(), "would".to_string()],
        "m" => vec![stem.to_string(), "am".to_string()],
        _ => vec![token.to_string()],
    }
}

/// What a word is: a number, or what the vocabulary says it is (a negator before a marker before a
/// function word), or a content word.
fn classify(word: &str) -> WordKind {
    let word = vocabulary::spelling(word);
    if let Some(number) = number(word) {
        return WordKind::Number(number);
    }
    let tags = vocabulary::tags(word);
    if tags.contains(&Tag::Negator) {
        WordKind::Negator
    } else if tags.contains(&Tag::Marker) {
        WordKind::Marker
    } else if tags.contains(&Tag::Function) {
        WordKind::Function
    } else {
        WordKind::Content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(String, WordKind)> {
        words(text).into_iter().map(|w| (w.text, w.kind)).collect()
    }

    #[test]
    fn contractions_split_off_their_negation() {
        let w = kinds("I don't know; it can't, won't work");
        let texts: Vec<&str> = w.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(texts, ["i", "do", "not", "know", "it", "can", "not", "will", "not", "work"]);
        assert_eq!(w.iter().filter(|(_, k)| *k == WordKind::Negator).count(), 3);
    }

    #[test]
    fn numbers_are_normalized_whether_written_in_digits_or_words() {
        let number = |text: &str| match &words(text)[0].kind {
            WordKind::Number(n) => n.clone(),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(number("1,000"), number("thousand"));
        assert_eq!(number("3rd"), number("third"));
        assert_eq!(number("seven"), "7");
        assert_eq!(number("3.5"), "3.5");
    }

    #[test]
    fn operators_between_numbers_and_percents_are_words() {
        let texts: Vec<String> =
            words("17 + 28 - 3 * 2, 20 % of 5, 40 percent").into_iter().map(|w| w.text).collect();
        assert_eq!(texts, ["17", "plus", "28", "minus", "3", "times", "2", "20%", "of", "5", "40%"]);
        let texts: Vec<String> = words("a 12-day trip, pages 3-4").into_iter().map(|w| w.text).collect();
        assert_eq!(texts, ["a", "12", "day", "trip", "pages", "3", "4"]);
    }

    #[test]
    fn technical_names_stay_whole() {
        let texts: Vec<String> =
            words("Use C++, C# or node.js (v1.2)?").into_iter().map(|w| w.text).collect();
        assert_eq!(texts, ["use", "c++", "c#", "or", "node.js", "v1.2"]);
        let texts: Vec<String> =
            words("a 12-day trip of 10kg, the 3rd").into_iter().map(|w| w.text).collect();
        assert_eq!(texts, ["a", "12", "day", "trip", "of", "10", "kg", "the", "3rd"]);
    }
}
