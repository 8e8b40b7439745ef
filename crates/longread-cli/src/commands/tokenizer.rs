//! `longread tokenizer train`: a byte-level BPE (RoBERTa) or WordPiece (BERT) tokenizer from
//! a corpus, written as a Hugging Face tokenizer.json.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use longread_text::{read_corpus, train_tokenizer, TokenizerKind, TokenizerTraining};

use crate::io::write_atomically;

/// `longread tokenizer ...`.
#[derive(Debug, Subcommand)]
pub enum TokenizerCommand {
    /// Train a tokenizer on text files; writes OUT/tokenizer.json.
    Train(TrainTokenizerArgs),
}

/// Arguments of `longread tokenizer train`.
#[derive(Debug, Args)]
pub struct TrainTokenizerArgs {
    /// Corpus: files or directories (every .txt and .jsonl below, sorted). A .jsonl file gives
    /// each line's "text"; other files give each non-empty line.
    #[arg(long, required = true, num_args = 1..)]
    corpus: Vec<PathBuf>,
    /// `bpe`: byte-level BPE with RoBERTa's special tokens (<s> <pad> </s> <unk> <mask> = 0–4)
    /// and post-processor; `wordpiece`: BERT's ([PAD] [UNK] [CLS] [SEP] [MASK] = 0–4).
    #[arg(long, value_enum, default_value_t = Kind::Bpe)]
    kind: Kind,
    /// Vocabulary size, special tokens included.
    #[arg(long, default_value_t = 50265)]
    vocab_size: usize,
    /// Pairs (BPE) or words (WordPiece) seen fewer times are not learned.
    #[arg(long, default_value_t = 2)]
    min_frequency: u64,
    /// WordPiece: lower-case and strip accents (as bert-base-uncased).
    #[arg(long)]
    lowercase: bool,
    /// Output directory (created if missing); its tokenizer.json must not exist yet.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    /// Byte-level BPE (RoBERTa).
    Bpe,
    /// WordPiece (BERT).
    Wordpiece,
}

/// Runs `longread tokenizer ...`.
pub fn run(command: TokenizerCommand, quiet: bool) -> Result<()> {
    let TokenizerCommand::Train(args) = command;
    let target = args.out.join("tokenizer.json");
    if target.exists() {
        bail!("{} already exists; choose another --out", target.display());
    }
    let started = std::time::Instant::now();
    let texts = read_corpus(&args.corpus)?;
    let kind = match args.kind {
        Kind::Bpe => TokenizerKind::Bpe,
        Kind::Wordpiece => TokenizerKind::WordPiece,
    };
    let cfg = TokenizerTraining {
        kind,
        vocab_size: args.vocab_size,
        min_frequency: args.min_frequency,
        lowercase: args.lowercase,
    };
    let tokenizer = train_tokenizer(&texts, cfg)?;
    let json = tokenizer.to_string(true).map_err(|e| anyhow::anyhow!("serialising the tokenizer: {e}"))?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    write_atomically(&target, json.as_bytes())?;
    if !quiet {
        eprintln!(
            "trained a {:?} tokenizer with {} tokens on {} texts ({} bytes) in {:.1} s: {}",
            kind,
            tokenizer.get_vocab_size(true),
            texts.len(),
            texts.iter().map(String::len).sum::<usize>(),
            started.elapsed().as_secs_f64(),
            target.display()
        );
    }
    Ok(())
}
