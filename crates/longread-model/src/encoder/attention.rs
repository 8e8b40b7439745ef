//! Multi-head self-attention with its output projection and post-LayerNorm.
//! Reference: transformers `modeling_bert.py: BertSelfAttention`, `BertSelfOutput`.

use std::ops::Range;

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;

use crate::config::EncoderConfig;
use crate::encoder::block_output::BlockOutput;
use crate::encoder::Keys;
use crate::layers::cuda::AttentionSoftmax;
use crate::layers::fused::{FusedAttention, PackedAttention};
use crate::layers::{linear, softmax, Dropout, Linear};
use crate::mode::Mode;

/// `LayerNorm(x + dropout(dense(attention(x))))`.
#[derive(Debug, Clone)]
pub struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: BlockOutput,
    probs_dropout: Dropout,
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
            output: BlockOutput::load(vb.pp("output"), cfg, h)?,
            probs_dropout: Dropout::new(cfg.attention_probs_dropout_prob),
            num_heads: cfg.num_attention_heads,
            head_size: cfg.head_size(),
        })
    }

    /// Keeps the four projections' weights in `dtype` (inference; see [`Linear::cast_weight`]).
    pub(crate) fn cast_weights(&mut self, dtype: DType) -> Result<()> {
        for layer in [&mut self.query, &mut self.key, &mut self.value] {
            layer.cast_weight(dtype)?;
        }
        self.output.cast_weight(dtype)
    }

    /// Switches the four projections to int8 products (inference) or back to f32.
    pub(crate) fn quantize_int8(&mut self, on: bool) -> Result<()> {
        for layer in [&mut self.query, &mut self.key, &mut self.value] {
            layer.quantize_int8(on)?;
        }
        self.output.quantize_int8(on)
    }

    /// Splits the last dimension into heads.
    ///
    /// # Shapes
    /// `[batch, seq, hidden]` → `[batch, heads, seq, head_size]`
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (b, s, _) = xs.dims3()?;
        xs.reshape((b, s, self.num_heads, self.head_size))?.transpose(1, 2)?.contiguous()
    }

    /// Attends over each sequence: padded sequences with `Keys::Masked` (the bias is 0 for
    /// real tokens and a large negative number for padding), or sequences packed without
    /// padding with `Keys::Packed` (inference, f32 on the CPU).
    ///
    /// # Shapes
    /// `Keys::Masked`: `xs: [batch, seq, hidden]`, bias `[batch, 1, 1, seq]` → `[batch, seq, hidden]`;
    /// `Keys::Packed`: `xs: [tokens, hidden]` → `[tokens, hidden]`
    pub fn forward(&self, xs: &Tensor, keys: Keys, mode: Mode) -> Result<Tensor> {
        let q = self.query.forward_in(xs, mode)?;
        let k = self.key.forward_in(xs, mode)?;
        let v = self.value.forward_in(xs, mode)?;
        let context = match keys {
            Keys::Packed(segments) => self.attend_packed(&q, &k, &v, segments, mode)?,
            Keys::Masked(bias) if xs.device().is_cpu() && xs.dtype() == DType::F32 => {
                self.attend_fused(&q, &k, &v, bias, mode)?
            }
            Keys::Masked(bias) if xs.device().is_cuda() && !mode.is_train() => self.attend_cuda(&q, &k, &v, bias)?,
            Keys::Masked(bias) => self.attend_composed(&q, &k, &v, bias, mode)?,
        };
        self.output.forward(&context, xs, mode)
    }

    /// Attention of sequences packed end to end (`layers::fused::packed_attention`).
    ///
    /// # Shapes
    /// `q, k, v: [tokens, hidden]` → `[tokens, hidden]`
    fn attend_packed(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        segments: &[Range<usize>],
        mode: Mode,
    ) -> Result<Tensor> {
        if mode.is_train() || !q.device().is_cpu() || q.dtype() != DType::F32 {
            candle_core::bail!("packed sequences are an f32 CPU inference path");
        }
        let op = PackedAttention { heads: self.num_heads, scale: self.scale() as f32, segments: segments.to_vec() };
        q.contiguous()?.apply_op3_no_bwd(&k.contiguous()?, &v.contiguous()?, &op)
    }

    fn scale(&self) -> f64 {
        1.0 / (self.head_size as f64).sqrt()
    }

    /// Attention as one CPU op (f32) that reads the heads in place and never holds the
    /// scores of all heads: see `layers::fused::attention`.
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_fused(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask_bias: &Tensor,
        mode: Mode,
    ) -> Result<Tensor> {
        let dropout = self.probs_dropout.seeded(mode);
        let key_bias = mask_bias.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let op = FusedAttention { heads: self.num_heads, scale: self.scale() as f32, key_bias, dropout };
        q.contiguous()?.apply_op3(&k.contiguous()?, &v.contiguous()?, op)
    }

    /// Inference on a GPU: the two products by cuBLAS (in the activations' dtype) and between
    /// them scale, mask and softmax as one in-place kernel (`layers::cuda`, f32 arithmetic).
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_cuda(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask_bias: &Tensor) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let (q, k, v) = (self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?);
        let scores = q.matmul(&k.t()?)?;
        let key_bias = mask_bias.to_dtype(DType::F32)?.reshape((b, s))?;
        scores.inplace_op2(&key_bias, &AttentionSoftmax { scale: self.scale() as f32 })?;
        scores.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))
    }

    /// Attention composed of candle ops (any device and dtype; the same dropout masks as the
    /// fused op).
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_composed(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask_bias: &Tensor,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let (q, k, v) = (self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?);
        let scores = (q.matmul(&k.t()?)? * self.scale())?.broadcast_add(mask_bias)?;
        let mut probs = softmax(&scores, mode)?;
        if let Some(dropout) = self.probs_dropout.seeded(mode) {
            probs = dropout.apply(&probs)?;
        }
        probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))
    }
}
