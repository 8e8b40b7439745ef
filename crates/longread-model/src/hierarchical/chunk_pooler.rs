//! Pooling a document's chunk vectors into one document vector, and reporting how much each
//! chunk contributed. Attention follows Yang et al. 2016 (Hierarchical Attention Networks):
//! `u_i = tanh(W h_i + b)`, `e_i = c·u_i`, `α = softmax(e)`, `d = Σ α_i h_i`.

use candle_core::{Result, Tensor, D};
use candle_nn::{Init, Module, VarBuilder};

use crate::hierarchical::config::{LongreadSection, PoolingStrategy};
use crate::layers::{linear, softmax_last_dim, Dropout, Linear};
use crate::mode::Mode;

/// Parameters of attention pooling: `pooler.projection` [A, H] + bias, `pooler.context`
/// [K, A], and for K > 1 `pooler.merge` [H, K·H] + bias; with the top-k and temperature
/// settings of the section.
#[derive(Debug, Clone)]
struct AttentionPooler {
    projection: Linear,
    context: Linear,
    merge: Option<Linear>,
    dropout: Dropout,
    top_k: usize,
    temperature: f64,
}

/// The pooling strategy with its parameters.
#[derive(Debug, Clone)]
pub struct ChunkPooler {
    strategy: PoolingStrategy,
    attention: Option<AttentionPooler>,
}

/// A pooled document.
#[derive(Debug, Clone)]
pub struct Pooled {
    /// Document vector `[hidden]`; with label-wise attention one per label, `[labels, hidden]`.
    pub vector: Tensor,
    /// Contribution of each chunk `[n_chunks]`, summing to 1 (see [`ChunkPooler::forward`]).
    pub attention: Tensor,
    /// Label-wise attention's weights, `[labels, n_chunks]` (each row sums to 1); `None` for
    /// the other poolings.
    pub label_attention: Option<Tensor>,
}

impl ChunkPooler {
    /// True for multiple-instance pooling ("max_logits"): the head scores each chunk and the
    /// document logits are the per-label maxima ([`max_over_chunks`]), not a pooled vector.
    pub fn scores_chunks(&self) -> bool {
        self.strategy == PoolingStrategy::MaxLogits
    }

    /// Loads (or, with an initialising builder, creates) the pooler under `vb` (= `pooler`) of a
    /// task with `labels` labels.
    pub fn load(vb: VarBuilder, section: &LongreadSection, hidden: usize, labels: usize, std: f64) -> Result<Self> {
        let attention = match section.pooling_strategy {
            PoolingStrategy::Attention | PoolingStrategy::Multihead | PoolingStrategy::LabelAttention => {
                let label_wise = section.pooling_strategy == PoolingStrategy::LabelAttention;
                let (a, k) = (section.attention_hidden_size, if label_wise { labels } else { section.heads() });
                let context =
                    vb.pp("context").get_with_hints((k, a), "weight", Init::Randn { mean: 0.0, stdev: std })?;
                Some(AttentionPooler {
                    projection: linear(vb.pp("projection"), hidden, a, std)?,
                    context: Linear::new(context, None),
                    merge: if k > 1 && !label_wise {
                        Some(linear(vb.pp("merge"), k * hidden, hidden, std)?)
                    } else {
                        None
                    },
                    dropout: Dropout::new(section.attention_dropout),
                    top_k: section.attention_top_k,
                    temperature: section.attention_temperature,
                })
            }
            _ => None,
        };
        Ok(Self { strategy: section.pooling_strategy, attention })
    }

    /// Pools one document's chunk vectors.
    ///
    /// Reported attention: the softmax weights for "attention" (for "multihead" the mean of
    /// the K distributions, for "label_attention" of the labels' distributions, each kept in
    /// [`Pooled::label_attention`]), `1/n` each for "mean", one-hot on the first chunk for "first",
    /// and for "max" the share of hidden dimensions whose maximum comes from each chunk.
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → vector `[hidden]`, attention `[n_chunks]`
    pub fn forward(&self, chunks: &Tensor, mode: Mode) -> Result<Pooled> {
        let (n, hidden) = chunks.dims2()?;
        let dev = chunks.device();
        match (self.strategy, &self.attention) {
            (PoolingStrategy::Attention | PoolingStrategy::Multihead, Some(p)) => {
                let (alpha, docs) = p.attend(chunks, mode)?;
                let vector = match &p.merge {
                    None => docs.squeeze(0)?,
                    Some(merge) => merge.forward(&docs.reshape((1, ()))?)?.squeeze(0)?,
                };
                Ok(Pooled { vector, attention: alpha.mean(0)?, label_attention: None })
            }
            (PoolingStrategy::LabelAttention, Some(p)) => {
                // One distribution and one document vector per label.
                let (alpha, vector) = p.attend(chunks, mode)?;
                Ok(Pooled { vector, attention: alpha.mean(0)?, label_attention: Some(alpha) })
            }
            (PoolingStrategy::Mean, _) => Ok(Pooled {
                vector: chunks.mean(0)?,
                attention: Tensor::full(1.0 / n as f32, n, dev)?,
                label_attention: None,
            }),
            (PoolingStrategy::Max, _) => {
                let winners: Vec<u32> = chunks.argmax(0)?.to_vec1()?;
                let mut share = vec![0f32; n];
                for w in winners {
                    share[w as usize] += 1.0 / hidden as f32;
                }
                Ok(Pooled {
                    vector: chunks.max(0)?,
                    attention: Tensor::from_vec(share, n, dev)?,
                    label_attention: None,
                })
            }
            // Max-logits pooling scores the chunks with the head: see `HierarchicalClassifier`.
            _ => Ok(Pooled { vector: chunks.get(0)?, attention: first_chunk_only(n, dev)?, label_attention: None }),
        }
    }
}

/// Chunks scored at a time: a document of many thousand chunks (every chunk of a 50 MB text)
/// never holds its whole `[n, A]` projection, twice (before and after tanh); each chunk's
/// score depends on its own vector only, so the scores are those of one pass.
const SCORE_BLOCK: usize = 4096;

impl AttentionPooler {
    /// Each context vector's distribution over the chunks (temperature and top-k applied) and
    /// the chunks weighted by it (dropout on the weights in training).
    ///
    /// # Shapes
    /// `chunks: [n, H]` → `([K, n], [K, H])`
    fn attend(&self, chunks: &Tensor, mode: Mode) -> Result<(Tensor, Tensor)> {
        let n = chunks.dim(0)?;
        let scores = self.scores(chunks)?; // [K, n]
        let scores = if self.temperature == 1.0 { scores } else { (scores / self.temperature)? };
        let scores = if self.top_k > 0 && self.top_k < n { keep_top_k(&scores, self.top_k)? } else { scores };
        let alpha = softmax_last_dim(&scores)?; // [K, n]
        let weights = self.dropout.forward(&alpha, mode)?;
        let docs = weights.matmul(chunks)?; // [K, H]
        Ok((alpha, docs))
    }

    /// Each context vector's score of each chunk, `e = c·tanh(W h + b)`, block by block.
    ///
    /// # Shapes
    /// `chunks: [n, H]` → `[K, n]`
    fn scores(&self, chunks: &Tensor) -> Result<Tensor> {
        let block = |chunks: &Tensor| -> Result<Tensor> {
            let u = self.projection.forward(chunks)?.tanh()?; // [b, A]
            self.context.forward(&u)?.t()?.contiguous() // [K, b]
        };
        let n = chunks.dim(0)?;
        if n <= SCORE_BLOCK {
            return block(chunks);
        }
        let blocks: Vec<Tensor> = (0..n)
            .step_by(SCORE_BLOCK)
            .map(|start| block(&chunks.narrow(0, start, SCORE_BLOCK.min(n - start))?))
            .collect::<Result<_>>()?;
        Tensor::cat(&blocks, 1)
    }
}

/// Large negative score given to chunks outside the top k: their softmax weight is 0 (exp
/// underflows) while the arithmetic stays finite.
const MASKED: f32 = -1e9;

/// `scores` with all but each row's `k` highest entries set to [`MASKED`] (ties: the earlier
/// chunk); gradients flow to the kept entries.
///
/// # Shapes
/// `scores: [K, n]` → `[K, n]`
fn keep_top_k(scores: &Tensor, k: usize) -> Result<Tensor> {
    let rows: Vec<Vec<f32>> = scores.to_dtype(candle_core::DType::F32)?.to_vec2()?;
    let n = rows.first().map_or(0, Vec::len);
    let mut keep = Vec::with_capacity(rows.len() * n);
    for row in &rows {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let mut kept = vec![0u8; n];
        order.iter().take(k).for_each(|&i| kept[i] = 1);
        keep.extend(kept);
    }
    let keep = Tensor::from_vec(keep, scores.shape(), scores.device())?;
    let masked = Tensor::full(MASKED, scores.shape(), scores.device())?.to_dtype(scores.dtype())?;
    keep.where_cond(scores, &masked)
}

/// Attention `[n]` that credits the first chunk alone (one-hot), for models that read only it.
pub fn first_chunk_only(n: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mut one_hot = vec![0f32; n];
    one_hot[0] = 1.0;
    Tensor::from_vec(one_hot, n, device)
}

/// Multiple-instance pooling of chunk logits: each label's maximum over the chunks; the
/// reported attention is the softmax over chunks of the winning label's chunk logits (which
/// chunk made the decision).
///
/// # Shapes
/// `chunk_logits: [n_chunks, labels]` → logits `[labels]`, attention `[n_chunks]`
pub fn max_over_chunks(chunk_logits: &Tensor) -> Result<(Tensor, Tensor)> {
    let logits = chunk_logits.max(0)?;
    let winner = logits.argmax(0)?.to_scalar::<u32>()? as usize;
    let column = chunk_logits.narrow(1, winner, 1)?.t()?.contiguous()?; // [1, n]
    let attention = softmax_last_dim(&column.detach())?.squeeze(0)?;
    Ok((logits, attention))
}

/// Masked mean over the tokens of each chunk (padding excluded, special tokens included).
///
/// # Shapes
/// `hidden: [batch, seq, H]`, `mask: [batch, seq]` → `[batch, H]`
pub fn masked_mean(hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let mask = mask.to_dtype(hidden.dtype())?.unsqueeze(D::Minus1)?;
    hidden.broadcast_mul(&mask)?.sum(1)?.broadcast_div(&mask.sum(1)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{DType, Device};
    use candle_nn::VarMap;

    /// Scores of a document longer than a block equal those of one pass over every chunk.
    #[test]
    fn block_by_block_scores_equal_one_pass() {
        let normals = Normals::new(201);
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu);
        let section: LongreadSection = serde_json::from_value(serde_json::json!({
            "pooling_strategy": "multihead", "attention_heads": 2, "attention_hidden_size": 8
        }))
        .unwrap();
        let pooler = ChunkPooler::load(vb.pp("pooler"), &section, 16, 3, 0.5).unwrap();
        let p = pooler.attention.as_ref().unwrap();
        let n = 2 * SCORE_BLOCK + 123;
        let chunks = normals.tensor(0f32, 1.0, (n, 16), &Device::Cpu).unwrap();
        let blocked = p.scores(&chunks).unwrap();
        let u = p.projection.forward(&chunks).unwrap().tanh().unwrap();
        let whole = p.context.forward(&u).unwrap().t().unwrap().contiguous().unwrap();
        assert_eq!(blocked.dims(), &[2, n]);
        let diff = blocked.sub(&whole).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() <= 1e-6);
    }
}
