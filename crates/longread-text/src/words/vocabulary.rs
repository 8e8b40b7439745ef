//! The HAN's word vocabulary: id 0 is padding, 1 out-of-vocabulary, then the training data's
//! words by descending count (ties by word, so the same data gives the same ids).

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Result, TextError};
use crate::words::split::Sentence;

/// Padding id.
pub const PAD: u32 = 0;
/// Out-of-vocabulary id.
pub const UNK: u32 = 1;

/// Words by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocabulary {
    words: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Vocabulary {
    /// From the words in id order (`words[0]` = `<pad>`, `words[1]` = `<unk>`).
    pub fn from_words(words: Vec<String>) -> Result<Self> {
        if words.len() < 2 || words[0] != "<pad>" || words[1] != "<unk>" {
            return Err(TextError::Config("a vocabulary starts with \"<pad>\", \"<unk>\"".into()));
        }
        let ids: HashMap<String, u32> = words.iter().enumerate().map(|(i, w)| (w.clone(), i as u32)).collect();
        if ids.len() != words.len() {
            return Err(TextError::Config("the vocabulary lists a word twice".into()));
        }
        Ok(Self { words, ids })
    }

    /// Words seen at least `min_count` times in `documents`, the `max_vocab` most frequent
    /// (0 = all), after `<pad>` and `<unk>`.
    pub fn build<'a>(documents: impl IntoIterator<Item = &'a [Sentence]>, min_count: usize, max_vocab: usize) -> Self {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for doc in documents {
            for word in doc.iter().flat_map(|s| &s.words) {
                *counts.entry(word.text.as_str()).or_default() += 1;
            }
        }
        let mut ranked: Vec<(&str, usize)> = counts.into_iter().filter(|&(_, c)| c >= min_count.max(1)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        if max_vocab > 0 {
            ranked.truncate(max_vocab);
        }
        let words = ["<pad>", "<unk>"].into_iter().chain(ranked.into_iter().map(|(w, _)| w)).map(String::from);
        Self::from_words(words.collect()).expect("built with <pad> and <unk> first and unique words")
    }

    /// Number of ids, `<pad>` and `<unk>` included.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when only `<pad>` and `<unk>` are known.
    pub fn is_empty(&self) -> bool {
        self.words.len() <= 2
    }

    /// The id of `word` (`UNK` when unknown).
    pub fn id(&self, word: &str) -> u32 {
        self.ids.get(word).copied().unwrap_or(UNK)
    }

    /// The words in id order.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Reads `vocab.json` (a JSON array of the words in id order).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TextError::Io { path: path.to_owned(), source })?;
        let words: Vec<String> = serde_json::from_str(&text)
            .map_err(|e| TextError::Config(format!("{}: not a JSON array of words: {e}", path.display())))?;
        Self::from_words(words).map_err(|e| TextError::Config(format!("{}: {e}", path.display())))
    }

    /// `vocab.json`'s contents.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.words).unwrap_or_default() + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::split::split_document;

    #[test]
    fn ids_follow_counts_then_words_and_respect_the_limits() {
        let docs = [split_document("b a. c a b a."), split_document("d! a c")];
        let v = Vocabulary::build(docs.iter().map(Vec::as_slice), 1, 0);
        assert_eq!(v.words(), ["<pad>", "<unk>", "a", "b", "c", "d"]);
        let v = Vocabulary::build(docs.iter().map(Vec::as_slice), 2, 0);
        assert_eq!(v.words(), ["<pad>", "<unk>", "a", "b", "c"]);
        assert_eq!(v.id("d"), UNK);
        let v = Vocabulary::build(docs.iter().map(Vec::as_slice), 1, 1);
        assert_eq!(v.words(), ["<pad>", "<unk>", "a"]);
        let back = Vocabulary::from_words(serde_json::from_str(&v.to_json()).unwrap()).unwrap();
        assert_eq!(back, v);
        assert!(Vocabulary::from_words(vec!["a".into(), "b".into()]).is_err());
    }
}
