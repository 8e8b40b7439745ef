//! `longread inspect`: configuration summary and parameter breakdown.

use anyhow::{Context, Result};
use clap::Args;
use longread_classifier::summary::summarize;

/// Arguments of `longread inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Model directory, or a Hugging Face repository id when built with `--features hub`.
    #[arg(long)]
    model: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `longread inspect`.
pub fn run(args: InspectArgs) -> Result<()> {
    let dir = longread_model::resolve_model_dir(&args.model)?;
    let summary = summarize(&dir).with_context(|| format!("opening model {}", dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.json)?);
    } else {
        print!("{}", summary.table);
    }
    Ok(())
}
