//! Multi-head self-attention with its output projection and post-LayerNorm.
//! Reference: transformers `modeling_bert.py: BertSelfAttention`, `BertSelfOutput`.

use candle_core::{Result, Tensor};
use candle_nn::{Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::layers::{linear, softmax, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// `LayerNorm(x + dropout(dense(attention(x))))`.
#[derive(Debug, Clone)]
pub struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    norm: LayerNorm,
    probs_dropout: Dropout,
    hidden_dropout: Dropout,
    num_heads: usize,
    head_size: usize,
}

impl SelfAttention {
    /// Loads `self.{query,key,value}` and `output.{dense,LayerNorm}` under `vb` (= `attention`).
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let std = cfg.initializer_range;
        Ok(Self {
            query: linear(vb.pp("self").pp("query"), h, h, std)?,
            key: linear(vb.pp("self").pp("key"), h, h, std)?,
            value: linear(vb.pp("self").pp("value"), h, h, std)?,
            output: linear(vb.pp("output").pp("dense"), h, h, std)?,
            norm: LayerNorm::load(vb.pp("output").pp("LayerNorm"), h, cfg.layer_norm_eps)?,
            probs_dropout: Dropout::new(cfg.attention_probs_dropout_prob),
            hidden_dropout: Dropout::new(cfg.hidden_dropout_prob),
            num_heads: cfg.num_attention_heads,
            head_size: cfg.head_size(),
        })
    }

    /// Splits the last dimension into heads.
    ///
    /// # Shapes
    /// `[batch, seq, hidden]` → `[batch, heads, seq, head_size]`
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (b, s, _) = xs.dims3()?;
        xs.reshape((b, s, self.num_heads, self.head_size))?.transpose(1, 2)?.contiguous()
    }

    /// Attends over the sequence; `mask_bias` is 0 for real tokens and a large negative
    /// number for padding.
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub fn forward(&self, xs: &Tensor, mask_bias: &Tensor, mode: Mode) -> Result<Tensor> {
        let (b, s, h) = xs.dims3()?;
        let q = self.split_heads(&self.query.forward(xs)?)?;
        let k = self.split_heads(&self.key.forward(xs)?)?;
        let v = self.split_heads(&self.value.forward(xs)?)?;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(mask_bias)?;
        let probs = self.probs_dropout.forward(&softmax(&scores, mode)?, mode)?;
        let context = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))?;
        let out = self.hidden_dropout.forward(&self.output.forward(&context)?, mode)?;
        self.norm.forward(&(out + xs)?, mode)
    }
}
