//! Loss and gradients for a batch of documents, with memory that does not grow with document
//! length: chunk-level recomputation (gradient checkpointing at chunk granularity) where a
//! document is longer than one encoder batch.
//!
//! With recomputation on ([`BatchSettings::recompute`], the default), the step's documents are
//! split by length ([`StepPlan`]):
//! - **Documents that fit one encoder batch** (`chunks × longest chunk ≤ max_batch_tokens`)
//!   are encoded in groups of whole documents, once, with their graph: each group's share of
//!   the loss is back-propagated before the next group is encoded. Peak memory is one batch's
//!   graph, as with recomputation, at the speed of keeping the graph.
//! - **Longer documents** are recomputed:
//!   1. every chunk batch is encoded without keeping its graph (only the chunk vectors stay);
//!   2. pooling, head and loss run on the chunk vectors as leaves; back-propagation gives the
//!      head's gradients and d loss / d chunk vectors;
//!   3. each chunk batch is encoded again, this time with its graph, and back-propagates its
//!      slice of that gradient (the surrogate `Σ vectors · grad`) into the encoder.
//!
//!   Dropout draws the same masks in both encodings (the generator is replayed per batch), so
//!   the gradients equal those of back-propagating through the whole graph at once
//!   (`recompute: false`), which the tests check.
//!
//! Each part's loss is its share of the step's (each task's mean taken over the whole step:
//! [`crate::loss::task_loss_share`]), so the parts' gradients add up to the step's. Where
//! documents fit, dropout draws its masks in another order than the whole graph does (group by
//! group), so the two agree in distribution rather than bit for bit; with dropout off they
//! agree to rounding (tested).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, TensorId, Var};
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::layers::weight_casts::StepCasts;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;

use crate::error::{Result, TrainError};
use crate::gradients::StepGradients;
use crate::loss::{loss_norms, no_label, task_loss, task_loss_share, TaskLoss};
use crate::prefix::{encode_batch, Prefix};

/// Loss of a batch and the gradients of the requested variables.
#[derive(Debug)]
pub struct BatchGradients {
    /// The loss: Σ over tasks of weight · (class-weighted) mean cross-entropy.
    pub loss: f32,
    /// Gradient of every requested variable that took part in the loss, by tensor id.
    pub grads: HashMap<TensorId, Tensor>,
}

/// How the batch is computed.
#[derive(Debug, Clone, Copy)]
pub struct BatchSettings<'a> {
    /// Most tokens per encoder batch.
    pub max_batch_tokens: usize,
    /// Re-encode chunks instead of keeping the whole graph.
    pub recompute: bool,
    /// Task weights and the first task's class weights.
    pub loss: TaskLoss<'a>,
    /// The frozen bottom of the encoder (run without dropout or graph, or read from a cache).
    pub prefix: Prefix<'a>,
}

/// How one step's documents are encoded (see the module's notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    /// Groups of whole documents (indices into the step's documents, in order), each encoded
    /// as one batch, once, with its graph.
    pub kept: Vec<Vec<usize>>,
    /// The documents encoded by chunk batches: recomputed (or, with `recompute: false`, every
    /// document, its whole graph kept).
    pub chunked: Vec<usize>,
}

impl StepPlan {
    /// The plan for `docs`: with `recompute`, consecutive documents that each fit one batch of
    /// `max_batch_tokens` (padded: `chunks × longest chunk`) share a group while the group's
    /// padded size fits; every other document is chunked. Without `recompute`, all are chunked.
    pub fn new(docs: &[&ChunkedDocument], max_batch_tokens: usize, recompute: bool) -> Self {
        let cost = |chunks: usize, longest: usize| chunks.saturating_mul(longest);
        let size = |d: &ChunkedDocument| (d.chunks.len(), d.chunks.iter().map(|c| c.ids.len()).max().unwrap_or(0));
        let mut plan = StepPlan { kept: Vec::new(), chunked: Vec::new() };
        // The open group: its documents, their chunks and their longest chunk.
        let (mut members, mut group_chunks, mut group_longest) = (Vec::new(), 0, 0);
        for (i, doc) in docs.iter().enumerate() {
            let (chunks, longest) = size(doc);
            if !recompute || chunks == 0 || cost(chunks, longest) > max_batch_tokens {
                plan.chunked.push(i);
                continue;
            }
            if !members.is_empty() && cost(group_chunks + chunks, group_longest.max(longest)) > max_batch_tokens {
                plan.kept.push(std::mem::take(&mut members));
                (group_chunks, group_longest) = (0, 0);
            }
            members.push(i);
            (group_chunks, group_longest) = (group_chunks + chunks, group_longest.max(longest));
        }
        if !members.is_empty() {
            plan.kept.push(members);
        }
        plan
    }
}

/// Loss and gradients for `docs` with gold `labels` (`labels[task][doc]`, `None` where a
/// document has no label for a task); `vars` are the variables whose gradients are wanted
/// (the trainable ones). Documents are encoded as [`StepPlan::new`] says.
pub fn batch_gradients(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    labels: &[Vec<Option<usize>>],
    vars: &[Var],
    rng: &DropoutRng,
    settings: BatchSettings,
    device: &Device,
) -> Result<BatchGradients> {
    let mut grads = StepGradients::new();
    let loss = add_batch_gradients(model, docs, labels, vars, rng, settings, device, &mut grads)?;
    Ok(BatchGradients { loss, grads: grads.into_map()? })
}

/// As [`batch_gradients`], adding the gradients into a step's running `grads` (one batch of
/// several in a step: `--grad-accum`); returns the batch's loss (unscaled).
#[allow(clippy::too_many_arguments)] // batch_gradients' arguments and the step's gradients
pub fn add_batch_gradients(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    labels: &[Vec<Option<usize>>],
    vars: &[Var],
    rng: &DropoutRng,
    settings: BatchSettings,
    device: &Device,
    grads: &mut StepGradients,
) -> Result<f32> {
    let plan = StepPlan::new(docs, settings.max_batch_tokens, settings.recompute);
    let mode = Mode::Train(rng);
    // Each weight cast to bf16 once for every group and batch of the step, not once per group.
    let _casts = StepCasts::begin();
    if plan.kept.is_empty() {
        // Every document by chunk batches: the step's loss as one.
        let all: Vec<usize> = (0..docs.len()).collect();
        let loss = |inputs: &[&Tensor]| task_loss(model, inputs, labels, settings.loss, mode, device).map(Some);
        let loss = chunked_gradients(model, docs, &all, vars, rng, settings, device, loss, grads)?;
        return loss.ok_or_else(no_label);
    }
    let norms = loss_norms(labels, settings.loss)?;
    let share = |part: &[usize], inputs: &[&Tensor]| {
        task_loss_share(model, part, inputs, labels, settings.loss, &norms, mode, device)
    };
    // The kept groups' losses stay on the device until the end (one read-back per step).
    let mut kept_losses = Vec::new();
    for group in &plan.kept {
        let loss_of = |v: &[&Tensor]| share(group, v);
        if let Some(loss) = kept_gradients(model, docs, group, vars, settings, mode, loss_of, grads)? {
            kept_losses.push(loss);
        }
    }
    let mut loss = 0.0;
    if !plan.chunked.is_empty() {
        let loss_of = |inputs: &[&Tensor]| share(&plan.chunked, inputs);
        if let Some(part) = chunked_gradients(model, docs, &plan.chunked, vars, rng, settings, device, loss_of, grads)?
        {
            loss += part;
        }
    }
    if !kept_losses.is_empty() {
        let total = Tensor::stack(&kept_losses, 0)?.sum_all()?;
        longread_model::profile::note_wait();
        loss += total.to_scalar::<f32>()?;
    }
    Ok(loss)
}

/// Loss (on the device, detached) of one group of whole documents (`group` indexes `docs`)
/// encoded as one batch with its graph, its gradients added into `grads`; `loss_of` gives the
/// group's loss from its documents' chunk vectors (`None`: no label among them, no gradient).
///
/// # Shapes
/// `loss_of` receives one `[n_chunks, hidden]` tensor per document of `group`
#[allow(clippy::too_many_arguments)] // the step's arguments, the group, its loss and gradients
fn kept_gradients(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    group: &[usize],
    vars: &[Var],
    settings: BatchSettings,
    mode: Mode,
    loss_of: impl FnOnce(&[&Tensor]) -> Result<Option<Tensor>>,
    grads: &mut StepGradients,
) -> Result<Option<Tensor>> {
    let refs: Vec<(usize, usize)> =
        group.iter().flat_map(|&d| (0..docs[d].chunks.len()).map(move |c| (d, c))).collect();
    let batch: Vec<usize> = (0..refs.len()).collect();
    let out = encode_batch(model, docs, &refs, &batch, settings.prefix, mode)?;
    let mut vectors = Vec::with_capacity(group.len());
    let mut start = 0;
    for &d in group {
        let n = docs[d].chunks.len();
        vectors.push(out.narrow(0, start, n)?);
        start += n;
    }
    let inputs: Vec<&Tensor> = vectors.iter().collect();
    match loss_of(&inputs)? {
        Some(loss) => {
            grads.backward_loss(&loss, vars)?;
            Ok(Some(loss.detach()))
        }
        None => Ok(None),
    }
}

/// Loss of the documents `members` (indexes `docs`) encoded by chunk batches, their gradients
/// added into `grads`: recomputed with `settings.recompute`, else with the whole graph kept.
/// `loss_of` gives their loss from their chunk vectors, in the order of `members` (`None`: no
/// label, no gradient).
#[allow(clippy::too_many_arguments)] // the step's arguments, the members, their loss and gradients
fn chunked_gradients(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    members: &[usize],
    vars: &[Var],
    rng: &DropoutRng,
    settings: BatchSettings,
    device: &Device,
    loss_of: impl FnOnce(&[&Tensor]) -> Result<Option<Tensor>>,
    grads: &mut StepGradients,
) -> Result<Option<f32>> {
    // Batches over the members' chunks; `refs` index the members, `step_refs` the same chunks
    // by their index among the step's documents (what the encoder and a prefix cache read).
    let member_docs: Vec<&ChunkedDocument> = members.iter().map(|&d| docs[d]).collect();
    let (refs, batches) = chunk_batches(&member_docs, settings.max_batch_tokens);
    let step_refs: Vec<(usize, usize)> = refs.iter().map(|&(m, c)| (members[m], c)).collect();
    let encode = |batch: &[usize]| encode_batch(model, docs, &step_refs, batch, settings.prefix, Mode::Train(rng));

    // Pass 1: chunk vectors (graphs dropped at once when recomputing).
    let mut snapshots = Vec::with_capacity(batches.len());
    let stacked = gather_chunk_vectors(&member_docs, &refs, &batches, |batch| {
        snapshots.push(rng.snapshot());
        let out = encode(batch)?;
        Ok::<_, TrainError>(if settings.recompute { out.detach() } else { out })
    })?;
    // With recomputation the chunk vectors are leaves whose gradients we need.
    let leaves: Vec<Option<Var>> = stacked
        .iter()
        .map(|t| if settings.recompute { Var::from_tensor(t).map(Some) } else { Ok(None) })
        .collect::<candle_core::Result<_>>()?;
    let inputs: Vec<&Tensor> =
        stacked.iter().zip(&leaves).map(|(t, l)| l.as_ref().map_or(t, |v| v.as_tensor())).collect();

    let Some(loss) = loss_of(&inputs)? else {
        return Ok(None);
    };
    let after = rng.snapshot();
    // The head's gradients (and the whole graph's without recomputation) into the step's; the
    // chunk vectors' gradients (leaves, not variables) are read from `first`. The loss is
    // scaled there (`--grad-accum`), so those gradients carry the scale into the surrogates.
    let first = grads.backward_loss_keeping(&loss, vars)?;

    // Pass 2: re-encode each chunk batch with its graph; back-propagate its slice.
    if settings.recompute {
        for (batch, snapshot) in batches.iter().zip(snapshots) {
            rng.restore(snapshot);
            let out = encode(batch)?;
            let slices: Vec<Tensor> = batch
                .iter()
                .map(|&i| {
                    let leaf = leaves[refs[i].0].as_ref().expect("leaves exist when recomputing");
                    // Detached: a variable's gradient in candle keeps the graph of the ops
                    // that made it (the head's weights), which the surrogate must not reach.
                    let g = first.get(leaf.as_tensor()).map(|g| g.get(refs[i].1).map(|g| g.detach())).transpose()?;
                    Ok(match g {
                        Some(g) => g,
                        None => Tensor::zeros(out.dim(1)?, DType::F32, device)?,
                    })
                })
                .collect::<candle_core::Result<_>>()?;
            let surrogate = out.mul(&Tensor::stack(&slices, 0)?)?.sum_all()?;
            grads.backward_surrogate(&surrogate, vars)?;
        }
        rng.restore(after);
    }
    longread_model::profile::note_wait();
    Ok(Some(loss.to_scalar::<f32>()?))
}

pub use crate::loss::cross_entropy;
