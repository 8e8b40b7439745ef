//! Words and word n-grams as scikit-learn's `TfidfVectorizer` finds them: the text lowercased,
//! tokens of two or more word characters (`(?u)\b\w\w+\b`), n-grams joined by one space.

use std::sync::LazyLock;

use regex::Regex;

/// scikit-learn's default `token_pattern`.
static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\w\w+\b").expect("a valid pattern"));

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
}
