//! Multi-label examples: documents that carry any number of labels, none included ("none of
//! these"), as a court case violates several articles or none. Read from
//!
//! - JSON lines with a `"labels"` list: `{"text": "...", "labels": ["3", "6"]}` (`[]` for none);
//! - CSV/TSV with a `labels` column of names joined by a separator (`3;6`; an empty cell for
//!   none), [`LabelLayout::Joined`];
//! - CSV/TSV (or JSON lines) with one 0/1 column per label, the layout of most public
//!   multi-label sets, [`LabelLayout::Columns`].
//!
//! Training data must name only the model's labels; evaluation data may name labels the model
//! does not know, which are left out of the scores with one summary of them (as scikit-learn's
//! `MultiLabelBinarizer` ignores unknown classes, with a warning), or refused when asked to be
//! strict. Every problem names its line.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use serde_json::Value;

use crate::error::{Result, TextError};
use crate::jsonl::read_records;
use crate::labelled::label_name_problem;

/// How a record says which labels its document carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelLayout {
    /// A `"labels"` field: a JSON list of names, or (CSV/TSV) names joined by `separator`.
    Joined {
        /// What joins names in a CSV/TSV cell (`;` by default).
        separator: String,
    },
    /// One column per label, in this order, holding 0 or 1.
    Columns(Vec<String>),
}

impl Default for LabelLayout {
    fn default() -> Self {
        Self::Joined { separator: ";".into() }
    }
}

/// One multi-label example, its labels as written.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiLabelExample {
    /// 1-based line number.
    pub line: usize,
    /// The `"id"` field, or the 0-based position.
    pub id: Value,
    /// The text.
    pub text: String,
    /// The label names the record gives, in its order, without repeats.
    pub labels: Vec<String>,
}

/// Reads multi-label examples laid out as `layout` says; a record without its labels, with a
/// single `"label"` (single-label data), or with both, is an error naming its line.
pub fn read_multilabel(
    reader: impl BufRead,
    source_name: &str,
    layout: &LabelLayout,
) -> Result<Vec<MultiLabelExample>> {
    let records = read_records(reader, source_name)?;
    // A CSV/TSV cell left empty is an absent field: there, a row without a labels cell carries
    // none of them, provided the file has the column at all.
    let delimited = crate::delimited::delimiter_of(source_name).is_some();
    let has_column = records.iter().any(|r| r.fields.contains_key("labels"));
    if delimited && !has_column && matches!(layout, LabelLayout::Joined { .. }) {
        return Err(TextError::BadLine {
            source_name: source_name.to_owned(),
            line: 1,
            message: "no \"labels\" column (names joined by the separator), nor --label-columns naming one 0/1 \
                      column per label"
                .into(),
        });
    }
    records
        .into_iter()
        .enumerate()
        .map(|(i, mut record)| {
            let line = record.line;
            let bad = |message: String| TextError::BadLine { source_name: source_name.to_owned(), line, message };
            let single = record.fields.shift_remove("label");
            let labels = match layout {
                LabelLayout::Joined { separator } => {
                    let field = record.fields.shift_remove("labels");
                    match (field, single) {
                        (Some(_), Some(_)) => {
                            return Err(bad(
                                "both \"label\" and \"labels\": a multi-label record gives its labels as one list \
                                 (\"labels\")"
                                    .into(),
                            ))
                        }
                        (None, Some(_)) => {
                            return Err(bad(
                                "\"label\" holds one label, but this model is multi-label: give \"labels\" as a list \
                                 (`[]` for none), or in CSV a labels column joined by the separator"
                                    .into(),
                            ))
                        }
                        (None, None) if delimited => Vec::new(),
                        (None, None) => {
                            return Err(bad("missing \"labels\" field (`[]` for a document with none)".into()))
                        }
                        (Some(value), None) => joined(value, separator).map_err(bad)?,
                    }
                }
                LabelLayout::Columns(columns) => {
                    if single.is_some() {
                        return Err(bad(
                            "a \"label\" field beside the label columns: with --label-columns each label is a column \
                             of 0 or 1"
                                .into(),
                        ));
                    }
                    let mut labels = Vec::new();
                    for column in columns {
                        match record.fields.shift_remove(column.as_str()) {
                            None => return Err(bad(format!("missing label column \"{column}\""))),
                            Some(value) => match indicator(&value) {
                                Some(true) => labels.push(column.clone()),
                                Some(false) => {}
                                None => {
                                    return Err(bad(format!("label column \"{column}\" must be 0 or 1, found {value}")))
                                }
                            },
                        }
                    }
                    labels
                }
            };
            let mut seen = BTreeSet::new();
            let mut unique = Vec::with_capacity(labels.len());
            for label in labels {
                if let Some(message) = label_name_problem(&label) {
                    return Err(bad(message));
                }
                if seen.insert(label.clone()) {
                    unique.push(label);
                }
            }
            Ok(MultiLabelExample {
                line,
                id: record.fields.shift_remove("id").unwrap_or(Value::from(i)),
                text: record.text,
                labels: unique,
            })
        })
        .collect()
}

/// The names in a `"labels"` value: a JSON list of names (numbers are names as written, so
/// `[3, 6]` is `["3", "6"]`), or a string of names joined by `separator` (a CSV cell; empty for
/// none). A CSV cell that is a whole number arrives as a number: the one name it writes.
fn joined(value: Value, separator: &str) -> std::result::Result<Vec<String>, String> {
    let name = |v: &Value| match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("\"labels\" must hold label names, found {other}")),
    };
    match value {
        Value::Array(items) => items.iter().map(name).collect(),
        Value::String(s) => {
            Ok(s.split(separator).map(str::trim).filter(|part| !part.is_empty()).map(str::to_owned).collect())
        }
        Value::Null => Ok(Vec::new()),
        number @ Value::Number(_) => Ok(vec![name(&number)?]),
        other => Err(format!("\"labels\" must be a list of label names, found {other}")),
    }
}

/// 0 or 1 as a JSON number, boolean or string (`"0"`, `"1"`, `"0.0"`, `"1.0"` as pandas writes).
fn indicator(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => {
            let x = n.as_f64()?;
            (x == 0.0 || x == 1.0).then_some(x == 1.0)
        }
        Value::String(s) => match s.trim() {
            "0" | "0.0" | "false" | "False" => Some(false),
            "1" | "1.0" | "true" | "True" => Some(true),
            _ => None,
        },
        _ => None,
    }
}

/// Every label name the examples give, sorted (a new model's labels, as scikit-learn's
/// `MultiLabelBinarizer` sorts its classes).
pub fn multilabel_names(examples: &[MultiLabelExample]) -> Vec<String> {
    examples.iter().flat_map(|e| e.labels.iter().cloned()).collect::<BTreeSet<_>>().into_iter().collect()
}

/// Labels of evaluation data that the model does not know, left out of the scores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLabels {
    /// Each unknown name with the number of documents that carry it, by name.
    pub names: BTreeMap<String, usize>,
    /// Documents that carry at least one of them.
    pub documents: usize,
}

impl std::fmt::Display for UnknownLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.names.iter().map(|(name, n)| format!("{name} ({n})")).collect();
        write!(
            f,
            "{} label{} the model does not know, on {} document{}, left out of the scores: {}",
            self.names.len(),
            if self.names.len() == 1 { "" } else { "s" },
            self.documents,
            if self.documents == 1 { "" } else { "s" },
            names.join(", ")
        )
    }
}

/// Each example's labels as indices into the model's `labels`, sorted. Training data
/// (`unknown_allowed` false) must name only the model's labels: an unknown one is an error
/// naming its line. Evaluation data (`unknown_allowed` true) has unknown labels dropped and
/// summarised in the second value.
pub fn resolve_multilabel(
    examples: &[MultiLabelExample],
    labels: &[String],
    source_name: &str,
    unknown_allowed: bool,
) -> Result<(Vec<Vec<usize>>, Option<UnknownLabels>)> {
    let mut unknown = UnknownLabels { names: BTreeMap::new(), documents: 0 };
    let mut resolved = Vec::with_capacity(examples.len());
    for e in examples {
        let mut ids = Vec::with_capacity(e.labels.len());
        let mut has_unknown = false;
        for name in &e.labels {
            match labels.iter().position(|l| l == name) {
                Some(id) => ids.push(id),
                None if unknown_allowed => {
                    *unknown.names.entry(name.clone()).or_default() += 1;
                    has_unknown = true;
                }
                None => {
                    return Err(TextError::BadLine {
                        source_name: source_name.to_owned(),
                        line: e.line,
                        message: format!(
                            "unknown label \"{name}\" (the model's labels: {})",
                            labels.iter().map(|l| format!("\"{l}\"")).collect::<Vec<_>>().join(", ")
                        ),
                    })
                }
            }
        }
        unknown.documents += usize::from(has_unknown);
        ids.sort_unstable();
        resolved.push(ids);
    }
    Ok((resolved, (!unknown.names.is_empty()).then_some(unknown)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, name: &str, layout: &LabelLayout) -> Result<Vec<MultiLabelExample>> {
        read_multilabel(text.as_bytes(), name, layout)
    }

    #[test]
    fn json_lines_give_a_list_and_an_empty_list_is_none_of_them() {
        let text = "{\"id\": \"a\", \"text\": \"x\", \"labels\": [\"3\", \"6\", \"3\"]}\n\n{\"text\": \"y\", \"labels\": []}\n{\"text\": \"z\", \"labels\": [8]}\n";
        let examples = read(text, "d.jsonl", &LabelLayout::default()).unwrap();
        assert_eq!(examples[0].labels, vec!["3", "6"]);
        assert_eq!(examples[0].id, Value::from("a"));
        assert!(examples[1].labels.is_empty());
        assert_eq!((examples[1].line, examples[1].id.clone()), (3, Value::from(1)));
        assert_eq!(examples[2].labels, vec!["8"]);
        assert_eq!(multilabel_names(&examples), vec!["3", "6", "8"]);
    }

    #[test]
    fn csv_cells_are_split_by_the_separator() {
        let text = "id,text,labels\n1,first,violence;language\n2,second,\n3,third, language ; nudity \n";
        let examples = read(text, "d.csv", &LabelLayout::default()).unwrap();
        assert_eq!(examples[0].labels, vec!["violence", "language"]);
        assert!(examples[1].labels.is_empty());
        assert_eq!(examples[2].labels, vec!["language", "nudity"]);
        let err = read("text,label\nx,a\n", "d.csv", &LabelLayout::default()).unwrap_err().to_string();
        assert!(err.contains("d.csv:1:"), "{err}");
        let err = read("text,tags\nx,a\n", "d.csv", &LabelLayout::default()).unwrap_err().to_string();
        assert!(err.contains("no \"labels\" column"), "{err}");
        let pipes = read("text,labels\nx,a|b\n", "d.csv", &LabelLayout::Joined { separator: "|".into() }).unwrap();
        assert_eq!(pipes[0].labels, vec!["a", "b"]);
    }

    #[test]
    fn indicator_columns_name_the_labels_set_to_one() {
        let layout = LabelLayout::Columns(vec!["toxic".into(), "threat".into()]);
        let examples = read("text,toxic,threat\nx,1,0\ny,0,0\nz,1,1\n", "d.csv", &layout).unwrap();
        assert_eq!(examples[0].labels, vec!["toxic"]);
        assert!(examples[1].labels.is_empty());
        assert_eq!(examples[2].labels, vec!["toxic", "threat"]);
        let err = read("text,toxic,threat\nx,1,2\n", "d.csv", &layout).unwrap_err().to_string();
        assert!(err.contains("d.csv:2: label column \"threat\" must be 0 or 1, found 2"), "{err}");
        let err = read("text,toxic\nx,1\n", "d.csv", &layout).unwrap_err().to_string();
        assert!(err.contains("missing label column \"threat\""), "{err}");
    }

    #[test]
    fn single_label_records_and_both_fields_are_refused_by_line() {
        let err =
            read("{\"text\": \"x\", \"label\": \"3\"}\n", "d.jsonl", &LabelLayout::default()).unwrap_err().to_string();
        assert!(err.starts_with("d.jsonl:1:") && err.contains("this model is multi-label"), "{err}");
        let err = read("{\"text\": \"x\", \"labels\": [], \"label\": \"3\"}\n", "d.jsonl", &LabelLayout::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("both \"label\" and \"labels\""), "{err}");
        let err = read("{\"text\": \"x\"}\n", "d.jsonl", &LabelLayout::default()).unwrap_err().to_string();
        assert!(err.contains("missing \"labels\""), "{err}");
        let err = read("{\"text\": \"x\", \"labels\": [null]}\n", "d.jsonl", &LabelLayout::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("must hold label names"), "{err}");
        let err = read("{\"text\": \"x\", \"labels\": [\"a\\tb\"]}\n", "d.jsonl", &LabelLayout::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("control character"), "{err}");
    }

    #[test]
    fn training_refuses_unknown_labels_and_evaluation_counts_them() {
        let text = "{\"text\": \"a\", \"labels\": [\"6\", \"P6\"]}\n{\"text\": \"b\", \"labels\": [\"3\"]}\n{\"text\": \"c\", \"labels\": [\"P12\", \"P6\"]}\n";
        let examples = read(text, "test.jsonl", &LabelLayout::default()).unwrap();
        let labels: Vec<String> = vec!["3".into(), "6".into()];
        let err = resolve_multilabel(&examples, &labels, "test.jsonl", false).unwrap_err().to_string();
        assert!(err.starts_with("test.jsonl:1: unknown label \"P6\""), "{err}");
        let (ids, unknown) = resolve_multilabel(&examples, &labels, "test.jsonl", true).unwrap();
        assert_eq!(ids, vec![vec![1], vec![0], vec![]]);
        let unknown = unknown.unwrap();
        assert_eq!(unknown.documents, 2);
        assert_eq!(
            unknown.to_string(),
            "2 labels the model does not know, on 2 documents, left out of the scores: P12 (1), P6 (2)"
        );
    }
}
