//! `train --arch han`: the classic HAN trained from scratch. The training documents are split
//! into sentences of words, a vocabulary and the grid shape are taken from them (printed), and
//! the run has the same outputs, progress, checkpoints and resume as the other architectures.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use longread_model::han::{encoder_word_vectors, HanClassifier, HanConfig};
use longread_text::words::{split_document, GridShape, Sentence, Vocabulary, UNK};
use longread_text::{read_labelled_columns, resolve_column, stratified_split, Example};
use longread_train::han_trainer::{train_han, HanSplit};
use longread_train::run::read_checkpoint;
use longread_train::trainer::Resume;

use super::args::TrainArgs;
use super::start::training_labels;
use super::{finish, log_modes, start_output, Reporter};
use crate::io::{input_name, open_input};

/// Documents as sentences of words, with their labels.
struct Documents {
    sentences: Vec<Vec<Sentence>>,
    labels: Vec<usize>,
}

impl Documents {
    fn pick(&self, idx: &[usize]) -> Self {
        Self {
            sentences: idx.iter().map(|&i| self.sentences[i].clone()).collect(),
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
        }
    }
}

/// Runs `train --arch han`, new or resumed from `checkpoint`.
pub(super) fn run(
    args: &TrainArgs,
    checkpoint: Option<&Path>,
    settings: &serde_json::Value,
    quiet: bool,
) -> Result<()> {
    let (text, json) = log_modes(args, quiet);
    let device = Device::Cpu;
    let resumed = checkpoint
        .map(|dir| HanClassifier::load(dir, &device).with_context(|| format!("loading checkpoint {}", dir.display())))
        .transpose()?;
    let resume = checkpoint
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| Resume { state, moments, steps }))
        .transpose()?;

    let (examples, source) = read(&args.train)?;
    let labels = match &resumed {
        Some(model) => model.labels().to_vec(),
        None => training_labels(args)?,
    };
    let all = documents(&examples, &labels, &source)?;
    let (train, dev) = match &args.dev {
        Some(path) => {
            let (dev_examples, dev_source) = read(path)?;
            (all, documents(&dev_examples, &labels, &dev_source)?)
        }
        None => {
            if !(0.0 < args.dev_split && args.dev_split < 1.0) {
                bail!("--dev-split must be between 0 and 1 (or give --dev FILE)");
            }
            let (train_idx, dev_idx) = stratified_split(&all.labels, args.dev_split, args.seed);
            if dev_idx.is_empty() || train_idx.is_empty() {
                bail!("--dev-split {} leaves an empty training or dev set", args.dev_split);
            }
            (all.pick(&train_idx), all.pick(&dev_idx))
        }
    };
    let model = match resumed {
        Some(model) => model,
        None => new_model(args, &train, labels, text)?,
    };
    let shape = model.config().grid_shape();
    let grids = |docs: &Documents| -> Vec<Vec<u32>> {
        docs.sentences.iter().map(|d| shape.grid(d, model.vocabulary()).ids).collect()
    };
    let (train_grids, dev_grids) = (grids(&train), grids(&dev));
    if text {
        describe(&model, &train, &dev, args);
    }
    let cfg = args.config(&train.labels, model.labels(), &["label".to_string()])?;
    let output = start_output(args, resume.as_ref().map(|r| r.state.epoch), settings)?;
    let output = std::cell::RefCell::new(output);
    let reporter = std::cell::RefCell::new(Reporter::new(text, json, "documents"));
    let logs = train_han(
        &model,
        HanSplit { grids: &train_grids, labels: &train.labels },
        HanSplit { grids: &dev_grids, labels: &dev.labels },
        &cfg,
        args.han.attention_penalty,
        &device,
        resume,
        |p| reporter.borrow_mut().progress(p),
        |end| {
            output.borrow_mut().epoch_end(&end)?;
            reporter.borrow_mut().epoch(end.log);
            Ok(())
        },
        |mid| output.borrow().mid_epoch(&mid),
    );
    reporter.borrow().finish();
    finish(args, logs, text, json)
}

/// Labelled JSON lines (the "label" column) and their display name.
fn read(path: &Path) -> Result<(Vec<Example>, String)> {
    let name = input_name(path);
    Ok((read_labelled_columns(open_input(path)?, &name, &["label".to_string()])?, name))
}

/// Splits every example into sentences of words; a text without any word is an error naming
/// its line.
fn documents(examples: &[Example], labels: &[String], source: &str) -> Result<Documents> {
    let gold = resolve_column(examples, 0, labels, source)?;
    let mut out = Documents { sentences: Vec::with_capacity(examples.len()), labels: Vec::new() };
    for (example, label) in examples.iter().zip(gold) {
        let sentences = split_document(&example.text);
        if sentences.is_empty() {
            bail!("{source}:{}: the text has no words", example.line);
        }
        out.sentences.push(sentences);
        out.labels.push(label.with_context(|| format!("{source}:{}: no label", example.line))?);
    }
    Ok(out)
}

/// A new HAN: vocabulary and grid shape from the training documents, sizes from the flags,
/// word vectors from --word-vectors when given.
fn new_model(args: &TrainArgs, train: &Documents, labels: Vec<String>, text: bool) -> Result<HanClassifier> {
    let h = &args.han;
    if !(0.0 < h.length_percentile && h.length_percentile <= 100.0) {
        bail!("--length-percentile must be in (0, 100], got {}", h.length_percentile);
    }
    let vocabulary = Vocabulary::build(train.sentences.iter().map(Vec::as_slice), h.min_count.max(1), h.max_vocab);
    let from_data = GridShape::from_percentile(&train.sentences, h.length_percentile);
    let shape = GridShape {
        doc_size: h.doc_size.unwrap_or(from_data.doc_size),
        sent_size: h.sent_size.unwrap_or(from_data.sent_size),
    };
    let vectors = match &h.word_vectors {
        Some(dir) => Some(
            encoder_word_vectors(dir, &vocabulary)
                .with_context(|| format!("reading word vectors from encoder {}", dir.display()))?,
        ),
        None => None,
    };
    let config = HanConfig {
        vocab_size: vocabulary.len(),
        embedding_dim: vectors.as_ref().map_or(h.embedding_dim, |v| v.vectors.dims()[1]),
        word_hidden: h.gru_hidden,
        sentence_hidden: h.gru_hidden,
        word_attention_size: h.attention_size,
        sentence_attention_size: h.attention_size,
        attention_hops: h.attention_hops,
        dropout: h.dropout,
        doc_size: shape.doc_size,
        sent_size: shape.sent_size,
        labels,
    };
    config.validate().map_err(|e| anyhow::anyhow!("HAN settings: {e}"))?;
    if text {
        let p = h.length_percentile;
        let why = |given: Option<usize>, what: &str| match given {
            Some(_) => format!("{what} as given"),
            None => format!("{what}: {p}th percentile of the training data"),
        };
        eprintln!(
            "HAN grid: {} sentences × {} words per document ({}; {})",
            shape.doc_size,
            shape.sent_size,
            why(h.doc_size, "--doc-size"),
            why(h.sent_size, "--sent-size")
        );
    }
    let model = HanClassifier::new(config, vocabulary, args.seed, &Device::Cpu)?;
    if let Some(v) = vectors {
        model.set_word_vectors(&v.vectors)?;
        if text {
            eprintln!(
                "word vectors from {} ({} dimensions; {} of {} words are one word piece, the rest the mean of \
                 their pieces)",
                h.word_vectors.as_deref().unwrap_or(Path::new("")).display(),
                v.vectors.dims()[1],
                v.single_piece,
                model.vocabulary().len() - 2
            );
        }
    }
    Ok(model)
}

/// Prints the vocabulary's coverage and how much the grid cuts.
fn describe(model: &HanClassifier, train: &Documents, dev: &Documents, args: &TrainArgs) {
    let vocabulary = model.vocabulary();
    let shape = model.config().grid_shape();
    let known = |docs: &Documents| {
        let words = docs.sentences.iter().flatten().flat_map(|s| &s.words);
        let (total, known) =
            words.fold((0usize, 0usize), |(t, k), w| (t + 1, k + usize::from(vocabulary.id(&w.text) != UNK)));
        100.0 * known as f64 / total.max(1) as f64
    };
    let docs_cut = train.sentences.iter().filter(|d| d.len() > shape.doc_size).count();
    let sentences: Vec<&Sentence> = train.sentences.iter().flatten().collect();
    let sentences_cut = sentences.iter().filter(|s| s.words.len() > shape.sent_size).count();
    eprintln!(
        "vocabulary: {} words (--min-count {}, --max-vocab {}); known: {:.1}% of training words, {:.1}% of dev words; \
         cut: {:.1}% of training documents (more than {} sentences), {:.1}% of sentences (more than {} words)",
        vocabulary.len(),
        args.han.min_count,
        args.han.max_vocab,
        known(train),
        known(dev),
        100.0 * docs_cut as f64 / train.sentences.len().max(1) as f64,
        shape.doc_size,
        100.0 * sentences_cut as f64 / sentences.len().max(1) as f64,
        shape.sent_size
    );
    eprintln!(
        "training on {} documents, dev {} documents; labels: {}",
        train.labels.len(),
        dev.labels.len(),
        model.labels().join(", ")
    );
}
