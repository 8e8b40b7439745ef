//! `longread threshold`: tune a model's decision rule (a two-label threshold, or label
//! biases) on held-out labelled documents and keep it in the model directory, where predict, eval, report, the server and
//! Python apply it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use longread_classifier::decision::{Decision, Limits, Rule, DECISION_FILE};
use longread_classifier::evaluate::{tune_threshold, tune_threshold_out_of_fold, ThresholdMetric};
use longread_classifier::multilabel_eval::{score_label_sets, tune_scored, ScoredSets};
use longread_classifier::out_of_fold::{multilabel_out_of_fold_for, out_of_fold_for, OutOfFold};
use longread_classifier::Classifier;
use longread_metrics::terminal::printable;
use longread_model::DeviceChoice;
use longread_text::multilabel::read_multilabel;

use crate::commands::counts::counted;
use crate::commands::predict::{progress_bar, EncodingArgs};
use crate::io::{input_name, open_input};

/// Arguments of `longread threshold`.
#[derive(Debug, Args)]
#[command(after_help = "Two labels take a threshold on the second label's probability (`inspect` lists the \
labels): it is predicted when its probability is at least the threshold, the first label otherwise. Three or \
more take a bias per label, added to the log of its probability; the label with the highest sum is predicted \
(the first label's bias stays 0; with two labels this is the same as a threshold). Probabilities are \
unchanged; only the label chosen from them moves. A multi-label model takes a threshold per label: each \
label is carried when its probability reaches its own threshold (0.5 by default); tuning picks, label by \
label, the threshold with the best F1 (which maximizes macro-F1), except that a label whose best F1 stays \
under 0.1 is carried only above its highest probability there (SCutFBR: a rare label does not flood every \
document for a few hundredths of F1); --top-k and --min-labels then bound how many \
labels a document carries. Tune on documents held out from training (a dev set), not on the test set you report.")]
pub struct ThresholdArgs {
    /// Model directory (any kind: hierarchical, sequence, HAN, bag of words, ensemble).
    #[arg(long)]
    model: PathBuf,
    /// Labelled JSON lines (or .csv/.tsv) held out from training, as `eval --data` reads them;
    /// `-` reads standard input. Not needed with --set, --clear or --out-of-fold.
    #[arg(
        long,
        visible_alias = "input",
        required_unless_present_any = ["set", "clear", "out_of_fold", "top_k", "min_labels"]
    )]
    data: Option<PathBuf>,
    /// Tune on the out-of-fold predictions of a `train --cv K` run (its --out directory, or its
    /// out-of-fold.jsonl) instead of --data, at the calibration the model has: for a final
    /// model trained on every document (`train --dev-split 0`) with that run's settings. A
    /// warning names settings or data in which the model and the run differ.
    #[arg(long, value_name = "CV_RUN", conflicts_with_all = ["data", "set", "clear"])]
    out_of_fold: Option<PathBuf>,
    /// What the threshold (or the biases) maximize on --data. A multi-label model's thresholds
    /// maximize each label's F1: macro-f1 only (another metric is refused).
    #[arg(long, value_enum, default_value_t = ThresholdMetric::MacroF1)]
    metric: ThresholdMetric,
    /// Print what tuning finds without writing it to the model.
    #[arg(long)]
    dry_run: bool,
    /// Keep this rule instead of tuning one: a threshold between 0 and 1 (two labels, e.g.
    /// `--set 0.3`), or label biases `LABEL=B,...` added to ln p (three or more labels, e.g.
    /// `--set teen=0.4,mature=-0.2`; a label not named gets 0). A multi-label model takes
    /// thresholds: `--set 0.3` for every label, or `--set violence=0.3,drugs=0.6` (a label
    /// not named keeps 0.5).
    #[arg(long, value_name = "T | LABEL=B,...", conflicts_with_all = ["data", "clear", "dry_run"])]
    set: Option<String>,
    /// Multi-label models: at most K labels a document, the K most probable of those that
    /// reach their thresholds. Kept in the model with the thresholds (tuned with --data, given
    /// with --set, or, with neither, the model's current ones). Not given: no cap.
    #[arg(long, value_name = "K", conflicts_with = "clear")]
    top_k: Option<usize>,
    /// Multi-label models: at least M labels a document: when fewer reach their thresholds,
    /// the most probable of the others are added. `--min-labels K --top-k K` carries exactly
    /// the K most probable labels. Kept as --top-k is. Not given: 0 (a document may carry none).
    #[arg(long, value_name = "M", conflicts_with = "clear")]
    min_labels: Option<usize>,
    /// Remove the model's threshold or biases: it labels by the most probable label again (a
    /// multi-label model: every label at 0.5 again).
    #[arg(long, conflicts_with_all = ["data", "dry_run"])]
    clear: bool,
    /// Print one JSON object (the rule: "positive" and "threshold", or "biases"; the metrics
    /// with the most probable label and with the rule; written). A multi-label model:
    /// {"decision": {"thresholds": {label: t}, "chosen_by"}, "documents", "at_default",
    /// "at_threshold" (multi-label reports), "written"}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    label_layout: longread_train::run::LabelLayoutSpec,
    /// Read chunk vectors from DIR, and keep new ones there (see `train --vector-cache`): the
    /// dev set's vectors from training or an earlier eval skip the encoder.
    #[arg(long, value_name = "DIR")]
    vector_cache: Option<PathBuf>,
    #[command(flatten)]
    encoding: EncodingArgs,
}

/// Runs `longread threshold`.
pub fn run(args: ThresholdArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    let dir = &args.model;
    let classifier = crate::commands::predict::load(dir, args.encoding.options(device), args.vector_cache.as_deref())?;
    let labels = classifier.labels().to_vec();
    if args.clear {
        let removed = Decision::clear(dir)?;
        let now = match classifier.multi_label() {
            true => "each label is carried at probability 0.5 again",
            false => "it labels by the most probable label",
        };
        report_cleared(dir, removed, args.json, quiet, "decision rule", now);
        return Ok(());
    }
    if classifier.multi_label() {
        return run_multilabel(&args, &classifier, quiet);
    }
    if !args.label_layout.label_columns.is_empty() {
        bail!("--label-columns is for multi-label models; {} predicts one label per document", dir.display());
    }
    if args.top_k.is_some() || args.min_labels.is_some() {
        bail!("--top-k and --min-labels are for multi-label models; {} predicts one label per document", dir.display());
    }
    if let Some(rule) = &args.set {
        let decision = Decision { rule: rule_to_set(rule, &labels)?, chosen_by: "set by hand".into() };
        if let Err(why) = decision.check(&labels) {
            bail!("{}: {why}", dir.display());
        }
        return keep_set(dir, &decision, args.json, quiet);
    }
    let (source, tuned) = match (&args.out_of_fold, &args.data) {
        (Some(run), _) => {
            let oof = out_of_fold_warned(&classifier, run, quiet)?;
            (oof.source.clone(), tune_threshold_out_of_fold(&classifier, &oof, args.metric)?)
        }
        (None, Some(data)) => {
            let progress = progress_bar(0, quiet);
            let source = input_name(data);
            let tuned = tune_threshold(&classifier, open_input(data)?, &source, args.metric, || progress.inc(1))?;
            progress.finish_and_clear();
            (source, tuned)
        }
        (None, None) => bail!("--data (or --out-of-fold) is needed to tune a threshold"),
    };
    let decision = &tuned.decision;
    let written = keep_tuned(dir, decision, &tuned, &args)?;
    if args.json {
        return Ok(());
    }
    println!(
        "{} ({}, maximizing {}): {}",
        source,
        counted(tuned.at_default.examples, "document"),
        args.metric.name(),
        printable(&decision.describe()),
    );
    println!("{:<22} {:>9} {:>9} {:>11}", "", "accuracy", "macro-F1", "weighted F1");
    let tuned_rule = if labels.len() == 2 { "tuned threshold" } else { "tuned biases" };
    let default_rule = if labels.len() == 2 { "most probable (0.5)" } else { "most probable" };
    for (what, r) in [(default_rule, &tuned.at_default), (tuned_rule, &tuned.at_threshold)] {
        println!("{what:<22} {:>9.4} {:>9.4} {:>11.4}", r.accuracy, r.macro_f1, r.weighted_f1);
    }
    if !quiet {
        announce(dir, decision, tuned.at_default.examples, written);
    }
    Ok(())
}

/// `threshold` for a multi-label model: a threshold per label, set by hand or tuned on --data.
fn run_multilabel(args: &ThresholdArgs, classifier: &Classifier, quiet: bool) -> Result<()> {
    let dir = &args.model;
    let labels = classifier.labels();
    let limits = Limits { min_labels: args.min_labels.unwrap_or(0), top_k: args.top_k };
    if let Err(why) = limits.check(labels.len()) {
        bail!("--top-k/--min-labels: {}", why.replace("top_k", "--top-k").replace("min_labels", "--min-labels"));
    }
    if let Some(given) = &args.set {
        let decision = Decision { rule: thresholds_to_set(given, labels, limits)?, chosen_by: "set by hand".into() };
        if let Err(why) = decision.check(labels) {
            bail!("--set {given}: {why}");
        }
        return keep_set(dir, &decision, args.json, quiet);
    }
    if args.data.is_none() && args.out_of_fold.is_none() {
        // Limits alone: the model's thresholds as they are (0.5 each without a rule).
        let current = Decision::load(dir, labels)?;
        let thresholds = match current.as_ref().and_then(Decision::thresholds) {
            Some(thresholds) => thresholds,
            None => vec![longread_classifier::decision::MULTI_LABEL_DEFAULT; labels.len()],
        };
        let chosen_by = match current {
            Some(current) if !current.chosen_by.is_empty() => {
                format!("{}; label limits set by hand", current.chosen_by)
            }
            _ => "set by hand".into(),
        };
        let rule = Rule::PerLabel { thresholds: labels.iter().cloned().zip(thresholds).collect(), limits };
        return keep_set(dir, &Decision { rule, chosen_by }, args.json, quiet);
    }
    if args.metric != ThresholdMetric::MacroF1 {
        bail!(
            "--metric {}: a multi-label model's thresholds maximize each label's F1 (and so macro-F1), the only metric \
             for them",
            args.metric.name()
        );
    }
    let scored =
        label_sets_scored(classifier, args.data.as_ref(), args.out_of_fold.as_ref(), &args.label_layout, quiet)?;
    let tuned = tune_scored(&scored, limits)?;
    let source = scored.source;
    let written = keep_tuned(dir, &tuned.decision, &tuned, args)?;
    if args.json {
        return Ok(());
    }
    println!(
        "{source} ({}, each label's F1): {}",
        counted(tuned.documents, "document"),
        printable(&tuned.decision.describe())
    );
    println!("{:<22} {:>9} {:>9} {:>9}", "", "micro-F1", "macro-F1", "samples");
    for (what, r) in [("every label at 0.5", &tuned.at_default), ("tuned thresholds", &tuned.at_threshold)] {
        println!("{what:<22} {:>9.4} {:>9.4} {:>9.4}", r.micro.f1, r.macro_avg.f1, r.samples.f1);
    }
    if let (Some(note), false) = (tuned.floored_note(), quiet) {
        eprintln!("{note}");
    }
    if !quiet {
        announce(dir, &tuned.decision, tuned.documents, written);
    }
    Ok(())
}

/// Keeps a tuned `decision` in `dir` unless `--dry-run`, and with `--json` prints what tuning
/// found (`tuned`) with "written"; returns whether it was written.
fn keep_tuned(
    dir: &std::path::Path,
    decision: &Decision,
    tuned: &impl serde::Serialize,
    args: &ThresholdArgs,
) -> Result<bool> {
    let written = !args.dry_run;
    if written {
        decision.save(dir)?;
    }
    if args.json {
        let mut value = serde_json::to_value(tuned)?;
        value["written"] = written.into();
        println!("{value}");
    }
    Ok(written)
}

/// Says, on standard error, where a tuned `decision` went (or that `--dry-run` kept it), with
/// its warning when it moved far on few `documents`.
fn announce(dir: &std::path::Path, decision: &Decision, documents: usize, written: bool) {
    if let Some(warning) = decision.warning(documents) {
        eprintln!("{warning}");
    }
    match written {
        true => {
            eprintln!("kept in {}; predict, eval, report, serve and Python apply it", dir.join(DECISION_FILE).display())
        }
        false => eprintln!("--dry-run: nothing written"),
    }
}

/// Keeps a rule set by hand in `dir` and says so: its JSON with `json`, its description otherwise.
fn keep_set(dir: &std::path::Path, decision: &Decision, json: bool, quiet: bool) -> Result<()> {
    decision.save(dir)?;
    if json {
        let mut value = serde_json::to_value(decision)?;
        value["written"] = true.into();
        println!("{value}");
    } else if !quiet {
        eprintln!("{}: {}", dir.display(), printable(&decision.describe()));
    }
    Ok(())
}

/// The thresholds `--set` gives a multi-label model: one for every label, or `LABEL=T,...`
/// (a label not named keeps 0.5), in the model's label order, with `limits`.
fn thresholds_to_set(given: &str, labels: &[String], limits: Limits) -> Result<Rule> {
    let default = longread_classifier::decision::MULTI_LABEL_DEFAULT;
    let parse = |text: &str, what: &str| -> Result<f32> {
        text.trim().parse::<f32>().map_err(|_| anyhow::anyhow!("--set {given}: {what} is not a number between 0 and 1"))
    };
    if !given.contains('=') {
        let t = parse(given, "the threshold")?;
        return Ok(Rule::PerLabel { thresholds: labels.iter().map(|l| (l.clone(), t)).collect(), limits });
    }
    let mut thresholds: Vec<(String, f32)> = labels.iter().map(|l| (l.clone(), default)).collect();
    for pair in given.split(',') {
        let Some((label, t)) = pair.split_once('=') else { bail!("--set {given}: `{pair}` is not LABEL=T") };
        let Some(slot) = thresholds.iter_mut().find(|(l, _)| l == label.trim()) else {
            bail!("--set {given}: the model has no label `{}` (its labels: {})", label.trim(), labels.join(", "))
        };
        slot.1 = parse(t, &format!("the threshold of `{}`", label.trim()))?;
    }
    Ok(Rule::PerLabel { thresholds, limits })
}

/// The labelled documents a multi-label `classifier` tunes or calibrates on, scored: those of
/// `data` (laid out as `layout` says) classified now, with a progress bar unless `quiet`, or
/// the out-of-fold predictions of the `--cv` run `out_of_fold` (its warnings printed unless
/// `quiet`).
pub(crate) fn label_sets_scored(
    classifier: &Classifier,
    data: Option<&PathBuf>,
    out_of_fold: Option<&PathBuf>,
    layout: &longread_train::run::LabelLayoutSpec,
    quiet: bool,
) -> Result<ScoredSets> {
    if let Some(run) = out_of_fold {
        let (scored, warnings) = multilabel_out_of_fold_for(classifier, run)?;
        if !quiet {
            warnings.iter().for_each(|w| eprintln!("{}", printable(w)));
        }
        return Ok(scored);
    }
    let Some(data) = data else { bail!("--data (or --out-of-fold) is needed") };
    let source = input_name(data);
    let examples = read_multilabel(open_input(data)?, &source, &layout.layout())?;
    let progress = progress_bar(examples.len(), quiet);
    let scored = score_label_sets(classifier, &examples, &source, || progress.inc(1))?;
    progress.finish_and_clear();
    Ok(scored)
}

/// The out-of-fold predictions of the `--cv` run `run` for `classifier`, its warnings
/// printed unless `quiet`.
pub(crate) fn out_of_fold_warned(classifier: &Classifier, run: &std::path::Path, quiet: bool) -> Result<OutOfFold> {
    let oof = out_of_fold_for(classifier, run)?;
    if !quiet {
        oof.warnings.iter().for_each(|w| eprintln!("{}", printable(w)));
    }
    Ok(oof)
}

/// Says that `--clear` removed the model's `what` (or that it had none) and what the model
/// does `now`: `{"cleared": bool}` with `json`, a line on standard error otherwise.
pub(crate) fn report_cleared(dir: &std::path::Path, removed: bool, json: bool, quiet: bool, what: &str, now: &str) {
    if json {
        println!("{}", serde_json::json!({ "cleared": removed }));
    } else if !quiet {
        let done = if removed { format!("removed its {what}") } else { format!("had no {what}") };
        eprintln!("{}: {done}; {now}", dir.display());
    }
}

/// The rule `--set` gives: a threshold (two labels) or `LABEL=B,...` biases (more labels; a
/// label not named gets 0), in the model's label order.
fn rule_to_set(given: &str, labels: &[String]) -> Result<Rule> {
    if !given.contains('=') {
        let threshold: f32 = given.trim().parse().map_err(|_| {
            anyhow::anyhow!("--set {given}: give a threshold between 0 and 1, or label biases LABEL=B,...")
        })?;
        if labels.len() != 2 {
            bail!(
                "--set {given}: a threshold is for a model with two labels; this one has {} ({}): give label biases, \
                 e.g. --set {}=0.5",
                labels.len(),
                labels.join(", "),
                labels[1]
            );
        }
        return Ok(Rule::Threshold { positive: labels[1].clone(), threshold });
    }
    let mut biases: Vec<(String, f32)> = labels.iter().map(|l| (l.clone(), 0.0)).collect();
    for pair in given.split(',') {
        let Some((label, bias)) = pair.split_once('=') else { bail!("--set {given}: `{pair}` is not LABEL=B") };
        let Some(slot) = biases.iter_mut().find(|(l, _)| l == label.trim()) else {
            bail!("--set {given}: the model has no label `{}` (its labels: {})", label.trim(), labels.join(", "))
        };
        slot.1 = match bias.trim().parse::<f32>() {
            Ok(b) if b.is_finite() => b,
            _ => bail!("--set {given}: the bias of `{}` must be a finite number", label.trim()),
        };
    }
    Ok(Rule::Biases(biases))
}
