//! Classifying many documents: their chunks are batched together under a token budget,
//! longest first, so padding stays small; only chunk vectors are kept between batches, so
//! memory does not grow with document length beyond them.

use candle_core::{Device, Tensor};
use longread_text::{pad_batch, ChunkedDocument};

use crate::batching::{plan_by_cost, Split};
use crate::error::Result;
use crate::hierarchical::model::HierarchicalClassifier;
use crate::layers::softmax_last_dim;
use crate::mode::Mode;

/// Scores of one document.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentScores {
    /// Raw logits, one per label.
    pub logits: Vec<f32>,
    /// Softmax of the logits; a multi-label task's sigmoid of each.
    pub probabilities: Vec<f32>,
    /// Contribution of each kept chunk, in chunk order.
    pub attention: Vec<f32>,
    /// Label-wise attention: each label's weight of each chunk (`[label][chunk]`); `None` for
    /// the other poolings.
    pub label_attention: Option<Vec<Vec<f32>>>,
}

/// Every chunk of `docs` as `(document, position)`, and encoder batches of indices into that
/// list planned by [`plan_by_cost`] (longest first, within `max_batch_tokens`; the training
/// rule, [`Split::Budget`]).
pub fn chunk_batches(docs: &[&ChunkedDocument], max_batch_tokens: usize) -> (Vec<(usize, usize)>, Vec<Vec<usize>>) {
    let refs: Vec<(usize, usize)> =
        docs.iter().enumerate().flat_map(|(d, doc)| (0..doc.chunks.len()).map(move |c| (d, c))).collect();
    let lengths: Vec<usize> = refs.iter().map(|&(d, c)| docs[d].chunks[c].ids.len()).collect();
    (refs, plan_by_cost(lengths, max_batch_tokens, Split::Budget))
}

/// Padded ids and mask of one batch from [`chunk_batches`].
///
/// # Shapes
/// → `ids, mask: [batch.len(), longest]` (u32)
pub fn batch_tensors(
    docs: &[&ChunkedDocument],
    refs: &[(usize, usize)],
    batch: &[usize],
    pad_id: u32,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let seqs: Vec<&[u32]> = batch.iter().map(|&i| docs[refs[i].0].chunks[refs[i].1].ids.as_slice()).collect();
    let (ids, mask, seq) = pad_batch(&seqs, pad_id);
    Ok((Tensor::from_vec(ids, (seqs.len(), seq), device)?, Tensor::from_vec(mask, (seqs.len(), seq), device)?))
}

/// Runs `encode` on every batch from [`chunk_batches`] (it returns one vector per chunk of the
/// batch, `[batch.len(), hidden]`) and regroups the rows by document, in chunk order.
///
/// # Shapes
/// → one `[n_chunks, hidden]` tensor per document
pub fn gather_chunk_vectors<E: From<candle_core::Error>>(
    docs: &[&ChunkedDocument],
    refs: &[(usize, usize)],
    batches: &[Vec<usize>],
    mut encode: impl FnMut(&[usize]) -> std::result::Result<Tensor, E>,
) -> std::result::Result<Vec<Tensor>, E> {
    let mut rows: Vec<Vec<Option<Tensor>>> = docs.iter().map(|d| vec![None; d.chunks.len()]).collect();
    for batch in batches {
        let out = encode(batch)?;
        for (row, &i) in batch.iter().enumerate() {
            rows[refs[i].0][refs[i].1] = Some(out.get(row)?);
        }
    }
    Ok(rows
        .into_iter()
        .map(|r| Tensor::stack(&r.into_iter().flatten().collect::<Vec<_>>(), 0))
        .collect::<candle_core::Result<_>>()?)
}

impl HierarchicalClassifier {
    /// Chunk vectors of every document (inference mode), one `[n_chunks, hidden]` tensor each.
    /// `on_chunks(n)` is called after each encoder batch of `n` chunks.
    pub fn encode_documents(
        &self,
        docs: &[&ChunkedDocument],
        max_batch_tokens: usize,
        device: &Device,
        mut on_chunks: impl FnMut(usize),
    ) -> Result<Vec<Tensor>> {
        let (refs, batches) = chunk_batches(docs, max_batch_tokens);
        gather_chunk_vectors(docs, &refs, &batches, |batch| {
            let (ids, mask) = batch_tensors(docs, &refs, batch, self.config().encoder.pad_token_id, device)?;
            // Detached: nothing here is differentiated, and no graph is kept alive.
            let out = self.chunk_vectors(&ids, &mask, Mode::Eval)?.detach();
            on_chunks(batch.len());
            Ok(out)
        })
    }

    /// Scores of one document from its chunk vectors (inference mode).
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → scores over the labels and chunks
    pub fn score(&self, chunks: &Tensor) -> Result<DocumentScores> {
        let classified = self.classify(chunks, Mode::Eval)?;
        scores_of(&classified, self.is_multi_label(0))
    }

    /// Scores of one document for every task, the primary task first.
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → one score set per task
    pub fn score_tasks(&self, chunks: &Tensor) -> Result<Vec<DocumentScores>> {
        Ok(self.score_tasks_many(std::slice::from_ref(chunks))?.pop().unwrap_or_default())
    }

    /// Scores of several documents for every task, the primary task first: every head runs
    /// on the device first, then all the numbers come back in one read (on a GPU one
    /// synchronisation for the group, where a read per document and score kept the GPU idle
    /// between documents).
    ///
    /// # Shapes
    /// `docs[i]: [n_chunks_i, hidden]` → per document, one score set per task
    pub fn score_tasks_many(&self, docs: &[Tensor]) -> Result<Vec<Vec<DocumentScores>>> {
        // Per document and task: probabilities, logits, attention and (label-wise attention)
        // each label's weights, in that order; `counts` says how many parts each score set has.
        let mut parts: Vec<Tensor> = Vec::with_capacity(docs.len() * self.task_count() * 3);
        let mut counts: Vec<usize> = Vec::with_capacity(docs.len() * self.task_count());
        for chunks in docs {
            for t in 0..self.task_count() {
                let set = score_parts(&self.classify_task(chunks, t, Mode::Eval)?, self.is_multi_label(t))?;
                counts.push(set.len());
                parts.extend(set);
            }
        }
        let numbers = if parts.is_empty() { Vec::new() } else { Tensor::cat(&parts, 0)?.to_vec1::<f32>()? };
        let mut offset = 0;
        let pieces: Vec<&[f32]> = parts
            .iter()
            .map(|part| {
                let piece = &numbers[offset..offset + part.elem_count()];
                offset += part.elem_count();
                piece
            })
            .collect();
        let mut next = 0;
        let scores: Vec<DocumentScores> = counts
            .iter()
            .map(|&count| {
                let p = &pieces[next..next + count];
                next += count;
                let label_attention = p.get(3).map(|w| {
                    let labels = p[1].len().max(1);
                    w.chunks((w.len() / labels).max(1)).map(<[f32]>::to_vec).collect()
                });
                DocumentScores {
                    probabilities: p[0].to_vec(),
                    logits: p[1].to_vec(),
                    attention: p[2].to_vec(),
                    label_attention,
                }
            })
            .collect();
        Ok(scores.chunks(self.task_count().max(1)).map(<[DocumentScores]>::to_vec).collect())
    }

    /// The primary task's probabilities of a document read without each of its chunks in
    /// turn (occlusion: how much each chunk moves the decision), the head run once per chunk
    /// over the others and every row read back at once. Empty for a document of one chunk
    /// (there is nothing to read without it). The cost grows with the square of the chunks.
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → `n_chunks` rows of `[labels]` (none when `n_chunks < 2`)
    pub fn leave_one_out(&self, chunks: &Tensor) -> Result<Vec<Vec<f32>>> {
        let n = chunks.dim(0)?;
        if n < 2 {
            return Ok(Vec::new());
        }
        let mut rows = Vec::with_capacity(n);
        for left_out in 0..n as u32 {
            let kept: Vec<u32> = (0..n as u32).filter(|&c| c != left_out).collect();
            let kept = Tensor::from_vec(kept, n - 1, chunks.device())?;
            let mut parts = score_parts(
                &self.classify_task(&chunks.index_select(&kept, 0)?, 0, Mode::Eval)?,
                self.is_multi_label(0),
            )?;
            rows.push(parts.swap_remove(0));
        }
        let numbers = Tensor::cat(&rows, 0)?.to_vec1::<f32>()?;
        Ok(numbers.chunks_exact(numbers.len() / n).map(<[f32]>::to_vec).collect())
    }

    /// Scores documents. `on_chunks(n)` is called after each encoder batch of `n` chunks.
    pub fn predict(
        &self,
        docs: &[&ChunkedDocument],
        max_batch_tokens: usize,
        device: &Device,
        on_chunks: impl FnMut(usize),
    ) -> Result<Vec<DocumentScores>> {
        self.encode_documents(docs, max_batch_tokens, device, on_chunks)?.iter().map(|v| self.score(v)).collect()
    }
}

/// What a score set is made of, still on the device: probabilities (the softmax of the logits,
/// or each one's sigmoid when `multi_label`), logits, attention and, with label-wise attention,
/// every label's weights flattened (f32, one dimension each).
///
/// # Shapes
/// logits `[labels]`, attention `[n_chunks]` → `[[labels], [labels], [n_chunks]]`, then
/// `[labels · n_chunks]` with label-wise attention
fn score_parts(classified: &crate::hierarchical::Classified, multi_label: bool) -> Result<Vec<Tensor>> {
    let logits = classified.logits.to_dtype(candle_core::DType::F32)?;
    let probabilities = if multi_label { candle_nn::ops::sigmoid(&logits)? } else { softmax_last_dim(&logits)? };
    let mut parts = vec![probabilities, logits, classified.attention.to_dtype(candle_core::DType::F32)?.flatten_all()?];
    if let Some(weights) = &classified.label_attention {
        parts.push(weights.to_dtype(candle_core::DType::F32)?.flatten_all()?);
    }
    Ok(parts)
}

/// Logits, probabilities and attention as plain numbers.
fn scores_of(classified: &crate::hierarchical::Classified, multi_label: bool) -> Result<DocumentScores> {
    let parts = score_parts(classified, multi_label)?;
    let label_attention = match (parts.get(3), &classified.label_attention) {
        (Some(_), Some(weights)) => Some(weights.to_dtype(candle_core::DType::F32)?.to_vec2()?),
        _ => None,
    };
    Ok(DocumentScores {
        probabilities: parts[0].to_vec1()?,
        logits: parts[1].to_vec1()?,
        attention: parts[2].to_vec1()?,
        label_attention,
    })
}
