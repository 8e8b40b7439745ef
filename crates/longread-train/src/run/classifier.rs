//! A run of the hierarchical or single-chunk classifier: the starting model, the data, the
//! training configuration, then the shared loop with the run directory saving each epoch.

use std::cell::RefCell;
use std::path::Path;

use longread_model::device::train_batch_tokens;
use longread_text::{Chunker, TextTokenizer};

use crate::error::Result;
use crate::run::checkpoints::read_checkpoint;
use crate::run::data::{dev_set_words, load_data, load_multilabel_data};
use crate::run::spec::TrainSpec;
use crate::run::start::starting_model;
use crate::run::threshold::DevTexts;
use crate::run::{RunHooks, RunOutput};
use crate::trainer::{train, EpochLog, Resume, Split};

/// Trains a classifier as `spec` says, new or resumed from `checkpoint`; returns the epochs
/// and the dev texts kept for `--tune-threshold`.
pub(crate) fn run(
    spec: &TrainSpec,
    checkpoint: Option<&Path>,
    settings: &serde_json::Value,
    hooks: &mut dyn RunHooks,
) -> Result<(Vec<EpochLog>, Option<DevTexts>)> {
    let device = spec.device.resolve()?;
    let model_dir = spec.model.clone().unwrap_or_default();
    let source = checkpoint.unwrap_or(&model_dir);
    let mut model = starting_model(spec, source, &device)?;
    model.set_precision(spec.encoder.precision.dtype())?;
    if spec.encoder.precision == crate::run::spec::TrainPrecision::Int8 {
        if !device.is_cpu() {
            return Err(crate::error::TrainError::InvalidSetting(
                "--precision int8 runs on the CPU (give --device cpu); a GPU trains in f32 or bf16".into(),
            ));
        }
        // Head-only (checked with the settings): the frozen encoder only ever runs forward.
        model.set_int8(true)?;
    }
    let resume = checkpoint
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| Resume { state, moments, steps }))
        .transpose()?;
    let chunker = Chunker::new(TextTokenizer::from_file(model.tokenizer_path())?, model.config().longread.chunking())?;
    let (train_data, dev_data, dev_texts) = if model.is_multi_label(0) {
        load_multilabel_data(spec, &mut model, &chunker, &device, &mut |line| hooks.note(line))?
    } else {
        load_data(spec, &mut model, &chunker, &device, &mut |line| hooks.note(line))?
    };
    let model = model;
    let labels = model.labels().to_vec();
    let tasks: Vec<String> = model.config().tasks().into_iter().map(|t| t.name).collect();
    let primary: Vec<usize> = train_data.labels[0].iter().flatten().copied().collect();
    let mut cfg = spec.config(&primary, &labels, &tasks)?;
    if let Some(sets) = &train_data.sets {
        cfg.pos_weight = spec.pos_weights(sets, &labels)?;
        note_multilabel(&labels, sets, cfg.pos_weight.as_deref(), &mut |line| hooks.note(line));
    }
    cfg.max_batch_tokens = spec.encoder.max_batch_tokens.unwrap_or_else(|| {
        let bf16 = spec.encoder.precision == crate::run::spec::TrainPrecision::Bf16;
        train_batch_tokens(&device, model.train_footprint(bf16))
    });
    let (train_docs, dev_docs) = (&train_data.docs, &dev_data.docs);
    let chunk_size = model.config().longread.chunk_size;
    let batches = if cfg.max_batch_tokens < chunk_size {
        format!(
            "encoder batches of one chunk: --max-batch-tokens {} is below a chunk's {chunk_size}",
            cfg.max_batch_tokens
        )
    } else {
        format!("encoder batches of up to {} tokens", cfg.max_batch_tokens)
    };
    hooks.note(&format!(
        "training on {} ({}, {batches}) with {} documents ({} chunks), {}; {}",
        longread_model::device::describe(&device),
        spec.encoder.precision.name(),
        train_docs.len(),
        train_docs.iter().map(|d| d.chunks.len()).sum::<usize>(),
        dev_set_words(dev_docs.len()),
        if model.is_multi_label(0) {
            format!("labels (any number a document): {}", labels.join(", "))
        } else {
            model
                .config()
                .tasks()
                .iter()
                .map(|t| format!("task {} (column \"{}\"): {}", t.name, t.column, t.labels.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        }
    ));
    let output = RefCell::new(RunOutput::start(&spec.out, resume.as_ref().map(|r| r.state.epoch), settings)?);
    // Both callbacks report: the hooks are shared.
    let hooks = RefCell::new(hooks);
    let logs = train(
        &model,
        Split {
            docs: train_docs,
            labels: train_data.labels.clone(),
            offsets: train_data.offsets.clone(),
            sets: train_data.sets.clone(),
        },
        Split {
            docs: dev_docs,
            labels: dev_data.labels.clone(),
            offsets: dev_data.offsets.clone(),
            sets: dev_data.sets.clone(),
        },
        &cfg,
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

/// Tells how the multi-label training documents carry the `labels` (`sets`, one per
/// document), and the --pos-weight used.
pub(crate) fn note_multilabel(
    labels: &[String],
    sets: &[Vec<usize>],
    pos_weight: Option<&[f32]>,
    note: &mut dyn FnMut(&str),
) {
    let carried: usize = sets.iter().map(Vec::len).sum();
    let mut line = format!(
        "multi-label: {} labels, {:.2} a training document, {} with none; binary cross-entropy",
        labels.len(),
        carried as f64 / sets.len().max(1) as f64,
        sets.iter().filter(|s| s.is_empty()).count()
    );
    if let Some(w) = pos_weight {
        let (lo, hi) = w.iter().fold((f32::INFINITY, 0f32), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        line += &format!(" with positive weights {lo:.2}–{hi:.2}");
    }
    note(&line);
}
