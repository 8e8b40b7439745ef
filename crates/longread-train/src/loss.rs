//! Losses: cross-entropy and binary cross-entropy (a multi-label task's) as PyTorch computes
//! them, and the weighted sum over the tasks of a multi-task model.

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

/// `BCEWithLogitsLoss(reduction="sum", pos_weight=w)` of `torch.nn`: over every (document,
/// label) pair, `−(w_l · y · log σ(x) + (1 − y) · log(1 − σ(x)))`, computed from the logits as
/// `w_l · y · softplus(−x) + (1 − y) · softplus(x)` (stable for large |x|). Without
/// `pos_weight`, w = 1. Divided by `docs × labels` it is the default mean reduction.
///
/// # Shapes
/// `logits: [docs, labels]`, `targets: [docs, labels]` (0/1), `pos_weight: [labels]` → scalar
pub fn binary_cross_entropy_sum(logits: &Tensor, targets: &Tensor, pos_weight: Option<&Tensor>) -> Result<Tensor> {
    let logits = logits.to_dtype(candle_core::DType::F32)?;
    let positive = softplus(&logits.neg()?)?.mul(targets)?; // y · (−log σ(x))
    let positive = match pos_weight {
        Some(w) => positive.broadcast_mul(&w.unsqueeze(0)?)?,
        None => positive,
    };
    let negative = softplus(&logits)?.mul(&targets.affine(-1.0, 1.0)?)?; // (1 − y) · (−log(1 − σ(x)))
    Ok((positive + negative)?.sum_all()?)
}

/// `ln(1 + eˣ)`, stable for large |x|: `max(x, 0) + ln(1 + e^{−|x|})`.
fn softplus(x: &Tensor) -> Result<Tensor> {
    Ok((x.relu()? + x.abs()?.neg()?.exp()?.affine(1.0, 1.0)?.log()?)?)
}

/// The 0/1 targets of label sets: row d has a 1 at each label of `sets[d]`.
///
/// # Shapes
/// `sets`: docs lists of label indices → `[docs, labels]`
pub fn multi_hot(sets: &[&[usize]], labels: usize, device: &Device) -> Result<Tensor> {
    let mut rows = vec![0f32; sets.len() * labels];
    for (d, set) in sets.iter().enumerate() {
        for &l in *set {
            if l >= labels {
                return Err(TrainError::InvalidSetting(format!("label {l} of a document is past the {labels} labels")));
            }
            rows[d * labels + l] = 1.0;
        }
    }
    Ok(Tensor::from_vec(rows, (sets.len(), labels), device)?)
}

/// The gold label sets of a multi-label primary task (see [`crate::trainer::Split::sets`]).
#[derive(Debug, Clone, Copy)]
pub struct MultiLabelGold<'a> {
    /// Each document's labels, in the order of the step's documents.
    pub sets: &'a [Vec<usize>],
    /// How many labels the task has.
    pub labels: usize,
    /// Weight of each label's positive term (`--pos-weight`; `[labels]`), or none.
    pub pos_weight: Option<&'a Tensor>,
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
    /// The first task's label sets when it is multi-label: its loss is then the binary
    /// cross-entropy over every (document, label) pair, averaged over them.
    pub multi_label: Option<MultiLabelGold<'a>>,
}

/// `Σ_t w_t · loss_t` over the documents that have a label for task t (cross-entropy, or a
/// multi-label task's mean binary cross-entropy).
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
        if let Some((logits, gold, docs)) = task_logits(model, &all, chunks, task_labels, t, how, mode)? {
            let loss = match how.multi_label.filter(|_| t == 0) {
                Some(multi) => {
                    let sum = multi_label_sum(&logits, &docs, multi, device)?;
                    (sum / (docs.len() * multi.labels) as f64)?
                }
                None => cross_entropy(&logits, &gold, if t == 0 { how.class_weights } else { None }, device)?,
            };
            total = Some(sum_of(total, (loss * weight)?)?);
        }
    }
    total.ok_or_else(no_label)
}

/// The summed binary cross-entropy of a multi-label task's `logits`, whose row k is the step's
/// document `docs[k]` (an index into `multi.sets`).
///
/// # Shapes
/// `logits: [docs, labels]` → scalar
fn multi_label_sum(logits: &Tensor, docs: &[usize], multi: MultiLabelGold, device: &Device) -> Result<Tensor> {
    let sets: Vec<&[usize]> = docs
        .iter()
        .map(|&d| {
            multi
                .sets
                .get(d)
                .map(Vec::as_slice)
                .ok_or_else(|| TrainError::InvalidSetting(format!("no label set for document {d} of the step")))
        })
        .collect::<Result<_>>()?;
    binary_cross_entropy_sum(logits, &multi_hot(&sets, multi.labels, device)?, multi.pos_weight)
}

/// The error of a batch whose documents have no label for any task that counts.
pub(crate) fn no_label() -> TrainError {
    TrainError::InvalidSetting("a batch has no label for any task with a non-zero weight".into())
}

/// What [`task_logits`] gives: logits, gold labels and the step's documents they belong to.
type TaskLogits = (Tensor, Vec<usize>, Vec<usize>);

/// Task `t`'s logits (with the first task's offsets), gold labels and step documents (from
/// `part`) for the documents of `part` that have a label for it (`chunks[i]` being the chunk
/// vectors of `part[i]`, an index into `task_labels`), in `part`'s order; `None` where none has.
///
/// # Shapes
/// `chunks[i]: [n_chunks, hidden]` → `([labelled, labels], labelled, labelled)`
fn task_logits(
    model: &HierarchicalClassifier,
    part: &[usize],
    chunks: &[&Tensor],
    task_labels: &[Option<usize>],
    t: usize,
    how: TaskLoss,
    mode: Mode,
) -> Result<Option<TaskLogits>> {
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
    let docs = chosen.iter().map(|&(i, _)| part[i]).collect();
    Ok(Some((Tensor::stack(&logits, 0)?, chosen.iter().map(|&(_, l)| l).collect(), docs)))
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
/// weights, or for a multi-label first task documents × labels; 0 for a task of weight 0. [`task_loss_share`]s divided by these add up to the
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
            if let Some(multi) = how.multi_label.filter(|_| t == 0) {
                // The mean over every (document, label) pair.
                return Ok((task_labels.iter().flatten().count() * multi.labels) as f64);
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
        if let Some((logits, gold, docs)) = task_logits(model, part, chunks, task_labels, t, how, mode)? {
            let sum = match how.multi_label.filter(|_| t == 0) {
                Some(multi) => multi_label_sum(&logits, &docs, multi, device)?,
                None => cross_entropy_sum(&logits, &gold, if t == 0 { how.class_weights } else { None }, device)?,
            };
            let share = (sum * (weight / norm))?;
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
