//! The verifier's vocabulary: one table of the English words its rules read, each with every part it
//! plays (`the` is a function word and a copula; `second` a unit of time; `please` a function word,
//! an opener and a word before an imperative). A word is looked up once, by binary search, instead of
//! in a dozen overlapping lists.
//!
//! Number words (`seven`, `third`, `ninety`) are in `numbers.rs`, where their position is their
//! value; the WordNet lexicon is generated data ([`crate::lexicon`]); names of one thing are in
//! [`crate::equivalents`]. A few entries fit the questions seen more than English grammar (`new`,
//! `located` and `concept` as function words, `chatgpt` and `gpt` as openers); they are kept so that
//! the verdicts stay as they were.

/// A part a word plays for the verifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// Carries no content: an article, pronoun, auxiliary, question word, preposition or conjunction
    /// that relates no roles, a politeness word, or a verb of the request itself (`write me`, `give
    /// me`, `make a list of`), which says that an answer is wanted, not what it is about.
    Function,
    /// A preposition whose object plays a role in a relation (`from`, `to`, `than`, `before`, `by`);
    /// `to` also marks an infinitive, so a marker is compared only when both texts have it.
    Marker,
    /// Negates (`not`, `no`, `never`, `without`; `n't` is split off as `not`).
    Negator,
    /// A determiner, after which `first` is an ordinal (`the first book`).
    Determiner,
    /// A verb that, first in an imperative, asks for an answer as `give` and `tell` do (`list the
    /// seven continents`); elsewhere a noun (`a list on commas`).
    RequestVerb,
    /// May come before an imperative's verb (`please list ...`, `can you name ...`).
    BeforeImperative,
    /// Turns the number before it into a percentage (`20 percent`).
    Percent,
    /// An auxiliary that may follow `how` in a question about a method (`how do I`, `how can we`).
    Auxiliary,
    /// Who a method is for, after `how` and an auxiliary (`how does one`).
    Person,
    /// An opening that carries nothing about the speech act (`hi, let's ...`, `ok so let's ...`).
    Opener,
    /// A unit of measure (a lemma): an answer in one is wrong in another.
    Unit,
    /// A unit of time, which `how many` counts where `how long` measures.
    Duration,
    /// A noun that names the way to do something (`steps to reset a router`, `bash for loop syntax`).
    MethodNoun,
    /// Makes a question a comparison of two things (`difference`, `vs`).
    ComparisonCue,
    /// A name of the whole world, the widest scope a superlative can have.
    WholeWorld,
    /// Links a subject to what is said of it (`which ocean is the largest`).
    Copula,
    /// Joins two things symmetrically (`A and B` asks what `B and A` asks).
    Coordinator,
    /// Introduces a phrase which may move as a whole (`in Python`, `for beginners`).
    Preposition,
    /// Frames a unit conversion and says nothing else (`how many`, `equals`, `degrees`).
    ConversionFrame,
}

use Tag::*;

/// Every word the rules read, sorted by its bytes, with the parts it plays.
const TABLE: &[(&str, &[Tag])] = &[
    ("%", &[Percent]),
    ("&", &[Coordinator]),
    ("a", &[Function, Determiner]),
    ("about", &[Function, Preposition]),
    ("above", &[Marker, Preposition]),
    ("according", &[Function]),
    ("acre", &[Unit]),
    ("actually", &[Function]),
    ("after", &[Marker, Preposition]),
    ("against", &[Function]),
    ("along", &[Function]),
    ("also", &[Function]),
    ("am", &[Function]),
    ("ampere", &[Unit]),
    ("an", &[Function]),
    ("and", &[Function, Coordinator]),
    ("any", &[Function]),
    ("anything", &[Function]),
    ("are", &[Function, Copula]),
    ("as", &[Function, Preposition]),
    ("at", &[Function, Preposition]),
    ("basically", &[Function]),
    ("be", &[Function]),
    ("been", &[Function]),
    ("before", &[Marker, Preposition]),
    ("being", &[Function]),
    ("below", &[Marker, Preposition]),
    ("between", &[Function]),
    ("bit", &[Unit]),
    ("but", &[Function]),
    ("by", &[Marker, Preposition]),
    ("byte", &[Unit]),
    ("calculate", &[Function]),
    ("calculated", &[Function]),
    ("calculates", &[Function]),
    ("calculating", &[Function]),
    ("calorie", &[Unit]),
    ("can", &[Function, BeforeImperative, Auxiliary]),
    ("cannot", &[Negator]),
    ("celsius", &[Unit]),
    ("centimeter", &[Unit]),
    ("century", &[Duration, Unit]),
    ("chatgpt", &[Opener]),
    ("compare", &[ComparisonCue]),
    ("compute", &[Function]),
    ("computed", &[Function]),
    ("computes", &[Function]),
    ("computing", &[Function]),
    ("concept", &[Function]),
    ("conversion", &[ConversionFrame]),
    ("convert", &[Function]),
    ("converted", &[Function]),
    ("converting", &[Function]),
    ("converts", &[Function]),
    ("could", &[Function, BeforeImperative, Auxiliary]),
    ("create", &[Function]),
    ("cup", &[Unit]),
    ("day", &[Duration, Unit]),
    ("decade", &[Duration, Unit]),
    ("define", &[Function]),
    ("definition", &[Function]),
    ("degree", &[ConversionFrame]),
    ("degrees", &[ConversionFrame]),
    ("describe", &[Function]),
    ("determine", &[Function]),
    ("determined", &[Function]),
    ("determines", &[Function]),
    ("did", &[Function]),
    ("differ", &[ComparisonCue]),
    ("difference", &[ComparisonCue]),
    ("differences", &[ComparisonCue]),
    ("differs", &[ComparisonCue]),
    ("do", &[Function, Auxiliary]),
    ("does", &[Function, Auxiliary]),
    ("doing", &[Function]),
    ("during", &[Preposition]),
    ("earth", &[WholeWorld]),
    ("enumerate", &[RequestVerb]),
    ("equal", &[ConversionFrame]),
    ("equals", &[ConversionFrame]),
    ("exactly", &[Function]),
    ("explain", &[Function]),
    ("fahrenheit", &[Unit]),
    ("foot", &[Unit]),
    ("for", &[Function, Preposition]),
    ("formula", &[MethodNoun]),
    ("from", &[Marker, Preposition]),
    ("gallon", &[Unit]),
    ("generate", &[Function]),
    ("get", &[Function]),
    ("gigabyte", &[Unit]),
    ("give", &[Function]),
    ("given", &[Function]),
    ("globe", &[WholeWorld]),
    ("gpt", &[Opener]),
    ("gram", &[Unit]),
    ("guide", &[MethodNoun]),
    ("had", &[Function]),
    ("has", &[Function]),
    ("have", &[Function]),
    ("he", &[Function]),
    ("hectare", &[Unit]),
    ("hello", &[Function, BeforeImperative, Opener]),
    ("help", &[Function]),
    ("her", &[Function, Determiner]),
    ("here", &[Function]),
    ("hey", &[Function, Opener]),
    ("hi", &[Function, BeforeImperative, Opener]),
    ("him", &[Function]),
    ("his", &[Function, Determiner]),
    ("hour", &[Duration, Unit]),
    ("how", &[Function]),
    ("i", &[Function, Person]),
    ("if", &[Function]),
    ("in", &[Function, Preposition]),
    ("inch", &[Unit]),
    ("instruction", &[MethodNoun]),
    ("is", &[Function, Copula]),
    ("it", &[Function]),
    ("its", &[Function, Determiner]),
    ("joule", &[Unit]),
    ("just", &[Function]),
    ("kelvin", &[Unit]),
    ("kilobyte", &[Unit]),
    ("kilogram", &[Unit]),
    ("kilometer", &[Unit]),
    ("kilowatt", &[Unit]),
    ("kindly", &[Function, BeforeImperative]),
    ("know", &[Function]),
    ("let", &[Function]),
    ("like", &[Function]),
    ("list", &[RequestVerb]),
    ("liter", &[Unit]),
    ("located", &[Function]),
    ("make", &[Function]),
    ("many", &[ConversionFrame]),
    ("may", &[Function, Auxiliary]),
    ("me", &[Function]),
    ("megabyte", &[Unit]),
    ("meter", &[Unit]),
    ("method", &[MethodNoun]),
    ("microsecond", &[Unit]),
    ("might", &[Function, Auxiliary]),
    ("mile", &[Unit]),
    ("millennium", &[Unit]),
    ("milligram", &[Unit]),
    ("milliliter", &[Unit]),
    ("millimeter", &[Unit]),
    ("millisecond", &[Unit]),
    ("mine", &[Function]),
    ("minute", &[Duration, Unit]),
    ("month", &[Duration, Unit]),
    ("much", &[ConversionFrame]),
    ("must", &[Function, Auxiliary]),
    ("my", &[Function, Determiner]),
    ("name", &[RequestVerb]),
    ("nanosecond", &[Unit]),
    ("need", &[Function]),
    ("neither", &[Negator]),
    ("never", &[Negator]),
    ("new", &[Function]),
    ("no", &[Negator]),
    ("nobody", &[Negator]),
    ("non", &[Negator]),
    ("none", &[Negator]),
    ("nor", &[Negator]),
    ("not", &[Negator]),
    ("nothing", &[Negator]),
    ("now", &[BeforeImperative, Opener]),
    ("of", &[Function, Preposition]),
    ("ok", &[Opener]),
    ("okay", &[Opener]),
    ("on", &[Function, Preposition]),
    ("one", &[Person]),
    ("or", &[Function, Coordinator]),
    ("ounce", &[Unit]),
    ("our", &[Function, Determiner]),
    ("over", &[Marker, Preposition]),
    ("pct", &[Percent]),
    ("per", &[ConversionFrame]),
    ("percent", &[Percent]),
    ("pint", &[Unit]),
    ("planet", &[WholeWorld]),
    ("please", &[Function, BeforeImperative, Opener]),
    ("possible", &[Function]),
    ("pound", &[Unit]),
    ("procedure", &[MethodNoun]),
    ("process", &[MethodNoun]),
    ("provide", &[Function]),
    ("quart", &[Unit]),
    ("really", &[Function]),
    ("recipe", &[MethodNoun]),
    ("regarding", &[Function]),
    ("second", &[Duration, Unit]),
    ("shall", &[Function]),
    ("she", &[Function]),
    ("should", &[Function, Auxiliary]),
    ("show", &[Function]),
    ("so", &[Function, Opener]),
    ("some", &[Function]),
    ("something", &[Function]),
    ("step", &[MethodNoun]),
    ("stone", &[Unit]),
    ("syntax", &[MethodNoun]),
    ("tablespoon", &[Unit]),
    ("teaspoon", &[Unit]),
    ("tell", &[Function]),
    ("terabyte", &[Unit]),
    ("than", &[Marker]),
    ("thank", &[Function]),
    ("thanks", &[Function]),
    ("that", &[Function]),
    ("the", &[Function, Determiner, Copula]),
    ("their", &[Function, Determiner]),
    ("them", &[Function]),
    ("then", &[Function]),
    ("there", &[Function]),
    ("these", &[Function]),
    ("they", &[Function]),
    ("this", &[Function]),
    ("those", &[Function]),
    ("through", &[Function, Preposition]),
    ("to", &[Marker, Preposition]),
    ("ton", &[Unit]),
    ("tonne", &[Unit]),
    ("u", &[Person]),
    ("under", &[Marker, Preposition]),
    ("us", &[Function]),
    ("using", &[Function, Preposition]),
    ("versus", &[Function, ComparisonCue, Coordinator]),
    ("via", &[Function, Preposition]),
    ("volt", &[Unit]),
    ("vs", &[Function, ComparisonCue, Coordinator]),
    ("want", &[Function]),
    ("was", &[Function, Copula]),
    ("watt", &[Unit]),
    ("way", &[Function]),
    ("we", &[Function, Person]),
    ("week", &[Duration, Unit]),
    ("well", &[Opener]),
    ("were", &[Function, Copula]),
    ("what", &[Function]),
    ("whats", &[Function]),
    ("when", &[Function]),
    ("where", &[Function]),
    ("whether", &[Function]),
    ("which", &[Function]),
    ("who", &[Function]),
    ("whom", &[Function]),
    ("whose", &[Function]),
    ("why", &[Function]),
    ("will", &[Function]),
    ("with", &[Function, Preposition]),
    ("within", &[Function, Preposition]),
    ("without", &[Negator, Preposition]),
    ("world", &[WholeWorld]),
    ("would", &[Function, BeforeImperative, Auxiliary]),
    ("write", &[Function]),
    ("yard", &[Unit]),
    ("year", &[Duration, Unit]),
    ("you", &[Function, BeforeImperative, Person]),
    ("your", &[Function, Determiner]),
    ("yours", &[Function]),
];

/// Who made what: nouns that name who did what a verb says (`author` of `wrote`), which no suffix
/// shows, each with its verb. A noun and its verb name one thing ([`crate::equivalents`]).
pub const MAKERS: [(&str, &str); 8] = [
    ("author", "write"),
    ("writer", "write"),
    ("inventor", "invent"),
    ("founder", "found"),
    ("painter", "paint"),
    ("composer", "compose"),
    ("director", "direct"),
    ("discoverer", "discover"),
];

/// Whether `word` names who did what a verb says ([`MAKERS`]).
pub fn is_agent_noun(word: &str) -> bool {
    MAKERS.iter().any(|(noun, _)| *noun == word)
}

/// The parts `word` (lowercase) plays; none for a word the table does not hold.
pub fn tags(word: &str) -> &'static [Tag] {
    entry(word).map_or(&[], |(_, tags)| tags)
}

/// Whether `word` (lowercase) plays the part `tag`.
pub fn is(word: &str, tag: Tag) -> bool {
    tags(word).contains(&tag)
}

/// The table's own copy of `word` and its parts, if the table holds it.
pub fn entry(word: &str) -> Option<(&'static str, &'static [Tag])> {
    TABLE.binary_search_by(|(w, _)| w.as_bytes().cmp(word.as_bytes())).ok().map(|at| TABLE[at])
}

/// The words that play the part `tag`, in the table's order.
pub fn words_with(tag: Tag) -> impl Iterator<Item = &'static str> {
    TABLE.iter().filter(move |(_, tags)| tags.contains(&tag)).map(|(word, _)| *word)
}

/// The word a spelling stands for: `into` and `onto` relate what `to` does.
pub fn spelling(word: &str) -> &str {
    match word {
        "into" | "onto" => "to",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_each_word_is_in_it_once() {
        assert!(TABLE.windows(2).all(|w| w[0].0.as_bytes() < w[1].0.as_bytes()));
        assert!(TABLE.iter().all(|(_, tags)| !tags.is_empty()));
    }

    #[test]
    fn a_word_has_every_part_it_plays() {
        assert_eq!(tags("the"), [Function, Determiner, Copula]);
        assert!(is("second", Unit) && is("second", Duration) && !is("millisecond", Duration));
        assert!(is("by", Marker) && !is("by", Function));
        assert!(is("please", Function) && is("please", Opener) && is("please", BeforeImperative));
        assert!(tags("python").is_empty());
        assert_eq!(spelling("into"), "to");
    }
}
