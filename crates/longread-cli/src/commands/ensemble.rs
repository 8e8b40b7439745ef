//! `longread ensemble`: combine trained models into one whose probabilities are their
//! weighted mean.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_classifier::calibration::Calibration;
use longread_classifier::ensemble::{build_calibrated_ensemble, build_ensemble, EnsembleSpec};
use longread_metrics::terminal::printable;
use longread_train::run::stacking::{build_stacked_ensemble, StackSettings};

/// Arguments of `longread ensemble`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scored").args(["calibrate", "stack"])))]
#[command(after_help = "The ensemble is a model directory like any other: predict, eval, report and serve \
accept it, and each prediction lists what every member said (\"members\"). Members may be of any kind \
(hierarchical, sequence, HAN, bag of words) but need the same labels and one task each, and are all \
multi-label or all single-label (multi-label members are combined label by label). Calibrate on \
held-out documents the members did not train on (--calibrate DEV.jsonl [--fit-weights]), or stack them by \
cross-validation on their own training data (--stack TRAIN.jsonl [--fit-weights]: each member is retrained \
--folds times with its recorded settings; no held-out data is spent), then compare the ensemble with its \
members on held-out data: longread eval --model ENSEMBLE --model MEMBER ... --data TEST")]
pub struct EnsembleArgs {
    /// A model directory made by `longread train` or `init`; give it once per member (at least
    /// two). Each is copied into OUT/members/.
    #[arg(long = "model", required = true, num_args = 1)]
    models: Vec<PathBuf>,
    /// Weight of each member, in the order of --model (as many as models; they are divided by
    /// their sum): repeated (`--weight 2 --weight 1`) or comma-separated (`--weight 2,1`).
    /// Default: equal weights.
    #[arg(long = "weight", num_args = 1, value_delimiter = ',', allow_negative_numbers = true)]
    weights: Vec<f64>,
    /// Output directory; must not exist (written under a temporary name, then renamed).
    #[arg(long, visible_alias = "output")]
    out: PathBuf,
    /// Labelled held-out documents (JSON lines or CSV with "text" and "label" — multi-label
    /// members: "labels" — not the members' training data): fit each member's temperature on
    /// them, so that probabilities are on one scale before they are averaged (an overconfident
    /// member otherwise decides alone). Prints how equal weights, calibrated, and fitted weights
    /// score out of fold, and keeps the one with the lowest out-of-fold log loss (the members'
    /// own probabilities when calibrating does not beat them). Multi-label members are
    /// calibrated label by label: each label gets every member's temperature (and weight) for
    /// it, and keeps its own best way.
    #[arg(long, value_name = "DEV.jsonl", conflicts_with = "stack")]
    calibrate: Option<PathBuf>,
    /// The members' training data (JSON lines or CSV with "text" and "label"; multi-label
    /// members: "labels", folds by iterative stratification, fitted label by label as
    /// --calibrate): retrain every member
    /// --folds times on stratified folds of it with the settings its run recorded
    /// (training_args.json), score each fold with the model that did not see it, and fit the
    /// temperatures (and with --fit-weights the weights) on those out-of-fold scores — stacking
    /// by cross-validation on the training set. Costs --folds trainings per member (seconds
    /// for a bag of words or a head on --vector-cache; full fine-tunings otherwise).
    #[arg(long, value_name = "TRAIN.jsonl")]
    stack: Option<PathBuf>,
    /// With --calibrate or --stack: also fit the members' weights (the likeliest mixture), kept
    /// only when they have the lowest out-of-fold log loss.
    #[arg(long, requires = "scored", conflicts_with = "weights")]
    fit_weights: bool,
    /// With --calibrate or --stack: read and keep encoder members' chunk vectors in this
    /// directory (as `predict --vector-cache`; with --stack the refits of a frozen encoder
    /// share them).
    #[arg(long, requires = "scored", value_name = "DIR")]
    vector_cache: Option<PathBuf>,
    /// Folds of --stack's refits, and of the out-of-fold scores of every choice.
    #[arg(long, default_value_t = 5, value_parser = crate::commands::counts::at_least(2))]
    folds: u64,
    /// Seed of --stack's stratified folds.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print ensemble.json (labels, members and their normalised weights) instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs `longread ensemble`.
pub fn run(args: EnsembleArgs, quiet: bool) -> Result<()> {
    let weights = match args.weights.len() {
        0 => vec![1.0; args.models.len()],
        n if n == args.models.len() => args.weights.clone(),
        n => bail!("{n} --weight values for {} --model directories: give one per model, or none", args.models.len()),
    };
    let members: Vec<(PathBuf, f64)> = args.models.iter().cloned().zip(weights).collect();
    let spec = match (&args.calibrate, &args.stack) {
        (Some(data), _) => {
            let cache = args.vector_cache.as_deref();
            build_calibrated_ensemble(&members, &args.out, data, args.fit_weights, args.folds as usize, cache, |m| {
                eprintln!("calibration: {} classified the held-out documents", members[m].0.display())
            })
            .with_context(|| format!("building ensemble {}", args.out.display()))?
        }
        (None, Some(train)) => stack(&args, &members, train, quiet)?,
        (None, None) => {
            build_ensemble(&members, &args.out).with_context(|| format!("building ensemble {}", args.out.display()))?
        }
    };
    if spec.calibration.is_none() && !quiet {
        eprintln!(
            "note: the members' probabilities are averaged as they are; if one member is much more confident \
             than the others it decides alone. Calibrate them on held-out labelled documents: --calibrate DEV.jsonl"
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&spec)?);
    } else {
        println!(
            "ensemble of {} models in {} (labels {})",
            spec.members.len(),
            args.out.display(),
            printable(&spec.labels.join(", "))
        );
        for m in &spec.members {
            println!("  {:<40} weight {:.3}  temperature {:.3}  from {}", m.dir, m.weight, m.temperature, m.source);
        }
        if let Some(c) = spec.calibration.as_ref().filter(|c| !c.per_label.is_empty()) {
            print_per_label(c);
        } else if let Some(c) = &spec.calibration {
            println!("out of fold ({} documents, {} folds):", c.documents, c.folds);
            println!("  {:<30} {:>8} {:>9} {:>9}", "combination", "log loss", "accuracy", "macro-F1");
            for row in &c.out_of_fold {
                println!("  {:<30} {:>8.4} {:>9.4} {:>9.4}", row.combination, row.log_loss, row.accuracy, row.macro_f1);
            }
            let kept = match (c.temperatures_fitted, c.weights_fitted) {
                (false, _) => "the members' own probabilities, equal weights: calibrating did not beat them",
                (true, false) if args.fit_weights => "calibrated, equal weights: the fitted ones did not beat them",
                (true, false) => "calibrated, equal weights",
                (true, true) => "calibrated, fitted weights",
            };
            println!("  kept: {kept} (the lowest out-of-fold log loss)");
        }
    }
    Ok(())
}

/// A multi-label ensemble's calibration: each way of combining out of fold, then each label's
/// choice with every member's temperature and weight for it.
fn print_per_label(c: &Calibration) {
    println!("out of fold ({} documents, {} folds; labels carried at 0.5):", c.documents, c.folds);
    println!("  {:<30} {:>8} {:>9} {:>9} {:>15}", "combination", "log loss", "micro-F1", "macro-F1", "subset accuracy");
    for row in &c.out_of_fold {
        let micro = row.micro_f1.unwrap_or(f64::NAN);
        println!(
            "  {:<30} {:>8.4} {:>9.4} {:>9.4} {:>15.4}",
            row.combination, row.log_loss, micro, row.macro_f1, row.accuracy
        );
    }
    println!("each label (temperature × weight of each member, in order):");
    for label in &c.per_label {
        let members: Vec<String> =
            label.temperatures.iter().zip(&label.weights).map(|(t, w)| format!("{t:.2} × {w:.2}")).collect();
        println!(
            "  {:<24} {:>6} positives  {:<28} {}",
            printable(&label.label),
            label.positives,
            label.kept,
            members.join("   ")
        );
    }
    println!("  kept: each label's way with the lowest out-of-fold log loss");
}

/// `--stack`: the ensemble fitted on every member's out-of-fold scores of its training data,
/// a line per refit.
fn stack(
    args: &EnsembleArgs,
    members: &[(PathBuf, f64)],
    train: &std::path::Path,
    quiet: bool,
) -> Result<EnsembleSpec> {
    let settings =
        StackSettings { folds: args.folds as usize, seed: args.seed, vector_cache: args.vector_cache.as_deref() };
    build_stacked_ensemble(members, &args.out, train, args.fit_weights, settings, |m, f| {
        if !quiet {
            eprintln!("stacking: {} fold {}/{} retrained and scored", members[m].0.display(), f + 1, args.folds);
        }
    })
    .with_context(|| format!("building ensemble {}", args.out.display()))
}
