//! The labelled questions `mesh bench auto` asks: arithmetic, unit conversions, capitals and yes/no
//! facts, each with an answer a program can check. Written for this benchmark and split once, by
//! position, into a calibration half (the confidence bar is learned on it) and a frozen test half
//! (reported, never tuned on). The arithmetic and conversions come from a seeded generator, a seed per
//! split.

use std::fmt;

/// Which half a question is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The confidence bar is learned here.
    Calibration,
    /// Reported only.
    Test,
}

/// What a correct answer is.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// The first number in the answer.
    Number(i64),
    /// A word among the answer's first three.
    Word(String),
    /// `yes` or `no`, the answer's first word.
    YesNo(bool),
}

/// One labelled question.
#[derive(Clone, Debug)]
pub struct Question {
    /// The kind (`arithmetic`, `conversion`, `capital`, `yes/no`).
    pub kind: &'static str,
    /// The question as asked.
    pub text: String,
    /// Its answer.
    pub expected: Expected,
}

impl fmt::Display for Question {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.text)
    }
}

/// The examples a prompt starts with, three of the question's kind (none of them is asked).
fn examples(kind: &str) -> &'static str {
    match kind {
        "arithmetic" => "Q: What is 3 + 4?\nA: 7\nQ: What is 90 - 7?\nA: 83\nQ: What is 13 times 3?\nA: 39\n",
        "conversion" => {
            "Q: How many grams are in 20 kilograms?\nA: 20000\nQ: How many minutes are in 20 hours?\nA: 1200\n\
             Q: How many centimeters are in 20 meters?\nA: 2000\n"
        }
        "capital" => {
            "Q: What is the capital of Spain?\nA: Madrid\nQ: What is the capital of Morocco?\nA: Rabat\n\
             Q: What is the capital of Ukraine?\nA: Kyiv\n"
        }
        _ => {
            "Q: Is the sun a star? Answer yes or no.\nA: yes\nQ: Do dogs have wings? Answer yes or no.\nA: no\n\
             Q: Is sugar sweet? Answer yes or no.\nA: yes\n"
        }
    }
}

impl Question {
    /// The text-completion prompt: three examples of its kind, then the question.
    pub fn prompt(&self) -> String {
        format!("{}Q: {}\nA:", examples(self.kind), self.text)
    }

    /// Whether `answer` (a completion of [`prompt`](Self::prompt)) is right.
    pub fn is_right(&self, answer: &str) -> bool {
        let first_line = answer.trim().lines().next().unwrap_or_default().to_lowercase();
        let words: Vec<&str> = first_line
            .split(|c: char| !(c.is_alphanumeric() || c == '-'))
            .filter(|w| !w.is_empty())
            .collect();
        match &self.expected {
            Expected::Number(n) => {
                let digits: String = first_line.chars().filter(|c| !matches!(c, ',' | ' ')).collect();
                first_number(&digits) == Some(*n)
            }
            Expected::Word(word) => {
                let wanted: Vec<String> = word.to_lowercase().split_whitespace().map(str::to_owned).collect();
                words.windows(wanted.len()).take(3).any(|w| w.iter().zip(&wanted).all(|(a, b)| a == b))
            }
            Expected::YesNo(yes) => words.first().is_some_and(|w| *w == if *yes { "yes" } else { "no" }),
        }
    }
}

fn first_number(text: &str) -> Option<i64> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let negative = text[..start].ends_with('-');
    let digits: String = text[start..].chars().take_while(char::is_ascii_digit).collect();
    let n: i64 = digits.parse().ok()?;
    Some(if negative { -n } else { n })
}

/// Capitals: the first 20 calibrate, the last 20 are the test.
const CAPITALS: [(&str, &str); 40] = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Germany", "Berlin"),
    ("Japan", "Tokyo"),
    ("Egypt", "Cairo"),
    ("Canada", "Ottawa"),
    ("Russia", "Moscow"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Norway", "Oslo"),
    ("Ireland", "Dublin"),
    ("Austria", "Vienna"),
    ("Poland", "Warsaw"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Cuba", "Havana"),
    ("Thailand", "Bangkok"),
    ("Sweden", "Stockholm"),
    ("Argentina", "Buenos Aires"),
    ("South Korea", "Seoul"),
    ("China", "Beijing"),
    ("India", "New Delhi"),
    ("Mexico", "Mexico City"),
    ("Belgium", "Brussels"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Hungary", "Budapest"),
    ("Turkey", "Ankara"),
    ("Iran", "Tehran"),
    ("Chile", "Santiago"),
    ("Colombia", "Bogota"),
    ("Vietnam", "Hanoi"),
    ("Indonesia", "Jakarta"),
    ("Nigeria", "Abuja"),
    ("Australia", "Canberra"),
    ("Brazil", "Brasilia"),
    ("Switzerland", "Bern"),
    ("Netherlands", "Amsterdam"),
    ("Czech Republic", "Prague"),
    ("Philippines", "Manila"),
];

/// Yes/no facts: the first 15 calibrate, the last 15 are the test.
const FACTS: [(&str, bool); 30] = [
    ("Is water made of hydrogen and oxygen?", true),
    ("Is the moon larger than the earth?", false),
    ("Do fish breathe with gills?", true),
    ("Is ice colder than boiling water?", true),
    ("Do spiders have six legs?", false),
    ("Is the Pacific the largest ocean?", true),
    ("Is a whale a fish?", false),
    ("Does the earth orbit the sun?", true),
    ("Is gold a metal?", true),
    ("Can penguins fly?", false),
    ("Is Mount Everest the tallest mountain on earth?", true),
    ("Is the number 7 even?", false),
    ("Do plants need sunlight to grow?", true),
    ("Is Paris in Germany?", false),
    ("Is a tomato a fruit?", true),
    ("Do bees make honey?", true),
    ("Is the sun a planet?", false),
    ("Is snow white?", true),
    ("Is a bat a bird?", false),
    ("Does a triangle have three sides?", true),
    ("Is the Sahara a desert?", true),
    ("Is Tokyo in China?", false),
    ("Do cows lay eggs?", false),
    ("Is copper a good conductor of electricity?", true),
    ("Is the number 12 odd?", false),
    ("Does sound travel faster than light?", false),
    ("Is Antarctica covered in ice?", true),
    ("Do humans have two lungs?", true),
    ("Is iron magnetic?", true),
    ("Is the Nile a mountain?", false),
];

/// A small seeded generator (splitmix64), so each split's arithmetic is fixed.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }

    fn between(&mut self, low: i64, high: i64) -> i64 {
        low + self.below((high - low + 1) as u64) as i64
    }
}

/// `count` arithmetic questions (sums, differences, products of small numbers).
fn arithmetic(seed: u64, count: usize) -> Vec<Question> {
    let mut rng = Seeded(seed);
    (0..count)
        .map(|i| {
            let (a, b) = (rng.between(2, 60), rng.between(2, 40));
            let (text, answer) = match i % 3 {
                0 => (format!("What is {a} + {b}?"), a + b),
                1 => (format!("What is {} - {b}?", a + b), a),
                _ => {
                    let (a, b) = (rng.between(2, 12), rng.between(2, 12));
                    (format!("What is {a} times {b}?"), a * b)
                }
            };
            Question { kind: "arithmetic", text, expected: Expected::Number(answer) }
        })
        .collect()
}

/// `count` unit conversions between common units, of even amounts (`odd`: odd ones, so the two halves
/// never share a question).
fn conversions(seed: u64, count: usize, odd: bool) -> Vec<Question> {
    const UNITS: [(&str, &str, i64); 6] = [
        ("centimeters", "meters", 100),
        ("meters", "kilometers", 1000),
        ("grams", "kilograms", 1000),
        ("minutes", "hours", 60),
        ("seconds", "minutes", 60),
        ("inches", "feet", 12),
    ];
    let mut rng = Seeded(seed);
    (0..count)
        .map(|i| {
            let (small, large, factor) = UNITS[i % UNITS.len()];
            let n = 2 * rng.between(1, 6) + i64::from(odd);
            Question {
                kind: "conversion",
                text: format!("How many {small} are in {n} {large}?"),
                expected: Expected::Number(n * factor),
            }
        })
        .collect()
}

/// The questions of `split`: 20 capitals, 15 facts, 15 sums and 15 conversions.
pub fn questions(split: Split) -> Vec<Question> {
    let (half, seed) = match split {
        Split::Calibration => (0, 0xCA11_B8A7),
        Split::Test => (1, 0x7E57_F20E),
    };
    let capitals = CAPITALS[half * 20..half * 20 + 20].iter().map(|(country, capital)| Question {
        kind: "capital",
        text: format!("What is the capital of {country}?"),
        expected: Expected::Word((*capital).to_owned()),
    });
    let facts = FACTS[half * 15..half * 15 + 15].iter().map(|(fact, yes)| Question {
        kind: "yes/no",
        text: format!("{fact} Answer yes or no."),
        expected: Expected::YesNo(*yes),
    });
    let mut all: Vec<Question> = capitals.chain(facts).collect();
    all.extend(arithmetic(seed, 15));
    all.extend(conversions(seed ^ 0xC0, 15, split == Split::Test));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_by_kind() {
        let sum =
            Question { kind: "arithmetic", text: "What is 2 + 2?".into(), expected: Expected::Number(4) };
        assert!(sum.is_right(" 4\n"));
        assert!(sum.is_right("4."));
        assert!(!sum.is_right(" 5"));
        assert!(!sum.is_right(" 14"));
        let big = Question { kind: "conversion", text: String::new(), expected: Expected::Number(3000) };
        assert!(big.is_right(" 3,000 meters"));
        let capital = Question {
            kind: "capital",
            text: String::new(),
            expected: Expected::Word("Buenos Aires".into()),
        };
        assert!(capital.is_right(" Buenos Aires."));
        assert!(!capital.is_right(" Santiago"));
        let fact = Question { kind: "yes/no", text: String::new(), expected: Expected::YesNo(false) };
        assert!(fact.is_right(" No"));
        assert!(!fact.is_right(" yes, no"));
    }

    #[test]
    fn the_splits_are_fixed_and_apart() {
        let (calibration, test) = (questions(Split::Calibration), questions(Split::Test));
        assert_eq!((calibration.len(), test.len()), (65, 65));
        assert_eq!(
            questions(Split::Test).iter().map(|q| q.text.clone()).collect::<Vec<_>>(),
            test.iter().map(|q| q.text.clone()).collect::<Vec<_>>(),
            "seeded"
        );
        let overlap = test.iter().filter(|q| calibration.iter().any(|c| c.text == q.text)).count();
        assert_eq!(overlap, 0, "no question is in both halves");
    }
}
