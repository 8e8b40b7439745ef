//! `longread threshold`: tune a model's decision rule (a two-label threshold, or label
//! biases) on held-out labelled documents and keep it in the model directory, where predict, eval, report, the server and
//! Python apply it.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_classifier::decision::{as_json_number, Decision, Rule, DECISION_FILE};
use longread_classifier::evaluate::{tune_threshold, ThresholdMetric};
use longread_classifier::Classifier;
use longread_metrics::terminal::printable;
use longread_model::DeviceChoice;

use crate::commands::counts::counted;
use crate::commands::predict::{progress_bar, EncodingArgs};
use crate::io::{input_name, open_input};

/// Arguments of `longread threshold`.
#[derive(Debug, Args)]
#[command(after_help = "Two labels take a threshold on the second label's probability (`inspect` lists the \
labels): it is predicted when its probability is at least the threshold, the first label otherwise. Three or \
more take a bias per label, added to the log of its probability; the label with the highest sum is predicted \
(the first label's bias stays 0; with two labels this is the same as a threshold). Probabilities are \
unchanged; only the label chosen from them moves. Tune on documents held out from training (a dev set), \
not on the test set you report.")]
pub struct ThresholdArgs {
    /// Model directory (any kind: hierarchical, sequence, HAN, bag of words, ensemble).
    #[arg(long)]
    model: PathBuf,
    /// Labelled JSON lines (or .csv/.tsv) held out from training, as `eval --data` reads them;
    /// `-` reads standard input. Not needed with --set or --clear.
    #[arg(long, visible_alias = "input", required_unless_present_any = ["set", "clear"])]
    data: Option<PathBuf>,
    /// What the threshold (or the biases) maximize on --data.
    #[arg(long, value_enum, default_value_t = ThresholdMetric::MacroF1)]
    metric: ThresholdMetric,
    /// Print what tuning finds without writing it to the model.
    #[arg(long)]
    dry_run: bool,
    /// Keep this threshold (between 0 and 1) instead of tuning one (two-label models).
    #[arg(long, conflicts_with_all = ["data", "clear", "dry_run"])]
    set: Option<f32>,
    /// Remove the model's threshold or biases: it labels by the most probable label again.
    #[arg(long, conflicts_with_all = ["data", "dry_run"])]
    clear: bool,
    /// Print one JSON object (the rule: "positive" and "threshold", or "biases"; the metrics
    /// with the most probable label and with the rule; written).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    encoding: EncodingArgs,
}

/// Runs `longread threshold`.
pub fn run(args: ThresholdArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    let dir = &args.model;
    let classifier = Classifier::load(dir, args.encoding.options(device))
        .with_context(|| format!("loading model {}", dir.display()))?;
    let labels = classifier.labels().to_vec();
    if args.clear {
        let removed = Decision::clear(dir)?;
        if args.json {
            println!("{}", serde_json::json!({ "cleared": removed }));
        } else if !quiet {
            let what = if removed { "removed its decision rule" } else { "had no decision rule" };
            eprintln!("{}: {what}; it labels by the most probable label", dir.display());
        }
        return Ok(());
    }
    if let Some(threshold) = args.set {
        if labels.len() != 2 {
            bail!(
                "--set is a threshold for a model with two labels; {} has {} (tune its label biases with --data)",
                dir.display(),
                labels.len()
            );
        }
        let decision = Decision {
            rule: Rule::Threshold { positive: labels[1].clone(), threshold },
            chosen_by: "set by hand".into(),
        };
        if let Err(why) = decision.check(&labels) {
            bail!("{}: {why}", dir.display());
        }
        decision.save(dir)?;
        if args.json {
            println!("{}", serde_json::json!({ "threshold": as_json_number(threshold), "written": true }));
        } else if !quiet {
            eprintln!("{}: `{}` when its probability is at least {threshold}", dir.display(), printable(&labels[1]));
        }
        return Ok(());
    }
    let Some(data) = &args.data else { bail!("--data is needed to tune a threshold") };
    let progress = progress_bar(0, quiet);
    let source = input_name(data);
    let (tuned, decision) = tune_threshold(&classifier, open_input(data)?, &source, args.metric, || progress.inc(1))?;
    progress.finish_and_clear();
    let written = !args.dry_run;
    if written {
        decision.save(dir)?;
    }
    if args.json {
        let mut value = serde_json::to_value(&decision)?;
        value["metric"] = serde_json::to_value(args.metric)?;
        value["at_default"] = serde_json::to_value(&tuned.at_default)?;
        value["at_threshold"] = serde_json::to_value(&tuned.at_threshold)?;
        value["written"] = written.into();
        println!("{value}");
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
        if let Some(warning) = decision.warning(tuned.at_default.examples) {
            eprintln!("{warning}");
        }
        match written {
            true => eprintln!(
                "kept in {}; predict, eval, report, serve and Python apply it",
                dir.join(DECISION_FILE).display()
            ),
            false => eprintln!("--dry-run: nothing written"),
        }
    }
    Ok(())
}
