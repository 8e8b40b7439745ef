//! Evaluation: a [`Classifier`] over labelled documents, scored per task with
//! `longread_metrics` (accuracy, per-class precision/recall/F1, macro/weighted F1, confusion).

use longread_metrics::Report;
use longread_text::{read_labelled_columns, resolve_column, Document, Example};

use crate::classifier::Classifier;
use crate::error::{ModelError, Result};
use crate::hierarchical::TaskSpec;

/// One task's evaluation.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// The task (name, data column, labels).
    pub task: TaskSpec,
    /// Its metrics.
    pub report: Report,
}

/// Reads labelled JSON lines (each task's label in its column; a multi-task line may lack
/// some) and evaluates `classifier` on them: one report per task, the primary task first.
/// `on_document` is called after each document is scored.
pub fn evaluate_reader(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    on_document: impl FnMut(),
) -> Result<Vec<TaskReport>> {
    let columns: Vec<String> = classifier.tasks().iter().map(|t| t.column.clone()).collect();
    let examples = read_labelled_columns(reader, source_name, &columns)?;
    evaluate_examples(classifier, &examples, source_name, on_document)
}

/// Evaluates `classifier` on `examples` (labels in the tasks' column order). A document that
/// cannot be classified fails the evaluation, naming it.
pub fn evaluate_examples(
    classifier: &Classifier,
    examples: &[Example],
    source_name: &str,
    mut on_document: impl FnMut(),
) -> Result<Vec<TaskReport>> {
    let tasks = classifier.tasks();
    let truth: Vec<Vec<Option<usize>>> = tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| resolve_column(examples, t, &spec.labels, source_name))
        .collect::<std::result::Result<_, _>>()?;
    let documents: Vec<Document> = examples.iter().map(|e| Document::new(e.id.clone(), e.text.clone())).collect();
    // predicted[task][document]
    let mut predicted: Vec<Vec<usize>> = vec![Vec::with_capacity(documents.len()); tasks.len()];
    classifier.classify_documents(&documents, |document, result| {
        let prediction = result
            .map_err(|e| ModelError::InvalidInput(format!("{source_name}: document {}: {}", document.id, e.message)))?;
        for (t, spec) in tasks.iter().enumerate() {
            predicted[t].push(prediction.task_label_index(t, &spec.name).unwrap_or(0));
        }
        on_document();
        Ok::<(), ModelError>(())
    })?;
    tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let (gold, pred): (Vec<usize>, Vec<usize>) =
                truth[t].iter().zip(&predicted[t]).filter_map(|(gold, &p)| gold.map(|g| (g, p))).unzip();
            if gold.is_empty() {
                return Err(ModelError::InvalidInput(format!(
                    "{source_name}: no document has a label for task {} (column \"{}\")",
                    spec.name, spec.column
                )));
            }
            let report = longread_metrics::evaluate(&spec.labels, &gold, &pred).map_err(ModelError::InvalidInput)?;
            Ok(TaskReport { task: spec.clone(), report })
        })
        .collect()
}
