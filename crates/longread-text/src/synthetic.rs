//! The quickstart's synthetic long-document set: "transcripts" rated general / teen / mature,
//! where the rating is carried by one short passage placed anywhere in a long stretch of
//! neutral talk. Reading the first chunk finds it only when it happens to be there; a model
//! that reads every chunk and attends over them can always find it.
//!
//! Deterministic: the same seed gives the same documents (ChaCha8, a portable generator).

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The labels, in id order.
pub const LABELS: [&str; 3] = ["general", "teen", "mature"];

/// Neutral talk: every document is mostly made of these.
const SUBJECTS: [&str; 12] = [
    "The host",
    "Our guest",
    "The narrator",
    "My neighbour",
    "The chef",
    "A listener",
    "The teacher",
    "Her brother",
    "The mayor",
    "A traveller",
    "The engineer",
    "His aunt",
];
const VERBS: [&str; 12] = [
    "talks about",
    "describes",
    "remembers",
    "explains",
    "asks about",
    "compares",
    "reads a note on",
    "points at",
    "writes down",
    "looks into",
    "plans",
    "jokes about",
];
const OBJECTS: [&str; 16] = [
    "the weather",
    "the new bridge",
    "a recipe for soup",
    "the garden",
    "the train timetable",
    "an old map",
    "the football results",
    "the price of bread",
    "a museum visit",
    "the harbour",
    "a broken bicycle",
    "the school library",
    "the morning market",
    "a mountain trail",
    "the village festival",
    "a letter from abroad",
];
const ENDINGS: [&str; 10] = [
    "before the break.",
    "for a few minutes.",
    "with some care.",
    "in great detail.",
    "while the kettle boils.",
    "near the window.",
    "after the news.",
    "once again.",
    "without hurry.",
    "as the audience listens.",
];

/// Sentences in the passage that carries the rating.
const PASSAGE_SENTENCES: usize = 3;

/// What carries each rating: a passage built from its own words only.
const RATING_SUBJECTS: [[&str; 4]; 3] = [
    ["A puppet", "The cartoon bunny", "A friendly dragon", "The choir of children"],
    ["A rebellious student", "The moody teenager", "A sarcastic rapper", "The rival gang"],
    ["A gangster", "The serial killer", "A drug dealer", "The torturer"],
];
const RATING_ACTIONS: [[&str; 4]; 3] = [
    ["sings a lullaby", "shares cookies", "plants sunflowers", "hugs a kitten"],
    ["swears at a referee", "sneaks out after curfew", "mocks a classmate", "throws a punch"],
    ["stabs a victim", "snorts cocaine", "shoots a hostage", "describes the autopsy"],
];
const RATING_DETAILS: [[&str; 4]; 3] = [
    ["and everyone giggles.", "under a rainbow.", "at the picnic.", "with a happy smile."],
    ["and slams the door.", "with crude language.", "at a wild party.", "while skipping class."],
    ["in graphic detail.", "amid pools of blood.", "with brutal violence.", "in an explicit scene."],
];

/// One synthetic document.
pub struct Transcript {
    /// `{prefix}{i}`.
    pub id: String,
    /// The whole document.
    pub text: String,
    /// One of [`LABELS`].
    pub label: &'static str,
    /// Index of the sentence that carries the rating.
    pub passage_sentence: usize,
    /// Where that sentence is in `text`, in characters.
    pub passage: std::ops::Range<usize>,
}

/// `n` transcripts of roughly `min_words..=max_words` words, labels balanced (cycling), with
/// ids `{prefix}{i}`.
pub fn transcripts(n: usize, min_words: usize, max_words: usize, prefix: &str, seed: u64) -> Vec<Transcript> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let label = i % LABELS.len();
            let target = rng.random_range(min_words..=max_words);
            let mut sentences: Vec<String> = Vec::new();
            let mut words = 0;
            while words < target {
                let s = neutral_sentence(&mut rng);
                words += s.split_whitespace().count();
                sentences.push(s);
            }
            let at = rng.random_range(0..=sentences.len());
            let passage = (0..PASSAGE_SENTENCES).map(|_| rating_sentence(&mut rng, label)).collect::<Vec<_>>();
            sentences.insert(at, passage.join(" "));
            let start: usize = sentences[..at].iter().map(|s| s.chars().count() + 1).sum();
            let passage = start..start + sentences[at].chars().count();
            Transcript {
                id: format!("{prefix}{i}"),
                text: sentences.join(" "),
                label: LABELS[label],
                passage_sentence: at,
                passage,
            }
        })
        .collect()
}

fn pick<'a, R: Rng>(rng: &mut R, words: &[&'a str]) -> &'a str {
    words.choose(rng).copied().unwrap_or_default()
}

fn neutral_sentence<R: Rng>(rng: &mut R) -> String {
    format!("{} {} {} {}", pick(rng, &SUBJECTS), pick(rng, &VERBS), pick(rng, &OBJECTS), pick(rng, &ENDINGS))
}

fn rating_sentence<R: Rng>(rng: &mut R, label: usize) -> String {
    format!(
        "{} {} {}",
        pick(rng, &RATING_SUBJECTS[label]),
        pick(rng, &RATING_ACTIONS[label]),
        pick(rng, &RATING_DETAILS[label])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_documents_and_labels_are_balanced() {
        let a = transcripts(30, 100, 400, "d", 5);
        let b = transcripts(30, 100, 400, "d", 5);
        assert!(a.iter().zip(&b).all(|(x, y)| x.text == y.text && x.label == y.label));
        let c = transcripts(30, 100, 400, "d", 6);
        assert!(a.iter().zip(&c).any(|(x, y)| x.text != y.text));
        for label in LABELS {
            assert_eq!(a.iter().filter(|t| t.label == label).count(), 10);
        }
    }

    #[test]
    fn exactly_one_passage_carries_the_rating_and_it_is_placed_anywhere() {
        let docs = transcripts(60, 200, 600, "d", 1);
        for d in &docs {
            let words = d.text.split_whitespace().count();
            assert!(
                (200..=660).contains(&words),
                "{words} words (a passage of 3 sentences and one sentence of overshoot)"
            );
            let carriers: Vec<usize> =
                (0..3).filter(|&l| RATING_SUBJECTS[l].iter().any(|s| d.text.contains(s))).collect();
            assert_eq!(carriers, vec![LABELS.iter().position(|&l| l == d.label).unwrap()], "{}", d.text);
            let passage: String = d.text.chars().skip(d.passage.start).take(d.passage.len()).collect();
            assert!(RATING_SUBJECTS.iter().flatten().any(|s| passage.starts_with(s)), "{passage}");
            assert!(passage.ends_with('.'));
        }
        let late = docs.iter().filter(|d| d.passage.start * 2 > d.text.len()).count();
        assert!(late > 15 && late < 45, "passages in the second half: {late} of 60");
    }
}
