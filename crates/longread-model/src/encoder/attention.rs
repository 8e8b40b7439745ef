//! Multi-head self-attention with its output projection and post-LayerNorm.
//! Reference: transformers `modeling_bert.py: BertSelfAttention`, `BertSelfOutput`.

use std::ops::Range;

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;

use crate::config::EncoderConfig;
use crate::encoder::block_output::BlockOutput;
use crate::encoder::deberta::RelativeContext;
use crate::encoder::{DebertaSettings, Keys};
use crate::layers::cuda::{self, AttentionSoftmax};
use crate::layers::fused::{FusedAttention, PackedAttention};
use crate::layers::weight_casts::{self, Join};
use crate::layers::{linear, softmax, Dropout, Linear};
use crate::mode::Mode;
use crate::profile::timed;
use crate::route;

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
    /// Inference on a GPU: the query, key and value weights concatenated (`[3·hidden, hidden]`,
    /// in the products' dtype) and their biases (`[3·hidden]`, f32), for one product instead of
    /// three (made by [`SelfAttention::cast_weights`]).
    fused_qkv: Option<(Tensor, Tensor)>,
    /// DeBERTa-v2 without `share_att_key`: `pos_key_proj` (c2p) and `pos_query_proj` (p2c).
    pos_key: Option<Linear>,
    pos_query: Option<Linear>,
    /// DeBERTa-v2's relative-position dropout (`hidden_dropout_prob`) on the shared table.
    pos_dropout: Dropout,
}

impl SelfAttention {
    /// Loads `self.{query,key,value}` and `output.{dense,LayerNorm}` under `vb` (= `attention`).
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let std = cfg.initializer_range;
        let deberta = (cfg.family() == crate::encoder::Family::DebertaV2).then(|| DebertaSettings::of(cfg));
        let separate = deberta.filter(|d| d.relative_attention && !d.share_att_key);
        let own = |name: &str, wanted: bool| -> Result<Option<Linear>> {
            if wanted {
                Ok(Some(linear(vb.pp("self").pp(name), h, h, std)?))
            } else {
                Ok(None)
            }
        };
        let pos = (
            own("pos_key_proj", separate.as_ref().is_some_and(|d| d.c2p))?,
            own("pos_query_proj", separate.as_ref().is_some_and(|d| d.p2c))?,
        );
        Ok(Self {
            query: linear(vb.pp("self").pp("query"), h, h, std)?,
            key: linear(vb.pp("self").pp("key"), h, h, std)?,
            value: linear(vb.pp("self").pp("value"), h, h, std)?,
            output: BlockOutput::load(vb.pp("output"), cfg, h)?,
            probs_dropout: Dropout::new(cfg.attention_probs_dropout_prob),
            num_heads: cfg.num_attention_heads,
            head_size: cfg.head_size(),
            fused_qkv: None,
            pos_key: pos.0,
            pos_query: pos.1,
            pos_dropout: Dropout::new(cfg.hidden_dropout_prob),
        })
    }

    /// Keeps the four projections' weights in `dtype` (inference; see [`Linear::cast_weight`]).
    pub(crate) fn cast_weights(&mut self, dtype: DType) -> Result<()> {
        for layer in [&mut self.query, &mut self.key, &mut self.value] {
            layer.cast_weight(dtype)?;
        }
        let (q, k, v) = (self.query.parts(), self.key.parts(), self.value.parts());
        if q.0.device().is_cuda() && self.heads_fit_vectors(dtype) {
            if let (Some(qb), Some(kb), Some(vb)) = (q.1, k.1, v.1) {
                let weight = Tensor::cat(&[q.0, k.0, v.0], 0)?.contiguous()?;
                let bias = Tensor::cat(&[qb, kb, vb], 0)?.to_dtype(DType::F32)?.contiguous()?;
                self.fused_qkv = Some((weight, bias));
            }
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

    /// Whether a head's row is whole 16-byte vectors of `dtype`, as the GPU kernels that split,
    /// merge and attend over the heads move them.
    fn heads_fit_vectors(&self, dtype: DType) -> bool {
        let vector = if dtype == DType::BF16 { 8 } else { 4 };
        self.head_size.is_multiple_of(vector)
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
        if let (Some((weight, bias)), Keys::Masked { mask, position: None, relative: None, lengths }, false) =
            (&self.fused_qkv, keys, mode.is_train())
        {
            return self.forward_fused(xs, weight, bias, mask, lengths, mode);
        }
        if let (Keys::Masked { mask, position: None, relative: None, lengths }, true) =
            (keys, mode.is_train() && route::gpu(xs.device()))
        {
            if let Some(out) = self.forward_fused_train(xs, mask, lengths, mode)? {
                return Ok(out);
            }
        }
        // On a GPU in bf16 the residual stream is f32: cast it once for the three projections.
        let input =
            if xs.device().is_cuda() && !mode.is_train() { &xs.to_dtype(self.query.weight_dtype())? } else { xs };
        let device = xs.device();
        let (q, k, v) = timed("qkv projections", device, || -> Result<_> {
            Ok((
                self.query.forward_in(input, mode)?,
                self.key.forward_in(input, mode)?,
                self.value.forward_in(input, mode)?,
            ))
        })?;
        let context = match keys {
            Keys::Packed(segments) => self.attend_packed(&q, &k, &v, segments, mode)?,
            Keys::Masked { relative: Some(relative), .. } => self.attend_disentangled(&q, &k, &v, relative, mode)?,
            // The fused CPU op adds a relative-position bias in inference; training needs its gradient.
            Keys::Masked { mask, position, .. } if route::cpu(xs.device()) && xs.dtype() == DType::F32 => {
                match position {
                    Some(position) if mode.is_train() => {
                        self.attend_composed(&q, &k, &v, mask, Some(position), mode)?
                    }
                    _ => self.attend_fused(&q, &k, &v, mask, position, mode)?,
                }
            }
            Keys::Masked { mask, position: Some(position), .. } => {
                self.attend_composed(&q, &k, &v, mask, Some(position), mode)?
            }
            Keys::Masked { mask, position: None, .. } if xs.device().is_cuda() && !mode.is_train() => {
                self.attend_cuda(&q, &k, &v, mask)?
            }
            Keys::Masked { mask, position: None, .. } if route::gpu(xs.device()) => {
                self.attend_cuda_train(&q, &k, &v, mask, mode)?
            }
            Keys::Masked { mask, position: None, .. } => self.attend_composed(&q, &k, &v, mask, None, mode)?,
        };
        timed("attention output + residual LayerNorm", device, || self.output.forward(&context, xs, mode))
    }

    /// Inference on a GPU with the fused projection: one product for q, k and v, the bias added
    /// as the heads are split, attention (`layers::cuda::fused_attention`; FlashAttention-2 over
    /// `lengths` where the encoder made them), then the output block.
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    fn forward_fused(
        &self,
        xs: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        mask_bias: &Tensor,
        lengths: Option<&cuda::KeyLengths>,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, h) = xs.dims3()?;
        let device = xs.device();
        // bf16 products run through cuBLASLt, the bias with the product where FlashAttention-2
        // reads it.
        let lt = weight.dtype() == DType::BF16;
        let bias_in_product = lt && lengths.is_some();
        let product = timed("qkv projection (fused)", device, || {
            let x = cuda::twin::product_input(xs, weight.dtype())?.reshape((b * s, h))?;
            if lt {
                cuda::lt_linear(&x, weight, bias_in_product.then_some(bias))
            } else {
                x.matmul(&weight.t()?)
            }
        })?;
        let key_bias = mask_bias.to_dtype(DType::F32)?.reshape((b, s))?;
        let heads = (b, s, self.num_heads);
        let bias = (!bias_in_product).then_some(bias);
        let context = cuda::fused_attention(&product, bias, &key_bias, lengths, heads, self.scale() as f32)?;
        timed("attention output + residual LayerNorm", device, || self.output.forward(&context, xs, mode))
    }

    /// Training on the GPU route: one product for q, k and v, then the attention as one op that
    /// keeps only that product for its backward pass (`layers::cuda::AttentionTrain`), then the
    /// output block. Runs on any device (on the CPU with the op's f32 reference kernels, for
    /// tests); `None` where the projections have no biases or the heads do not split into the
    /// kernels' 16-byte vectors (the caller composes instead).
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn forward_fused_train(
        &self,
        xs: &Tensor,
        mask_bias: &Tensor,
        lengths: Option<&cuda::KeyLengths>,
        mode: Mode,
    ) -> Result<Option<Tensor>> {
        let (q, k, v) = (self.query.parts(), self.key.parts(), self.value.parts());
        let (Some(qb), Some(kb), Some(vb)) = (q.1, k.1, v.1) else {
            return Ok(None);
        };
        if !self.heads_fit_vectors(xs.dtype()) {
            return Ok(None);
        }
        let (b, s, h) = xs.dims3()?;
        let device = xs.device();
        let dtype = xs.dtype();
        // Joined once per training step (`weight_casts::joined`: a leaf of the step's graphs).
        let bias = weight_casts::joined(&[qb, kb, vb], Join::Cat, DType::F32, "qkv-bias")?;
        // Where FlashAttention-2 (or cuDNN) runs in bf16 on a GPU, the bias comes with the
        // product (cuBLASLt's epilogue: `LinearBiasTrain`) instead of two passes in the attention
        // op; on the CPU (the route emulated, for tests) through the op's f32 reference.
        let op_runs_here = (device.is_cuda() && dtype == DType::BF16) || (device.is_cpu() && dtype == DType::F32);
        let bias_in_product = lengths.is_some() && op_runs_here && cuda::train_qkv_bias_in_product();
        let product = timed("qkv projection (fused)", device, || -> Result<_> {
            // Each weight cast, then joined: the same values as joining then casting, made once
            // per training step (`weight_casts::joined`).
            let weight = weight_casts::joined(&[q.0, k.0, v.0], Join::Cat, dtype, "qkv")?;
            let x = xs.reshape((b * s, h))?;
            if bias_in_product {
                x.contiguous()?.apply_op3(&weight, &bias, cuda::LinearBiasTrain)
            } else {
                x.matmul(&weight.t()?)
            }
        })?;
        let seeded = self.probs_dropout.seeded(mode);
        let context = if let Some(lengths) = lengths {
            // FlashAttention-2 with its backward kernel (where it applies: the encoder made the lengths).
            let op = cuda::FlashAttentionTrain::new(
                self.num_heads,
                self.scale() as f32,
                lengths.clone(),
                seeded.map(|d| (d.p, d.seed)),
            );
            timed("attention (training, FlashAttention-2)", device, || {
                if bias_in_product {
                    op.forward_biased(&product)
                } else {
                    op.forward(&product, &bias)
                }
            })?
            .reshape((b, s, h))?
        } else {
            let key_bias = mask_bias.to_dtype(DType::F32)?.reshape((b, s))?.detach().contiguous()?;
            let dropout = seeded.map_or((0, 0, 1.0), |d| (d.seed, d.threshold(), d.scale()));
            let op = cuda::AttentionTrain { heads: self.num_heads, scale: self.scale() as f32, dropout };
            timed("attention (training)", device, || product.apply_op3(&bias, &key_bias, op))?
        };
        timed("attention output + residual LayerNorm", device, || self.output.forward(&context, xs, mode)).map(Some)
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
    /// scores of all heads: see `layers::fused::attention`. A relative-position bias (MPNet)
    /// is added in inference only (the op has no gradient for it).
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]`, `position_bias:
    /// [1, heads, seq, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_fused(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask_bias: &Tensor,
        position_bias: Option<&Tensor>,
        mode: Mode,
    ) -> Result<Tensor> {
        let dropout = self.probs_dropout.seeded(mode);
        let key_bias = mask_bias.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let score_bias = match position_bias {
            Some(_) if mode.is_train() => {
                candle_core::bail!("the fused attention adds a position bias in inference only")
            }
            Some(bias) => Some(bias.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        let with_bias = score_bias.is_some();
        let op = FusedAttention { heads: self.num_heads, scale: self.scale() as f32, key_bias, score_bias, dropout };
        let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
        if with_bias {
            return q.apply_op3_no_bwd(&k, &v, &op);
        }
        q.apply_op3(&k, &v, op)
    }

    /// Inference on a GPU: the two products by cuBLAS (in the activations' dtype) and between
    /// them scale, mask and softmax as one in-place kernel (`layers::cuda`, f32 arithmetic).
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_cuda(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask_bias: &Tensor) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let device = q.device();
        let (q, k, v) = timed("attention: split heads", device, || -> Result<_> {
            Ok((self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?))
        })?;
        let scores = timed("attention: q·kᵀ", device, || q.matmul(&k.t()?))?;
        let key_bias = mask_bias.to_dtype(DType::F32)?.reshape((b, s))?;
        timed("attention: softmax", device, || {
            scores.inplace_op2(&key_bias, &AttentionSoftmax { scale: self.scale() as f32 })
        })?;
        let context = timed("attention: p·v", device, || scores.matmul(&v))?;
        timed("attention: merge heads", device, || context.transpose(1, 2)?.reshape((b, s, h)))
    }

    /// Training on a GPU: the two products by cuBLAS with their backward passes, and between
    /// them scale, mask, softmax and dropout as one op whose backward pass recomputes the
    /// softmax from the scores (`layers::cuda::AttentionProbsTrain`): two `[batch, heads,
    /// seq, seq]` tensors kept per layer instead of the composition's seven. The same dropout
    /// masks as the CPU's.
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_cuda_train(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask_bias: &Tensor,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let (q, k, v) = (self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?);
        let scores = q.matmul(&k.t()?)?.contiguous()?;
        let key_bias = mask_bias.to_dtype(DType::F32)?.reshape((b, s))?.detach().contiguous()?;
        let dropout = self.probs_dropout.seeded(mode).map_or((0, 0, 1.0), |d| (d.seed, d.threshold(), d.scale()));
        let op = cuda::AttentionProbsTrain { scale: self.scale() as f32, dropout };
        let probs = scores.apply_op2(&key_bias, op)?;
        probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))
    }

    /// DeBERTa-v2's disentangled attention, composed of candle ops (any device and dtype,
    /// training included): `(q·kᵀ + c2p + p2c) / sqrt(head_size · factor)`, where c2p gathers
    /// `q·posKᵀ` and p2c `k·posQᵀ` at each pair's bucketed relative position, `posK`/`posQ`
    /// being the shared relative table through the key/query projections (or DeBERTa's own
    /// `pos_key_proj`/`pos_query_proj`); masked where query or key is padding.
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]` → `[batch, seq, hidden]`
    fn attend_disentangled(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        relative: &RelativeContext,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let (qh, kh, vh) = (self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?);
        let settings = &relative.settings;
        let scale = ((self.head_size * settings.scale_factor()) as f64).sqrt();
        let mut scores = (qh.matmul(&kh.t()?)? / scale)?;
        if let Some(table) = &relative.table {
            let table = self.pos_dropout.forward(&table.to_dtype(q.dtype())?, mode)?.unsqueeze(0)?;
            let rows = table.dim(1)?;
            // [2span, hidden] → [1, heads, 2span, head_size]
            let heads_of = |x: Tensor| -> Result<Tensor> { self.split_heads(&x) };
            let gathered = |product: Tensor, index: &Tensor| -> Result<Tensor> {
                product.reshape((b * self.num_heads, s * rows))?.index_select(index, 1)?.reshape((
                    b,
                    self.num_heads,
                    s,
                    s,
                ))
            };
            if settings.c2p {
                let proj = self.pos_key.as_ref().unwrap_or(&self.key);
                let pos_key = heads_of(proj.forward_in(&table, mode)?)?;
                let c2p = qh.broadcast_matmul(&pos_key.t()?)?.contiguous()?;
                scores = (scores + (gathered(c2p, &relative.c2p_index)? / scale)?)?;
            }
            if settings.p2c {
                let proj = self.pos_query.as_ref().unwrap_or(&self.query);
                let pos_query = heads_of(proj.forward_in(&table, mode)?)?;
                let p2c = kh.broadcast_matmul(&pos_query.t()?)?.contiguous()?;
                scores = (scores + (gathered(p2c, &relative.p2c_index)? / scale)?)?;
            }
        }
        // Filled, not added (as transformers' masked_fill): no gradient reaches a masked score.
        let keep = relative.pair_keep.broadcast_as(scores.shape())?;
        let fill = Tensor::new(crate::encoder::mask_minimum(scores.dtype()) as f32, scores.device())?
            .to_dtype(scores.dtype())?
            .broadcast_as(scores.shape())?;
        let scores = keep.where_cond(&scores, &fill)?;
        let mut probs = softmax(&scores, mode)?;
        if let Some(dropout) = self.probs_dropout.seeded(mode) {
            probs = dropout.apply(&probs)?;
        }
        probs.matmul(&vh)?.transpose(1, 2)?.reshape((b, s, h))
    }

    /// Attention composed of candle ops (any device and dtype; the same dropout masks as the
    /// fused op), with MPNet's relative-position bias when given (added after scaling, before
    /// the mask, as `MPNetSelfAttention` does).
    ///
    /// # Shapes
    /// `q, k, v: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]`, `position_bias:
    /// [1, heads, seq, seq]` → `[batch, seq, hidden]`
    pub(crate) fn attend_composed(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask_bias: &Tensor,
        position_bias: Option<&Tensor>,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, h) = q.dims3()?;
        let (q, k, v) = (self.split_heads(q)?, self.split_heads(k)?, self.split_heads(v)?);
        let mut scores = (q.matmul(&k.t()?)? * self.scale())?;
        if let Some(position) = position_bias {
            scores = scores.broadcast_add(&position.to_dtype(scores.dtype())?)?;
        }
        let scores = scores.broadcast_add(mask_bias)?;
        let mut probs = softmax(&scores, mode)?;
        if let Some(dropout) = self.probs_dropout.seeded(mode) {
            probs = dropout.apply(&probs)?;
        }
        probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DropoutRng;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};
    use candle_nn::VarMap;

    /// Self-attention of hidden 24 in 3 heads of 8, with dropout, over trainable weights.
    fn attention() -> (VarMap, SelfAttention) {
        attention_with(0.3)
    }

    /// The same with `probs_dropout` on the attention probabilities.
    fn attention_with(probs_dropout: f64) -> (VarMap, SelfAttention) {
        let normals = Normals::new(484);
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 24, "num_hidden_layers": 1, "num_attention_heads": 3,
            "hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": probs_dropout, "layer_norm_eps": 1e-5
        }))
        .unwrap();
        let vars = VarMap::new();
        let attention = SelfAttention::load(VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu), &cfg).unwrap();
        for (_, var) in vars.data().lock().unwrap().iter() {
            let t = normals.tensor(0f32, 0.4, var.shape(), &Device::Cpu).unwrap();
            var.set(&(t + 0.1).unwrap()).unwrap();
        }
        (vars, attention)
    }

    /// The GPU route's training attention (one q/k/v product, `AttentionTrain`), run on the CPU
    /// with its reference kernels, gives the CPU route's output and gradients (input and all
    /// eight parameters) with the same dropout masks, padding included.
    #[test]
    fn the_gpu_routes_training_attention_is_the_cpu_routes() {
        gpu_route_equals_cpu_route(attention(), false);
    }

    /// The same with FlashAttention-2 as the GPU route's attention (`FlashAttentionTrain` over
    /// the batch's `KeyLengths`, its CPU loops; without dropout on the probabilities, which only
    /// the CUDA kernel draws), the block's output dropout still on; the q/k/v bias in the
    /// product (`LinearBiasTrain`'s reference, then `forward_biased`), as on a GPU by default.
    #[test]
    fn the_gpu_routes_training_flash_attention_is_the_cpu_routes() {
        gpu_route_equals_cpu_route(attention_with(0.0), true);
    }

    fn gpu_route_equals_cpu_route((vars, attention): (VarMap, SelfAttention), flash: bool) {
        let normals = Normals::new(516);
        let device = Device::Cpu;
        let (batch, seq) = (2, 9);
        let xs = Var::from_tensor(&normals.tensor(0f32, 1.0, (batch, seq, 24), &device).unwrap()).unwrap();
        let mut mask = vec![1u32; batch * seq];
        mask[seq - 3..seq].iter_mut().for_each(|m| *m = 0);
        let mask = Tensor::from_vec(mask, (batch, seq), &device).unwrap();
        let mask_bias = crate::encoder::mask_bias(&mask, DType::F32).unwrap();
        let lengths = cuda::KeyLengths::right_padded(&mask).unwrap().expect("right-padded");
        let w = normals.tensor(0f32, 1.0, (batch, seq, 24), &device).unwrap();
        let mut names: Vec<_> = vars.data().lock().unwrap().keys().cloned().collect();
        names.sort();
        assert_eq!(names.len(), 10, "{names:?}");
        let run = |gpu_route: bool| {
            let rng = DropoutRng::new(11);
            let mode = Mode::Train(&rng);
            let y = if gpu_route {
                let lengths = flash.then_some(&lengths);
                attention.forward_fused_train(xs.as_tensor(), &mask_bias, lengths, mode).unwrap().expect("fusable")
            } else {
                let keys = Keys::Masked { mask: &mask_bias, position: None, relative: None, lengths: None };
                attention.forward(xs.as_tensor(), keys, mode).unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let mut all = vec![y, grads.get(xs.as_tensor()).unwrap().clone()];
            for name in &names {
                let var = vars.data().lock().unwrap()[name].clone();
                all.push(grads.get(var.as_tensor()).unwrap_or_else(|| panic!("no gradient for {name}")).clone());
            }
            all
        };
        let (gpu_route, cpu_route) = (run(true), run(false));
        let largest = |t: &Tensor| t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        for (i, (a, b)) in gpu_route.iter().zip(&cpu_route).enumerate() {
            let d = largest(&(a - b).unwrap());
            let what = if i < 2 { ["output", "input"][i].to_string() } else { names[i - 2].clone() };
            // Relative to the values beyond 1: the inputs are random, and a weight's gradient
            // (a sum over the batch's rows, ~5–30) differs by f32 rounding in the last bits.
            let scale = largest(b).max(1.0);
            assert!(d < 2e-5 * scale, "{what}: max abs diff {d} (largest value {scale})");
        }
    }
}
