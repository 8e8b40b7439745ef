//! Term counts of documents, with every distinct n-gram of a corpus interned once, so that
//! cross-validation folds fit their vocabularies without tokenizing again.

use std::collections::HashMap;

use crate::terms::{for_each_char_ngram, for_each_ngram, words};
use crate::tfidf::TfidfSettings;

/// What a character n-gram's vocabulary entry starts with, so it never meets a word n-gram
/// (words are letters, digits and `_`, so none contains `:`).
pub const CHAR_PREFIX: &str = "c:";

/// Distinct n-grams of a corpus, each with an id.
#[derive(Debug, Default)]
pub struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    /// The id of `term`, new if unseen.
    fn id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(term.to_owned(), id);
        id
    }

    /// The terms of `ids` (each must be an id of this interner), in the order given.
    pub fn names(&self, ids: &[u32]) -> Vec<String> {
        let mut by_id: Vec<Option<&str>> = vec![None; self.ids.len()];
        for (term, &id) in &self.ids {
            by_id[id as usize] = Some(term);
        }
        ids.iter().map(|&id| by_id[id as usize].unwrap_or_default().to_owned()).collect()
    }
}

/// How often each term occurs in one document: (term id, count), ids ascending, for each
/// block of features.
#[derive(Debug, Clone, Default)]
pub struct TermCounts {
    /// Word n-grams.
    pub words: Vec<(u32, u32)>,
    /// Character n-grams (empty unless the settings ask for them).
    pub chars: Vec<(u32, u32)>,
}

/// Counts the word 1..=`ngram_max`-grams of `text` and, when `settings.char_ngrams` is set, its
/// character n-grams (interned with [`CHAR_PREFIX`]), interning new ones.
pub fn count_terms(text: &str, settings: &TfidfSettings, interner: &mut Interner) -> TermCounts {
    let mut words_seen: HashMap<u32, u32> = HashMap::new();
    for_each_ngram(&words(text), settings.ngram_max, |g| *words_seen.entry(interner.id(g)).or_default() += 1);
    let mut chars_seen: HashMap<u32, u32> = HashMap::new();
    if let Some(range) = settings.char_ngrams {
        for_each_char_term(text, range, |term| *chars_seen.entry(interner.id(term)).or_default() += 1);
    }
    TermCounts { words: sorted(words_seen), chars: sorted(chars_seen) }
}

/// Calls `f` with the vocabulary name of every character n-gram of `text` (the n-gram after
/// [`CHAR_PREFIX`]), n in `[shortest, longest]`.
pub fn for_each_char_term(text: &str, [shortest, longest]: [usize; 2], mut f: impl FnMut(&str)) {
    let mut term = String::from(CHAR_PREFIX);
    for_each_char_ngram(text, shortest, longest, |g| {
        term.truncate(CHAR_PREFIX.len());
        term.push_str(g);
        f(&term);
    });
}

/// The (term, count) pairs, terms ascending.
fn sorted(counts: HashMap<u32, u32>) -> Vec<(u32, u32)> {
    let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
    terms.sort_unstable();
    terms
}
