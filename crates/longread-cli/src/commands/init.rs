//! `longread init`: a new classifier (hierarchical, or the single-chunk baseline) on a
//! pretrained encoder.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_model::hierarchical::{ChunkPooling, HierarchicalClassifier, LongreadSection, PoolingStrategy};
use longread_text::ChunkSelection;

use longread_train::run::spec::{sequence_section, Arch};

/// Arguments of `longread init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Pretrained encoder directory (config.json, model.safetensors, tokenizer.json), or a Hub id
    /// when built with `--features hub`.
    #[arg(long)]
    encoder: String,
    /// Comma-separated label names, in id order (at least two), e.g. general,teen,mature.
    #[arg(long, value_delimiter = ',', required = true)]
    labels: Vec<String>,
    /// Output model directory; must not exist yet.
    #[arg(long)]
    out: PathBuf,
    /// The classifier: `sequence` reads only the first --chunk-size tokens (at most the
    /// encoder's positions) and ignores the chunking and pooling flags below.
    #[arg(long, value_enum, default_value_t = Arch::Hierarchical)]
    arch: Arch,
    /// Pooling over a document's chunks.
    #[arg(long, value_enum, default_value_t = PoolingStrategy::Attention)]
    pooling: PoolingStrategy,
    /// Context vectors for `--pooling multihead` (at least 2).
    #[arg(long, default_value_t = 1)]
    attention_heads: usize,
    /// Size of the attention projection.
    #[arg(long, default_value_t = 256)]
    attention_hidden_size: usize,
    /// Attention over the K highest-scoring chunks only (0 = every chunk; --pooling
    /// attention/multihead). For labels that a few passages of a long document decide.
    #[arg(long, default_value_t = 0, value_name = "K")]
    attention_top_k: usize,
    /// Softmax temperature of the attention scores (--pooling attention/multihead): below 1
    /// concentrates the weight on the top chunks.
    #[arg(long, default_value_t = 1.0, value_name = "T")]
    attention_temperature: f64,
    /// The labels are ordered, in the order --labels gives them (e.g. general,teen,mature):
    /// the head scores each document once and a cumulative link model (proportional odds)
    /// turns the score into label probabilities, so a mistake costs more the further it is
    /// from the truth. With --pooling max-logits the document's score is its highest chunk's.
    #[arg(long)]
    ordinal: bool,
    /// Tokens per chunk, special tokens included (at most the encoder's positions).
    #[arg(long, default_value_t = 512)]
    chunk_size: usize,
    /// Overlap in tokens between consecutive chunks.
    #[arg(long, default_value_t = 256)]
    stride: usize,
    /// Most chunks read per document; 0 reads every chunk.
    #[arg(long, default_value_t = 20)]
    max_chunks: usize,
    /// Which chunks to keep when a document has more than --max-chunks: the first ones, or
    /// ones spread evenly from beginning to end.
    #[arg(long, value_enum, default_value_t = ChunkSelection::Head)]
    chunk_selection: ChunkSelection,
    /// How a chunk's token vectors become one chunk vector.
    #[arg(long, value_enum, default_value_t = ChunkPooling::Cls)]
    chunk_pooling: ChunkPooling,
    /// Seed for the new weights (same seed, same model).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Flags given explicitly (filled in after parsing).
    #[arg(skip)]
    pub given: Vec<String>,
}

/// Runs `longread init`.
pub fn run(args: InitArgs, quiet: bool) -> Result<()> {
    if args.given.iter().any(|g| g == "attention_heads") && args.pooling != PoolingStrategy::Multihead {
        bail!("--attention-heads applies only to --pooling multihead");
    }
    let attention = matches!(args.pooling, PoolingStrategy::Attention | PoolingStrategy::Multihead);
    if let Some(flag) = ["attention_top_k", "attention_temperature"].iter().find(|f| args.given.iter().any(|g| g == *f))
    {
        if !attention {
            bail!("--{} applies only to --pooling attention or multihead", flag.replace('_', "-"));
        }
    }
    if !(args.attention_temperature.is_finite() && args.attention_temperature > 0.0) {
        bail!("--attention-temperature {}: must be above 0", args.attention_temperature);
    }
    let labels: Vec<String> = args.labels.iter().map(|l| l.trim().to_owned()).collect();
    if labels.len() < 2 || labels.iter().any(String::is_empty) {
        bail!("--labels needs at least two non-empty names, e.g. --labels general,teen,mature");
    }
    let mut unique = labels.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != labels.len() {
        bail!("--labels contains a name twice: {}", labels.join(","));
    }
    let encoder = longread_model::resolve_model_dir(&args.encoder)?;
    let section = match args.arch {
        Arch::Hierarchical => hierarchical_section(&args),
        Arch::Sequence => {
            let checkpoint = longread_model::Checkpoint::open(&encoder)
                .with_context(|| format!("reading encoder {}", encoder.display()))?;
            sequence_section(&checkpoint.config, args.chunk_size)
        }
        Arch::Han => bail!(
            "--arch han is not built on an encoder: `longread train --arch han --train DATA --out DIR` builds it \
             (its vocabulary and grid come from the training data)"
        ),
        Arch::Bow => bail!(
            "--arch bow is not built on an encoder: `longread train --arch bow --train DATA --out DIR` builds it \
             (TF-IDF + logistic regression, in seconds)"
        ),
    };
    let model = HierarchicalClassifier::create(&encoder, labels, section, args.seed, &args.out)
        .with_context(|| format!("creating a classifier on {}", encoder.display()))?;
    if quiet {
        return Ok(());
    }
    let section = &model.config().longread;
    let shape = if args.arch == Arch::Hierarchical {
        format!(
            "pooling {}, chunks of {} tokens, stride {}, max {}",
            serde_json::to_value(section.pooling_strategy)?.as_str().unwrap_or_default(),
            section.chunk_size,
            section.stride,
            section.max_chunks
        )
    } else {
        format!("single chunk: the first {} tokens, {}", section.chunk_size, model.config().hf_architecture())
    };
    eprintln!("wrote {} ({} labels: {}, {shape})", args.out.display(), model.labels().len(), model.labels().join(", "));
    Ok(())
}

/// The hierarchical model's section from the flags.
fn hierarchical_section(args: &InitArgs) -> LongreadSection {
    LongreadSection {
        chunk_size: args.chunk_size,
        stride: args.stride,
        max_chunks: args.max_chunks,
        chunk_selection: args.chunk_selection,
        chunk_pooling: args.chunk_pooling,
        pooling_strategy: args.pooling,
        attention_heads: args.attention_heads,
        attention_hidden_size: args.attention_hidden_size,
        attention_top_k: args.attention_top_k,
        attention_temperature: args.attention_temperature,
        ordinal: args.ordinal,
        ..LongreadSection::default()
    }
}
