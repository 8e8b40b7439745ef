//! `train --arch han`: the classic HAN trained from scratch. The training documents are split
//! into sentences of words, a vocabulary and the grid shape are taken from them (printed), and
//! the run has the same outputs, progress, checkpoints and resume as the other architectures.

use std::cell::RefCell;
use std::path::Path;

use longread_model::han::{encoder_word_vectors, HanClassifier, HanConfig};
use longread_text::multilabel::{resolve_multilabel, MultiLabelExample};
use longread_text::words::{split_document, GridShape, Sentence, Vocabulary, UNK};
use longread_text::LabelledDataset;

use crate::error::{Result, TrainError};
use crate::han_trainer::{train_han, HanSplit};
use crate::run::checkpoints::read_checkpoint;
use crate::run::classifier::note_multilabel;
use crate::run::data::{
    check_dev_for_metric, dev_set_words, multilabel_dev_split, multilabel_training_labels, read_examples,
    read_multilabel_examples, warn_of_overlap,
};
use crate::run::spec::{HanSpec, TrainSpec};
use crate::run::start::training_labels;
use crate::run::threshold::{self, DevTexts};
use crate::run::{RunHooks, RunOutput};
use crate::trainer::{EpochLog, Resume};

/// Documents as sentences of words, with their labels.
struct Documents {
    sentences: Vec<Vec<Sentence>>,
    /// Each document's label (a multi-label model: 0, the truth being `sets`).
    labels: Vec<usize>,
    /// A multi-label model's truth: each document's labels.
    sets: Option<Vec<Vec<usize>>>,
}

impl Documents {
    /// The documents at `idx`, in that order.
    fn pick(&self, idx: &[usize]) -> Self {
        Self {
            sentences: idx.iter().map(|&i| self.sentences[i].clone()).collect(),
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
            sets: self.sets.as_ref().map(|sets| idx.iter().map(|&i| sets[i].clone()).collect()),
        }
    }
}

/// The labels, training and dev documents of a run, and the dev texts kept for tuning.
type Prepared = (Vec<String>, Documents, Documents, Option<DevTexts>);

/// Trains a HAN as `spec` says, new or resumed from `checkpoint`; returns the epochs and the
/// dev texts kept for `--tune-threshold`.
pub(crate) fn run(
    spec: &TrainSpec,
    han: &HanSpec,
    checkpoint: Option<&Path>,
    settings: &serde_json::Value,
    hooks: &mut dyn RunHooks,
) -> Result<(Vec<EpochLog>, Option<DevTexts>)> {
    let device = longread_model::device::host();
    let resumed = checkpoint.map(|dir| HanClassifier::load(dir, &device)).transpose()?;
    let resume = checkpoint
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| Resume { state, moments, steps }))
        .transpose()?;

    let known = resumed.as_ref().map(|model| model.labels().to_vec());
    let multi_label = resumed.as_ref().map_or(spec.is_multi_label(), HanClassifier::is_multi_label);
    let (labels, train, dev, dev_texts) = match multi_label {
        true => multilabel_documents(spec, known, hooks)?,
        false => single_label_documents(spec, known, hooks)?,
    };
    let model = match resumed {
        Some(model) => model,
        None => new_model(han, spec.seed, &train, labels, multi_label, hooks)?,
    };
    let shape = model.config().grid_shape();
    let grids = |docs: &Documents| -> Vec<Vec<u32>> {
        docs.sentences.iter().map(|d| shape.grid(d, model.vocabulary()).ids).collect()
    };
    let (train_grids, dev_grids) = (grids(&train), grids(&dev));
    describe(&model, &train, &dev, han, hooks);
    let mut cfg = spec.config(&train.labels, model.labels(), &["label".to_string()])?;
    if let Some(sets) = &train.sets {
        cfg.pos_weight = spec.pos_weights(sets, model.labels())?;
        note_multilabel(model.labels(), sets, cfg.pos_weight.as_deref(), &mut |line| hooks.note(line));
    }
    let output = RefCell::new(RunOutput::start(&spec.out, resume.as_ref().map(|r| r.state.epoch), settings)?);
    let hooks = RefCell::new(hooks);
    let logs = train_han(
        &model,
        HanSplit { grids: &train_grids, labels: &train.labels, sets: train.sets.as_deref() },
        HanSplit { grids: &dev_grids, labels: &dev.labels, sets: dev.sets.as_deref() },
        &cfg,
        han.attention_penalty,
        &device,
        resume,
        |p| hooks.borrow_mut().progress(p),
        |end| {
            output.borrow_mut().epoch_end(&end)?;
            hooks.borrow_mut().epoch(end.log);
            Ok(())
        },
        |mid| output.borrow().mid_epoch(&mid),
    )?;
    Ok((logs, dev_texts))
}

/// The documents of a single-label run: the labels (`known` from a resumed model, else the
/// training data's), training and dev documents, and the dev texts kept for tuning.
fn single_label_documents(spec: &TrainSpec, known: Option<Vec<String>>, hooks: &mut dyn RunHooks) -> Result<Prepared> {
    let (examples, source) = read_examples(&spec.train, &["label".to_string()])?;
    let labels = match known {
        Some(labels) => labels,
        None => training_labels(spec)?,
    };
    let label_names = [labels.as_slice()];
    let all = LabelledDataset::resolve(examples, &label_names, &source)?;
    // Every training text must have words and a label, whichever side of the split it lands on.
    let documents_all = documents(&all)?;
    let (train, dev, dev_texts) = match &spec.dev {
        Some(path) => {
            let (examples, source) = read_examples(path, &["label".to_string()])?;
            let dev_data = LabelledDataset::resolve(examples, &label_names, &source)?;
            warn_of_overlap(&all, &dev_data, &mut |l| hooks.note(l));
            check_dev_for_metric(spec, &dev_data, &label_names)?;
            let texts = threshold::keep_dev(spec, &dev_data.examples, &dev_data.source);
            (documents_all, documents(&dev_data)?, texts)
        }
        None if spec.trains_without_dev() => {
            warn_of_overlap(&all, &all.pick(&[]), &mut |l| hooks.note(l));
            let none = documents_all.pick(&[]);
            (documents_all, none, None)
        }
        None => {
            let (train_idx, dev_idx) = all.dev_split_indices(spec.training.dev_split, spec.seed)?;
            let dev_data = all.pick(&dev_idx);
            warn_of_overlap(&all.pick(&train_idx), &dev_data, &mut |l| hooks.note(l));
            check_dev_for_metric(spec, &dev_data, &label_names)?;
            let texts = threshold::keep_dev(spec, &dev_data.examples, &dev_data.source);
            (documents_all.pick(&train_idx), documents_all.pick(&dev_idx), texts)
        }
    };
    Ok((labels, train, dev, dev_texts))
}

/// The documents of a multi-label run, laid out as --label-separator / --label-columns say:
/// the labels (`known` from a resumed model, else --labels or the training data's), training
/// and dev documents with their label sets (the dev set --dev, a --dev-split by iterative
/// stratification, or none; its unknown labels left out with a note), and the dev texts kept
/// for tuning.
fn multilabel_documents(spec: &TrainSpec, known: Option<Vec<String>>, hooks: &mut dyn RunHooks) -> Result<Prepared> {
    if !spec.encoder.task.is_empty() {
        return Err(TrainError::Run("--task takes one label per document; a multi-label HAN has one task".into()));
    }
    let layout = spec.label_layout.layout();
    let (examples, source) = read_multilabel_examples(&spec.train, &layout)?;
    let labels = match known {
        Some(labels) => labels,
        None => multilabel_training_labels(spec, &layout, &examples, &source)?,
    };
    let (sets, _) = resolve_multilabel(&examples, &labels, &source, false)?;
    let documents = |examples: &[MultiLabelExample], sets: Vec<Vec<usize>>, source: &str| -> Result<Documents> {
        let mut sentences = Vec::with_capacity(examples.len());
        for example in examples {
            let split = split_document(&example.text);
            if split.is_empty() {
                return Err(TrainError::Run(format!("{source}:{}: the text has no words", example.line)));
            }
            sentences.push(split);
        }
        Ok(Documents { sentences, labels: vec![0; examples.len()], sets: Some(sets) })
    };
    let prepared = match &spec.dev {
        Some(path) => {
            let (dev_examples, dev_source) = read_multilabel_examples(path, &layout)?;
            let (dev_sets, unknown) = resolve_multilabel(&dev_examples, &labels, &dev_source, true)?;
            if let Some(unknown) = unknown {
                hooks.note(&format!("warning: {dev_source}: {unknown}"));
            }
            let kept = threshold::keep_multilabel_dev(spec, &dev_examples, &dev_source);
            (documents(&examples, sets, &source)?, documents(&dev_examples, dev_sets, &dev_source)?, kept)
        }
        None if spec.trains_without_dev() => {
            let all = documents(&examples, sets, &source)?;
            let none = all.pick(&[]);
            (all, none, None)
        }
        None => {
            let (train, dev) = multilabel_dev_split(&sets, spec.training.dev_split, spec.seed)?;
            let all = documents(&examples, sets, &source)?;
            let dev_examples: Vec<MultiLabelExample> = dev.iter().map(|&i| examples[i].clone()).collect();
            let kept = threshold::keep_multilabel_dev(spec, &dev_examples, &source);
            (all.pick(&train), all.pick(&dev), kept)
        }
    };
    let (train, dev, kept) = prepared;
    Ok((labels, train, dev, kept))
}

/// Splits every document into sentences of words; a text without any word, or without a
/// label, is an error naming its line.
fn documents(data: &LabelledDataset) -> Result<Documents> {
    let mut out = Documents { sentences: Vec::with_capacity(data.len()), labels: Vec::new(), sets: None };
    for (example, label) in data.examples.iter().zip(&data.labels[0]) {
        let sentences = split_document(&example.text);
        if sentences.is_empty() {
            return Err(TrainError::Run(format!("{}:{}: the text has no words", data.source, example.line)));
        }
        out.sentences.push(sentences);
        out.labels.push(label.ok_or_else(|| TrainError::Run(format!("{}:{}: no label", data.source, example.line)))?);
    }
    Ok(out)
}

/// A new HAN: vocabulary and grid shape from the training documents, sizes from the flags,
/// word vectors from --word-vectors when given.
fn new_model(
    han: &HanSpec,
    seed: u64,
    train: &Documents,
    labels: Vec<String>,
    multi_label: bool,
    hooks: &mut dyn RunHooks,
) -> Result<HanClassifier> {
    let h = han;
    if !(0.0 < h.length_percentile && h.length_percentile <= 100.0) {
        return Err(TrainError::Run(format!("--length-percentile must be in (0, 100], got {}", h.length_percentile)));
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
                .map_err(|e| TrainError::Run(format!("reading word vectors from encoder {}: {e}", dir.display())))?,
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
        multi_label,
    };
    config.validate().map_err(|e| TrainError::Run(format!("HAN settings: {e}")))?;
    {
        let p = h.length_percentile;
        let why = |given: Option<usize>, what: &str| match given {
            Some(_) => format!("{what} as given"),
            None => format!("{what}: {p}th percentile of the training data"),
        };
        hooks.note(&format!(
            "HAN grid: {} sentences × {} words per document ({}; {})",
            shape.doc_size,
            shape.sent_size,
            why(h.doc_size, "--doc-size"),
            why(h.sent_size, "--sent-size")
        ));
    }
    let model = HanClassifier::new(config, vocabulary, seed, &longread_model::device::host())?;
    if let Some(v) = vectors {
        model.set_word_vectors(&v.vectors)?;
        {
            hooks.note(&format!(
                "word vectors from {} ({} dimensions; {} of {} words are one word piece, the rest the mean of \
                 their pieces)",
                h.word_vectors.as_deref().unwrap_or(Path::new("")).display(),
                v.vectors.dims()[1],
                v.single_piece,
                model.vocabulary().len() - 2
            ));
        }
    }
    Ok(model)
}

/// Notes the vocabulary's coverage and how much the grid cuts.
fn describe(model: &HanClassifier, train: &Documents, dev: &Documents, han: &HanSpec, hooks: &mut dyn RunHooks) {
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
    let dev_known = match dev.sentences.len() {
        0 => String::new(),
        _ => format!(", {:.1}% of dev words", known(dev)),
    };
    hooks.note(&format!(
        "vocabulary: {} words (--min-count {}, --max-vocab {}); known: {:.1}% of training words{dev_known}; \
         cut: {:.1}% of training documents (more than {} sentences), {:.1}% of sentences (more than {} words)",
        vocabulary.len(),
        han.min_count,
        han.max_vocab,
        known(train),
        100.0 * docs_cut as f64 / train.sentences.len().max(1) as f64,
        shape.doc_size,
        100.0 * sentences_cut as f64 / sentences.len().max(1) as f64,
        shape.sent_size
    ));
    hooks.note(&format!(
        "training on {} documents, {}; labels: {}",
        train.labels.len(),
        dev_set_words(dev.labels.len()),
        model.labels().join(", ")
    ));
}
