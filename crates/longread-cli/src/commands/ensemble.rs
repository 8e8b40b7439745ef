//! `longread ensemble`: combine trained models into one whose probabilities are their
//! weighted mean.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_model::classifier::ensemble::build_ensemble;

/// Arguments of `longread ensemble`.
#[derive(Debug, Args)]
#[command(after_help = "The ensemble is a model directory like any other: predict, eval, report and serve \
accept it, and each prediction lists what every member said (\"members\"). Members may be of any kind \
(hierarchical, sequence, HAN, bag of words) but need the same labels and one task each. Compare the \
ensemble with its members on held-out data: longread eval --model ENSEMBLE --model MEMBER ... --data DEV")]
pub struct EnsembleArgs {
    /// A model directory made by `longread train` or `init`; give it once per member (at least
    /// two). Each is copied into OUT/members/.
    #[arg(long = "model", required = true, num_args = 1)]
    models: Vec<PathBuf>,
    /// Weight of each member, in the order of --model (as many as models; they are divided by
    /// their sum). Default: equal weights.
    #[arg(long = "weight", num_args = 1, allow_negative_numbers = true)]
    weights: Vec<f64>,
    /// Output directory; must not exist (written under a temporary name, then renamed).
    #[arg(long)]
    out: PathBuf,
    /// Print ensemble.json (labels, members and their normalised weights) instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs `longread ensemble`.
pub fn run(args: EnsembleArgs) -> Result<()> {
    let weights = match args.weights.len() {
        0 => vec![1.0; args.models.len()],
        n if n == args.models.len() => args.weights.clone(),
        n => bail!("{n} --weight values for {} --model directories: give one per model, or none", args.models.len()),
    };
    let members: Vec<(PathBuf, f64)> = args.models.iter().cloned().zip(weights).collect();
    let spec =
        build_ensemble(&members, &args.out).with_context(|| format!("writing ensemble {}", args.out.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&spec)?);
    } else {
        println!(
            "ensemble of {} models in {} (labels {})",
            spec.members.len(),
            args.out.display(),
            spec.labels.join(", ")
        );
        for m in &spec.members {
            println!("  {:<40} weight {:.3}  from {}", m.dir, m.weight, m.source);
        }
    }
    Ok(())
}
