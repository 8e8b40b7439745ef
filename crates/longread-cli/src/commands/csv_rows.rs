//! `predict --format csv`: a row per document for spreadsheets — the id, the label (a
//! multi-label model's labels, joined by `;`), each
//! label's probability, the most attended chunk or sentence (its character span and weight),
//! the other tasks' labels, and the error of a document that failed.

use anyhow::{Context, Result};
use longread_classifier::{Classifier, DocResult};
use longread_text::Document;

use super::predict::id_text;

/// The header row: `id`, `label`, `p_<label>` per label, `evidence_start`, `evidence_end` and
/// `evidence_attention` (models that read chunks or sentences), one column per other task,
/// `error`.
pub fn header(classifier: &Classifier) -> Vec<String> {
    let decision = if classifier.multi_label() { "labels" } else { "label" };
    let mut columns = vec!["id".to_string(), decision.to_string()];
    columns.extend(classifier.labels().iter().map(|l| format!("p_{l}")));
    if classifier.evidence_unit() != "none" {
        columns.extend(["evidence_start", "evidence_end", "evidence_attention"].map(String::from));
    }
    columns.extend(classifier.tasks()[1..].iter().map(|t| t.name.clone()));
    columns.push("error".into());
    columns
}

/// One document's row, in [`header`]'s columns (empty cells where it has nothing: a failed
/// document has only its id and error).
pub fn row(classifier: &Classifier, document: &Document, result: &DocResult) -> Vec<String> {
    let mut cells = vec![id_text(document)];
    let prediction = match result {
        Err(e) => {
            cells.resize(header(classifier).len() - 1, String::new());
            cells.push(e.to_string());
            return cells;
        }
        Ok(p) => p,
    };
    cells.push(prediction.decision_text());
    cells.extend(prediction.probabilities().iter().map(|p| p.to_string()));
    if classifier.evidence_unit() != "none" {
        match prediction.top_evidence() {
            Some(e) => cells.extend([e.start.to_string(), e.end.to_string(), e.attention.to_string()]),
            None => cells.extend([String::new(), String::new(), String::new()]),
        }
    }
    for (t, spec) in classifier.tasks().iter().enumerate().skip(1) {
        cells.push(prediction.task_label_index(t, &spec.name).map_or(String::new(), |i| spec.labels[i].clone()));
    }
    cells.push(String::new());
    cells
}

/// `cells` as one CSV line (RFC 4180 quoting: a cell with a comma, a quote or a line break is
/// quoted), without its line break; each cell [`inert`].
pub fn line(cells: &[String]) -> Result<Vec<u8>> {
    let mut writer = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    let cells: Vec<_> = cells.iter().map(|c| inert(c)).collect();
    writer.write_record(cells.iter().map(|c| c.as_bytes())).context("writing a CSV row")?;
    let mut bytes = writer.into_inner().map_err(|e| anyhow::anyhow!("writing a CSV row: {}", e.error()))?;
    bytes.pop(); // the terminator: the caller ends every format's line alike
    Ok(bytes)
}

/// A cell a spreadsheet shows as text: one that starts as a formula would (`=`, `+`, `-`, `@`,
/// a tab or a carriage return) and is not a number gets a leading `'`, as OWASP advises against
/// CSV injection — a document id such as `=HYPERLINK(...)` ran as a formula when the file was
/// opened. Numbers (`-0.5`) are left as they are.
fn inert(cell: &str) -> std::borrow::Cow<'_, str> {
    let formula_like = cell.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if formula_like && cell.trim().parse::<f64>().is_err() {
        format!("'{cell}").into()
    } else {
        cell.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_that_a_spreadsheet_would_run_as_formulas_are_quoted_as_text() {
        let cells: Vec<String> =
            ["=HYPERLINK(\"http://x\")", "+1+2", "@SUM(A1)", "-2", "-1e-3", "\tx", "plain", "a=b", "-x"]
                .map(String::from)
                .into();
        let text = String::from_utf8(line(&cells).unwrap()).unwrap();
        assert_eq!(text, "\"'=HYPERLINK(\"\"http://x\"\")\",'+1+2,'@SUM(A1),-2,-1e-3,'\tx,plain,a=b,'-x");
    }
}
