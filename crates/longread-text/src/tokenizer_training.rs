//! Training a tokenizer from a corpus with the Hugging Face `tokenizers` trainers:
//! byte-level BPE as RoBERTa's (special tokens `<s> <pad> </s> <unk> <mask>` = ids 0–4,
//! `<s> … </s>` around a sequence), or WordPiece as BERT's (`[PAD] [UNK] [CLS] [SEP] [MASK]`
//! = ids 0–4, `[CLS] … [SEP]`, BERT's normaliser and pre-tokenizer).

use std::collections::HashSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainerBuilder};
use tokenizers::models::TrainerWrapper;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::error::{Result, TextError};
use crate::jsonl::read_records;

/// Which tokenizer to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TokenizerKind {
    /// Byte-level BPE with RoBERTa's special tokens and post-processor.
    Bpe,
    /// WordPiece with BERT's special tokens, normaliser and post-processor.
    #[cfg_attr(feature = "clap", value(name = "wordpiece"))]
    WordPiece,
}

impl TokenizerKind {
    /// Its name for people: "byte-level BPE" or "WordPiece".
    pub fn describe(self) -> &'static str {
        match self {
            Self::Bpe => "byte-level BPE",
            Self::WordPiece => "WordPiece",
        }
    }

    /// The special tokens, in id order (ids 0–4).
    pub fn special_tokens(self) -> [&'static str; 5] {
        match self {
            Self::Bpe => ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            Self::WordPiece => ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        }
    }
}

/// Training settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenizerTraining {
    /// BPE or WordPiece.
    pub kind: TokenizerKind,
    /// Size of the vocabulary, special tokens included.
    pub vocab_size: usize,
    /// Merges / words seen fewer times are not learned.
    pub min_frequency: u64,
    /// WordPiece only: lower-case and strip accents (as `bert-base-uncased`).
    pub lowercase: bool,
}

/// Trains a tokenizer on `texts` (each one a sequence: a line or a document).
pub fn train_tokenizer(texts: &[String], cfg: TokenizerTraining) -> Result<Tokenizer> {
    let fail = |e: tokenizers::Error| TextError::Tokenize(format!("training the tokenizer: {e}"));
    if texts.iter().all(|t| t.trim().is_empty()) {
        return Err(TextError::Tokenize("the corpus has no text to train a tokenizer on".into()));
    }
    let min_vocab = match cfg.kind {
        TokenizerKind::Bpe => 256 + 5,
        TokenizerKind::WordPiece => 5 + 26,
    };
    if cfg.vocab_size < min_vocab {
        return Err(TextError::Setting(format!(
            "vocab size {} is too small: at least {min_vocab} for {} (special tokens and the base alphabet)",
            cfg.vocab_size,
            cfg.kind.describe()
        )));
    }
    if cfg.vocab_size > MAX_VOCAB {
        // 4,000,000,000 ran for most of a minute in the trainer's allocations.
        return Err(TextError::Setting(format!(
            "vocab size {} is too large: at most {MAX_VOCAB} (the largest tokenizers in use have ~256,000 tokens; \
             RoBERTa's has 50,265)",
            cfg.vocab_size
        )));
    }
    let specials: Vec<AddedToken> = cfg
        .kind
        .special_tokens()
        .iter()
        // RoBERTa's <mask> absorbs the space before it (so "a <mask>" masks the word " b").
        .map(|&t| AddedToken::from(t, true).lstrip(t == "<mask>"))
        .collect();
    let mut tokenizer = match cfg.kind {
        TokenizerKind::Bpe => {
            let mut tokenizer = Tokenizer::new(BPE::default());
            tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
            tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
            let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
            let trainer = BpeTrainerBuilder::new()
                .vocab_size(cfg.vocab_size)
                .min_frequency(cfg.min_frequency)
                .special_tokens(specials)
                .initial_alphabet(alphabet)
                .show_progress(false)
                .build();
            tokenizer.train(&mut TrainerWrapper::from(trainer), texts.iter()).map_err(fail)?;
            tokenizer
        }
        TokenizerKind::WordPiece => {
            let model = WordPiece::builder().unk_token("[UNK]".into()).build().map_err(fail)?;
            let mut tokenizer = Tokenizer::new(model);
            tokenizer.with_normalizer(Some(BertNormalizer::new(true, true, Some(cfg.lowercase), cfg.lowercase)));
            tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
            tokenizer.with_decoder(Some(WordPieceDecoder::default()));
            let trainer = WordPieceTrainerBuilder::new()
                .vocab_size(cfg.vocab_size)
                .min_frequency(cfg.min_frequency)
                .special_tokens(specials)
                .show_progress(false)
                .build();
            tokenizer.train(&mut TrainerWrapper::from(trainer), texts.iter()).map_err(fail)?;
            tokenizer
        }
    };
    let id = |token: &str| {
        tokenizer
            .token_to_id(token)
            .ok_or_else(|| TextError::Tokenize(format!("the trained vocabulary lacks the special token {token}")))
    };
    for (expected, token) in cfg.kind.special_tokens().iter().enumerate() {
        if id(token)? != expected as u32 {
            return Err(TextError::Tokenize(format!("special token {token} did not get id {expected}")));
        }
    }
    match cfg.kind {
        TokenizerKind::Bpe => {
            let processor = RobertaProcessing::new(("</s>".into(), 2), ("<s>".into(), 0))
                .trim_offsets(true)
                .add_prefix_space(false);
            tokenizer.with_post_processor(Some(processor));
        }
        TokenizerKind::WordPiece => {
            tokenizer.with_post_processor(Some(BertProcessing::new(("[SEP]".into(), 3), ("[CLS]".into(), 2))));
        }
    }
    Ok(tokenizer)
}

/// The largest vocabulary `train_tokenizer` makes: 2^20 tokens.
pub const MAX_VOCAB: usize = 1 << 20;

/// The texts of a corpus: every file given, and every `.txt`/`.jsonl`/`.csv`/`.tsv` file under a directory
/// given (sorted, recursively). A JSON-lines file gives each line's `"text"`, a CSV/TSV file
/// each row's `text` column; any other file gives each non-empty line. Non-UTF-8 text is an error naming the file.
pub fn read_corpus(paths: &[PathBuf]) -> Result<Vec<String>> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    let mut texts = Vec::new();
    for file in &files {
        let io = |source| TextError::Io { path: file.clone(), source };
        let reader = std::io::BufReader::new(std::fs::File::open(file).map_err(io)?);
        let name = file.to_string_lossy();
        if crate::compressed::format_name(&name).ends_with(".jsonl") || crate::delimited::delimiter_of(&name).is_some()
        {
            texts.extend(read_records(reader, &file.display().to_string())?.into_iter().map(|r| r.text));
        } else {
            for line in crate::compressed::decompressed(reader).map_err(io)?.lines() {
                let line = line.map_err(io)?;
                let line = line.trim_start_matches(crate::jsonl::BOM);
                if !line.trim().is_empty() {
                    texts.push(line.to_owned());
                }
            }
        }
    }
    if texts.is_empty() {
        return Err(TextError::EmptyInput {
            source_name: paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            why: if files.is_empty() {
                "no *.txt, *.jsonl, *.csv or *.tsv files"
            } else {
                "its files hold only blank lines"
            },
        });
    }
    Ok(texts)
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |source| TextError::Io { path: path.to_owned(), source };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io)?;
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .map_err(io)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_files(&entry, out)?;
        } else if entry.file_name().is_some_and(|n| {
            let name = n.to_string_lossy();
            [".txt", ".jsonl", ".csv", ".tsv"].iter().any(|x| crate::compressed::format_name(&name).ends_with(x))
        }) {
            out.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<String> {
        let text = "Rain is expected over the weekend, with strong winds along the coast. \
                    Prices rose by 3.5% in October; analysts had expected 2.9%. \
                    The committee met on Tuesday to discuss the budget and the weather.";
        (0..50).map(|i| format!("{text} Line {i}.")).collect()
    }

    #[test]
    fn bpe_is_byte_level_with_roberta_specials() {
        let cfg = TokenizerTraining { kind: TokenizerKind::Bpe, vocab_size: 400, min_frequency: 2, lowercase: false };
        let tok = train_tokenizer(&corpus(), cfg).unwrap();
        for (i, t) in ["<s>", "<pad>", "</s>", "<unk>", "<mask>"].iter().enumerate() {
            assert_eq!(tok.token_to_id(t), Some(i as u32), "{t}");
        }
        let text = "Rain über the coast 🙂";
        let enc = tok.encode(text, true).unwrap();
        let ids = enc.get_ids();
        assert_eq!((ids[0], ids[ids.len() - 1]), (0, 2), "<s> … </s>");
        assert!(!ids[1..ids.len() - 1].contains(&3), "byte-level BPE never needs <unk>");
        assert_eq!(tok.decode(ids, true).unwrap(), text, "lossless round trip");
        assert!(tok.get_vocab_size(true) <= 400 && tok.get_vocab_size(true) > 300);
        // Deterministic: the same corpus gives the same tokenizer.
        let again = train_tokenizer(&corpus(), cfg).unwrap();
        assert_eq!(tok.to_string(false).unwrap(), again.to_string(false).unwrap());
    }

    #[test]
    fn wordpiece_has_bert_specials_and_lowercases() {
        let cfg =
            TokenizerTraining { kind: TokenizerKind::WordPiece, vocab_size: 200, min_frequency: 1, lowercase: true };
        let tok = train_tokenizer(&corpus(), cfg).unwrap();
        for (i, t) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].iter().enumerate() {
            assert_eq!(tok.token_to_id(t), Some(i as u32), "{t}");
        }
        let enc = tok.encode("RAIN expected", true).unwrap();
        assert_eq!(enc.get_ids()[0], 2);
        assert_eq!(*enc.get_ids().last().unwrap(), 3);
        assert_eq!(enc.get_tokens()[1], "rain");
    }

    #[test]
    fn bad_settings_and_empty_corpora_are_errors() {
        let cfg = TokenizerTraining { kind: TokenizerKind::Bpe, vocab_size: 100, min_frequency: 2, lowercase: false };
        let small = train_tokenizer(&corpus(), cfg).unwrap_err().to_string();
        assert!(small.starts_with("vocab size 100 is too small"), "a setting, not a chunking error: {small}");
        let huge = train_tokenizer(&corpus(), TokenizerTraining { vocab_size: 4_000_000_000, ..cfg }).unwrap_err();
        assert!(huge.to_string().starts_with("vocab size 4000000000 is too large: at most 1048576"), "{huge}");
        let cfg = TokenizerTraining { vocab_size: 400, ..cfg };
        assert!(train_tokenizer(&["  ".to_string()], cfg).unwrap_err().to_string().contains("no text"));
        let dir = tempfile::tempdir().unwrap();
        let none = read_corpus(&[dir.path().to_owned()]).unwrap_err().to_string();
        assert!(none.contains("no input records (no *.txt, *.jsonl, *.csv or *.tsv files)"), "{none}");
        std::fs::write(dir.path().join("blank.txt"), b"\n  \n").unwrap();
        let blank = read_corpus(&[dir.path().to_owned()]).unwrap_err().to_string();
        assert!(blank.contains("no input records (its files hold only blank lines)"), "{blank}");
        let missing = dir.path().join("missing.txt");
        assert!(read_corpus(&[missing]).unwrap_err().to_string().contains("missing.txt"));
        std::fs::write(dir.path().join("bom.txt"), "\u{feff}first line\nsecond\n").unwrap();
        let texts = read_corpus(&[dir.path().join("bom.txt")]).unwrap();
        assert_eq!(texts, ["first line", "second"], "the byte order mark is not text");
        std::fs::write(dir.path().join("rows.csv"), "id,text\n1,\"a, b\"\n").unwrap();
        assert_eq!(read_corpus(&[dir.path().join("rows.csv")]).unwrap(), ["a, b"], "a CSV file's text column");
        std::fs::write(dir.path().join("bad.txt"), b"ok\n\xff\xfe\n").unwrap();
        assert!(read_corpus(&[dir.path().to_owned()]).unwrap_err().to_string().contains("bad.txt"));
    }
}
