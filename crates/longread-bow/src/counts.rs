//! Term counts of documents, with every distinct n-gram of a corpus interned once, so that
//! cross-validation folds fit their vocabularies without tokenizing again.

use std::collections::HashMap;

use crate::terms::{for_each_ngram, words};

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

/// How often each term occurs in one document: (term id, count), ids ascending.
#[derive(Debug, Clone, Default)]
pub struct TermCounts {
    /// (term id, count) pairs.
    pub terms: Vec<(u32, u32)>,
}

/// Counts the 1..=`ngram_max`-grams of `text`, interning new ones.
pub fn count_terms(text: &str, ngram_max: usize, interner: &mut Interner) -> TermCounts {
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for_each_ngram(&words(text), ngram_max, |g| *counts.entry(interner.id(g)).or_default() += 1);
    let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
    terms.sort_unstable();
    TermCounts { terms }
}
