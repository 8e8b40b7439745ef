//! Losses: cross-entropy as PyTorch computes it, and the weighted sum over the tasks of a
//! multi-task model.

use candle_core::{Device, Tensor};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::Mode;

use crate::error::{Result, TrainError};

/// Cross-entropy as `torch.nn.functional.cross_entropy`: mean over documents, or with class
/// weights `Σ w_y · nll / Σ w_y`.
///
/// # Shapes
/// `logits: [docs, labels]`, `labels: docs` → scalar
pub fn cross_entropy(logits: &Tensor, labels: &[usize], weights: Option<&Tensor>, device: &Device) -> Result<Tensor> {
    let log_probs = candle_nn::ops::log_softmax(logits, 1)?;
    let targets = Tensor::from_vec(labels.iter().map(|&l| l as u32).collect::<Vec<_>>(), (labels.len(), 1), device)?;
    let nll = log_probs.gather(&targets, 1)?.squeeze(1)?.neg()?;
    Ok(match weights {
        None => nll.mean_all()?,
        Some(w) => {
            let w = w.index_select(&targets.squeeze(1)?, 0)?;
            (nll.mul(&w)?.sum_all()? / w.sum_all()?.to_scalar::<f32>()? as f64)?
        }
    })
}

/// How the tasks' losses are combined.
#[derive(Debug, Clone, Copy)]
pub struct TaskLoss<'a> {
    /// Weight of each task's loss (missing entries weigh 1).
    pub task_weights: &'a [f64],
    /// Per-class weights of the first task's loss (`[labels]`).
    pub class_weights: Option<&'a Tensor>,
}

/// `Σ_t w_t · cross_entropy_t` over the documents that have a label for task t.
/// `labels[t][d]` is document d's label for task t; `chunks[d]` its chunk vectors.
///
/// # Shapes
/// `chunks[d]: [n_chunks_d, hidden]` → scalar
pub fn task_loss(
    model: &HierarchicalClassifier,
    chunks: &[&Tensor],
    labels: &[Vec<Option<usize>>],
    how: TaskLoss,
    mode: Mode,
    device: &Device,
) -> Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for (t, task_labels) in labels.iter().enumerate() {
        let weight = how.task_weights.get(t).copied().unwrap_or(1.0);
        let chosen: Vec<(usize, usize)> =
            task_labels.iter().enumerate().filter_map(|(d, l)| l.map(|l| (d, l))).collect();
        if weight == 0.0 || chosen.is_empty() {
            continue;
        }
        let logits: Vec<Tensor> =
            chosen.iter().map(|&(d, _)| Ok(model.classify_task(chunks[d], t, mode)?.logits)).collect::<Result<_>>()?;
        let gold: Vec<usize> = chosen.iter().map(|&(_, l)| l).collect();
        let class_weights = if t == 0 { how.class_weights } else { None };
        let loss = (cross_entropy(&Tensor::stack(&logits, 0)?, &gold, class_weights, device)? * weight)?;
        total = Some(match total {
            Some(prev) => (prev + loss)?,
            None => loss,
        });
    }
    total.ok_or_else(|| TrainError::InvalidSetting("a batch has no label for any task with a non-zero weight".into()))
}
