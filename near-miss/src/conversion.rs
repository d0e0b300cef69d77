//! Unit conversions, whatever their frame: `how many km are in a mile`, `1 mile in km`, `a mile equals
//! how many km`, `convert a mile to km` and `1 mile = ? km` all convert one mile into kilometres, while
//! `how many miles are in a km` converts the other way. Word alignment cannot see this: the frames use
//! different words (`many`, `equals`, `convert`: [`Tag::ConversionFrame`] and function words) and put
//! the two units in either order.

use crate::lexicon::Lexicon;
use crate::vocabulary::{self, Tag};
use crate::words::{Word, WordKind};

/// What a conversion question asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// The quantity converted (`1` when none is written).
    pub amount: String,
    /// The unit converted from.
    pub from: &'static str,
    /// The unit converted into.
    pub to: &'static str,
    /// The question's other content words, as their first dictionary form, sorted (`usa` in `how many
    /// liters in a US gallon`).
    pub rest: Vec<String>,
}

/// The conversion `words` ask for: exactly two units of measure, at most one quantity, and it before
/// the unit converted from (the other unit not between them). `how many U1 ... U2` converts U2 into U1; otherwise the first unit is
/// converted into the second (`U1 in U2`, `U1 equals how many U2`, `convert U1 to U2`), except in `U1
/// per U2`, which counts U1 in one U2.
pub fn conversion(words: &[Word], lexicon: &Lexicon) -> Option<Conversion> {
    let content: Vec<(usize, &Word)> = words
        .iter()
        .enumerate()
        .filter(|(_, w)| matches!(w.kind, WordKind::Content | WordKind::Number(_)))
        .collect();
    let units: Vec<(usize, &'static str)> = content
        .iter()
        .filter(|(_, w)| w.kind == WordKind::Content)
        .filter_map(|(at, w)| Some((*at, lexicon.unit(&w.text)?)))
        .collect();
    let [(first_at, first), (second_at, second)] = units[..] else { return None };
    if first == second {
        return None;
    }
    let many_before = |at: usize| {
        at.checked_sub(1).and_then(|i| words.get(i)).is_some_and(|w| w.text == "many" || w.text == "much")
    };
    let per = second_at == first_at + 2 && words[first_at + 1].text == "per";
    let (from_at, from, to_at, to) = if many_before(first_at) || per {
        (second_at, second, first_at, first)
    } else {
        (first_at, first, second_at, second)
    };
    let numbers: Vec<(usize, &str)> = content
        .iter()
        .filter_map(|(at, w)| match &w.kind {
            WordKind::Number(n) => Some((*at, n.as_str())),
            _ => None,
        })
        .collect();
    let amount = match numbers[..] {
        [] => "1".to_string(),
        [(at, n)] if at < from_at && !(at < to_at && to_at < from_at) => n.to_string(),
        _ => return None,
    };
    let mut rest: Vec<String> = content
        .iter()
        .filter(|(at, w)| {
            *at != first_at
                && *at != second_at
                && w.kind == WordKind::Content
                && !vocabulary::is(&w.text, Tag::ConversionFrame)
        })
        .map(|(_, w)| lexicon.lemmas(&w.text).pop().unwrap_or_else(|| w.text.clone()))
        .collect();
    rest.sort();
    Some(Conversion { amount, from, to, rest })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::words;

    fn of(text: &str) -> Option<Conversion> {
        conversion(&words(text), Lexicon::get())
    }

    #[test]
    fn every_frame_of_one_conversion_reads_the_same() {
        let mile_in_km = of("How many kilometers are in a mile?").expect("a conversion");
        assert_eq!((mile_in_km.amount.as_str(), mile_in_km.from, mile_in_km.to), ("1", "mile", "kilometer"));
        for frame in
            ["1 mile in km", "a mile equals how many km", "convert a mile to kilometres", "1 mile = ? km"]
        {
            assert_eq!(of(frame).as_ref(), Some(&mile_in_km), "{frame}");
        }
        assert_eq!(of("What is 90 minutes in hours?"), of("how many hours is ninety minutes"));
        assert_eq!(of("How many liters are in a US gallon?"), of("convert 1 US gallon to litres"));
        assert_eq!(of("How many ounces in a pound?"), of("oz per lb?"));
        assert_eq!(of("What is 350 degrees Fahrenheit in Celsius?"), of("350 F to C please"));
    }

    #[test]
    fn direction_amount_and_other_words_tell_conversions_apart() {
        assert_ne!(of("How many kilometers are in a mile?"), of("How many miles are in a kilometer?"));
        assert_ne!(of("10 miles in km"), of("10 km in miles"));
        assert_ne!(of("10 miles in km"), of("20 miles in km"));
        assert_ne!(of("How many liters are in a US gallon?"), of("How many liters are in a UK gallon?"));
        assert_eq!(of("How many feet are in a foot?"), None, "one unit is no conversion");
        assert_eq!(of("How far is 5 km in miles from 10 km?"), None, "two quantities");
        assert_eq!(of("What is the capital of France?"), None);
    }
}
