//! Labelled examples for training and evaluation: JSON lines with `"text"` and `"label"`
//! (a label name, or an integer index into the model's labels).

use std::collections::BTreeSet;
use std::io::BufRead;

use serde_json::Value;

use crate::error::{Result, TextError};
use crate::jsonl::read_records;

/// Label names for a message: all of them, comma-separated, up to 20; beyond that the first
/// 10 and how many there are (a model of 10,000 labels made one error line of 60 KB).
pub fn label_list(labels: &[String]) -> String {
    const SHOWN: usize = 20;
    if labels.len() <= SHOWN {
        return labels.join(", ");
    }
    format!("{}, … ({} labels)", labels[..SHOWN / 2].join(", "), labels.len())
}

/// A label as written in the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelValue {
    /// A label name.
    Name(String),
    /// An index into the model's labels.
    Index(usize),
}

/// One labelled example.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// 1-based line number.
    pub line: usize,
    /// The `"id"` field, or the 0-based position.
    pub id: Value,
    /// The text.
    pub text: String,
    /// The label of each requested column as written (`None`: absent or null).
    pub labels: Vec<Option<LabelValue>>,
}

impl Example {
    /// The label of the first column (`"label"` for [`read_labelled`]).
    pub fn label(&self) -> Option<&LabelValue> {
        self.labels.first().and_then(Option::as_ref)
    }
}

/// Reads examples labelled in the `"label"` field (required); every problem names its line.
pub fn read_labelled(reader: impl BufRead, source_name: &str) -> Result<Vec<Example>> {
    read_labelled_columns(reader, source_name, &["label".to_string()])
}

/// Reads examples labelled in `columns` (one per task). With one column it is required; with
/// several, a column may be absent or null on a line (that line does not count for that task),
/// but every line needs at least one label.
pub fn read_labelled_columns(reader: impl BufRead, source_name: &str, columns: &[String]) -> Result<Vec<Example>> {
    read_records(reader, source_name)?
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            let bad =
                |message: String| TextError::BadLine { source_name: source_name.to_owned(), line: r.line, message };
            let mut labels = Vec::with_capacity(columns.len());
            for column in columns {
                let label = match r.fields.shift_remove(column.as_str()) {
                    Some(Value::String(s)) if !s.trim().is_empty() => Some(LabelValue::Name(s)),
                    Some(Value::Number(n)) if whole_number(&n).is_some() => {
                        Some(LabelValue::Index(whole_number(&n).unwrap_or(0)))
                    }
                    Some(Value::Null) | None if columns.len() > 1 => None,
                    Some(other) => {
                        return Err(bad(format!(
                            "\"{column}\" must be a label name or a non-negative integer, found {other}"
                        )))
                    }
                    None => return Err(bad(format!("missing \"{column}\" field"))),
                };
                labels.push(label);
            }
            if labels.iter().all(Option::is_none) {
                return Err(bad(format!("no label in any of the columns {}", columns.join(", "))));
            }
            Ok(Example {
                line: r.line,
                id: r.fields.shift_remove("id").unwrap_or(Value::from(i)),
                text: r.text,
                labels,
            })
        })
        .collect()
}

/// `value` when it is a non-negative whole number an f64 holds exactly (`1.0`, as pandas
/// writes an integer column that held a missing value).
fn whole(value: f64) -> Option<usize> {
    (value >= 0.0 && value.fract() == 0.0 && value < 2f64.powi(53)).then_some(value as usize)
}

/// A JSON number that is a non-negative whole number (`1`, or `1.0`), as an index.
fn whole_number(n: &serde_json::Number) -> Option<usize> {
    match n.as_u64() {
        Some(i) => usize::try_from(i).ok(),
        None => n.as_f64().and_then(whole),
    }
}

/// The index of the label named by the whole number a CSV cell such as `1.0` writes (pandas'
/// float column of integer labels), when the model has a label of that name (`1`) and none
/// named as the cell is.
fn whole_number_name(cell: &str, labels: &[String]) -> Option<usize> {
    let name = whole(cell.trim().parse().ok()?)?.to_string();
    labels.iter().position(|l| *l == name)
}

/// The label names found in the data (first column), sorted; integer labels have no names, so
/// they are an error here.
pub fn labels_from_data(examples: &[Example], source_name: &str) -> Result<Vec<String>> {
    labels_from_column(examples, 0, source_name)
}

/// Why `name` cannot be a label name, if it cannot: one with a control character (a tab, a
/// line break, a terminal escape code) would become a JSON key, a CSV column and a table
/// heading that moves the cursor or recolours the terminal of whoever reads the results.
pub fn label_name_problem(name: &str) -> Option<String> {
    let bad = name.chars().find(|c| c.is_control())?;
    Some(format!(
        "label {name:?} holds a control character ({}); label names become JSON keys, CSV columns and \
         table headings",
        bad.escape_default()
    ))
}

/// The label names found in column `column` (an index into the columns read), sorted.
pub fn labels_from_column(examples: &[Example], column: usize, source_name: &str) -> Result<Vec<String>> {
    let mut names = BTreeSet::new();
    for e in examples {
        match e.labels.get(column).and_then(Option::as_ref) {
            Some(LabelValue::Name(n)) => {
                if let Some(message) = label_name_problem(n) {
                    return Err(TextError::BadLine { source_name: source_name.to_owned(), line: e.line, message });
                }
                names.insert(n.clone());
            }
            Some(LabelValue::Index(_)) => {
                return Err(TextError::BadLine {
                    source_name: source_name.to_owned(),
                    line: e.line,
                    message: "an integer label needs the label names: give `--labels A,B,...` (their order maps \
                              0, 1, ...) to `train --arch`, or train a model made by `longread init --labels`"
                        .into(),
                })
            }
            None => {}
        }
    }
    Ok(names.into_iter().collect())
}

/// Each example's label (first column, required) as an index into `labels`.
pub fn resolve_labels(examples: &[Example], labels: &[String], source_name: &str) -> Result<Vec<usize>> {
    resolve_column(examples, 0, labels, source_name)?
        .into_iter()
        .zip(examples)
        .map(|(l, e)| {
            l.ok_or_else(|| TextError::BadLine {
                source_name: source_name.to_owned(),
                line: e.line,
                message: "missing label".into(),
            })
        })
        .collect()
}

/// Each example's label in column `column` as an index into `labels` (`None` where absent).
pub fn resolve_column(
    examples: &[Example],
    column: usize,
    labels: &[String],
    source_name: &str,
) -> Result<Vec<Option<usize>>> {
    examples
        .iter()
        .map(|e| {
            let bad =
                |message: String| TextError::BadLine { source_name: source_name.to_owned(), line: e.line, message };
            match e.labels.get(column).and_then(Option::as_ref) {
                None => Ok(None),
                Some(LabelValue::Name(n)) => {
                    labels.iter().position(|l| l == n).or_else(|| whole_number_name(n, labels)).map(Some).ok_or_else(
                        || bad(format!("unknown label \"{n}\" (the model's labels: {})", label_list(labels))),
                    )
                }
                Some(LabelValue::Index(i)) if *i < labels.len() => Ok(Some(*i)),
                Some(LabelValue::Index(i)) => Err(bad(format!(
                    "label index {i} is out of range: the model has {} labels ({})",
                    labels.len(),
                    label_list(labels)
                ))),
            }
        })
        .collect()
}

/// Splits example indices into (train, dev), stratified by label: each class gives
/// `round(n · fraction)` examples to dev (at least one when it has two or more), chosen by a
/// shuffle seeded with `seed`. Both lists are sorted.
pub fn stratified_split(labels: &[usize], fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let n_classes = labels.iter().max().map_or(0, |m| m + 1);
    let mut rng = SplitMix64(seed);
    let (mut train, mut dev) = (Vec::new(), Vec::new());
    for class in 0..n_classes {
        let mut members: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == class).collect();
        // Fisher–Yates with a fixed generator, so the split is the same on every platform.
        for i in (1..members.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            members.swap(i, j);
        }
        let mut n_dev = (members.len() as f64 * fraction).round() as usize;
        if members.len() >= 2 && fraction > 0.0 {
            n_dev = n_dev.clamp(1, members.len() - 1);
        }
        dev.extend_from_slice(&members[..n_dev.min(members.len())]);
        train.extend_from_slice(&members[n_dev.min(members.len())..]);
    }
    train.sort_unstable();
    dev.sort_unstable();
    (train, dev)
}

/// A tiny, well-known generator (SplitMix64) for reproducible shuffles without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &str) -> Result<Vec<Example>> {
        read_labelled(s.as_bytes(), "d.jsonl")
    }

    #[test]
    fn long_label_lists_are_cut_in_messages() {
        let labels: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
        assert_eq!(label_list(&labels), "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, … (10000 labels)");
        assert_eq!(label_list(&labels[..20]), labels[..20].join(", "), "up to 20: all of them");
    }

    #[test]
    fn names_and_indices_resolve_against_the_model_labels() {
        let ex =
            read("{\"text\": \"a\", \"label\": \"teen\"}\n{\"text\": \"b\", \"label\": 2, \"id\": \"x\"}\n").unwrap();
        let labels: Vec<String> = ["general", "teen", "mature"].iter().map(|s| s.to_string()).collect();
        assert_eq!(resolve_labels(&ex, &labels, "d.jsonl").unwrap(), vec![1, 2]);
        assert_eq!(ex[1].id, "x");
    }

    /// pandas writes an integer label column that held a missing value as floats: `1.0` in
    /// JSON lines (`to_json`) and in CSV (`to_csv`). Both were refused ("found 1.0", "unknown
    /// label \"1.0\"").
    #[test]
    fn whole_numbers_written_as_floats_resolve_as_the_integers() {
        let labels: Vec<String> = vec!["0".into(), "1".into()];
        let ex = read("{\"text\": \"a\", \"label\": 1.0}\n{\"text\": \"b\", \"label\": 0.0}\n").unwrap();
        assert_eq!(resolve_labels(&ex, &labels, "d.jsonl").unwrap(), vec![1, 0]);
        // A CSV input (read as such by its name): its cells are label names.
        let csv = read_labelled("text,label\na,1.0\nb,0\n".as_bytes(), "d.csv").unwrap();
        assert_eq!(resolve_labels(&csv, &labels, "d.csv").unwrap(), vec![1, 0]);
        // A label named "1.0" is that label; a fraction is still refused.
        let named: Vec<String> = vec!["1".into(), "1.0".into()];
        let ex = read("{\"text\": \"a\", \"label\": \"1.0\"}\n").unwrap();
        assert_eq!(resolve_labels(&ex, &named, "d.jsonl").unwrap(), vec![1]);
        assert!(read("{\"text\": \"t\", \"label\": 1.5}\n").unwrap_err().to_string().contains("found 1.5"));
        let ex = read("{\"text\": \"a\", \"label\": \"1.5\"}\n").unwrap();
        assert!(resolve_labels(&ex, &labels, "d.jsonl").is_err());
    }

    #[test]
    fn label_problems_name_the_line() {
        let labels: Vec<String> = vec!["a".into(), "b".into()];
        let ex = read("{\"text\": \"t\", \"label\": \"a\"}\n{\"text\": \"t\", \"label\": \"zz\"}\n").unwrap();
        let err = resolve_labels(&ex, &labels, "d.jsonl").unwrap_err().to_string();
        assert!(err.starts_with("d.jsonl:2: unknown label \"zz\" (the model's labels: a, b)"), "{err}");
        let ex = read("{\"text\": \"t\", \"label\": 5}\n").unwrap();
        assert!(resolve_labels(&ex, &labels, "d.jsonl").unwrap_err().to_string().contains("index 5 is out of range"));
        assert!(read("{\"text\": \"t\"}\n").unwrap_err().to_string().contains("d.jsonl:1: missing \"label\""));
        assert!(read("{\"text\": \"t\", \"label\": -1}\n").unwrap_err().to_string().contains("non-negative integer"));
        assert!(read("{\"text\": \"t\", \"label\": null}\n").unwrap_err().to_string().contains("found null"));
        let ex = read("{\"text\": \"t\", \"label\": 1}\n").unwrap();
        assert!(labels_from_data(&ex, "d.jsonl").unwrap_err().to_string().contains("needs the label names"));
    }

    #[test]
    fn labels_from_data_are_sorted_and_unique() {
        let ex = read("{\"text\": \"t\", \"label\": \"b\"}\n{\"text\": \"t\", \"label\": \"a\"}\n{\"text\": \"t\", \"label\": \"b\"}\n").unwrap();
        assert_eq!(labels_from_data(&ex, "d").unwrap(), vec!["a", "b"]);
    }

    /// A label with a terminal escape code or a line break is refused, naming its line (it went
    /// into the model and printed raw in tables, recolouring the terminal).
    #[test]
    fn labels_with_control_characters_are_refused() {
        let ex = read("{\"text\": \"t\", \"label\": \"a\"}\n{\"text\": \"t\", \"label\": \"x\\u001b[2Jy\"}\n").unwrap();
        let err = labels_from_data(&ex, "d.jsonl").unwrap_err().to_string();
        assert!(err.starts_with("d.jsonl:2: label \"x\\u{1b}[2Jy\" holds a control character (\\u{1b})"), "{err}");
        assert!(label_name_problem("a\tb").is_some() && label_name_problem("a\nb").is_some());
        assert_eq!(label_name_problem("Mature 18+ (é)"), None);
    }

    #[test]
    fn several_columns_may_be_missing_on_a_line_but_not_all() {
        let columns: Vec<String> = vec!["rating".into(), "topic".into()];
        let text = "{\"text\": \"a\", \"rating\": \"teen\", \"topic\": \"news\"}\n{\"text\": \"b\", \"topic\": null}\n";
        let err = read_labelled_columns(text.as_bytes(), "d", &columns).unwrap_err().to_string();
        assert!(err.contains("d:2: no label in any of the columns rating, topic"), "{err}");
        let text =
            "{\"text\": \"a\", \"rating\": \"teen\", \"topic\": \"news\"}\n{\"text\": \"b\", \"topic\": \"sport\"}\n";
        let ex = read_labelled_columns(text.as_bytes(), "d", &columns).unwrap();
        assert_eq!(labels_from_column(&ex, 1, "d").unwrap(), vec!["news", "sport"]);
        let ratings = vec!["general".to_string(), "teen".to_string()];
        assert_eq!(resolve_column(&ex, 0, &ratings, "d").unwrap(), vec![Some(1), None]);
        assert!(resolve_labels(&ex, &ratings, "d").unwrap_err().to_string().contains("d:2: missing label"));
    }

    #[test]
    fn split_is_stratified_seeded_and_a_partition() {
        let labels: Vec<usize> = (0..100).map(|i| if i < 70 { 0 } else { 1 }).collect();
        let (train, dev) = stratified_split(&labels, 0.1, 7);
        assert_eq!(dev.iter().filter(|&&i| labels[i] == 0).count(), 7);
        assert_eq!(dev.iter().filter(|&&i| labels[i] == 1).count(), 3);
        let mut all: Vec<usize> = train.iter().chain(&dev).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert_eq!(stratified_split(&labels, 0.1, 7), (train.clone(), dev.clone()));
        assert_ne!(stratified_split(&labels, 0.1, 8).1, dev);
    }
}
