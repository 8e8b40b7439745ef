//! `longread encoder new`: a freshly initialised RoBERTa encoder from a preset, to pretrain or
//! to put a classifier on.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use longread_model::model_dir::write_new_dir;
use longread_model::presets::{init_masked_lm, preset_config};
use longread_text::TextTokenizer;

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
    /// roberta-base (12×768, 125M), roberta-large (24×1024), small (4×512) or tiny (2×128).
    #[arg(long)]
    preset: String,
    /// tokenizer.json, or a directory holding one (e.g. from `longread tokenizer train`); its
    /// size sets the vocabulary.
    #[arg(long)]
    tokenizer: PathBuf,
    /// Output directory; must not exist.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Runs `longread encoder ...`.
pub fn run(command: EncoderCommand, quiet: bool) -> Result<()> {
    let EncoderCommand::New(args) = command;
    if args.out.exists() {
        bail!("{} already exists; choose another --out", args.out.display());
    }
    let tokenizer_path =
        if args.tokenizer.is_dir() { args.tokenizer.join("tokenizer.json") } else { args.tokenizer.clone() };
    let tokenizer = TextTokenizer::from_file(&tokenizer_path)?;
    let vocab_size = tokenizer.inner().get_vocab_size(true);
    let config = preset_config(&args.preset, vocab_size)?;
    let tensors = init_masked_lm(&config, args.seed)?;
    let config_text = serde_json::to_string_pretty(&config)? + "\n";
    let tokenizer_json =
        std::fs::read(&tokenizer_path).with_context(|| format!("reading {}", tokenizer_path.display()))?;
    let files: [(&str, &[u8]); 2] = [("config.json", config_text.as_bytes()), ("tokenizer.json", &tokenizer_json)];
    write_new_dir(&args.out, &tensors, &files).with_context(|| format!("writing {}", args.out.display()))?;
    if !quiet {
        let parameters: usize = tensors.values().map(|t| t.elem_count()).sum();
        eprintln!(
            "{} encoder ({} layers × {}, vocabulary {vocab_size}, {parameters} parameters with the LM head) in {}",
            args.preset,
            config.num_hidden_layers,
            config.hidden_size,
            args.out.display()
        );
    }
    Ok(())
}
