//! The RoBERTa kit's first two steps as library calls, so that every front (CLI, Python) runs
//! them the same way: a tokenizer trained on a corpus ([`TokenizerSpec`],
//! [`train_tokenizer_run`]) and a freshly initialised encoder from a preset ([`EncoderSpec`],
//! [`new_encoder_run`]); MLM pretraining is [`super::pretrain_run`]. The settings derive clap
//! behind the `clap` feature (the CLI's flags are these fields).

use std::path::{Path, PathBuf};

use longread_model::model_dir::{write_file_atomically, write_new_dir};
use longread_model::presets::{init_masked_lm, preset_config};
use longread_model::EncoderConfig;
use longread_text::{read_corpus, train_tokenizer, TextTokenizer, TokenizerKind, TokenizerTraining};

use crate::error::{Result, TrainError};
use crate::run::pretrain_run::pretty;

/// Every setting of `longread tokenizer train`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TokenizerSpec {
    /// Corpus: files or directories (every .txt, .jsonl, .csv and .tsv below, sorted). A .jsonl
    /// file gives each line's "text", a .csv/.tsv file each row's "text" column; other files
    /// give each non-empty line.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "input", required = true, num_args = 1..))]
    pub corpus: Vec<PathBuf>,
    /// `bpe`: byte-level BPE with RoBERTa's special tokens (<s> <pad> </s> <unk> <mask> = 0–4)
    /// and post-processor; `wordpiece`: BERT's ([PAD] [UNK] [CLS] [SEP] [MASK] = 0–4).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TokenizerKind::Bpe))]
    pub kind: TokenizerKind,
    /// Vocabulary size, special tokens included (from 261 for BPE, 31 for WordPiece, to 1,048,576).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 50265))]
    pub vocab_size: usize,
    /// Pairs (BPE) or words (WordPiece) seen fewer times are not learned.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2))]
    pub min_frequency: u64,
    /// WordPiece: lower-case and strip accents (as bert-base-uncased).
    #[cfg_attr(feature = "clap", arg(long))]
    pub lowercase: bool,
    /// Output directory (created if missing); its tokenizer.json must not exist yet.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "output"))]
    pub out: PathBuf,
}

/// What [`train_tokenizer_run`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenizerSummary {
    /// The tokenizer.json written.
    pub path: PathBuf,
    /// Tokens in its vocabulary, special tokens included.
    pub vocab_size: usize,
    /// Texts of the corpus it learned from.
    pub texts: usize,
    /// Bytes of those texts.
    pub bytes: usize,
    /// Seconds it took (reading the corpus included).
    pub seconds: f64,
}

/// Trains the tokenizer `spec` asks for and writes `spec.out/tokenizer.json` atomically;
/// refuses an existing tokenizer.json, an empty corpus and sizes the trainer refuses.
pub fn train_tokenizer_run(spec: &TokenizerSpec) -> Result<TokenizerSummary> {
    let path = spec.out.join("tokenizer.json");
    if path.exists() {
        bail!("{} already exists; choose another --out", path.display());
    }
    let started = std::time::Instant::now();
    let texts = read_corpus(&spec.corpus).map_err(|e| TrainError::Run(e.to_string()))?;
    let cfg = TokenizerTraining {
        kind: spec.kind,
        vocab_size: spec.vocab_size,
        min_frequency: spec.min_frequency,
        lowercase: spec.lowercase,
    };
    let tokenizer = train_tokenizer(&texts, cfg).map_err(|e| TrainError::Run(e.to_string()))?;
    let json = tokenizer.to_string(true).map_err(|e| TrainError::Run(format!("serialising the tokenizer: {e}")))?;
    std::fs::create_dir_all(&spec.out).map_err(|source| TrainError::Io { path: spec.out.clone(), source })?;
    write_file_atomically(&path, json.as_bytes())?;
    Ok(TokenizerSummary {
        path,
        vocab_size: tokenizer.get_vocab_size(true),
        texts: texts.len(),
        bytes: texts.iter().map(String::len).sum(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Token ids the masking and packing need.
pub(crate) struct Specials {
    pub(crate) bos: u32,
    pub(crate) eos: u32,
    pub(crate) pad: u32,
    pub(crate) mask: u32,
    pub(crate) all: Vec<u32>,
}

/// The special tokens of `tokenizer` (RoBERTa's or BERT's names).
pub(crate) fn specials(tokenizer: &TextTokenizer) -> Result<Specials> {
    let inner = tokenizer.inner();
    let find = |names: [&str; 2]| names.iter().find_map(|n| inner.token_to_id(n));
    let (Some(bos), Some(eos), Some(pad), Some(mask)) =
        (find(["<s>", "[CLS]"]), find(["</s>", "[SEP]"]), find(["<pad>", "[PAD]"]), find(["<mask>", "[MASK]"]))
    else {
        bail!("the tokenizer needs <s> </s> <pad> <mask> (or [CLS] [SEP] [PAD] [MASK]) for masked-LM pretraining");
    };
    let mut all = vec![bos, eos, pad, mask];
    all.extend(find(["<unk>", "[UNK]"]));
    Ok(Specials { bos, eos, pad, mask, all })
}

impl Specials {
    /// Writes the padding, start and end ids into `config` (a preset's are RoBERTa's 1, 0, 2;
    /// a WordPiece vocabulary has [PAD] at 0), so that padding and positions follow the tokenizer.
    pub(crate) fn set_ids(&self, config: &mut EncoderConfig) {
        config.pad_token_id = self.pad;
        config.extra.insert("bos_token_id".into(), self.bos.into());
        config.extra.insert("eos_token_id".into(), self.eos.into());
    }
}

/// `path` itself, or the tokenizer.json in it when it is a directory.
pub(crate) fn tokenizer_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_owned()
    }
}

/// Every setting of `longread encoder new`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct EncoderSpec {
    /// roberta-base (12×768, 125M), roberta-large (24×1024), small (4×512) or tiny (2×128).
    #[cfg_attr(feature = "clap", arg(long))]
    pub preset: String,
    /// tokenizer.json, or a directory holding one (e.g. from `longread tokenizer train`); its
    /// size sets the vocabulary.
    #[cfg_attr(feature = "clap", arg(long))]
    pub tokenizer: PathBuf,
    /// Output directory; must not exist.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "output"))]
    pub out: PathBuf,
    /// Seed of the initial weights.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub seed: u64,
}

/// What [`new_encoder_run`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EncoderSummary {
    /// The encoder's config.json.
    pub config: EncoderConfig,
    /// Parameters, the LM head included.
    pub parameters: usize,
}

/// Writes the new RoBERTa encoder `spec` asks for (config.json, model.safetensors in
/// RobertaForMaskedLM's layout, tokenizer.json) into `spec.out`, which must not exist.
pub fn new_encoder_run(spec: &EncoderSpec) -> Result<EncoderSummary> {
    if spec.out.exists() {
        bail!("{} already exists; choose another --out", spec.out.display());
    }
    let tokenizer_path = tokenizer_file(&spec.tokenizer);
    let tokenizer = TextTokenizer::from_file(&tokenizer_path).map_err(|e| TrainError::Run(e.to_string()))?;
    let vocab_size = tokenizer.inner().get_vocab_size(true);
    let mut config = preset_config(&spec.preset, vocab_size)?;
    specials(&tokenizer)?.set_ids(&mut config);
    let tensors = init_masked_lm(&config, spec.seed)?;
    let config_text = pretty(&config);
    let tokenizer_json =
        std::fs::read(&tokenizer_path).map_err(|source| TrainError::Io { path: tokenizer_path.clone(), source })?;
    let files: [(&str, &[u8]); 2] = [("config.json", config_text.as_bytes()), ("tokenizer.json", &tokenizer_json)];
    write_new_dir(&spec.out, &tensors, &files)?;
    Ok(EncoderSummary { parameters: tensors.values().map(|t| t.elem_count()).sum(), config })
}
