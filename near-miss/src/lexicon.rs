//! The verifier's lexicon: WordNet 3.0 synonyms, antonyms, irregular forms and lemmas, bounded by
//! all-MiniLM-L6-v2's vocabulary (`near-miss/data/lexicon.tsv`, built by `scripts/build-lexicon.py`
//! and compiled in, so the edge worker carries the same lexicon as the regional nodes).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use crate::equivalents;
use crate::vocabulary::{self, Tag};

/// The lexicon file, as `scripts/build-lexicon.py` writes it.
const LEXICON_TSV: &str = include_str!("../data/lexicon.tsv");

/// Prefixes that negate or reverse a word (`illegal`, `unsafe`, `disable`, `nonzero`, `decompress`).
const NEGATIVE_PREFIXES: [&str; 8] = ["un", "in", "im", "il", "ir", "dis", "non", "de"];

/// Prefixes that make opposites of one stem (`encode` / `decode`, `import` / `export`,
/// `upload` / `download`, `include` / `exclude`, `input` / `output`), among them the Greek and
/// Latin pairs of science words (`hyperthyroidism` / `hypothyroidism`, `intracellular` /
/// `intercellular`, `endothermic` / `exothermic`), which read as one word misspelled otherwise.
const OPPOSITE_PREFIXES: [(&str, &str); 16] = [
    ("en", "de"),
    ("in", "de"),
    ("im", "ex"),
    ("in", "ex"),
    ("up", "down"),
    ("in", "out"),
    ("pre", "post"),
    ("over", "under"),
    ("hyper", "hypo"),
    ("super", "sub"),
    ("inter", "intra"),
    ("micro", "macro"),
    ("endo", "exo"),
    ("homo", "hetero"),
    ("ana", "cata"),
    ("max", "min"),
];

/// Words and their relations.
#[derive(Debug, Default)]
pub struct Lexicon {
    /// Each word's synsets (indices into the file's `s` lines).
    synsets: HashMap<&'static str, Vec<u32>>,
    /// Antonym pairs, each stored in both orders.
    antonyms: HashSet<(&'static str, &'static str)>,
    /// Derivationally related pairs (`important` / `importance`), each stored in both orders.
    derived: HashSet<(&'static str, &'static str)>,
    /// Irregular inflection -> lemma.
    irregular: HashMap<&'static str, &'static str>,
    /// Words that are lemmas.
    lemmas: HashSet<&'static str>,
}

impl Lexicon {
    /// The compiled-in lexicon, parsed once.
    pub fn get() -> &'static Lexicon {
        static LEXICON: OnceLock<Lexicon> = OnceLock::new();
        LEXICON.get_or_init(|| Lexicon::parse(LEXICON_TSV))
    }

    /// Parses the file's format; lines it does not know are skipped.
    pub fn parse(text: &'static str) -> Self {
        let mut lexicon = Lexicon::default();
        let mut next_synset = 0u32;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((tag, rest)) = line.split_once('\t') else { continue };
            let words: Vec<&'static str> = rest.split(' ').filter(|w| !w.is_empty()).collect();
            match (tag, words.as_slice()) {
                ("s", synset) => {
                    for word in synset {
                        lexicon.synsets.entry(word).or_default().push(next_synset);
                    }
                    next_synset += 1;
                }
                ("a", [a, b]) => {
                    lexicon.antonyms.insert((a, b));
                    lexicon.antonyms.insert((b, a));
                }
                ("d", [a, b]) => {
                    lexicon.derived.insert((a, b));
                    lexicon.derived.insert((b, a));
                }
                ("x", [form, lemma]) => {
                    lexicon.irregular.insert(form, lemma);
                }
                ("l", lemmas) => lexicon.lemmas.extend(lemmas.iter().copied()),
                _ => {}
            }
        }
        lexicon
    }

    /// The dictionary forms a lowercase word may have: itself, its irregular lemma (`went` ->
    /// `go`), and every lemma WordNet's suffix rules give (`tested` -> `test`, `files` -> `file`,
    /// `running` -> `run`). A word like `tested` is a lemma itself and an inflection of `test`,
    /// so both are kept.
    pub fn lemmas(&self, word: &str) -> Vec<String> {
        let mut forms = vec![word.to_string()];
        if let Some(lemma) = self.irregular.get(word) {
            forms.push(lemma.to_string());
        }
        if word.len() <= 3 {
            return forms;
        }
        for (suffix, replacement) in DETACHMENTS {
            let Some(stem) = word.strip_suffix(suffix) else { continue };
            let candidate = format!("{stem}{replacement}");
            if candidate.len() >= 2 && self.lemmas.contains(candidate.as_str()) {
                forms.push(candidate);
            }
            // A doubled final consonant: `running` -> `runn` -> `run`.
            let bytes = stem.as_bytes();
            if replacement.is_empty() && bytes.len() >= 3 && bytes[bytes.len() - 1] == bytes[bytes.len() - 2]
            {
                let single = &stem[..stem.len() - 1];
                if self.lemmas.contains(single) {
                    forms.push(single.to_string());
                }
            }
        }
        forms.dedup();
        forms
    }

    /// Whether a word is in the lexicon at all.
    pub fn knows(&self, word: &str) -> bool {
        self.lemmas.contains(word) || self.irregular.contains_key(word)
    }

    /// Whether two lemmas are forms of one concept in another part of speech (`important` /
    /// `importance`, `generate` / `generation`).
    pub fn derived(&self, a: &str, b: &str) -> bool {
        self.derived.contains(&(a, b))
    }

    /// Whether two lemmas share a sense. Two different units of measure never do, though WordNet
    /// puts `minute` and `second` in one sense (a short time).
    pub fn synonyms(&self, a: &str, b: &str) -> bool {
        if a != b && vocabulary::is(a, Tag::Unit) && vocabulary::is(b, Tag::Unit) {
            return false;
        }
        match (self.synsets.get(a), self.synsets.get(b)) {
            (Some(x), Some(y)) => x.iter().any(|s| y.contains(s)),
            _ => false,
        }
    }

    /// The unit of measure `word` names (`km`, `kilometres` and `kilometer` are `kilometer`), if any:
    /// the first of its dictionary forms that is a unit ([`Tag::Unit`]) or a name of one.
    pub fn unit(&self, word: &str) -> Option<&'static str> {
        let unit = |name: &str| {
            vocabulary::entry(name).filter(|(_, tags)| tags.contains(&Tag::Unit)).map(|(u, _)| u)
        };
        self.lemmas(word)
            .iter()
            .find_map(|form| unit(form).or_else(|| equivalents::group_name(form).and_then(unit)))
    }

    /// Whether two lemmas are opposites: a WordNet antonym pair, or one is the other with a
    /// negative prefix (`legal` / `illegal`, `able` / `unable`).
    pub fn antonyms(&self, a: &str, b: &str) -> bool {
        if self.antonyms.contains(&(a, b)) {
            return true;
        }
        let prefixed = |long: &str, short: &str| {
            NEGATIVE_PREFIXES.iter().any(|p| long.strip_prefix(p).is_some_and(|rest| rest == short))
        };
        let opposite = |x: &str, y: &str| {
            OPPOSITE_PREFIXES.iter().any(|(p, q)| match (x.strip_prefix(p), y.strip_prefix(q)) {
                (Some(s), Some(t)) => s == t && s.len() >= 3,
                _ => false,
            })
        };
        prefixed(a, b) || prefixed(b, a) || opposite(a, b) || opposite(b, a)
    }
}

/// WordNet's detachment rules (nouns, verbs, adjectives), plus adverbs in `-ly`.
const DETACHMENTS: [(&str, &str); 20] = [
    ("ies", "y"),
    ("ses", "s"),
    ("xes", "x"),
    ("zes", "z"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("es", "e"),
    ("es", ""),
    ("s", ""),
    ("ed", "e"),
    ("ed", ""),
    ("ing", "e"),
    ("ing", ""),
    ("est", ""),
    ("est", "e"),
    ("er", ""),
    ("er", "e"),
    ("ily", "y"),
    ("ly", "le"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lemmas_come_from_wordnet_rules_and_exceptions() {
        let lexicon = Lexicon::get();
        assert!(lexicon.lemmas("files").contains(&"file".to_string()));
        assert!(lexicon.lemmas("running").contains(&"run".to_string()));
        assert!(lexicon.lemmas("went").contains(&"go".to_string()));
        assert!(lexicon.lemmas("quickly").contains(&"quick".to_string()));
        assert!(lexicon.lemmas("tested").contains(&"test".to_string()));
        assert_eq!(lexicon.lemmas("python"), ["python"]);
        assert!(lexicon.derived("importance", "important"));
    }

    #[test]
    fn antonyms_come_from_wordnet_and_negative_prefixes() {
        let lexicon = Lexicon::get();
        assert!(lexicon.antonyms("legal", "illegal"));
        assert!(lexicon.antonyms("increase", "decrease"));
        assert!(lexicon.antonyms("import", "export"));
        assert!(lexicon.antonyms("upload", "download"));
        assert!(lexicon.antonyms("decompress", "compress"));
        assert!(!lexicon.antonyms("legal", "lawful"));
    }

    #[test]
    fn a_unit_names_no_other_unit() {
        // `unit` prefers a form that is a unit to the unit its group names: the same answer as long as
        // no unit belongs to a group named by another.
        let lexicon = Lexicon::get();
        for unit in vocabulary::words_with(Tag::Unit) {
            assert_eq!(lexicon.unit(unit), Some(unit));
            let named = equivalents::group_name(unit);
            assert!(named.is_none_or(|name| name == unit || !vocabulary::is(name, Tag::Unit)), "{unit}");
        }
        assert_eq!(lexicon.unit("km"), Some("kilometer"));
        assert_eq!(lexicon.unit("kilometres"), Some("kilometer"));
        assert_eq!(lexicon.unit("python"), None);
    }

    #[test]
    fn synonyms_share_a_synset() {
        let lexicon = Lexicon::get();
        assert!(lexicon.synonyms("car", "automobile"));
        assert!(!lexicon.synonyms("python", "java"));
    }
}
