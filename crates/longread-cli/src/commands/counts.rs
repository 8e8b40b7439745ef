//! Whole numbers in words: parsers of flags with a least value, whose errors say so (clap's own
//! range check printed "0 is not in 1..18446744073709551615"), and counts in messages.

/// "1 document", "2 documents" (the report and eval said "1 documents").
pub fn counted(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// A parser of a whole number at least `min`.
pub fn at_least(min: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        let n: u64 = text.trim().parse().map_err(|_| format!("`{text}` is not a whole number"))?;
        if n < min {
            return Err(format!("must be at least {min}"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(counted(1, "document"), "1 document");
        assert_eq!(counted(0, "document"), "0 documents");
        assert_eq!(counted(2, "token"), "2 tokens");
    }

    #[test]
    fn below_the_least_value_or_not_a_number_is_refused_in_words() {
        let parse = at_least(2);
        assert_eq!(parse("2"), Ok(2));
        assert_eq!(parse("1"), Err("must be at least 2".into()));
        assert_eq!(parse("-1"), Err("`-1` is not a whole number".into()));
        assert_eq!(parse("x"), Err("`x` is not a whole number".into()));
    }
}
