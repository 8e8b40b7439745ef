//! The dev-set evaluation after every epoch.

use candle_core::{DType, Device, Tensor};
use candle_nn::ops::softmax_last_dim;
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::Mode;
use longread_text::ChunkedDocument;

use longread_metrics::Report;

use crate::error::{Result, TrainError};
use crate::loss::{binary_cross_entropy_sum, cross_entropy, multi_hot, offset_logits};
use crate::prefix::{encode_batch, Prefix};
use crate::trainer::phase::{Phase, Run};
use crate::trainer::TaskLog;

/// Every task's dev loss and metrics (inference mode), from the phase's caches where it has them.
pub(super) fn evaluate(run: &Run, phase: &Phase) -> Result<Vec<TaskLog>> {
    let (model, split, device, tokens) = (run.model, run.dev, run.device, run.cfg.max_batch_tokens);
    let docs: Vec<&ChunkedDocument> = split.docs.iter().collect();
    let vectors = match (&phase.vectors, &phase.prefix) {
        (Some((_, dev)), _) => dev.clone(),
        (None, prefix) => {
            // bf16 on a GPU: the encoder's inference path, weights cast once for this pass.
            let copy = model.gpu_inference_copy()?;
            let encoder = copy.as_ref().unwrap_or(model);
            match prefix {
                Some((_, cache)) => {
                    let doc_ids: Vec<usize> = (0..docs.len()).collect();
                    let prefix = Prefix::Cached { cache, doc_ids: &doc_ids };
                    let (refs, batches) = chunk_batches(&docs, tokens);
                    gather_chunk_vectors(&docs, &refs, &batches, |batch| {
                        encode_batch(encoder, &docs, &refs, batch, prefix, Mode::Eval)
                    })?
                }
                None => encoder.encode_documents(&docs, tokens, device, |_| {})?,
            }
        }
    };
    let tasks = model.config().tasks();
    tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let chosen: Vec<(usize, usize)> =
                split.labels[t].iter().enumerate().filter_map(|(d, l)| l.map(|l| (d, l))).collect();
            let offsets = if t == 0 { split.offsets.as_deref() } else { None };
            let logits: Vec<Tensor> = chosen
                .iter()
                .map(|&(d, _)| offset_logits(model.classify_task(&vectors[d], t, Mode::Eval)?.logits, offsets, d))
                .collect::<Result<_>>()?;
            let logits = Tensor::stack(&logits, 0)?;
            if let (0, Some(sets)) = (t, &split.sets) {
                let sets: Vec<&[usize]> = chosen.iter().map(|&(d, _)| sets[d].as_slice()).collect();
                let (dev_loss, dev) = multi_label_dev(&spec.labels, &sets, &logits, device)?;
                return Ok(TaskLog { name: spec.name.clone(), dev_loss, dev });
            }
            let gold: Vec<usize> = chosen.iter().map(|&(_, l)| l).collect();
            let dev_loss = cross_entropy(&logits, &gold, None, device)?.to_scalar::<f32>()? as f64;
            let dev = dev_report(&spec.labels, &gold, &logits)?;
            Ok(TaskLog { name: spec.name.clone(), dev_loss, dev })
        })
        .collect()
}

/// A multi-label task's dev loss (the mean binary cross-entropy, without `--pos-weight`, as
/// the single-label dev loss is without class weights) and metrics (each label carried at
/// probability ≥ 0.5; see [`Report::from_multilabel`]) of `logits` against the label `sets`.
///
/// # Shapes
/// `logits: [documents, labels]`
pub(crate) fn multi_label_dev(
    labels: &[String],
    sets: &[&[usize]],
    logits: &Tensor,
    device: &Device,
) -> Result<(f64, Report)> {
    let targets = multi_hot(sets, labels.len(), device)?;
    let sum = binary_cross_entropy_sum(logits, &targets, None)?.to_scalar::<f32>()? as f64;
    let dev_loss = sum / (sets.len() * labels.len()).max(1) as f64;
    let probabilities = candle_nn::ops::sigmoid(&logits.to_dtype(DType::F32)?)?.to_vec2::<f32>()?;
    let truth: Vec<Vec<bool>> = sets.iter().map(|set| (0..labels.len()).map(|l| set.contains(&l)).collect()).collect();
    let predicted: Vec<Vec<bool>> = probabilities
        .iter()
        .map(|r| r.iter().map(|&p| p >= longread_classifier::prediction::MULTI_LABEL_THRESHOLD).collect())
        .collect();
    let report = longread_metrics::multilabel::evaluate_multilabel(labels, &truth, &predicted)
        .map_err(TrainError::InvalidSetting)?;
    let finite = probabilities.iter().flatten().all(|p| p.is_finite());
    let report =
        if finite { report.with_scores(&truth, &probabilities).map_err(TrainError::InvalidSetting)? } else { report };
    Ok((dev_loss, Report::from_multilabel(&report, finite.then_some(dev_loss))))
}

/// The dev metrics of `logits` against `gold`: the labels' (argmax), and the probabilities'
/// (ROC-AUC, log loss) unless a probability is not finite (a diverged model's epoch is
/// still logged; `--metric roc-auc` then says why it has no AUC).
///
/// # Shapes
/// `logits: [documents, labels]`
pub(crate) fn dev_report(labels: &[String], gold: &[usize], logits: &Tensor) -> Result<Report> {
    let predicted: Vec<usize> = logits.argmax(1)?.to_vec1::<u32>()?.into_iter().map(|p| p as usize).collect();
    let report = longread_metrics::evaluate(labels, gold, &predicted).map_err(TrainError::InvalidSetting)?;
    let probabilities = softmax_last_dim(&logits.to_dtype(DType::F32)?)?.to_vec2::<f32>()?;
    if probabilities.iter().flatten().any(|p| !p.is_finite()) {
        return Ok(report);
    }
    report.with_scores(gold, &probabilities).map_err(TrainError::InvalidSetting)
}
