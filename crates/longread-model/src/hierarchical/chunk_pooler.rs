//! Pooling a document's chunk vectors into one document vector, and reporting how much each
//! chunk contributed. Attention follows Yang et al. 2016 (Hierarchical Attention Networks):
//! `u_i = tanh(W h_i + b)`, `e_i = c·u_i`, `α = softmax(e)`, `d = Σ α_i h_i`.

use candle_core::{Result, Tensor, D};
use candle_nn::{Init, Module, VarBuilder};

use crate::hierarchical::config::{LongreadSection, PoolingStrategy};
use crate::layers::{linear, softmax_last_dim, Dropout, Linear};
use crate::mode::Mode;

/// Parameters of attention pooling: `pooler.projection` [A, H] + bias, `pooler.context`
/// [K, A], and for K > 1 `pooler.merge` [H, K·H] + bias.
#[derive(Debug, Clone)]
struct AttentionPooler {
    projection: Linear,
    context: Linear,
    merge: Option<Linear>,
    dropout: Dropout,
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
    /// Document vector `[hidden]`.
    pub vector: Tensor,
    /// Contribution of each chunk `[n_chunks]`, summing to 1 (see [`ChunkPooler::forward`]).
    pub attention: Tensor,
}

impl ChunkPooler {
    /// Loads (or, with an initialising builder, creates) the pooler under `vb` (= `pooler`).
    pub fn load(vb: VarBuilder, section: &LongreadSection, hidden: usize, std: f64) -> Result<Self> {
        let attention = match section.pooling_strategy {
            PoolingStrategy::Attention | PoolingStrategy::Multihead => {
                let (a, k) = (section.attention_hidden_size, section.heads());
                let context =
                    vb.pp("context").get_with_hints((k, a), "weight", Init::Randn { mean: 0.0, stdev: std })?;
                Some(AttentionPooler {
                    projection: linear(vb.pp("projection"), hidden, a, std)?,
                    context: Linear::new(context, None),
                    merge: if k > 1 { Some(linear(vb.pp("merge"), k * hidden, hidden, std)?) } else { None },
                    dropout: Dropout::new(section.attention_dropout),
                })
            }
            _ => None,
        };
        Ok(Self { strategy: section.pooling_strategy, attention })
    }

    /// Pools one document's chunk vectors.
    ///
    /// Reported attention: the softmax weights for "attention" (for "multihead" the mean of
    /// the K distributions), `1/n` each for "mean", one-hot on the first chunk for "first",
    /// and for "max" the share of hidden dimensions whose maximum comes from each chunk.
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → vector `[hidden]`, attention `[n_chunks]`
    pub fn forward(&self, chunks: &Tensor, mode: Mode) -> Result<Pooled> {
        let (n, hidden) = chunks.dims2()?;
        let dev = chunks.device();
        match (self.strategy, &self.attention) {
            (PoolingStrategy::Attention | PoolingStrategy::Multihead, Some(p)) => {
                let u = p.projection.forward(chunks)?.tanh()?; // [n, A]
                let scores = p.context.forward(&u)?.t()?.contiguous()?; // [K, n]
                let alpha = softmax_last_dim(&scores)?; // [K, n]
                let weights = p.dropout.forward(&alpha, mode)?;
                let docs = weights.matmul(chunks)?; // [K, H]
                let vector = match &p.merge {
                    None => docs.squeeze(0)?,
                    Some(merge) => merge.forward(&docs.reshape((1, ()))?)?.squeeze(0)?,
                };
                Ok(Pooled { vector, attention: alpha.mean(0)? })
            }
            (PoolingStrategy::Mean, _) => {
                Ok(Pooled { vector: chunks.mean(0)?, attention: Tensor::full(1.0 / n as f32, n, dev)? })
            }
            (PoolingStrategy::Max, _) => {
                let winners: Vec<u32> = chunks.argmax(0)?.to_vec1()?;
                let mut share = vec![0f32; n];
                for w in winners {
                    share[w as usize] += 1.0 / hidden as f32;
                }
                Ok(Pooled { vector: chunks.max(0)?, attention: Tensor::from_vec(share, n, dev)? })
            }
            _ => Ok(Pooled { vector: chunks.get(0)?, attention: first_chunk_only(n, dev)? }),
        }
    }
}

/// Attention `[n]` that credits the first chunk alone (one-hot), for models that read only it.
pub fn first_chunk_only(n: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mut one_hot = vec![0f32; n];
    one_hot[0] = 1.0;
    Tensor::from_vec(one_hot, n, device)
}

/// Masked mean over the tokens of each chunk (padding excluded, special tokens included).
///
/// # Shapes
/// `hidden: [batch, seq, H]`, `mask: [batch, seq]` → `[batch, H]`
pub fn masked_mean(hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let mask = mask.to_dtype(hidden.dtype())?.unsqueeze(D::Minus1)?;
    hidden.broadcast_mul(&mask)?.sum(1)?.broadcast_div(&mask.sum(1)?)
}
