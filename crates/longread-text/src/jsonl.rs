//! JSON-lines input: one object per line with a `"text"` field; every other field is kept.

use std::io::BufRead;

use serde_json::{Map, Value};

use crate::error::{Result, TextError};

/// The UTF-8 byte order mark: dropped where a line or a text file starts with it.
pub const BOM: char = '\u{feff}';

/// One input line.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// 1-based line number in the input.
    pub line: usize,
    /// The text.
    pub text: String,
    /// Every other field of the object, in input order.
    pub fields: Map<String, Value>,
}

/// Reads every record; blank lines are skipped. Invalid UTF-8, invalid JSON, a missing,
/// non-string or empty `"text"` and an input without records are errors naming the line.
pub fn read_records(reader: impl BufRead, source_name: &str) -> Result<Vec<Record>> {
    read(reader, source_name, false)
}

/// Why an input without a line holds no records.
const NO_LINES: &str = "the input is empty or holds only blank lines";

fn read(reader: impl BufRead, source_name: &str, allow_empty: bool) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    for line in read_lines(reader, source_name, allow_empty) {
        records.push(line?);
    }
    if records.is_empty() {
        return Err(TextError::EmptyInput { source_name: source_name.to_owned(), why: NO_LINES });
    }
    Ok(records)
}

/// Like [`read_records`], but an empty `"text"` is kept (its document fails on its own later)
/// and a line that cannot be read (invalid UTF-8 or
/// JSON, no `"text"`) is an error of its own, in input order, and the other lines are kept:
/// one bad line among millions does not stop a job. An input without any line is an error.
pub fn read_records_lenient(reader: impl BufRead, source_name: &str) -> Result<Vec<Result<Record>>> {
    let lines: Vec<Result<Record>> = read_lines(reader, source_name, true).collect();
    if lines.is_empty() {
        return Err(TextError::EmptyInput { source_name: source_name.to_owned(), why: NO_LINES });
    }
    Ok(lines)
}

/// Every non-blank line as a record or the error that names it; the rows of an input named
/// `*.csv` or `*.tsv` likewise ([`crate::delimited`]).
pub(crate) fn read_lines<'a>(
    reader: impl BufRead + 'a,
    source_name: &str,
    allow_empty: bool,
) -> Box<dyn Iterator<Item = Result<Record>> + 'a> {
    read_lines_within(reader, source_name, allow_empty, crate::compressed::MAX_TEXT_BYTES)
}

/// [`read_lines`], with lines of at most `limit` bytes: a longer one is the last item, an
/// error saying so.
fn read_lines_within<'a>(
    reader: impl BufRead + 'a,
    source_name: &str,
    allow_empty: bool,
    limit: u64,
) -> Box<dyn Iterator<Item = Result<Record>> + 'a> {
    let reader = match crate::compressed::text_lines(reader, limit) {
        Ok(reader) => reader,
        Err(e) => {
            let message = e.to_string();
            return Box::new(std::iter::once(Err(TextError::BadLine {
                source_name: source_name.into(),
                line: 1,
                message,
            })));
        }
    };
    if let Some(delimiter) = crate::delimited::delimiter_of(source_name) {
        return crate::delimited::read_rows(reader, source_name, delimiter, allow_empty);
    }
    let name: std::rc::Rc<str> = source_name.into();
    // After a failed read (a device error, a corrupt gzip stream) the rest cannot be trusted,
    // and reading on could fail forever: that line's error is the last item.
    let mut failed = false;
    Box::new(
        reader
            .split(b'\n')
            .enumerate()
            .map_while(move |(i, line)| {
                if failed {
                    return None;
                }
                failed = line.is_err();
                Some(parse_line(i + 1, line, &name, allow_empty).transpose())
            })
            .flatten(),
    )
}

/// One line as a record; `None` for a blank line.
fn parse_line(
    line_no: usize,
    line: std::io::Result<Vec<u8>>,
    source_name: &str,
    allow_empty: bool,
) -> Result<Option<Record>> {
    let bad = |message: String| TextError::BadLine { source_name: source_name.to_owned(), line: line_no, message };
    let bytes = line.map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| bad(format!("not valid UTF-8 (invalid byte at column {})", e.utf8_error().valid_up_to() + 1)))?;
    // A UTF-8 byte order mark (Windows tools write one at the start of a file; `cat` of such
    // files puts it at the start of later lines) is never JSON: it is dropped, not an error.
    let text = text.trim_start_matches(BOM).trim_end_matches('\r');
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // A line of plain text (`echo "some text" | longread predict --input -`) is the likely
        // mistake when the line does not even start as JSON does.
        let hint = if text.trim_start().starts_with(['{', '[', '"']) {
            ""
        } else {
            " (each line is a JSON object such as {\"text\": \"...\"}; a plain-text document goes in a .txt file)"
        };
        bad(format!("invalid JSON: {e}{hint}"))
    })?;
    let Value::Object(mut fields) = value else {
        return Err(bad("expected a JSON object such as {\"text\": \"...\"}".into()));
    };
    let text = match fields.shift_remove("text") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(bad(format!("\"text\" must be a string, found {}", kind(&other)))),
        None => return Err(bad("missing \"text\" field".into())),
    };
    if !allow_empty && text.trim().is_empty() {
        return Err(bad("\"text\" is empty".into()));
    }
    Ok(Some(Record { line: line_no, text, fields }))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: &[u8]) -> Result<Vec<Record>> {
        read_records(input, "in.jsonl")
    }

    #[test]
    fn keeps_other_fields_in_order_and_skips_blank_lines() {
        let r = read(b"{\"id\": 7, \"text\": \"hello\", \"lang\": \"en\"}\n\n{\"text\": \"b\"}\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].text, "hello");
        assert_eq!(r[0].fields.keys().collect::<Vec<_>>(), vec!["id", "lang"]);
        assert_eq!(r[1].line, 3);
    }

    #[test]
    fn each_bad_line_names_its_line_and_problem() {
        let cases: [(&[u8], &str); 6] = [
            (b"{\"text\": \"ok\"}\n{\"text\": \"\xff\"}", "in.jsonl:2: not valid UTF-8"),
            (b"{\"text\": ", "in.jsonl:1: invalid JSON"),
            (b"[1, 2]", "in.jsonl:1: expected a JSON object"),
            (b"{\"id\": 1}", "in.jsonl:1: missing \"text\""),
            (b"{\"text\": 3}", "in.jsonl:1: \"text\" must be a string, found a number"),
            (b"{\"text\": \"  \"}", "in.jsonl:1: \"text\" is empty"),
        ];
        for (input, expected) in cases {
            let err = read(input).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{err:?} should start with {expected:?}");
        }
        // Plain text where JSON lines were expected gets a hint; broken JSON does not.
        let err = read(b"just some text").unwrap_err().to_string();
        assert!(err.ends_with("a plain-text document goes in a .txt file)"), "{err}");
        assert!(!read(b"{\"text\": ").unwrap_err().to_string().contains(".txt"));
    }

    #[test]
    fn lenient_reading_keeps_the_good_lines_around_a_bad_one() {
        let lines = read_records_lenient(
            &b"{\"text\": \"a\"}\n{\"text\": \n\n{\"id\": 2}\n{\"text\": \"b\"}\n"[..],
            "in.jsonl",
        )
        .unwrap();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].as_ref().unwrap().text, "a");
        assert!(lines[1].as_ref().unwrap_err().to_string().starts_with("in.jsonl:2: invalid JSON"));
        assert!(lines[2].as_ref().unwrap_err().to_string().starts_with("in.jsonl:4: missing \"text\""));
        assert_eq!(lines[3].as_ref().unwrap().line, 5);
        assert!(read_records_lenient(&b"\n"[..], "in.jsonl").is_err());
    }

    #[test]
    fn a_byte_order_mark_at_the_start_of_a_line_is_dropped() {
        // As Windows tools write a file's first line, and `cat` of two such files a later one.
        let records = read("\u{feff}{\"text\": \"a\"}\r\n\u{feff}{\"text\": \"\u{feff}b\"}\n".as_bytes()).unwrap();
        assert_eq!(
            records.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
            ["a", "\u{feff}b"],
            "only before the JSON"
        );
        assert_eq!(records[1].line, 2);
        let err = read("\u{feff}\u{feff}not json\n".as_bytes()).unwrap_err().to_string();
        assert!(err.contains(":1: invalid JSON"), "{err}");
    }

    /// Inputs named `*.csv` / `*.tsv` are read as such by every reader (`crate::delimited`).
    #[test]
    fn a_csv_file_reads_as_its_records() {
        let csv = "text,label\n\"Rain, then sun\",0\n";
        let records = read_records(csv.as_bytes(), "data/train.csv").unwrap();
        assert_eq!(
            (records[0].line, records[0].text.as_str(), &records[0].fields["label"]),
            (2, "Rain, then sun", &Value::from(0))
        );
        let lenient = read_records_lenient("text\nok\n".as_bytes(), "x.TSV").unwrap();
        assert_eq!(lenient[0].as_ref().unwrap().text, "ok");
        assert!(read_records(csv.as_bytes(), "x.jsonl").unwrap_err().to_string().contains(":1: invalid JSON"));
        let empty = read_records("text,label\n".as_bytes(), "x.csv").unwrap_err().to_string();
        assert!(empty.contains("no input records"), "{empty}");
    }

    /// A gzip-compressed input reads as its text, whatever its name; a CSV's format is read
    /// from its name without `.gz`.
    #[test]
    fn gzip_inputs_read_as_their_text() {
        use crate::compressed::tests::gzip;
        let records = read(&gzip(b"{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n")).unwrap();
        assert_eq!((records[1].line, records[1].text.as_str()), (3, "b"));
        let csv = read_records(&gzip(b"text,label\nRain,0\n")[..], "train.csv.gz").unwrap();
        assert_eq!((csv[0].text.as_str(), &csv[0].fields["label"]), ("Rain", &Value::from(0)));
    }

    /// A gzip stream cut short ends with one error naming the line it reached (reading on after
    /// a failed read could fail forever, one error document at a time).
    #[test]
    fn a_failed_read_is_the_last_line() {
        use crate::compressed::tests::gzip;
        let text: String = (0..2000).map(|i| format!("{{\"text\": \"document {i}\"}}\n")).collect();
        let whole = gzip(text.as_bytes());
        let cut = &whole[..whole.len() / 2];
        let lines = read_records_lenient(cut, "cut.jsonl.gz").unwrap();
        let (last, good) = lines.split_last().unwrap();
        assert!(good.iter().all(Result::is_ok) && !good.is_empty());
        let err = last.as_ref().unwrap_err().to_string();
        assert!(err.starts_with(&format!("cut.jsonl.gz:{}:", good.len() + 1)), "{err}");
        assert!(read_records(cut, "cut.jsonl.gz").is_err());
    }

    /// A line past the limit ends the reading with an error naming it, in JSON lines and CSV.
    #[test]
    fn a_line_past_the_limit_is_the_last_item() {
        let input = format!("{{\"text\": \"a\"}}\n{{\"text\": \"{}\"}}\n{{\"text\": \"c\"}}\n", "b".repeat(5000));
        let lines: Vec<_> = read_lines_within(input.as_bytes(), "in.jsonl", true, 4096).collect();
        assert_eq!(lines.len(), 2);
        let err = lines[1].as_ref().unwrap_err().to_string();
        assert!(err.starts_with("in.jsonl:2: a line is longer than 4096 bytes"), "{err}");
        let csv = format!("text\na\n{}\nc\n", "b".repeat(5000));
        let rows: Vec<_> = read_lines_within(csv.as_bytes(), "in.csv", true, 4096).collect();
        let err = rows.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(err.contains("a line is longer than 4096 bytes"), "{err}");
    }

    #[test]
    fn empty_input_is_an_error() {
        assert!(read(b"\n\n").unwrap_err().to_string().contains("no input records"));
    }
}
