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
    let (nll, targets) = gold_nll(logits, labels, device)?;
    Ok(match weights {
        None => nll.mean_all()?,
        Some(w) => {
            let w = w.index_select(&targets, 0)?;
            (nll.mul(&w)?.sum_all()? / w.sum_all()?.to_scalar::<f32>()? as f64)?
        }
    })
}

/// The numerator of [`cross_entropy`]: `Σ nll`, or with class weights `Σ w_y · nll`.
///
/// # Shapes
/// `logits: [docs, labels]`, `labels: docs` → scalar
pub fn cross_entropy_sum(
    logits: &Tensor,
    labels: &[usize],
    weights: Option<&Tensor>,
    device: &Device,
) -> Result<Tensor> {
    let (nll, targets) = gold_nll(logits, labels, device)?;
    Ok(match weights {
        None => nll.sum_all()?,
        Some(w) => nll.mul(&w.index_select(&targets, 0)?)?.sum_all()?,
    })
}

/// Each document's negative log-likelihood of its gold label, and the labels as a tensor.
///
/// # Shapes
/// `logits: [docs, labels]`, `labels: docs` → `([docs], [docs])`
fn gold_nll(logits: &Tensor, labels: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
    let log_probs = candle_nn::ops::log_softmax(logits, 1)?;
    let targets = Tensor::from_vec(labels.iter().map(|&l| l as u32).collect::<Vec<_>>(), (labels.len(), 1), device)?;
    Ok((log_probs.gather(&targets, 1)?.squeeze(1)?.neg()?, targets.squeeze(1)?))
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
    let all: Vec<usize> = (0..chunks.len()).collect();
    let mut total: Option<Tensor> = None;
    for (t, task_labels) in labels.iter().enumerate() {
        let weight = how.task_weights.get(t).copied().unwrap_or(1.0);
        if weight == 0.0 {
            continue;
        }
        if let Some((logits, gold)) = task_logits(model, &all, chunks, task_labels, t, how, mode)? {
            let class_weights = if t == 0 { how.class_weights } else { None };
            total = Some(sum_of(total, (cross_entropy(&logits, &gold, class_weights, device)? * weight)?)?);
        }
    }
    total.ok_or_else(no_label)
}

/// The error of a batch whose documents have no label for any task that counts.
pub(crate) fn no_label() -> TrainError {
    TrainError::InvalidSetting("a batch has no label for any task with a non-zero weight".into())
}

/// Task `t`'s logits (with the first task's offsets) and gold labels for the documents of
/// `part` that have a label for it (`chunks[i]` being the chunk vectors of `part[i]`, an index
/// into `task_labels`), in `part`'s order; `None` where none has.
///
/// # Shapes
/// `chunks[i]: [n_chunks, hidden]` → `([labelled, labels], labelled)`
fn task_logits(
    model: &HierarchicalClassifier,
    part: &[usize],
    chunks: &[&Tensor],
    task_labels: &[Option<usize>],
    t: usize,
    how: TaskLoss,
    mode: Mode,
) -> Result<Option<(Tensor, Vec<usize>)>> {
    let chosen: Vec<(usize, usize)> =
        part.iter().enumerate().filter_map(|(i, &d)| task_labels.get(d).copied().flatten().map(|l| (i, l))).collect();
    if chosen.is_empty() {
        return Ok(None);
    }
    let offsets = if t == 0 { how.offsets } else { None };
    let logits: Vec<Tensor> = chosen
        .iter()
        .map(|&(i, _)| offset_logits(model.classify_task(chunks[i], t, mode)?.logits, offsets, part[i]))
        .collect::<Result<_>>()?;
    Ok(Some((Tensor::stack(&logits, 0)?, chosen.iter().map(|&(_, l)| l).collect())))
}

/// `total + loss` (or `loss` alone when there is no total yet).
fn sum_of(total: Option<Tensor>, loss: Tensor) -> Result<Tensor> {
    Ok(match total {
        Some(prev) => (prev + loss)?,
        None => loss,
    })
}

/// Each task's denominator of [`task_loss`] over a whole step's documents: how many have a
/// label for task t, or for the first task with class weights the sum of their gold classes'
/// weights; 0 for a task of weight 0. [`task_loss_share`]s divided by these add up to the
/// step's [`task_loss`].
pub fn loss_norms(labels: &[Vec<Option<usize>>], how: TaskLoss) -> Result<Vec<f64>> {
    let class_weights = how.class_weights.map(|w| w.to_vec1::<f32>()).transpose()?;
    let norms: Vec<f64> = labels
        .iter()
        .enumerate()
        .map(|(t, task_labels)| {
            if how.task_weights.get(t).copied().unwrap_or(1.0) == 0.0 {
                return Ok(0.0);
            }
            let weights = if t == 0 { class_weights.as_deref() } else { None };
            task_labels.iter().flatten().try_fold(0.0, |sum, &l| match weights {
                None => Ok(sum + 1.0),
                Some(w) => w.get(l).map(|&w| sum + w as f64).ok_or_else(|| {
                    TrainError::InvalidSetting(format!("label {l} has no class weight ({} weights)", w.len()))
                }),
            })
        })
        .collect::<Result<_>>()?;
    if norms.iter().all(|&n| n == 0.0) {
        return Err(no_label());
    }
    Ok(norms)
}

/// The share of [`task_loss`] that the documents `part` (indices into the step's documents,
/// as `labels[t]` holds them) contribute, `chunks[i]` being the chunk vectors of `part[i]`:
/// for each task, its weight × the (class-weighted) sum of their negative log-likelihoods ÷
/// the task's norm over the whole step (`norms`, from [`loss_norms`]). The shares of the parts
/// of a step add up to the step's loss; `None` where no document of `part` has a label for a
/// task with a norm.
///
/// # Shapes
/// `chunks[i]: [n_chunks, hidden]` → scalar
#[allow(clippy::too_many_arguments)] // the step's arguments of `task_loss`, the part and its norms
pub fn task_loss_share(
    model: &HierarchicalClassifier,
    part: &[usize],
    chunks: &[&Tensor],
    labels: &[Vec<Option<usize>>],
    how: TaskLoss,
    norms: &[f64],
    mode: Mode,
    device: &Device,
) -> Result<Option<Tensor>> {
    let mut total: Option<Tensor> = None;
    for (t, task_labels) in labels.iter().enumerate() {
        let (weight, norm) = (how.task_weights.get(t).copied().unwrap_or(1.0), norms.get(t).copied().unwrap_or(0.0));
        if weight == 0.0 || norm == 0.0 {
            continue;
        }
        if let Some((logits, gold)) = task_logits(model, part, chunks, task_labels, t, how, mode)? {
            let class_weights = if t == 0 { how.class_weights } else { None };
            let share = (cross_entropy_sum(&logits, &gold, class_weights, device)? * (weight / norm))?;
            total = Some(sum_of(total, share)?);
        }
    }
    Ok(total)
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
