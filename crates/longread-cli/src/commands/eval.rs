//! `longread eval`: accuracy, per-class precision/recall/F1, macro and weighted F1 and the
//! confusion matrix of a model on labelled documents.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use longread_model::classifier::evaluate::{evaluate_reader, TaskReport};
use longread_model::Precision;
use serde_json::Map;

use crate::commands::predict::{load, progress_bar};
use crate::io::{input_name, open_input};

/// Arguments of `longread eval`.
#[derive(Debug, Args)]
#[command(after_help = "Macro-F1 (and macro precision/recall) average over the labels that occur in the \
gold labels or the predictions, as scikit-learn's f1_score(average=\"macro\") does; a label of the model \
that neither the data nor the model uses does not count.")]
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
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
}

/// Runs `longread eval`.
pub fn run(args: EvalArgs, quiet: bool) -> Result<()> {
    let reports = evaluate_file(&args.model, &args.data, args.max_batch_tokens, args.precision, quiet)?;
    if args.json {
        let mut value = serde_json::to_value(&reports[0].report)?;
        if reports.len() > 1 {
            let by_task: Map<String, serde_json::Value> = reports
                .iter()
                .map(|r| Ok((r.task.name.clone(), serde_json::to_value(&r.report)?)))
                .collect::<Result<_>>()?;
            value["tasks"] = serde_json::Value::Object(by_task);
        }
        println!("{value}");
    } else if reports.len() == 1 {
        print!("{}", reports[0].report.to_table());
    } else {
        for r in &reports {
            println!("task {} (column \"{}\", {} documents)", r.task.name, r.task.column, r.report.examples);
            print!("{}", r.report.to_table());
            println!();
        }
    }
    Ok(())
}

/// Scores the labelled JSON lines in `data` with the model in `model_dir`: one report per task,
/// primary task first.
pub fn evaluate_file(
    model_dir: &Path,
    data: &Path,
    max_batch_tokens: u64,
    precision: Precision,
    quiet: bool,
) -> Result<Vec<TaskReport>> {
    let classifier = load(model_dir, max_batch_tokens, precision)?;
    let progress = progress_bar(0, quiet);
    let reports = evaluate_reader(&classifier, open_input(data)?, &input_name(data), || progress.inc(1))?;
    progress.finish_and_clear();
    Ok(reports)
}
