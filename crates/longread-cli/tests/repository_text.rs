//! The repository's text speaks of the product only: no tracked file refers to the history of
//! its own development by a numbered work session or issue ("... 36", "since ... 33", "the
//! previous ...", "an issue's target"). A reader of the code, the scripts or the documentation
//! has no way to resolve such a reference: the numbering lives nowhere in the repository. Where
//! history matters, the text gives a date (YYYY-MM-DD) or a commit hash, which `git show` and
//! `git log` resolve; otherwise it says what the product does and why.
//!
//! Checked: every text file `git ls-files` lists, but third-party upstream sources under
//! vendor/ (their own authors' text; vendor/README.md and longread's own glue are checked) and
//! generated data (tests/fixtures/, examples/). The patterns are built from pieces so that this
//! file does not match itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// Tracked paths left out: upstream sources kept as their authors wrote them, and data.
const SKIPPED: &[&str] =
    &["vendor/candle-core/", "vendor/candle-kernels/", "vendor/flash-attn/kernels/", "tests/fixtures/", "examples/"];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The patterns of a development-history reference, case-insensitive.
fn patterns() -> Vec<Regex> {
    let session = concat!("ses", "sion");
    let issue = concat!("iss", "ue");
    [
        // A numbered session or issue: "<word> 36", "<word>s 39–42", "<word> #7", "<word>-17",
        // "<word>_34" (in a function's name). A URL's ".../issues/1241" does not match.
        format!(r"(?i)(?:\b|_)(?:{session}|{issue})s?[\s_-]*#?\s*\d"),
        // A session named by its place in the sequence of work.
        format!(r"(?i)\b(?:this|previous|prior|earlier|later|next|last|future)\s+{session}s?\b"),
        // An issue's text cited as the authority for a choice.
        format!(r"(?i)\bthe\s+{issue}(?:'s\b|\s+(?:asks|says|wants)\b)"),
    ]
    .iter()
    .map(|p| Regex::new(p).unwrap())
    .collect()
}

/// The tracked files, relative to `root`, or why they cannot be listed.
fn tracked_files(root: &Path) -> Result<Vec<String>, String> {
    if !root.join(".git").exists() {
        return Err(format!("{} has no .git", root.display()));
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .map_err(|e| format!("git could not run: {e}"))?;
    if !out.status.success() {
        return Err(format!("git ls-files failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let list = String::from_utf8(out.stdout).map_err(|e| format!("git ls-files gave non-UTF-8 names: {e}"))?;
    Ok(list.split('\0').filter(|p| !p.is_empty()).map(str::to_owned).collect())
}

/// Up to `reach` bytes of `line` on each side of `start..end`, on character boundaries.
fn excerpt(line: &str, start: usize, end: usize, reach: usize) -> String {
    let mut from = start.saturating_sub(reach);
    while !line.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (end + reach).min(line.len());
    while !line.is_char_boundary(to) {
        to += 1;
    }
    let (left, right) = (if from > 0 { "…" } else { "" }, if to < line.len() { "…" } else { "" });
    format!("{left}{}{right}", line[from..to].trim())
}

/// `path:line: text` for each line of `text` that matches one of `patterns`.
fn history_references(path: &str, text: &str, patterns: &[Regex]) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(m) = patterns.iter().find_map(|p| p.find(line)) {
            found.push(format!("{path}:{}: {}", n + 1, excerpt(line, m.start(), m.end(), 80)));
        }
    }
    found
}

#[test]
fn tracked_files_make_no_reference_to_development_history() {
    let root = workspace_root();
    let files = match tracked_files(&root) {
        Ok(files) => files,
        Err(why) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("the tracked files cannot be listed under CI: {why}");
            }
            eprintln!("skipping: {why} (set CI=true to make this a failure)");
            return;
        }
    };
    let patterns = patterns();
    let mut found = Vec::new();
    let mut read = 0;
    for path in &files {
        if SKIPPED.iter().any(|prefix| path.starts_with(prefix)) {
            continue;
        }
        // A tracked file deleted in the working tree, or a submodule's directory: nothing to read.
        let Ok(bytes) = std::fs::read(root.join(path)) else { continue };
        // Binary files (weights, images) are not text.
        if bytes.iter().take(8192).any(|&b| b == 0) {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else { continue };
        read += 1;
        found.extend(history_references(path, &text, &patterns));
    }
    assert!(read > 100, "only {read} text files read of {} tracked: is {} the workspace?", files.len(), root.display());
    assert!(
        found.is_empty(),
        "{} line(s) refer to the development history by a work session's or an issue's number or \
         place; say what the product does and why, with a date (YYYY-MM-DD) or a commit hash where \
         history matters:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_patterns_flag_history_and_spare_product_text() {
    let (session, issue) = (concat!("ses", "sion"), concat!("iss", "ue"));
    let capitalised = |word: &str| word[..1].to_uppercase() + &word[1..];
    let patterns = patterns();
    let flagged = |line: &str| !history_references("x", line, &patterns).is_empty();
    for line in [
        format!("the default since {session} 36"),
        format!("{} 33 measured it on an H200", capitalised(session)),
        format!("each change of {session}s 37–40 switched off"),
        format!("the GPU check of {issue} 33"),
        format!("({issue} 16)"),
        format!("{issue} #7's bench"),
        format!("the {issue}-17 target"),
        format!("fn {issue}_34_is_met()"),
        format!("as the previous {session} left it"),
        format!("until a later {session} measures it"),
        format!("{} {session}s ran it", capitalised("earlier")),
        format!("the {issue}'s setting"),
        format!("what the {issue} asks for"),
    ] {
        assert!(flagged(&line), "not flagged: {line:?}");
    }
    for line in [
        format!("report it as a GitHub {issue}"),
        format!("an HTTP {session} cookie"),
        format!("a Python {session}: the set-up notes"),
        format!("https://github.com/huggingface/candle/{issue}s/1241"),
        format!("no {issue}: the scores are the same"),
        "chunk #0 chars 0–4".to_owned(),
        "Unicode sentence boundaries, UAX #29".to_owned(),
        "s01: i64, s02: i64".to_owned(),
        "measured on an H200 on 2026-11-27 (commit 2a6340c)".to_owned(),
    ] {
        assert!(!flagged(&line), "flagged: {line:?}");
    }
}
