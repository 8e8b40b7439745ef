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
    /// Added to the first task's logits, one `[labels]` tensor per document of the batch (a
    /// wide-and-deep model's wide side; see [`crate::trainer::Split::offsets`]).
    pub offsets: Option<&'a [Tensor]>,
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
        let offsets = if t == 0 { how.offsets } else { None };
        let logits: Vec<Tensor> = chosen
            .iter()
            .map(|&(d, _)| offset_logits(model.classify_task(chunks[d], t, mode)?.logits, offsets, d))
            .collect::<Result<_>>()?;
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

/// `logits` plus document `d`'s offset, when there are offsets.
///
/// # Shapes
/// `logits: [labels]`, `offsets[d]: [labels]` → `[labels]`
pub fn offset_logits(logits: Tensor, offsets: Option<&[Tensor]>, d: usize) -> Result<Tensor> {
    Ok(match offsets {
        Some(o) => {
            let offset =
                o.get(d).ok_or_else(|| TrainError::InvalidSetting(format!("no logit offset for document {d}")))?;
            logits.add(offset)?
        }
        None => logits,
    })
}

/// The attention penalty of Lin et al. (2017), `P = ‖A Aᵀ − I‖²_F` for each document's r
/// attention distributions A, averaged over the documents: 0 when the hops attend to disjoint
/// single positions; it pushes them apart (and, with r = 1, towards a single position).
///
/// # Shapes
/// `attention: [B, r, D]` → scalar
pub fn attention_penalty(attention: &Tensor) -> Result<Tensor> {
    let (b, r, _) = attention.dims3()?;
    let gram = attention.matmul(&attention.transpose(1, 2)?)?; // [B, r, r]
    let eye = Tensor::eye(r, attention.dtype(), attention.device())?.unsqueeze(0)?;
    let diff = gram.broadcast_sub(&eye)?;
    Ok((diff.sqr()?.sum_all()? / b as f64)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_penalty_is_the_squared_frobenius_norm_of_a_at_minus_i() {
        let d = Device::Cpu;
        // Disjoint one-hot hops: A Aᵀ = I.
        let disjoint = Tensor::new(&[[[1f32, 0.0, 0.0], [0.0, 0.0, 1.0]]], &d).unwrap();
        assert_eq!(attention_penalty(&disjoint).unwrap().to_scalar::<f32>().unwrap(), 0.0);
        // Two identical uniform hops over 2 positions: A Aᵀ = [[.5, .5], [.5, .5]];
        // (A Aᵀ − I) = [[−.5, .5], [.5, −.5]], squared sum 1. Mean with a second document of 0.
        let same =
            Tensor::new(&[[[0.5f32, 0.5, 0.0], [0.5, 0.5, 0.0]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], &d).unwrap();
        let p = attention_penalty(&same).unwrap().to_scalar::<f32>().unwrap();
        assert!((p - 0.5).abs() < 1e-6, "{p}");
    }
}
