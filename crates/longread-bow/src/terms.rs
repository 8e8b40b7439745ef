//! Words and word n-grams as scikit-learn's `TfidfVectorizer` finds them: the text lowercased,
//! tokens of two or more word characters (`(?u)\b\w\w+\b`), n-grams joined by one space; and
//! character n-grams inside word boundaries as its `analyzer="char_wb"` finds them.

use std::sync::LazyLock;

use regex::Regex;

/// scikit-learn's default `token_pattern`.
pub(crate) static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\w\w+\b").expect("a valid pattern"));

/// The words of `text`, lowercased.
pub fn words(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    WORD.find_iter(&lower).map(|m| m.as_str().to_owned()).collect()
}

/// Calls `f` with every n-gram of `words` for n = 1..=`max_n`, unigrams first.
pub fn for_each_ngram(words: &[String], max_n: usize, mut f: impl FnMut(&str)) {
    let mut gram = String::new();
    for n in 1..=max_n {
        for window in words.windows(n) {
            gram.clear();
            for (i, w) in window.iter().enumerate() {
                if i > 0 {
                    gram.push(' ');
                }
                gram.push_str(w);
            }
            f(&gram);
        }
    }
}

/// Calls `f` with every character n-gram of `text` (lowercased first), n = `min_n..=max_n`,
/// as scikit-learn's `char_wb` analyzer makes them: each whitespace-separated word padded with a
/// space on both sides, n-grams inside the padded word only; a padded word shorter than n
/// gives itself once (and no longer n-grams).
pub fn for_each_char_ngram(text: &str, min_n: usize, max_n: usize, mut f: impl FnMut(&str)) {
    let lower = text.to_lowercase();
    let mut padded = String::new();
    let mut starts: Vec<usize> = Vec::new();
    for word in lower.split_whitespace() {
        padded.clear();
        padded.push(' ');
        padded.push_str(word);
        padded.push(' ');
        // Byte offset of every character, and the end.
        starts.clear();
        starts.extend(padded.char_indices().map(|(i, _)| i));
        starts.push(padded.len());
        let chars = starts.len() - 1;
        for n in min_n..=max_n {
            if n >= chars {
                f(&padded);
                break;
            }
            for offset in 0..=chars - n {
                f(&padded[starts[offset]..starts[offset + n]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_scikit_learns_token_pattern() {
        assert_eq!(words("The U.S. isn't a 2nd-rate É-cole_x!"), ["the", "isn", "2nd", "rate", "cole_x"]);
        assert!(words("a b c ! ?").is_empty());
    }

    #[test]
    fn ngrams_are_unigrams_then_bigrams() {
        let mut seen = Vec::new();
        for_each_ngram(&words("red green blue"), 2, |g| seen.push(g.to_owned()));
        assert_eq!(seen, ["red", "green", "blue", "red green", "green blue"]);
    }

    #[test]
    fn char_ngrams_follow_scikit_learns_char_wb() {
        // sklearn: TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)).build_analyzer()("Ab  É!\tcd")
        let mut seen = Vec::new();
        for_each_char_ngram("Ab  É!\tcd", 2, 4, |g| seen.push(g.to_owned()));
        let expected = [
            " a", "ab", "b ", " ab", "ab ", " ab ", " é", "é!", "! ", " é!", "é! ", " é! ", " c", "cd", "d ", " cd",
            "cd ", " cd ",
        ];
        assert_eq!(seen, expected);
        seen.clear();
        for_each_char_ngram("a", 2, 5, |g| seen.push(g.to_owned()));
        assert_eq!(seen, [" a", "a ", " a "], "a short word gives itself once, then stops");
    }
}
