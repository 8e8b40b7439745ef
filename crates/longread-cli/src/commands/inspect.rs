//! `longread inspect`: configuration summary and parameter breakdown.

use anyhow::{Context, Result};
use clap::Args;
use longread_classifier::summary::summarize;

/// Arguments of `longread inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Model directory, or a Hugging Face Hub id (downloaded into the Hugging Face cache).
    #[arg(long, required_unless_present = "model_dir", conflicts_with = "model_dir")]
    model: Option<String>,
    /// The same, without `--model` (`longread inspect my-model`).
    #[arg(value_name = "MODEL")]
    model_dir: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `longread inspect`.
pub fn run(args: InspectArgs) -> Result<()> {
    let model = args.model.or(args.model_dir).expect("clap requires one of the two");
    let dir = longread_model::resolve_model_dir(&model)?;
    let summary = summarize(&dir).with_context(|| format!("opening model {}", dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.json)?);
    } else {
        print!("{}", summary.table);
    }
    Ok(())
}
