//! `longread calibrate`: fit a temperature that calibrates a model's probabilities on held-out
//! labelled documents and keep it in the model directory, where predict, eval, report, the
//! server and Python apply it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use longread_classifier::decision::temperature::{self, short, Fitted, CALIBRATION_FILE};
use longread_classifier::decision::Temperature;
use longread_classifier::decision::{label_temperature, Decision};
use longread_classifier::evaluate::{calibrate_out_of_fold, calibrate_temperature};
use longread_classifier::multilabel_eval::calibrate_scored;
use longread_classifier::Classifier;
use longread_metrics::terminal::printable;
use longread_model::DeviceChoice;

use crate::commands::counts::counted;
use crate::commands::predict::{progress_bar, EncodingArgs};
use crate::commands::threshold::{label_sets_scored, out_of_fold_warned, report_cleared};
use crate::io::{input_name, open_input};

/// Arguments of `longread calibrate`.
#[derive(Debug, Args)]
#[command(after_help = "Temperature scaling (Guo et al. 2017): the primary task's log-probabilities are divided \
by T and renormalised, softmax(ln p / T); T > 1 softens an overconfident model, T < 1 sharpens a timid one. T is \
the value of least log loss on --data, searched in [0.05, 20]. The most probable label never changes; a decision \
rule the model keeps (`threshold`) is restated so that every document keeps its label. Calibrating again fits anew \
from the model's own probabilities (it replaces T). Fit on documents held out from training (a dev set), not on the test set you report; `eval` \
then shows log loss and ECE (expected calibration error) on the test set. A multi-label model gets a temperature \
per label: each label's probability becomes σ(logit(p) / T), T the value of least binary cross-entropy for that \
label (a label every document carries, or none, keeps 1), and its per-label thresholds are restated so that every \
label is carried as before (a --top-k/--min-labels bound kept with them ranks the calibrated probabilities, which \
may order labels differently).")]
pub struct CalibrateArgs {
    /// Model directory (any kind: hierarchical, sequence, HAN, bag of words, ensemble).
    #[arg(long)]
    model: PathBuf,
    /// Labelled JSON lines (or .csv/.tsv) held out from training, as `eval --data` reads them;
    /// `-` reads standard input. Not needed with --clear or --out-of-fold.
    #[arg(long, visible_alias = "input", required_unless_present_any = ["clear", "out_of_fold"])]
    data: Option<PathBuf>,
    /// Fit on the out-of-fold predictions of a `train --cv K` run (its --out directory, or its
    /// out-of-fold.jsonl) instead of --data: for a final model trained on every document
    /// (`train --dev-split 0`) with that run's settings, which has no documents held out. A
    /// warning names settings or data in which the model and the run differ.
    #[arg(long, value_name = "CV_RUN", conflicts_with_all = ["data", "clear"])]
    out_of_fold: Option<PathBuf>,
    /// Print what fitting finds without writing it to the model.
    #[arg(long)]
    dry_run: bool,
    /// Remove the model's calibration: it gives its own probabilities again (its decision
    /// rule, if it has one, restated for them, so that no label changes).
    #[arg(long, conflicts_with_all = ["data", "dry_run"])]
    clear: bool,
    /// Print one JSON object (temperature, chosen_by, previous, at_bound, documents, log_loss
    /// and ece before and after, written; decision when a rule was restated). A multi-label
    /// model: temperatures ({label: T}), chosen_by, documents, labels (each label's
    /// temperature, previous, positives, one_class, at_bound, log_loss), log_loss, ece,
    /// written, decision.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    label_layout: longread_train::run::LabelLayoutSpec,
    /// Read chunk vectors from DIR, and keep new ones there (see `train --vector-cache`): the
    /// held-out set's vectors from training or an earlier eval skip the encoder.
    #[arg(long, value_name = "DIR")]
    vector_cache: Option<PathBuf>,
    #[command(flatten)]
    encoding: EncodingArgs,
}

/// Runs `longread calibrate`.
pub fn run(args: CalibrateArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    let dir = &args.model;
    let classifier = crate::commands::predict::load(dir, args.encoding.options(device), args.vector_cache.as_deref())?;
    if args.clear {
        let (removed, restated) = temperature::remove(dir, classifier.labels())?;
        report_cleared(dir, removed, args.json, quiet, "calibration", "it gives its own probabilities");
        if let (Some(decision), false) = (restated, quiet || args.json) {
            eprintln!("its decision rule, restated for them: {}", printable(&decision.describe()));
        }
        return Ok(());
    }
    if classifier.multi_label() {
        return run_multilabel(&args, &classifier, quiet);
    }
    if !args.label_layout.label_columns.is_empty() {
        bail!("--label-columns is for multi-label models; {} predicts one label per document", dir.display());
    }
    let (source, fitted) = match (&args.out_of_fold, &args.data) {
        (Some(run), _) => {
            let oof = out_of_fold_warned(&classifier, run, quiet)?;
            (oof.source.clone(), calibrate_out_of_fold(&classifier, &oof)?)
        }
        (None, Some(data)) => {
            let progress = progress_bar(0, quiet);
            let source = input_name(data);
            let fitted = calibrate_temperature(&classifier, open_input(data)?, &source, || progress.inc(1))?;
            progress.finish_and_clear();
            (source, fitted)
        }
        (None, None) => bail!("--data (or --out-of-fold) is needed to calibrate"),
    };
    let written = !args.dry_run;
    let restated = if written { temperature::keep(dir, &fitted, classifier.labels())? } else { None };
    if args.json {
        return print_json(&fitted, written, restated.as_ref());
    }
    print_table(&source, &fitted);
    if !quiet {
        say_kept(dir, &temperature::warnings(&fitted), restated.as_ref(), "decision rule", written);
    }
    Ok(())
}

/// `calibrate` for a multi-label model: a temperature per label, fitted on --data.
fn run_multilabel(args: &CalibrateArgs, classifier: &Classifier, quiet: bool) -> Result<()> {
    let dir = &args.model;
    let scored =
        label_sets_scored(classifier, args.data.as_ref(), args.out_of_fold.as_ref(), &args.label_layout, quiet)?;
    let fitted = calibrate_scored(&scored, Temperature::load(dir)?.as_ref())?;
    let source = scored.source;
    let written = !args.dry_run;
    let restated = if written { label_temperature::keep(dir, &fitted, classifier.labels())? } else { None };
    if args.json {
        return print_json(&fitted, written, restated.as_ref());
    }
    println!("{source} ({}): a temperature per label", counted(fitted.documents, "document"));
    println!("{:<16} {:>9} {:>12} {:>18}", "label", "positives", "temperature", "log loss (before)");
    for f in &fitted.labels {
        let t = match (f.one_class, f.previous == 1.0) {
            (true, _) => "1 (one class)".to_string(),
            (false, true) => short(f.temperature),
            (false, false) => format!("{} (was {})", short(f.temperature), short(f.previous)),
        };
        println!(
            "{:<16} {:>9} {:>12} {:>9.4} ({:.4})",
            printable(&f.label),
            f.positives,
            t,
            f.log_loss.after,
            f.log_loss.before
        );
    }
    println!("{:<14} {:>9} {:>9}", "", "log loss", "ECE");
    println!("{:<14} {:>9.4} {:>9.4}", "as given", fitted.log_loss.before, fitted.ece.before);
    println!("{:<14} {:>9.4} {:>9.4}", "calibrated", fitted.log_loss.after, fitted.ece.after);
    if !quiet {
        say_kept(dir, &label_temperature::warnings(&fitted), restated.as_ref(), "thresholds", written);
    }
    Ok(())
}

/// Prints what calibrating found (`fitted`) as one JSON object, with "written" and the
/// `restated` rule.
fn print_json(fitted: &impl serde::Serialize, written: bool, restated: Option<&Decision>) -> Result<()> {
    let mut value = serde_json::to_value(fitted)?;
    value["written"] = written.into();
    if let Some(decision) = restated {
        value["decision"] = serde_json::to_value(decision)?;
    }
    println!("{value}");
    Ok(())
}

/// Says, on standard error, the `warnings`, the model's `rule` as `restated`, and where the
/// calibration went (or that `--dry-run` kept it).
fn say_kept(dir: &std::path::Path, warnings: &[String], restated: Option<&Decision>, rule: &str, written: bool) {
    for warning in warnings {
        eprintln!("{warning}");
    }
    if let Some(decision) = restated {
        eprintln!("its {rule}, restated for the calibrated probabilities: {}", printable(&decision.describe()));
    }
    match written {
        true => eprintln!(
            "kept in {}; predict, eval, report, serve and Python give the calibrated probabilities",
            dir.join(CALIBRATION_FILE).display()
        ),
        false => eprintln!("--dry-run: nothing written"),
    }
}

/// The fitted temperature and the scores before and after, for people.
fn print_table(source: &str, fitted: &Fitted) {
    let replaced = match fitted.previous == 1.0 {
        true => String::new(),
        false => format!(" (it was {})", short(fitted.previous)),
    };
    let t = short(fitted.calibration.temperature);
    println!("{source} ({}): temperature {t}{replaced}", counted(fitted.documents, "document"));
    println!("{:<14} {:>9} {:>9}", "", "log loss", "ECE");
    println!("{:<14} {:>9.4} {:>9.4}", "as given", fitted.log_loss.before, fitted.ece.before);
    println!("{:<14} {:>9.4} {:>9.4}", "calibrated", fitted.log_loss.after, fitted.ece.after);
    println!("\nreliability: documents by their top probability, its mean and how often that label is right");
    println!(
        "{:<16} {:>27}   {:>27}",
        "top probability", "as given: docs  mean  right", "calibrated: docs  mean  right"
    );
    let (before, after) = (&fitted.reliability.before, &fitted.reliability.after);
    let mut lowers: Vec<f64> = before.iter().chain(after).map(|b| b.lower).collect();
    lowers.sort_by(f64::total_cmp);
    lowers.dedup();
    let cell =
        |bins: &[longread_metrics::scores::ReliabilityBin], lower: f64| match bins.iter().find(|b| b.lower == lower) {
            Some(b) => format!("{:>6} {:>6.3} {:>6.3}", b.examples, b.confidence, b.accuracy),
            None => format!("{:>6} {:>6} {:>6}", 0, "-", "-"),
        };
    for lower in lowers {
        let upper = lower + 1.0 / longread_metrics::scores::CALIBRATION_BINS as f64;
        let span = format!("({lower:.3}, {upper:.3}]");
        println!("{span:<16} {:>27}   {:>29}", cell(before, lower), cell(after, lower));
    }
}
