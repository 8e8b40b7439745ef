//! Loss and gradients for a batch of documents, with memory that does not grow with document
//! length: chunk-level recomputation (gradient checkpointing at chunk granularity).
//!
//! 1. Every chunk batch is encoded without keeping its graph (only the chunk vectors stay).
//! 2. Pooling, head and loss run on the chunk vectors as leaves; back-propagation gives the
//!    head's gradients and d loss / d chunk vectors.
//! 3. Each chunk batch is encoded again, this time with its graph, and back-propagates its
//!    slice of that gradient (the surrogate `Σ vectors · grad`) into the encoder.
//!
//! Dropout draws the same masks in both encodings (the generator is replayed per batch), so
//! the gradients equal those of back-propagating through the whole graph at once
//! (`recompute: false`), which the tests check.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, TensorId, Var};
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;

use crate::error::{Result, TrainError};
use crate::loss::{task_loss, TaskLoss};
use crate::prefix::{encode_batch, Prefix};

/// Loss of a batch and the gradients of the requested variables.
#[derive(Debug)]
pub struct BatchGradients {
    /// The loss: Σ over tasks of weight · (class-weighted) mean cross-entropy.
    pub loss: f32,
    /// Gradient of every requested variable that took part in the loss, by tensor id.
    pub grads: HashMap<TensorId, Tensor>,
}

impl BatchGradients {
    /// Back-propagates the scalar `loss` and keeps the gradients of `vars`.
    pub(crate) fn of_loss(loss: &Tensor, vars: &[candle_core::Var]) -> Result<Self> {
        let grads = loss.backward()?;
        Ok(Self {
            loss: loss.to_scalar::<f32>()?,
            grads: vars
                .iter()
                .filter_map(|v| grads.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone())))
                .collect(),
        })
    }
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

/// Loss and gradients for `docs` with gold `labels` (`labels[task][doc]`, `None` where a
/// document has no label for a task); `vars` are the variables whose gradients are wanted
/// (the trainable ones).
pub fn batch_gradients(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    labels: &[Vec<Option<usize>>],
    vars: &[Var],
    rng: &DropoutRng,
    settings: BatchSettings,
    device: &Device,
) -> Result<BatchGradients> {
    let (refs, batches) = chunk_batches(docs, settings.max_batch_tokens);
    let encode = |batch: &[usize]| encode_batch(model, docs, &refs, batch, settings.prefix, Mode::Train(rng), device);

    // Pass 1: chunk vectors (graphs dropped at once when recomputing).
    let mut snapshots = Vec::with_capacity(batches.len());
    let stacked = gather_chunk_vectors(docs, &refs, &batches, |batch| {
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

    let loss = task_loss(model, &inputs, labels, settings.loss, Mode::Train(rng), device)?;
    let after = rng.snapshot();
    let first = loss.backward()?;
    let mut grads: HashMap<TensorId, Tensor> =
        vars.iter().filter_map(|v| first.get(v.as_tensor()).map(|g| (v.as_tensor().id(), g.clone()))).collect();

    // Pass 2: re-encode each chunk batch with its graph; back-propagate its slice.
    if settings.recompute {
        for (batch, snapshot) in batches.iter().zip(snapshots) {
            rng.restore(snapshot);
            let out = encode(batch)?;
            let slices: Vec<Tensor> = batch
                .iter()
                .map(|&i| {
                    let leaf = leaves[refs[i].0].as_ref().expect("leaves exist when recomputing");
                    let g = first.get(leaf.as_tensor()).map(|g| g.get(refs[i].1)).transpose()?;
                    Ok(match g {
                        Some(g) => g,
                        None => Tensor::zeros(out.dim(1)?, DType::F32, device)?,
                    })
                })
                .collect::<candle_core::Result<_>>()?;
            let surrogate = out.mul(&Tensor::stack(&slices, 0)?)?.sum_all()?;
            let second = surrogate.backward()?;
            for v in vars {
                if let Some(g) = second.get(v.as_tensor()) {
                    let id = v.as_tensor().id();
                    let total = match grads.remove(&id) {
                        Some(prev) => (prev + g)?,
                        None => g.clone(),
                    };
                    grads.insert(id, total);
                }
            }
        }
        rng.restore(after);
    }
    Ok(BatchGradients { loss: loss.to_scalar::<f32>()?, grads })
}

pub use crate::loss::cross_entropy;
