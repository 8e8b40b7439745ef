//! `longread eval`: accuracy, per-class precision/recall/F1, macro and weighted F1 and the
//! confusion matrix of a model on labelled documents.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use longread_text::{read_labelled, resolve_labels, Document};
use serde_json::Map;

use crate::commands::predict::{argmax, load, progress_bar, score_documents};
use crate::io::{input_name, open_input};

/// Arguments of `longread eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Model directory made by `longread init` or `longread train`.
    #[arg(long)]
    model: PathBuf,
    /// Labelled JSON lines: {"text": ..., "label": name or index into the model's labels};
    /// `-` reads standard input.
    #[arg(long)]
    data: PathBuf,
    /// Print one JSON object (accuracy, macro_f1, weighted_f1, per_class, confusion_matrix, …)
    /// instead of tables.
    #[arg(long)]
    json: bool,
    /// Most tokens per encoder batch (as for `predict`).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_tokens: u64,
}

/// Runs `longread eval`.
pub fn run(args: EvalArgs, quiet: bool) -> Result<()> {
    let (model, chunker) = load(&args.model)?;
    let name = input_name(&args.data);
    let examples = read_labelled(open_input(&args.data)?, &name)?;
    let labels = model.labels().to_vec();
    let truth = resolve_labels(&examples, &labels, &name)?;
    let documents: Vec<Document> = examples
        .iter()
        .map(|e| Document { id: e.id.clone(), text: e.text.clone(), fields: Map::new(), error: None })
        .collect();
    let progress = progress_bar(documents.len(), quiet);
    let mut predicted = Vec::with_capacity(documents.len());
    score_documents(&model, &chunker, &documents, args.max_batch_tokens as usize, &progress, |result| {
        match result.outcome {
            Ok((_, scores)) => predicted.push(argmax(&scores.probabilities)),
            Err(message) => bail!("{name}: document {}: {message}", result.document.id),
        }
        Ok(())
    })?;
    progress.finish_and_clear();
    let report = longread_metrics::evaluate(&labels, &truth, &predicted).map_err(anyhow::Error::msg)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}
