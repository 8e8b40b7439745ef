//! Documents to classify, from JSON lines (a file or standard input), one `.txt` file, or a
//! directory of `.txt` files.

use std::io::BufRead;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, TextError};
use crate::source::DocumentSource;

/// One document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The `"id"` field, the file name, or the 0-based position in the input.
    pub id: Value,
    /// The text (may be empty: such a document fails on its own, not the batch).
    pub text: String,
    /// Other fields of a JSON-lines record (e.g. `"label"`), in input order.
    pub fields: Map<String, Value>,
    /// A problem found while reading this document (e.g. a `.txt` file that is not UTF-8, or
    /// a JSON line that could not be parsed: its id is then `null`).
    pub error: Option<String>,
    /// 1-based line of a JSON-lines input (`None` for `.txt` files and in-memory texts).
    pub line: Option<usize>,
}

impl Document {
    /// A document made of `text` alone, with this id.
    pub fn new(id: impl Into<Value>, text: impl Into<String>) -> Self {
        Self { id: id.into(), text: text.into(), fields: Map::new(), error: None, line: None }
    }

    /// True for a JSON line that could not be read as a document (no id, no text).
    pub fn is_unreadable_line(&self) -> bool {
        self.id.is_null() && self.line.is_some() && self.error.is_some()
    }
}

/// Reads every document of `path` at once (see [`DocumentSource`], which reads them one at a
/// time): `-` (JSON lines on `stdin`), a directory (every `*.txt`, sorted by name, id = file
/// name), a `.txt` file (one document) or a JSON-lines file. With `strict`, a JSON line that
/// cannot be read fails the whole input; without, it becomes a document of its own with an
/// error (see [`Document::is_unreadable_line`]).
pub fn read_documents(
    path: &Path,
    stdin: impl FnOnce() -> Box<dyn BufRead + Send>,
    strict: bool,
) -> Result<Vec<Document>> {
    DocumentSource::open(path, stdin, strict, None)?.documents().collect()
}

/// Whether `path` names a text file: `*.txt`, or `*.txt.gz` (inflated when read).
pub(crate) fn is_text_file_name(path: &Path) -> bool {
    path.file_name().is_some_and(|n| crate::compressed::format_name(&n.to_string_lossy()).ends_with(".txt"))
}

/// A `.txt` document's id: its file name.
fn file_id(path: &Path) -> Value {
    Value::from(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
}

/// A file of a directory that could not be read: a document that fails on its own.
pub(crate) fn unreadable_file(path: &Path, error: TextError) -> Document {
    let id = file_id(path);
    let why = match error {
        TextError::Io { source, .. } => format!("cannot be read: {source}"),
        other => other.to_string(),
    };
    Document { id, text: String::new(), fields: Map::new(), error: Some(why), line: None }
}

pub(crate) fn text_file(path: &Path) -> Result<Document> {
    let io = |source| TextError::Io { path: path.to_owned(), source };
    let bytes = crate::compressed::read_text_file(path, crate::compressed::MAX_TEXT_BYTES).map_err(io)?;
    let id = file_id(path);
    let (text, error) = match String::from_utf8(bytes) {
        Ok(text) => (text.strip_prefix(crate::jsonl::BOM).map(str::to_owned).unwrap_or(text), None),
        Err(e) => {
            (String::new(), Some(format!("not valid UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to())))
        }
    };
    Ok(Document { id, text, fields: Map::new(), error, line: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stdin() -> Box<dyn BufRead + Send> {
        Box::new(std::io::empty())
    }

    /// A `.txt` entry that cannot be read (a dangling link) vanished from the output; it is now a
    /// failed document of its own, and a pipe named `.txt` is left out (reading it would wait).
    #[test]
    fn an_unreadable_file_of_a_directory_fails_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "first").unwrap();
        std::os::unix::fs::symlink("/nonexistent/x.txt", dir.path().join("b.txt")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(dir.path().join("c.txt")).status().unwrap().success());
        let docs = read_documents(dir.path(), no_stdin, true).unwrap();
        let ids: Vec<_> = docs.iter().map(|d| d.id.as_str().unwrap()).collect();
        assert_eq!(ids, vec!["a.txt", "b.txt"]);
        assert_eq!(docs[0].error, None);
        let why = docs[1].error.as_deref().unwrap();
        assert!(why.starts_with("cannot be read: No such file or directory"), "{why}");
    }

    #[test]
    fn directory_reads_txt_files_sorted_with_file_name_ids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), "second").unwrap();
        std::fs::write(dir.path().join("a.txt"), "first").unwrap();
        std::fs::write(dir.path().join("c.txt"), b"caf\xe9").unwrap();
        std::fs::write(dir.path().join("notes.md"), "ignored").unwrap();
        let docs = read_documents(dir.path(), no_stdin, true).unwrap();
        let ids: Vec<_> = docs.iter().map(|d| d.id.as_str().unwrap()).collect();
        assert_eq!(ids, vec!["a.txt", "b.txt", "c.txt"]);
        assert_eq!(docs[0].text, "first");
        assert!(docs[2].error.as_deref().unwrap().contains("not valid UTF-8"));
    }

    /// A text file saved with a byte order mark (as Windows tools do) reads without it, so that
    /// the chunks' character offsets start at its first real character.
    #[test]
    fn a_text_files_byte_order_mark_is_not_part_of_its_text() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "\u{feff}Hello").unwrap();
        std::fs::write(dir.path().join("b.jsonl"), "\u{feff}{\"text\": \"Hi\"}\n").unwrap();
        let docs = read_documents(&dir.path().join("a.txt"), no_stdin, true).unwrap();
        assert_eq!(docs[0].text, "Hello");
        let docs = read_documents(&dir.path().join("b.jsonl"), no_stdin, true).unwrap();
        assert_eq!(docs[0].text, "Hi");
    }

    /// A directory without text files says so (it once said "the file is empty").
    #[test]
    fn a_directory_without_txt_files_is_an_error_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.md"), "ignored").unwrap();
        let err = read_documents(dir.path(), no_stdin, true).expect_err("no documents").to_string();
        assert!(err.ends_with("no input records (the directory has no *.txt files)"), "{err}");
    }

    #[test]
    fn jsonl_keeps_empty_texts_and_takes_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docs.jsonl");
        std::fs::write(&path, "{\"id\": \"x\", \"text\": \"\", \"label\": 1}\n{\"text\": \"b\"}\n").unwrap();
        let docs = read_documents(&path, no_stdin, true).unwrap();
        assert_eq!(docs[0].id, "x");
        assert_eq!(docs[0].text, "");
        assert_eq!(docs[0].fields["label"], 1);
        assert_eq!(docs[1].id, 1);
    }

    #[test]
    fn stdin_is_read_for_dash() {
        let docs = read_documents(Path::new("-"), || Box::new(&b"{\"text\": \"hi\"}\n"[..]), true).unwrap();
        assert_eq!(docs[0].line, Some(1));
        assert_eq!(docs[0].text, "hi");
    }

    #[test]
    fn a_malformed_line_is_a_document_error_unless_strict() {
        let input = || -> Box<dyn BufRead + Send> {
            Box::new(&b"{\"text\": \"a\"}\n{oops\n{\"id\": \"c\", \"text\": \"b\"}\n"[..])
        };
        let docs = read_documents(Path::new("-"), input, false).unwrap();
        assert_eq!(docs.len(), 3);
        assert!(docs[1].is_unreadable_line() && docs[1].line == Some(2), "{:?}", docs[1]);
        assert!(docs[1].error.as_deref().unwrap().starts_with("invalid JSON"));
        assert!(!docs[0].is_unreadable_line() && docs[2].id == "c" && docs[2].line == Some(3));
        let err = read_documents(Path::new("-"), input, true).unwrap_err().to_string();
        assert!(err.starts_with("<stdin>:2: invalid JSON"), "{err}");
    }
}
