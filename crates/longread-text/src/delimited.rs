//! CSV and TSV inputs: a file named `*.csv` (commas) or `*.tsv` (tabs) is read wherever JSON
//! lines are — documents, labelled data, embeddings, calibration — as the same records: a
//! header row names the columns, one of them `text`; every other column becomes a field, so
//! `label`, `id` and task columns mean what they mean in JSON lines.
//!
//! A cell is what JSON lines would hold: a canonical integer (`0`, `17`, `-3`; not `007`) is a
//! number — as pandas' `to_json` writes integer labels, so that `0`/`1` labels are label
//! indices in both formats — anything else is a string, kept as written (an id `007` stays
//! `"007"`), and an empty cell is an absent field. Quoting and multi-line fields follow RFC 4180
//! (the `csv` crate). Each record is named by the line it starts on, the header being line 1.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Read;
use std::rc::Rc;

use serde_json::{Map, Number, Value};

use crate::error::{Result, TextError};
use crate::jsonl::{Record, BOM};

/// The delimiter of an input named `*.csv` or `*.tsv` (any case, `.gz` after it or not), else
/// `None` (JSON lines).
pub fn delimiter_of(source_name: &str) -> Option<u8> {
    let lower = crate::compressed::format_name(source_name).to_ascii_lowercase();
    if lower.ends_with(".csv") {
        Some(b',')
    } else if lower.ends_with(".tsv") {
        Some(b'\t')
    } else {
        None
    }
}

/// Every data row of a CSV/TSV input as a record (see the module), or the error that names its
/// line. A header without a `text` column, or with a column named twice, is one error.
pub fn read_rows<'a>(
    reader: impl Read + 'a,
    source_name: &str,
    delimiter: u8,
    allow_empty: bool,
) -> Box<dyn Iterator<Item = Result<Record>> + 'a> {
    let lines = Rc::new(RefCell::new(Lines::default()));
    let indexed = LineIndex { inner: reader, offset: 0, lines: lines.clone() };
    let mut csv = csv::ReaderBuilder::new().delimiter(delimiter).has_headers(true).from_reader(indexed);
    let name: Rc<str> = source_name.into();
    let bad = move |line: usize, message: String| TextError::BadLine { source_name: name.to_string(), line, message };
    // A record's line as editors count it (the csv crate's own numbers leave out blank lines).
    let line_of = move |position: Option<&csv::Position>| {
        lines.borrow_mut().first_line_from(position.map_or(0, csv::Position::byte))
    };
    let columns = match header(&mut csv) {
        Ok(columns) => columns,
        Err(message) => return Box::new(std::iter::once(Err(bad(1, message)))),
    };
    let mut stopped = false;
    Box::new(csv.into_byte_records().map_while(move |row| {
        if stopped {
            return None;
        }
        Some(match row {
            Ok(row) => {
                let line = line_of(row.position());
                record(&columns, &row, line, allow_empty).map_err(|message| bad(line, message))
            }
            Err(e) => {
                let line = line_of(e.position());
                // After a failed read the rest of the input is not trustworthy; a row of the
                // wrong length is an error of its own and the reading goes on.
                stopped = !matches!(e.kind(), csv::ErrorKind::UnequalLengths { .. });
                Err(bad(line, row_error(&e)))
            }
        })
    }))
}

/// A reader that notes, as it passes bytes on, where each line ends and which lines are blank
/// (nothing but a `\r`): the csv crate skips blank lines and counts neither them nor, in a
/// record's position, where it skipped them.
struct LineIndex<R> {
    inner: R,
    offset: u64,
    lines: Rc<RefCell<Lines>>,
}

/// The lines seen and not yet passed (queries come in input order, so what lies before the
/// last one asked about is let go: memory stays flat in the input's length).
#[derive(Default)]
struct Lines {
    /// Lines let go.
    passed: usize,
    /// Each line not yet passed: the offset of its `\n`, and whether it is blank.
    ends: VecDeque<(u64, bool)>,
    /// Whether the current line has held anything but `\r` yet.
    content: bool,
}

impl Lines {
    /// The 1-based line of the first non-blank line at or after `byte` (no smaller than the
    /// previous call's `byte`).
    fn first_line_from(&mut self, byte: u64) -> usize {
        // `<=`: after a `\r\n`, the csv crate starts the next record at the `\n`, which ends
        // the line before.
        while self.ends.front().is_some_and(|&(at, _)| at <= byte) {
            self.ends.pop_front();
            self.passed += 1;
        }
        let skipped = self.ends.iter().take_while(|&&(_, blank)| blank).count();
        self.passed + skipped + 1
    }
}

impl<R: Read> Read for LineIndex<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut lines = self.lines.borrow_mut();
        for (i, &b) in buf[..n].iter().enumerate() {
            match b {
                b'\n' => {
                    let blank = !lines.content;
                    lines.ends.push_back((self.offset + i as u64, blank));
                    lines.content = false;
                }
                b'\r' => {}
                _ => lines.content = true,
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

/// The column names (the first without a byte order mark, each trimmed), or why they cannot be.
fn header<R: Read>(csv: &mut csv::Reader<R>) -> std::result::Result<Vec<String>, String> {
    let names = csv.byte_headers().map_err(|e| row_error(&e))?.clone();
    let mut columns = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let name =
            std::str::from_utf8(name).map_err(|_| format!("the header's column {} is not valid UTF-8", i + 1))?;
        let name = name.trim_start_matches(BOM).trim().to_owned();
        if columns.contains(&name) {
            return Err(format!("the header names column {name:?} twice"));
        }
        columns.push(name);
    }
    if !columns.iter().any(|c| c == "text") {
        return Err(format!(
            "the header has no \"text\" column (its columns: {}); the first row names the columns",
            columns.join(", ")
        ));
    }
    Ok(columns)
}

/// One data row as a record.
fn record(
    columns: &[String],
    row: &csv::ByteRecord,
    line: usize,
    allow_empty: bool,
) -> std::result::Result<Record, String> {
    let mut text = None;
    let mut fields = Map::new();
    for (column, cell) in columns.iter().zip(row) {
        let cell = std::str::from_utf8(cell).map_err(|e| {
            format!("column {column:?} is not valid UTF-8 (invalid byte at column {})", e.valid_up_to() + 1)
        })?;
        if column == "text" {
            text = Some(cell.to_owned());
        } else if !cell.is_empty() {
            fields.insert(column.clone(), cell_value(cell));
        }
    }
    let text = text.unwrap_or_default();
    if !allow_empty && text.trim().is_empty() {
        return Err("\"text\" is empty".into());
    }
    Ok(Record { line, text, fields })
}

/// A canonical integer as a JSON number, anything else as a string.
fn cell_value(cell: &str) -> Value {
    let number = cell.parse::<i64>().ok().filter(|n| n.to_string() == cell).map(Number::from);
    let number = number.or_else(|| cell.parse::<u64>().ok().filter(|n| n.to_string() == cell).map(Number::from));
    number.map_or_else(|| Value::String(cell.to_owned()), Value::Number)
}

/// A reading error without the position the caller puts in front of it.
fn row_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("{len} fields where the header has {expected_len} (quote a field that holds the delimiter)")
        }
        csv::ErrorKind::Io(io) => io.to_string(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(input: &str, name: &str) -> Vec<std::result::Result<Record, String>> {
        read_rows(input.as_bytes(), name, delimiter_of(name).unwrap(), false)
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn the_delimiter_follows_the_name() {
        assert_eq!(delimiter_of("data/Train.CSV"), Some(b','));
        assert_eq!(delimiter_of("x.tsv"), Some(b'\t'));
        assert_eq!(delimiter_of("x.jsonl"), None);
        assert_eq!(delimiter_of("<stdin>"), None);
    }

    #[test]
    fn rows_read_as_json_lines_would() {
        let input = "\u{feff}id,text ,label,note\n007,\"Rain, then sun\nall day\",1,\n8,\"She said \"\"no\"\"\",mature,-3\n\n9,plain,2.5,x\n";
        let records: Vec<Record> = rows(input, "d.csv").into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].line, 2);
        assert_eq!(records[0].text, "Rain, then sun\nall day");
        assert_eq!(records[0].fields["id"], "007", "an id keeps its zeros");
        assert_eq!(records[0].fields["label"], 1, "integers are numbers, as in pandas' JSON lines");
        assert!(!records[0].fields.contains_key("note"), "an empty cell is an absent field");
        assert_eq!(records[1].line, 4, "the line a record starts on");
        assert_eq!(records[1].text, "She said \"no\"");
        assert_eq!(records[1].fields["label"], "mature");
        assert_eq!(records[1].fields["note"], -3);
        assert_eq!(records[2].line, 6, "blank lines are skipped but counted");
        assert_eq!(records[2].fields["label"], "2.5");
        let keys: Vec<&String> = records[1].fields.keys().collect();
        assert_eq!(keys, ["id", "label", "note"], "the header's order");
    }

    #[test]
    fn lines_ending_in_crlf_are_counted_as_editors_count_them() {
        let input = "id,text,label\r\na,\"two\r\nlines\",1\r\n\r\nb,one,2\r\nc,,3\r\n";
        let read = rows(input, "d.csv");
        assert_eq!(read[0].as_ref().unwrap().line, 2);
        assert_eq!(read[1].as_ref().unwrap().line, 5, "after a two-line record and a blank line");
        assert_eq!(read[2].as_ref().unwrap_err(), "d.csv:6: \"text\" is empty");
    }

    #[test]
    fn tabs_separate_tsv() {
        let records = rows("text\tlabel\na, b\tx\n", "d.tsv");
        let record = records[0].as_ref().unwrap();
        assert_eq!((record.text.as_str(), &record.fields["label"]), ("a, b", &Value::from("x")));
    }

    #[test]
    fn each_problem_names_its_line_and_reading_goes_on_past_a_short_row() {
        let read = rows("text,label\nok,1\nshort\n,2\nfine,3\n", "d.csv");
        assert!(read[0].is_ok() && read[3].is_ok(), "{read:?}");
        assert_eq!(
            read[1].as_ref().unwrap_err(),
            "d.csv:3: 1 fields where the header has 2 (quote a field that holds the delimiter)"
        );
        assert_eq!(read[2].as_ref().unwrap_err(), "d.csv:4: \"text\" is empty");
        let bytes = b"text,label\nok,\xff\n";
        let read: Vec<_> = read_rows(&bytes[..], "d.csv", b',', true).collect();
        assert!(read[0].as_ref().unwrap_err().to_string().contains("d.csv:2: column \"label\" is not valid UTF-8"));
    }

    #[test]
    fn a_header_without_text_or_with_a_twice_named_column_is_one_error() {
        let read = rows("body,label\nx,1\n", "d.csv");
        assert_eq!(read.len(), 1);
        assert!(read[0]
            .as_ref()
            .unwrap_err()
            .starts_with("d.csv:1: the header has no \"text\" column (its columns: body, label)"));
        let read = rows("text,label,label\nx,1,2\n", "d.csv");
        assert_eq!(read[0].as_ref().unwrap_err(), "d.csv:1: the header names column \"label\" twice");
    }
}
