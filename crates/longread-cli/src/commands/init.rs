//! `longread init`: a new classifier (hierarchical, or the single-chunk baseline) on a
//! pretrained encoder. The settings, checks and model building are the library's
//! ([`longread_train::run::init`]); this prints what was written.

use anyhow::Result;
use clap::Args;
use longread_train::run::init::{advice, describe, init_run, InitSpec};

/// Arguments of `longread init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub spec: InitSpec,
}

/// Runs `longread init`.
pub fn run(args: InitArgs, quiet: bool) -> Result<()> {
    let model = init_run(&args.spec)?;
    if !quiet {
        eprintln!("wrote {} ({})", args.spec.out.display(), describe(&model));
        if let Some(advice) = advice(&args.spec) {
            eprintln!("note: {advice}");
        }
    }
    Ok(())
}
