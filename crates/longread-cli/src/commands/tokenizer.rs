//! `longread tokenizer train`: a byte-level BPE (RoBERTa) or WordPiece (BERT) tokenizer from
//! a corpus, written as a Hugging Face tokenizer.json (the library's
//! [`longread_train::run::kit::train_tokenizer_run`]; this prints what was written).

use anyhow::Result;
use clap::{Args, Subcommand};
use longread_train::run::kit::{train_tokenizer_run, TokenizerSpec};

/// `longread tokenizer ...`.
#[derive(Debug, Subcommand)]
pub enum TokenizerCommand {
    /// Train a tokenizer on text files; writes OUT/tokenizer.json.
    Train(TrainTokenizerArgs),
}

/// Arguments of `longread tokenizer train`.
#[derive(Debug, Args)]
pub struct TrainTokenizerArgs {
    #[command(flatten)]
    spec: TokenizerSpec,
}

/// Runs `longread tokenizer ...`.
pub fn run(command: TokenizerCommand, quiet: bool) -> Result<()> {
    let TokenizerCommand::Train(args) = command;
    let made = train_tokenizer_run(&args.spec)?;
    if !quiet {
        eprintln!(
            "trained a {} tokenizer with {} tokens on {} texts ({} bytes) in {:.1} s: {}",
            args.spec.kind.describe(),
            made.vocab_size,
            made.texts,
            made.bytes,
            made.seconds,
            made.path.display()
        );
    }
    Ok(())
}
