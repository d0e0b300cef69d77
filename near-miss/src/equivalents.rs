//! Words WordNet does not pair but everyday questions use interchangeably: abbreviations and short
//! names (`js` / `javascript`, `k8s` / `kubernetes`, `tbsp` / `tablespoon`), an author and what they
//! wrote, and phrases that state a quantity in words (`half an hour` is `30 minutes`).
//!
//! Each group is one concept; a group never joins two things that could answer differently.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::vocabulary;

/// Groups of interchangeable words, each compared after lemmatizing (`teaspoons` is `teaspoon`).
const GROUPS: &[&[&str]] = &[
    // Programming languages, tools and formats.
    &["javascript", "js"],
    &["typescript", "ts"],
    &["python", "py", "python3"],
    &["golang", "go"],
    &["c#", "csharp"],
    &["c++", "cpp"],
    &["kubernetes", "k8s", "kube"],
    &["postgresql", "postgres", "psql"],
    &["mongodb", "mongo"],
    &["node", "nodejs", "node.js"],
    &["react", "reactjs", "react.js"],
    &["vue", "vuejs", "vue.js"],
    &["regex", "regexp", "regular expression"],
    &["database", "db"],
    &["integer", "int"],
    &["string", "str"],
    &["dictionary", "dict"],
    &["temperature", "temp"],
    &["refrigerator", "fridge"],
    &["sqrt", "square root"],
    &["information", "info"],
    &["photograph", "photo", "picture", "pic"],
    &["exit", "quit"],
    &["approximately", "approx"],
    &["average", "avg"],
    &["maximum", "max"],
    &["difference", "differ"],
    &["repository", "repo"],
    &["directory", "folder", "dir"],
    &["configuration", "config"],
    &["documentation", "docs"],
    &["application", "app"],
    &["function", "func"],
    &["variable", "var"],
    &["argument", "arg"],
    &["parameter", "param"],
    &["environment", "env"],
    &["authentication", "auth"],
    &["html", "hypertext markup language"],
    &["css", "cascading style sheets"],
    &["sql", "structured query language"],
    &["api", "application programming interface"],
    &["ml", "machine learning"],
    &["ai", "artificial intelligence"],
    &["os", "operating system"],
    &["vm", "virtual machine"],
    &["cli", "command line", "command-line", "terminal"],
    &["excel", "ms excel", "microsoft excel"],
    &["vscode", "vs code", "visual studio code"],
    // Units.
    &["teaspoon", "tsp"],
    &["tablespoon", "tbsp"],
    &["ounce", "oz"],
    &["pound", "lb", "lbs"],
    &["kilogram", "kg", "kilo"],
    &["gram", "g"],
    &["kilometer", "kilometre", "km"],
    &["meter", "metre", "m"],
    &["centimeter", "centimetre", "cm"],
    &["millimeter", "millimetre", "mm"],
    &["mile", "mi"],
    &["foot", "feet", "ft"],
    &["liter", "litre", "l"],
    &["milliliter", "millilitre", "ml"],
    &["gallon", "gal"],
    &["hour", "hr", "hrs"],
    &["minute", "min", "mins"],
    &["second", "sec", "secs"],
    &["fahrenheit", "f"],
    &["celsius", "c", "centigrade"],
    &["km/h", "kph", "kilometers per hour", "kilometres per hour"],
    &["mph", "miles per hour"],
    // Places and organisations.
    &["usa", "us", "united states", "united states of america", "america", "american"],
    &["uk", "united kingdom", "britain", "great britain", "british"],
    &["nyc", "new york city"],
    &["la", "los angeles"],
    &["eu", "european union"],
    &["un", "united nations"],
    // Words of one meaning that WordNet keeps apart.
    &["all", "every"],
    &["brief", "short"],
    // Who made what follows, from [`vocabulary::MAKERS`].
];

/// Phrases that frame a question the way a single word does: `number of days` asks `how many days`.
pub const FRAME_PHRASES: &[(&str, &str)] = &[
    ("number of", "many"),
    ("amount of", "much"),
    ("stand for", "abbreviation"),
    ("stands for", "abbreviation"),
    ("short for", "abbreviation"),
    ("abbreviation of", "abbreviation"),
    ("abbreviation for", "abbreviation"),
    ("make up", "make"),
    ("makes up", "make"),
    ("capital city", "capital"),
    ("another word", "synonym"),
    ("another term", "synonym"),
    ("how do you say", "translate"),
    ("how do i say", "translate"),
    ("how to say", "translate"),
    ("how would you say", "translate"),
];

/// Phrases that state a quantity in words, and the same quantity in digits.
pub const QUANTITY_PHRASES: &[(&str, &str)] = &[
    ("half an hour", "30 minutes"),
    ("half hour", "30 minutes"),
    ("quarter of an hour", "15 minutes"),
    ("quarter hour", "15 minutes"),
    ("an hour and a half", "90 minutes"),
    ("a dozen", "12"),
    ("half a dozen", "6"),
    ("a couple of", "2"),
    ("a hundred", "100"),
    ("a thousand", "1000"),
    ("a million", "1000000"),
    ("a billion", "1000000000"),
];

/// Every group: [`GROUPS`], then one per verb of [`vocabulary::MAKERS`] (`author`, `writer`, `write`).
fn groups() -> &'static [Vec<&'static str>] {
    static ALL: OnceLock<Vec<Vec<&'static str>>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<Vec<&'static str>> = GROUPS.iter().map(|group| group.to_vec()).collect();
        let mut makers: Vec<Vec<&'static str>> = Vec::new();
        for (noun, verb) in vocabulary::MAKERS {
            match makers.iter_mut().find(|group| group.last() == Some(&verb)) {
                Some(group) => group.insert(group.len() - 1, noun),
                None => makers.push(vec![noun, verb]),
            }
        }
        all.extend(makers);
        all
    })
}

/// Each name and the groups that hold it, in [`groups`] order.
fn index() -> &'static HashMap<&'static str, Vec<usize>> {
    static INDEX: OnceLock<HashMap<&'static str, Vec<usize>>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index: HashMap<&'static str, Vec<usize>> = HashMap::new();
        for (at, group) in groups().iter().enumerate() {
            for name in group {
                index.entry(name).or_default().push(at);
            }
        }
        index
    })
}

/// The groups `word` is a name of, as itself or as the plural of one (the lexicon may not know
/// `tablespoons`), in order.
fn groups_of(word: &str) -> impl Iterator<Item = usize> + '_ {
    let index = index();
    let singular = word.strip_suffix('s').and_then(|s| index.get(s));
    index.get(word).into_iter().chain(singular).flatten().copied()
}

/// Whether two words are interchangeable names of one thing (a plural `s` is ignored).
pub fn equivalent(a: &str, b: &str) -> bool {
    a != b && groups_of(a).any(|g| groups_of(b).any(|h| g == h))
}

/// The first name of the group that `word` belongs to (a plural `s` ignored), if any.
pub fn group_name(word: &str) -> Option<&'static str> {
    groups_of(word).min().map(|g| groups()[g][0])
}

/// A phrase and the words that stand for it.
pub type Rewrite = (Vec<&'static str>, Vec<&'static str>);

/// The multiword names of the groups (each stands for the group's first, one-word name) and the
/// quantity phrases (each stands for its digits), longest first, as word sequences.
pub fn multiword_names() -> &'static [Rewrite] {
    static NAMES: OnceLock<Vec<Rewrite>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<Rewrite> = groups()
            .iter()
            .flat_map(|group| {
                group
                    .iter()
                    .filter(|name| name.contains(' '))
                    .map(|name| (name.split(' ').collect(), vec![group[0]]))
            })
            .chain(FRAME_PHRASES.iter().map(|(phrase, word)| (phrase.split(' ').collect(), vec![*word])))
            .chain(
                QUANTITY_PHRASES
                    .iter()
                    .map(|(phrase, digits)| (phrase.split(' ').collect(), digits.split(' ').collect())),
            )
            .collect();
        names.sort_by_key(|(words, _)| std::cmp::Reverse(words.len()));
        names
    })
}

/// The rewrites of [`multiword_names`] whose phrase starts with `word`, longest first.
pub fn multiword_names_from(word: &str) -> &'static [Rewrite] {
    static BY_FIRST: OnceLock<HashMap<&'static str, Vec<Rewrite>>> = OnceLock::new();
    let by_first = BY_FIRST.get_or_init(|| {
        let mut by_first: HashMap<&'static str, Vec<Rewrite>> = HashMap::new();
        for rewrite in multiword_names() {
            if let Some(first) = rewrite.0.first() {
                by_first.entry(first).or_default().push(rewrite.clone());
            }
        }
        by_first
    });
    by_first.get(word).map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_pair_names_of_one_thing_only() {
        assert!(equivalent("js", "javascript") && equivalent("javascript", "js"));
        assert!(equivalent("tbsp", "tablespoon") && equivalent("tablespoons", "tbsp"));
        assert!(!equivalent("tsp", "tbsp"), "a teaspoon is not a tablespoon");
        assert!(!equivalent("python", "python"));
        assert!(!equivalent("fahrenheit", "celsius"));
        assert!(equivalent("ml", "milliliter") && equivalent("ml", "machine learning"));
        assert_eq!(group_name("ml"), Some("ml"), "the first group that holds it");
        assert!(equivalent("author", "writer") && !equivalent("write", "write"));
        assert!(equivalent("authors", "write") && equivalent("inventor", "invent"));
        let names = multiword_names();
        assert!(names.iter().any(|(w, one)| w == &["new", "york", "city"] && one == &["nyc"]));
        assert!(names.iter().any(|(w, digits)| w == &["half", "an", "hour"] && digits == &["30", "minutes"]));
        assert!(names.windows(2).all(|w| w[0].0.len() >= w[1].0.len()));
    }
}
