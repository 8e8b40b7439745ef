//! Sentences (Unicode sentence boundaries, UAX #29) of words (Unicode word boundaries,
//! lower-cased; punctuation and spaces dropped), with their byte offsets in the text.

use unicode_segmentation::UnicodeSegmentation;

/// A word and where it is in the document (byte offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Lower-cased text.
    pub text: String,
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset past the last byte.
    pub end: usize,
}

/// A sentence with at least one word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    /// Its words, in order.
    pub words: Vec<Word>,
    /// Byte offset where the sentence starts.
    pub start: usize,
    /// Byte offset past its end.
    pub end: usize,
}

/// Splits a document into sentences of words; sentences without words (a lone "…") are
/// dropped, so an empty or punctuation-only text gives none.
pub fn split_document(text: &str) -> Vec<Sentence> {
    text.split_sentence_bound_indices()
        .filter_map(|(offset, sentence)| {
            let words: Vec<Word> = sentence
                .unicode_word_indices()
                .map(|(i, w)| Word { text: w.to_lowercase(), start: offset + i, end: offset + i + w.len() })
                .collect();
            (!words.is_empty()).then(|| Sentence { words, start: offset, end: offset + sentence.trim_end().len() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_and_words_follow_unicode_boundaries() {
        let text = "Prices rose 3.5% in Oct. The U.S. market? Ünïcödé wörds, too!  …";
        let sentences = split_document(text);
        let words: Vec<Vec<&str>> =
            sentences.iter().map(|s| s.words.iter().map(|w| w.text.as_str()).collect()).collect();
        assert_eq!(words[0], ["prices", "rose", "3.5", "in", "oct"]);
        assert_eq!(words.last().unwrap(), &["ünïcödé", "wörds", "too"]);
        for s in &sentences {
            for w in &s.words {
                assert_eq!(text[w.start..w.end].to_lowercase(), w.text);
                assert!(s.start <= w.start && w.end <= s.end);
            }
        }
        assert!(split_document("  … !! ").is_empty());
        assert!(split_document("").is_empty());
    }
}
