//! The dev-set evaluation after every epoch.

use candle_core::{DType, Tensor};
use candle_nn::ops::softmax_last_dim;
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::Mode;
use longread_text::ChunkedDocument;

use longread_metrics::Report;

use crate::error::{Result, TrainError};
use crate::loss::{cross_entropy, offset_logits};
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
            let gold: Vec<usize> = chosen.iter().map(|&(_, l)| l).collect();
            let dev_loss = cross_entropy(&logits, &gold, None, device)?.to_scalar::<f32>()? as f64;
            let dev = dev_report(&spec.labels, &gold, &logits)?;
            Ok(TaskLog { name: spec.name.clone(), dev_loss, dev })
        })
        .collect()
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
