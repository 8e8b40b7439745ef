//! `longread encoder new`: a freshly initialised RoBERTa encoder from a preset, to pretrain or
//! to put a classifier on (the library's [`longread_train::run::kit::new_encoder_run`]; this
//! prints what was written).

use anyhow::Result;
use clap::{Args, Subcommand};
use longread_train::run::kit::{new_encoder_run, EncoderSpec};

/// `longread encoder ...`.
#[derive(Debug, Subcommand)]
pub enum EncoderCommand {
    /// Write a new RoBERTa encoder (config.json, model.safetensors, tokenizer.json) from a
    /// preset, initialised as transformers does, in RobertaForMaskedLM's layout.
    New(NewEncoderArgs),
}

/// Arguments of `longread encoder new`.
#[derive(Debug, Args)]
pub struct NewEncoderArgs {
    #[command(flatten)]
    spec: EncoderSpec,
}

/// Runs `longread encoder ...`.
pub fn run(command: EncoderCommand, quiet: bool) -> Result<()> {
    let EncoderCommand::New(args) = command;
    let made = new_encoder_run(&args.spec)?;
    if !quiet {
        eprintln!(
            "{} encoder ({} layers × {}, vocabulary {}, {} parameters with the LM head) in {}",
            args.spec.preset,
            made.config.num_hidden_layers,
            made.config.hidden_size,
            made.config.vocab_size,
            made.parameters,
            args.spec.out.display()
        );
    }
    Ok(())
}
