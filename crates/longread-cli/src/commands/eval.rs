//! `longread eval`: accuracy, per-class precision/recall/F1, macro and weighted F1 and the
//! confusion matrix of a model on labelled documents.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use longread_metrics::Report;
use longread_model::han::is_han_dir;
use longread_model::hierarchical::{TaskSpec, DEFAULT_TASK};
use longread_text::{read_labelled_columns, resolve_column, Document};
use serde_json::Map;

use crate::commands::han_scoring;
use crate::commands::predict::{argmax, load, progress_bar, score_documents, ScoringPrecision};
use crate::io::{input_name, open_input};

/// Arguments of `longread eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Model directory made by `longread init` or `longread train`.
    #[arg(long)]
    model: PathBuf,
    /// Labelled JSON lines: {"text": ..., "label": name or index into the model's labels};
    /// `-` reads standard input. A multi-task model reads each task's label from its column
    /// (see `inspect`); a line may lack some of them.
    #[arg(long)]
    data: PathBuf,
    /// Print one JSON object (accuracy, macro_f1, weighted_f1, per_class, confusion_matrix, …)
    /// instead of tables; for a multi-task model these are the primary task's, and "tasks"
    /// holds one such object per task.
    #[arg(long)]
    json: bool,
    /// Most tokens per encoder batch (as for `predict`).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_tokens: u64,
    /// Encoder precision (as for `predict`).
    #[arg(long, value_enum, default_value_t = ScoringPrecision::F32)]
    precision: ScoringPrecision,
}

/// Runs `longread eval`.
pub fn run(args: EvalArgs, quiet: bool) -> Result<()> {
    let (tasks, reports) =
        evaluate_file(&args.model, &args.data, args.max_batch_tokens as usize, args.precision, quiet)?;
    if args.json {
        let mut value = serde_json::to_value(&reports[0])?;
        if tasks.len() > 1 {
            let by_task: Map<String, serde_json::Value> = tasks
                .iter()
                .zip(&reports)
                .map(|(spec, r)| Ok((spec.name.clone(), serde_json::to_value(r)?)))
                .collect::<Result<_>>()?;
            value["tasks"] = serde_json::Value::Object(by_task);
        }
        println!("{value}");
    } else if tasks.len() == 1 {
        print!("{}", reports[0].to_table());
    } else {
        for (spec, report) in tasks.iter().zip(&reports) {
            println!("task {} (column \"{}\", {} documents)", spec.name, spec.column, report.examples);
            print!("{}", report.to_table());
            println!();
        }
    }
    Ok(())
}

/// `evaluate_file` for a HAN model: its one task, labels in the "label" column.
fn evaluate_han(model_dir: &Path, data: &Path, quiet: bool) -> Result<(Vec<TaskSpec>, Vec<Report>)> {
    let model = han_scoring::load(model_dir)?;
    let name = input_name(data);
    let examples = read_labelled_columns(open_input(data)?, &name, &[DEFAULT_TASK.to_string()])?;
    let labels = model.labels().to_vec();
    let truth = resolve_column(&examples, 0, &labels, &name)?;
    let documents = as_documents(&examples);
    let progress = progress_bar(documents.len(), quiet);
    let mut predicted = Vec::with_capacity(documents.len());
    han_scoring::score_documents(&model, &documents, &progress, |result| match result.outcome {
        Ok(scores) => {
            predicted.push(argmax(&scores.probabilities));
            Ok(())
        }
        Err(message) => bail!("{name}: document {}: {message}", result.document.id),
    })?;
    progress.finish_and_clear();
    let (gold, pred): (Vec<usize>, Vec<usize>) =
        truth.iter().zip(&predicted).filter_map(|(gold, &p)| gold.map(|g| (g, p))).unzip();
    let report = longread_metrics::evaluate(&labels, &gold, &pred).map_err(anyhow::Error::msg)?;
    let task = TaskSpec { name: DEFAULT_TASK.into(), column: DEFAULT_TASK.into(), labels };
    Ok((vec![task], vec![report]))
}

/// Labelled examples as documents to score.
fn as_documents(examples: &[longread_text::Example]) -> Vec<Document> {
    examples
        .iter()
        .map(|e| Document { id: e.id.clone(), text: e.text.clone(), fields: Map::new(), error: None })
        .collect()
}

/// Scores the labelled JSON lines in `data` with the model in `model_dir`: one report per task,
/// primary task first.
pub fn evaluate_file(
    model_dir: &Path,
    data: &Path,
    max_batch_tokens: usize,
    precision: ScoringPrecision,
    quiet: bool,
) -> Result<(Vec<TaskSpec>, Vec<Report>)> {
    if is_han_dir(model_dir) {
        return evaluate_han(model_dir, data, quiet);
    }
    let (model, chunker) = load(model_dir, precision)?;
    let name = input_name(data);
    let tasks = model.config().tasks();
    let columns: Vec<String> = tasks.iter().map(|t| t.column.clone()).collect();
    let examples = read_labelled_columns(open_input(data)?, &name, &columns)?;
    let truth: Vec<Vec<Option<usize>>> = tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| resolve_column(&examples, t, &spec.labels, &name))
        .collect::<std::result::Result<_, _>>()?;
    let documents = as_documents(&examples);
    let progress = progress_bar(documents.len(), quiet);
    // predicted[task][doc]
    let mut predicted: Vec<Vec<usize>> = vec![Vec::with_capacity(documents.len()); tasks.len()];
    score_documents(&model, &chunker, &documents, max_batch_tokens, &progress, |result| {
        match result.outcome {
            Ok((_, scores)) => {
                predicted[0].push(argmax(&scores.probabilities));
                for (t, s) in result.tasks.iter().enumerate() {
                    predicted[t + 1].push(argmax(&s.probabilities));
                }
            }
            Err(message) => bail!("{name}: document {}: {message}", result.document.id),
        }
        Ok(())
    })?;
    progress.finish_and_clear();
    let reports = tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let pairs: Vec<(usize, usize)> =
                truth[t].iter().zip(&predicted[t]).filter_map(|(gold, &p)| gold.map(|g| (g, p))).collect();
            if pairs.is_empty() {
                bail!("{name}: no document has a label for task {} (column \"{}\")", spec.name, spec.column);
            }
            let (gold, pred): (Vec<usize>, Vec<usize>) = pairs.into_iter().unzip();
            longread_metrics::evaluate(&spec.labels, &gold, &pred).map_err(anyhow::Error::msg)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((tasks, reports))
}
