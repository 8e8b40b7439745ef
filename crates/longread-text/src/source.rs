//! Documents read as they are used: an input opened once, then walked one document at a time,
//! so that classifying a directory of 100,000 transcripts or a JSON-lines file of many
//! gigabytes holds only the documents in flight, not the whole input.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::documents::{is_text_file_name, text_file, unreadable_file, Document};
use crate::error::{Result, TextError};
use crate::jsonl::{read_lines, Record};
use crate::Shard;

/// An input of documents, opened (a missing file or an empty directory is an error here) and
/// not yet read: `-` (JSON lines on standard input), a directory (every `*.txt`, sorted by
/// name, id = file name), a `.txt` file (one document) or a JSON-lines / CSV / TSV file.
pub struct DocumentSource {
    kind: Kind,
    /// The input's name, for messages.
    name: String,
    /// The shard to keep of a line input (the others' shards are chosen when opened).
    shard: Option<Shard>,
    /// A line input that is a regular file, which can be read through twice.
    path: Option<PathBuf>,
    strict: bool,
}

enum Kind {
    /// Read whole when opened: a `.txt` file, or a pipe read strictly (its bad line must stop
    /// the run before anything is written, and a pipe cannot be read twice).
    Read(Vec<Document>),
    /// The files of a directory, each read when its turn comes.
    Files(Vec<PathBuf>),
    /// JSON lines or CSV/TSV rows, parsed as they are read.
    Lines(Box<dyn BufRead + Send>),
}

impl DocumentSource {
    /// Opens `path` (`-` takes `stdin`). With `strict`, a line that cannot be read is an error
    /// (see [`DocumentSource::count`]); without, it becomes a document of its own with an error
    /// ([`Document::is_unreadable_line`]). `shard` keeps only that shard's documents.
    pub fn open(
        path: &Path,
        stdin: impl FnOnce() -> Box<dyn BufRead + Send>,
        strict: bool,
        shard: Option<Shard>,
    ) -> Result<Self> {
        let io = |source: std::io::Error| TextError::Io { path: path.to_owned(), source };
        let source = |kind, name: String, path| Self { kind, name, shard, path, strict };
        let pick = |documents: Vec<Document>| match shard {
            Some(shard) => shard.select(documents),
            None => documents,
        };
        if path.as_os_str() == "-" {
            return source(Kind::Lines(stdin()), "<stdin>".into(), None).read_now_if_strict();
        }
        let name = path.display().to_string();
        if path.is_dir() {
            // Regular files, and `.txt` entries that cannot be followed (a dangling link): those
            // fail as documents of their own instead of vanishing from the output. Pipes and
            // devices are left out (reading one could wait forever).
            let mut files: Vec<_> = std::fs::read_dir(path)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_text_file_name(p))
                .filter(|p| std::fs::metadata(p).map_or(true, |m| m.is_file()))
                .collect();
            if files.is_empty() {
                return Err(TextError::EmptyInput { source_name: name, why: "the directory has no *.txt files" });
            }
            files.sort();
            let files = files.into_iter().enumerate().filter(|(i, _)| shard.is_none_or(|s| s.holds_position(*i)));
            return Ok(source(Kind::Files(files.map(|(_, f)| f).collect()), name, None));
        }
        if is_text_file_name(path) {
            return Ok(source(Kind::Read(pick(vec![text_file(path)?])), name, None));
        }
        let file = std::fs::File::open(path).map_err(io)?;
        let regular = file.metadata().map_err(io)?.is_file();
        let lines = Kind::Lines(Box::new(std::io::BufReader::new(file)));
        if regular {
            Ok(source(lines, name, Some(path.to_owned())))
        } else {
            // A pipe (`<(...)`, /dev/stdin) is read once, as standard input is.
            source(lines, name, None).read_now_if_strict()
        }
    }

    /// A pipe read strictly is read whole now: its first bad line is the error before anything
    /// is classified, as for a file ([`DocumentSource::count`]).
    fn read_now_if_strict(self) -> Result<Self> {
        if !self.strict {
            return Ok(self);
        }
        let (name, strict) = (self.name.clone(), self.strict);
        let documents = self.documents().collect::<Result<Vec<_>>>()?;
        Ok(Self { kind: Kind::Read(documents), name, shard: None, path: None, strict })
    }

    /// The input's name for messages (`<stdin>` for `-`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many documents the input holds (its shard's), when that can be known before reading
    /// them: a line input that is a regular file is read through once for it, holding one
    /// record at a time — when strict, a line that cannot be read is the error here, before
    /// anything is classified. `None` for a pipe read leniently: it can be read only once.
    pub fn count(&self) -> Result<Option<usize>> {
        match (&self.kind, &self.path) {
            (Kind::Read(documents), _) => Ok(Some(documents.len())),
            (Kind::Files(files), _) => Ok(Some(files.len())),
            (Kind::Lines(_), None) => Ok(None),
            (Kind::Lines(_), Some(path)) => {
                let file = std::fs::File::open(path).map_err(|source| TextError::Io { path: path.clone(), source })?;
                let reader = Box::new(std::io::BufReader::new(file));
                let mut n = 0;
                for document in line_documents(reader, &self.name, self.strict, self.shard) {
                    document?;
                    n += 1;
                }
                Ok(Some(n))
            }
        }
    }

    /// The documents, in input order, each read when asked for. A line that cannot be read
    /// ends them with its error when strict; an input without any record ends with
    /// [`TextError::EmptyInput`]. Not `Send` (a CSV reader keeps line numbers in an `Rc`): walk
    /// it on the thread that makes it.
    pub fn documents(self) -> Box<dyn Iterator<Item = Result<Document>>> {
        match self.kind {
            Kind::Read(documents) => Box::new(documents.into_iter().map(Ok)),
            Kind::Files(files) => {
                Box::new(files.into_iter().map(|f| Ok(text_file(&f).unwrap_or_else(|e| unreadable_file(&f, e)))))
            }
            Kind::Lines(reader) => line_documents(reader, &self.name, self.strict, self.shard),
        }
    }
}

/// Every record of a JSON-lines or CSV/TSV input as a document (the id is the `"id"` field, or
/// the record's 0-based place), keeping `shard`'s; see [`DocumentSource::documents`].
fn line_documents(
    reader: Box<dyn BufRead + Send>,
    name: &str,
    strict: bool,
    shard: Option<Shard>,
) -> Box<dyn Iterator<Item = Result<Document>>> {
    let mut seen = false;
    let mut ended = false;
    let empty =
        TextError::EmptyInput { source_name: name.to_owned(), why: "the input is empty or holds only blank lines" };
    let mut empty = Some(empty);
    let mut lines = read_lines(reader, name, true).enumerate();
    Box::new(std::iter::from_fn(move || loop {
        if ended {
            return None;
        }
        let Some((i, line)) = lines.next() else {
            ended = true;
            return if seen { None } else { empty.take().map(Err) };
        };
        seen = true;
        let document = match line {
            Ok(record) => record_document(i, record),
            Err(e) if strict => {
                ended = true;
                return Some(Err(e));
            }
            Err(e) => unreadable_line(e),
        };
        if shard.is_none_or(|s| s.holds(&document, i)) {
            return Some(Ok(document));
        }
    }))
}

/// A record as a document: its `"id"` field, or its 0-based place `i` among the records.
fn record_document(i: usize, mut record: Record) -> Document {
    Document {
        id: record.fields.shift_remove("id").unwrap_or(Value::from(i)),
        text: record.text,
        fields: record.fields,
        error: None,
        line: Some(record.line),
    }
}

/// A line that could not be read, as a document that fails on its own.
fn unreadable_line(error: TextError) -> Document {
    let (line, message) = match error {
        TextError::BadLine { line, message, .. } => (line, message),
        other => (0, other.to_string()),
    };
    Document { id: Value::Null, text: String::new(), fields: Map::new(), error: Some(message), line: Some(line) }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn no_stdin() -> Box<dyn BufRead + Send> {
        Box::new(std::io::empty())
    }

    /// A reader that counts the bytes taken from it.
    struct Counted(std::io::Cursor<Vec<u8>>, Arc<AtomicUsize>);

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        }
    }

    /// Standard input is read as the documents are asked for, not whole first (a large input
    /// was held in memory before classifying began).
    #[test]
    fn lines_are_read_as_the_documents_are_asked_for() {
        let input: String = (0..20_000).map(|i| format!("{{\"text\": \"document {i}\"}}\n")).collect();
        let total = input.len();
        let taken = Arc::new(AtomicUsize::new(0));
        let reader = Counted(std::io::Cursor::new(input.into_bytes()), taken.clone());
        let source =
            DocumentSource::open(Path::new("-"), || Box::new(std::io::BufReader::new(reader)), false, None).unwrap();
        assert_eq!(source.count().unwrap(), None, "a pipe cannot be counted without reading it");
        let mut documents = source.documents();
        assert_eq!(documents.next().unwrap().unwrap().text, "document 0");
        assert!(taken.load(Ordering::Relaxed) < total / 10, "read {} of {total} bytes", taken.load(Ordering::Relaxed));
        assert_eq!(documents.count(), 19_999);
        assert_eq!(taken.load(Ordering::Relaxed), total);
    }

    /// A file is counted by reading it through (its shard's documents, bad lines included when
    /// lenient); strictly, its bad line is the counting's error, before any document is used.
    #[test]
    fn a_file_is_counted_and_checked_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docs.jsonl");
        std::fs::write(&path, "{\"text\": \"a\"}\n\n{oops\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n").unwrap();
        let lenient = DocumentSource::open(&path, no_stdin, false, None).unwrap();
        assert_eq!(lenient.count().unwrap(), Some(4));
        assert_eq!(lenient.documents().filter(|d| d.as_ref().unwrap().is_unreadable_line()).count(), 1);
        let shard = Some(Shard { index: 0, count: 2 });
        let sharded = DocumentSource::open(&path, no_stdin, false, shard).unwrap();
        assert_eq!(sharded.count().unwrap(), Some(3), "lines 1, 3 and 5 (by line number)");
        let lines: Vec<Option<usize>> = sharded.documents().map(|d| d.unwrap().line).collect();
        assert_eq!(lines, [Some(1), Some(3), Some(5)]);
        let strict = DocumentSource::open(&path, no_stdin, true, shard).unwrap();
        let err = strict.count().unwrap_err().to_string();
        assert!(err.contains("docs.jsonl:3: invalid JSON"), "{err}");
    }

    /// Standard input read strictly is read whole when opened (its bad line is the error then);
    /// an input without records ends its documents with an error saying so.
    #[test]
    fn strict_stdin_is_checked_when_opened_and_empty_input_is_an_error() {
        let bad = || -> Box<dyn BufRead + Send> { Box::new(&b"{\"text\": \"a\"}\n[1]\n"[..]) };
        let err = DocumentSource::open(Path::new("-"), bad, true, None).err().unwrap().to_string();
        assert!(err.starts_with("<stdin>:2: expected a JSON object"), "{err}");
        let good = || -> Box<dyn BufRead + Send> { Box::new(&b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n"[..]) };
        assert_eq!(DocumentSource::open(Path::new("-"), good, true, None).unwrap().count().unwrap(), Some(2));
        let blank = || -> Box<dyn BufRead + Send> { Box::new(&b"\n\n"[..]) };
        let mut documents = DocumentSource::open(Path::new("-"), blank, false, None).unwrap().documents();
        let err = documents.next().unwrap().unwrap_err().to_string();
        assert!(err.contains("no input records"), "{err}");
        assert!(documents.next().is_none());
    }

    /// Compressed inputs: a `.jsonl.gz` file (counted and read), standard input, a `.txt.gz`
    /// file and one in a directory, beside a plain `.txt`.
    #[test]
    fn gzip_compressed_inputs_read_as_their_text() {
        use crate::compressed::tests::gzip;
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("docs.jsonl.gz");
        std::fs::write(&jsonl, gzip(b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n")).unwrap();
        let source = DocumentSource::open(&jsonl, no_stdin, true, None).unwrap();
        assert_eq!(source.count().unwrap(), Some(2));
        assert_eq!(source.documents().map(|d| d.unwrap().text).collect::<Vec<_>>(), ["a", "b"]);
        let stdin = || -> Box<dyn BufRead + Send> { Box::new(std::io::Cursor::new(gzip(b"{\"text\": \"c\"}\n"))) };
        let source = DocumentSource::open(Path::new("-"), stdin, false, None).unwrap();
        assert_eq!(source.documents().next().unwrap().unwrap().text, "c");
        let texts = dir.path().join("texts");
        std::fs::create_dir(&texts).unwrap();
        std::fs::write(texts.join("a.txt.gz"), gzip("caf\u{e9}".as_bytes())).unwrap();
        std::fs::write(texts.join("b.txt"), "plain").unwrap();
        let documents: Vec<Document> =
            DocumentSource::open(&texts, no_stdin, true, None).unwrap().documents().map(|d| d.unwrap()).collect();
        assert_eq!((documents[0].id.as_str(), documents[0].text.as_str()), (Some("a.txt.gz"), "caf\u{e9}"));
        assert_eq!(documents[1].text, "plain");
        let one = DocumentSource::open(&texts.join("a.txt.gz"), no_stdin, true, None).unwrap();
        assert_eq!(one.documents().next().unwrap().unwrap().text, "caf\u{e9}");
    }

    /// A directory's shard is chosen by place in the sorted listing, and counted without
    /// reading any file.
    #[test]
    fn a_directory_is_sharded_by_place_and_its_files_read_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["c", "a", "b", "d"] {
            std::fs::write(dir.path().join(format!("{name}.txt")), name).unwrap();
        }
        let source = DocumentSource::open(dir.path(), no_stdin, true, Some(Shard { index: 1, count: 2 })).unwrap();
        assert_eq!(source.count().unwrap(), Some(2));
        std::fs::remove_file(dir.path().join("d.txt")).unwrap();
        let documents: Vec<Document> = source.documents().map(|d| d.unwrap()).collect();
        assert_eq!(documents[0].text, "b");
        assert_eq!(documents[1].id, "d.txt");
        assert!(documents[1].error.as_deref().unwrap().starts_with("cannot be read"), "read when its turn came");
    }
}
