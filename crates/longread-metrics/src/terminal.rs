//! Text as a terminal shows it safely, for the tables printed for people.

/// `s` with line breaks and tabs as spaces and other control characters escaped (`\u{1b}`), so
/// that a label name, document or id cannot move the cursor, recolour the terminal or split a
/// row of a table.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => " ".to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_breaks_become_spaces() {
        assert_eq!(printable("a\u{1b}[31mb\nc\td\u{7}"), "a\\u{1b}[31mb c d\\u{7}");
        assert_eq!(printable("général · 中文"), "général · 中文");
    }
}
