//! `longread eval`: accuracy, per-class precision/recall/F1, macro and weighted F1 and the
//! confusion matrix of a model on labelled documents.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use longread_classifier::evaluate::{compare, evaluate_reader, Comparison, TaskReport};
use longread_classifier::multilabel_eval::evaluate_multilabel_models;
use longread_classifier::ClassifierOptions;
use longread_metrics::bootstrap::{Bootstrap, Interval, RESAMPLES};
use longread_metrics::terminal::printable;
use longread_model::DeviceChoice;
use serde_json::Map;

use crate::commands::counts::counted;
use crate::commands::predict::{load, progress_bar, EncodingArgs};
use crate::io::{input_name, open_input};

/// Arguments of `longread eval`.
#[derive(Debug, Args)]
#[command(after_help = "Macro-F1 (and macro precision/recall) average over the labels that occur in the \
gold labels or the predictions, as scikit-learn's f1_score(average=\"macro\") does; a label of the model \
that neither the data nor the model uses does not count.")]
pub struct EvalArgs {
    /// Model directory made by `longread init` or `longread train`. Give it several times to
    /// compare models on the same documents: one table of accuracy, macro-F1 and per-label
    /// recall with 95% bootstrap intervals, and paired bootstrap p-values against the first.
    #[arg(long, required = true)]
    model: Vec<PathBuf>,
    /// Labelled JSON lines: {"text": ..., "label": name or index into the model's labels} (or a
    /// .csv/.tsv file with "text" and "label" columns);
    /// `-` reads standard input. A multi-task model reads each task's label from its column
    /// (see `inspect`); a line may lack some of them. A multi-label model reads a "labels" list
    /// (CSV/TSV: a labels cell joined by --label-separator, or --label-columns) and reports
    /// micro/macro/weighted/samples F1, subset accuracy, Hamming loss, ROC-AUC and per-label
    /// scores. `--input` is the same flag, as in `predict` and `report`.
    #[arg(long, visible_alias = "input")]
    data: PathBuf,
    /// Print one JSON object (accuracy, macro_f1, weighted_f1, per_class, confusion_matrix, …)
    /// instead of tables; for a multi-task model these are the primary task's, and "tasks"
    /// holds one such object per task.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    encoding: EncodingArgs,
    /// Read chunk vectors from DIR, and keep new ones there (see `train --vector-cache`):
    /// models on the same frozen encoder share them, and a second eval skips the encoder.
    #[arg(long, value_name = "DIR")]
    vector_cache: Option<PathBuf>,
    /// Resamples of the bootstrap that gives the intervals and p-values (several models).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(*RESAMPLES.start() as u64..=*RESAMPLES.end() as u64))]
    bootstrap: u64,
    /// Seed of the bootstrap (the same seed, the same intervals).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    label_layout: longread_train::run::LabelLayoutSpec,
    /// Multi-label models: refuse data that names a label the model does not know (by default
    /// such labels are left out of the scores, with one warning naming them and counting their
    /// documents, as scikit-learn's MultiLabelBinarizer ignores unknown classes).
    #[arg(long)]
    strict_labels: bool,
}

/// Runs `longread eval`.
pub fn run(args: EvalArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    let options = args.encoding.options(device);
    let first = load(&args.model[0], options, args.vector_cache.as_deref())?;
    if first.multi_label() {
        return run_multilabel(&args, first, options, quiet);
    }
    if args.strict_labels || !args.label_layout.label_columns.is_empty() {
        anyhow::bail!(
            "--strict-labels and --label-columns are for multi-label models; {} predicts one label per document",
            args.model[0].display()
        );
    }
    if args.model.len() > 1 {
        return run_comparison(&args, first, options, quiet);
    }
    let reports = evaluate_loaded(&first, &args.data, quiet)?;
    for r in &reports {
        let task = if reports.len() > 1 { format!(" (task {})", r.task.name) } else { String::new() };
        note_constant(&format!("{}{task}", args.model[0].display()), &r.report, quiet);
    }
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
            println!("task {} (column \"{}\", {})", r.task.name, r.task.column, counted(r.report.examples, "document"));
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
    options: ClassifierOptions,
    vector_cache: Option<&Path>,
    quiet: bool,
) -> Result<Vec<TaskReport>> {
    evaluate_loaded(&load(model_dir, options, vector_cache)?, data, quiet)
}

/// [`evaluate_file`] with the model loaded.
fn evaluate_loaded(classifier: &longread_classifier::Classifier, data: &Path, quiet: bool) -> Result<Vec<TaskReport>> {
    let progress = progress_bar(0, quiet);
    let reports = evaluate_reader(classifier, open_input(data)?, &input_name(data), || progress.inc(1))?;
    progress.finish_and_clear();
    Ok(reports)
}

/// The loaded first model and every other `--model`, each named by its directory as given.
fn with_the_others(
    args: &EvalArgs,
    first: longread_classifier::Classifier,
    options: ClassifierOptions,
) -> Result<Vec<(String, longread_classifier::Classifier)>> {
    let mut classifiers = vec![(args.model[0].display().to_string(), first)];
    for dir in &args.model[1..] {
        classifiers.push((dir.display().to_string(), load(dir, options, args.vector_cache.as_deref())?));
    }
    Ok(classifiers)
}

/// `eval` of multi-label models (one, or several compared on the same documents): the
/// multi-label metrics with bootstrap intervals, as a table or JSON.
fn run_multilabel(
    args: &EvalArgs,
    first: longread_classifier::Classifier,
    options: ClassifierOptions,
    quiet: bool,
) -> Result<()> {
    let classifiers = with_the_others(args, first, options)?;
    let models: Vec<(String, &longread_classifier::Classifier)> =
        classifiers.iter().map(|(n, c)| (n.clone(), c)).collect();
    let progress = progress_bar(0, quiet);
    let bootstrap = Bootstrap::new(args.bootstrap as usize, args.seed).map_err(anyhow::Error::msg)?;
    let evaluation = evaluate_multilabel_models(
        &models,
        open_input(&args.data)?,
        &input_name(&args.data),
        &args.label_layout.layout(),
        args.strict_labels,
        bootstrap,
        || progress.inc(1),
    )?;
    progress.finish_and_clear();
    if let (Some(note), false) = (evaluation.unknown_note(), quiet) {
        eprintln!("{note}");
    }
    if args.json {
        println!("{}", evaluation.to_json());
    } else {
        print!("{}", evaluation.to_table());
    }
    Ok(())
}

/// `eval` with several models: the comparison table, or its JSON.
fn run_comparison(
    args: &EvalArgs,
    first: longread_classifier::Classifier,
    options: ClassifierOptions,
    quiet: bool,
) -> Result<()> {
    let classifiers = with_the_others(args, first, options)?;
    let models: Vec<(String, &longread_classifier::Classifier)> =
        classifiers.iter().map(|(n, c)| (n.clone(), c)).collect();
    let progress = progress_bar(0, quiet);
    let bootstrap = Bootstrap::new(args.bootstrap as usize, args.seed).map_err(anyhow::Error::msg)?;
    let comparison = compare(&models, open_input(&args.data)?, &input_name(&args.data), bootstrap, || progress.inc(1))?;
    progress.finish_and_clear();
    for m in &comparison.models {
        note_constant(&m.model, &m.report, quiet);
    }
    if args.json {
        println!("{}", serde_json::to_string(&comparison)?);
    } else {
        print!("{}", comparison_table(&comparison));
    }
    Ok(())
}

/// A note on stderr when `model` predicted one label for every document: a collapsed model
/// (or one whose inputs shifted, as a bag of words on another vocabulary) scores the floor.
fn note_constant(model: &str, report: &longread_metrics::Report, quiet: bool) {
    if let (Some(label), false) = (&report.constant_prediction, quiet) {
        eprintln!(
            "note: {model} predicted `{}` for all {} (its scores are a constant's); if it did \
             well on its training data, these documents differ from that data (docs/recipes.md, section 1)",
            printable(label),
            counted(report.examples, "document")
        );
    }
}

/// The comparison for people: a row per model.
fn comparison_table(c: &Comparison) -> String {
    let ci = |v: f64, i: &Interval| format!("{v:.3} [{:.3}, {:.3}]", i.low, i.high);
    let p = |v: Option<f64>| v.map_or("-".to_string(), |p| format!("{p:.3}"));
    let width = c.models.iter().map(|m| m.model.chars().count()).max().unwrap_or(5).max(5);
    let mut out = format!(
        "{}; {:.0}% bootstrap intervals from {} resamples; p: paired bootstrap against the first model\n\n",
        counted(c.documents, "document"),
        c.level * 100.0,
        c.resamples
    );
    out += &format!(
        "{:<width$}  {:<22}  {:<22}  {:>7}  {:>7}  {:<22}  {:>7}  {:<22}  {:>7}",
        "model", "accuracy", "macro-F1", "p(acc)", "p(F1)", "ROC-AUC", "p(AUC)", "log loss", "p(LL)"
    );
    for label in &c.labels {
        out += &format!("  {:<22}", format!("recall {}", printable(label)));
    }
    out.push('\n');
    for m in &c.models {
        let auc = match (m.report.roc_auc, &m.roc_auc_ci) {
            (Some(auc), Some(interval)) => ci(auc, interval),
            _ => "-".to_string(),
        };
        let log_loss = m.report.log_loss.map_or("-".to_string(), |l| ci(l, &m.log_loss_ci));
        out += &format!(
            "{:<width$}  {:<22}  {:<22}  {:>7}  {:>7}  {:<22}  {:>7}  {:<22}  {:>7}",
            m.model,
            ci(m.report.accuracy, &m.accuracy_ci),
            ci(m.report.macro_f1, &m.macro_f1_ci),
            p(m.accuracy_p_value),
            p(m.macro_f1_p_value),
            auc,
            p(m.roc_auc_p_value),
            log_loss,
            p(m.log_loss_p_value)
        );
        for (class, interval) in m.report.per_class.iter().zip(&m.recall_ci) {
            out += &format!("  {:<22}", ci(class.recall, interval));
        }
        out.push('\n');
    }
    out
}
