//! Numbers written in digits or in words, normalized so that two texts compare them alike: `1,000` and
//! `thousand` are `1000`, `3rd` and `third` are `3rd`, `ninety-one` is `91`, `two thirds` is `2/3`,
//! `20 percent` is `20%`. A number word's place in its list is its value.

use crate::vocabulary::{self, Tag};

/// The normalized quantity a word stands for, if it is one.
pub(crate) fn number(word: &str) -> Option<String> {
    let digits: String = word.chars().filter(|&c| c != ',').collect();
    if digits.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        // `3rd`, `10th`, `2nd` -> ordinal; `5k`, `10kg`, `3.5`, `24/7` stay as written.
        for suffix in ["st", "nd", "rd", "th"] {
            if let Some(n) = digits.strip_suffix(suffix) {
                if n.chars().all(|c| c.is_ascii_digit()) {
                    return Some(format!("{n}th"));
                }
            }
        }
        return Some(digits);
    }
    let cardinal = CARDINALS.iter().position(|&w| w == word).map(|n| n.to_string());
    let ordinal = ORDINALS.iter().position(|&w| w == word).map(|n| format!("{}th", n + 1));
    let large = match word {
        "hundred" => Some("100".to_string()),
        "thousand" => Some("1000".to_string()),
        "million" => Some("1000000".to_string()),
        "billion" => Some("1000000000".to_string()),
        "dozen" => Some("12".to_string()),
        "half" => Some("0.5".to_string()),
        "twice" | "double" => Some("2x".to_string()),
        "triple" => Some("3x".to_string()),
        _ => None,
    };
    cardinal.or(ordinal).or(large)
}

/// Numbers written in several words become one: `ninety-one` and `ninety one` are `91`, `two and a
/// half` is `2.5`, `one third` and `two thirds` are `1/3` and `2/3`.
pub(crate) fn join_number_words(pieces: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    let mut i = 0;
    while i < pieces.len() {
        let piece = &pieces[i];
        let tens = TENS.iter().position(|&w| w == piece).map(|k| 20 + 10 * k as u64);
        let unit = pieces.get(i + 1).and_then(|next| CARDINALS[1..10].iter().position(|&w| w == next));
        if let (Some(tens), Some(unit)) = (tens, unit) {
            out.push((tens + unit as u64 + 1).to_string());
            i += 2;
            continue;
        }
        let whole = number(piece).filter(|n| n.chars().all(|c| c.is_ascii_digit()));
        if let (Some(whole), Some(parts)) = (&whole, pieces.get(i + 1).and_then(|next| fraction_of(next))) {
            out.push(format!("{whole}/{parts}"));
            i += 2;
            continue;
        }
        let and_a_half = pieces.get(i + 1..i + 4).is_some_and(|rest| rest == ["and", "a", "half"]);
        if let (true, Some(whole)) = (and_a_half, &whole) {
            out.push(format!("{whole}.5"));
            i += 4;
            continue;
        }
        out.push(match tens {
            Some(tens) => tens.to_string(),
            None => piece.clone(),
        });
        i += 1;
    }
    out
}

/// The parts a fraction word divides into (`third` and `thirds`: 3, `quarter`: 4, `half`: 2);
/// `second` is left alone, since `1 second` is a time.
fn fraction_of(word: &str) -> Option<u32> {
    let singular = word.strip_suffix('s').unwrap_or(word);
    match singular {
        "half" | "halve" => Some(2),
        "quarter" => Some(4),
        "second" => None,
        _ => ORDINALS.iter().position(|&w| w == singular).map(|n| n as u32 + 1).filter(|&n| n >= 3),
    }
}

/// `20 percent` and `20%` are one quantity, `20%`, which is not the plain `20` of `20 is what
/// percent of 80`.
pub(crate) fn join_percents(pieces: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let quantity = out.last().and_then(|last| number(last)).filter(|n| !n.ends_with('%'));
        if let (Some(n), true) = (quantity, vocabulary::is(&piece, Tag::Percent)) {
            if let Some(last) = out.last_mut() {
                *last = format!("{n}%");
            }
            continue;
        }
        out.push(if piece == "%" { "percent".into() } else { piece });
    }
    out
}

/// Multiples of ten from twenty on.
const TENS: [&str; 8] = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];

/// Cardinal numbers in words, each at its value.
const CARDINALS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// Ordinal numbers in words, each at its value less one.
pub(crate) const ORDINALS: [&str; 10] =
    ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"];
