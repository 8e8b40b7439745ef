//! ModernBERT's transformer layers: pre-norm (the first layer without an attention norm),
//! bias-free products and norms (by default), one fused q/k/v product, rotary positions
//! (θ 160,000 in global layers, 10,000 in sliding-window ones), a ±`local_attention / 2` window in
//! every layer but each `global_attn_every_n_layers`-th, a GeGLU feed-forward, and a final norm.
//! Composed of candle ops, so training differentiates it as it is.
//! Reference: transformers `models/modernbert/modeling_modernbert.py` (`ModernBertEncoderLayer`,
//! `ModernBertAttention`, `ModernBertMLP`, `ModernBertRotaryEmbedding`, eager attention).

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};
use serde_json::Value;

use crate::activation::Activation;
use crate::config::EncoderConfig;
use crate::layers::{linear_with_bias, softmax, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// ModernBERT's settings beyond BERT's keys, read from config.json with transformers' defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernSettings {
    /// LayerNorms have a bias (`norm_bias`, default false).
    pub norm_bias: bool,
    /// The attention products have biases (`attention_bias`, default false).
    pub attention_bias: bool,
    /// The feed-forward products have biases (`mlp_bias`, default false).
    pub mlp_bias: bool,
    /// Dropout after the embeddings (`embedding_dropout`, default 0).
    pub embedding_dropout: f64,
    /// Dropout inside the feed-forward block (`mlp_dropout`, default 0).
    pub mlp_dropout: f64,
    /// Rotary base of global layers (`rope_parameters.full_attention.rope_theta` or
    /// `global_rope_theta`, default 160,000).
    pub global_theta: f64,
    /// Rotary base of sliding-window layers (default 10,000).
    pub local_theta: f64,
    /// A sliding-window query sees keys at most this far (`local_attention / 2`, default 64).
    pub half_window: usize,
    /// Per layer: true for a sliding-window layer (`layer_types`, else every layer whose index is
    /// not a multiple of `global_attn_every_n_layers`, default 3).
    pub sliding: Vec<bool>,
}

impl ModernSettings {
    /// The settings of `cfg` (a ModernBERT config).
    pub fn of(cfg: &EncoderConfig) -> Self {
        let extra = &cfg.extra;
        let flag = |key: &str| extra.get(key).and_then(Value::as_bool).unwrap_or(false);
        let number = |key: &str| extra.get(key).and_then(Value::as_f64);
        let theta = |layer_type: &str, old_key: &str, default: f64| {
            extra
                .get("rope_parameters")
                .and_then(|r| r.get(layer_type))
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .or_else(|| number(old_key))
                .unwrap_or(default)
        };
        let every = extra.get("global_attn_every_n_layers").and_then(Value::as_u64).unwrap_or(3).max(1) as usize;
        let sliding = match extra.get("layer_types").and_then(Value::as_array) {
            Some(types) => types.iter().map(|t| t.as_str() == Some("sliding_attention")).collect(),
            None => (0..cfg.num_hidden_layers).map(|i| !i.is_multiple_of(every)).collect(),
        };
        Self {
            norm_bias: flag("norm_bias"),
            attention_bias: flag("attention_bias"),
            mlp_bias: flag("mlp_bias"),
            embedding_dropout: number("embedding_dropout").unwrap_or(0.0),
            mlp_dropout: number("mlp_dropout").unwrap_or(0.0),
            global_theta: theta("full_attention", "global_rope_theta", 160_000.0),
            local_theta: theta("sliding_attention", "local_rope_theta", 10_000.0),
            half_window: extra.get("local_attention").and_then(Value::as_u64).unwrap_or(128) as usize / 2,
            sliding,
        }
    }

    /// A message naming what does not fit the layer count, or `None`.
    pub fn problem(&self, layers: usize) -> Option<String> {
        (self.sliding.len() != layers)
            .then(|| format!("layer_types lists {} layers, num_hidden_layers is {layers}", self.sliding.len()))
    }
}

/// A LayerNorm with or without its bias (`norm_bias`; without, the bias is a constant 0).
pub fn norm(vb: VarBuilder, size: usize, eps: f64, bias: bool) -> Result<LayerNorm> {
    if bias {
        return LayerNorm::load(vb, size, eps);
    }
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.0))?;
    Ok(LayerNorm::new(weight, Tensor::zeros(size, DType::F32, vb.device())?, eps))
}

/// The cosines and sines of rotary positions 0..seq for one base.
///
/// # Shapes
/// → `([seq, head_size], [seq, head_size])` (f32)
fn rotary_tables(seq: usize, head_size: usize, theta: f64, device: &Device) -> Result<(Tensor, Tensor)> {
    // As transformers: inv_freq in f32, position × inv_freq in f32, the halves repeated.
    let inv_freq: Vec<f32> =
        (0..head_size).step_by(2).map(|i| 1.0 / (theta as f32).powf(i as f32 / head_size as f32)).collect();
    let half = inv_freq.len();
    let mut cos = Vec::with_capacity(seq * head_size);
    let mut sin = Vec::with_capacity(seq * head_size);
    for pos in 0..seq {
        for j in 0..head_size {
            let angle = pos as f32 * inv_freq[j % half];
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    Ok((Tensor::from_vec(cos, (seq, head_size), device)?, Tensor::from_vec(sin, (seq, head_size), device)?))
}

/// `x·cos + rotate_half(x)·sin`, in f32 (transformers' `apply_rotary_pos_emb`).
///
/// # Shapes
/// `x: [batch, heads, seq, head_size]`, `cos, sin: [seq, head_size]` → `x`'s shape and dtype
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let dtype = x.dtype();
    let x = x.to_dtype(DType::F32)?;
    let half = x.dim(D::Minus1)? / 2;
    let rotated = Tensor::cat(&[&x.narrow(D::Minus1, half, half)?.neg()?, &x.narrow(D::Minus1, 0, half)?], D::Minus1)?;
    (x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?)?.to_dtype(dtype)
}

/// What every layer of one forward pass shares: the rotary tables of both layer kinds and the
/// additive attention biases (padding; padding or outside the window).
pub(crate) struct ModernContext {
    global: (Tensor, Tensor),
    local: (Tensor, Tensor),
    /// `[batch, 1, 1, seq]`.
    mask: Tensor,
    /// `[batch, 1, seq, seq]`: the padding bias, and the same large negative number for keys
    /// farther than the window (one, not added twice, so a row with nothing to see stays finite).
    window_mask: Tensor,
}

impl ModernContext {
    /// # Shapes
    /// `attention_mask: [batch, seq]` (u32)
    pub(crate) fn new(
        settings: &ModernSettings,
        head_size: usize,
        attention_mask: &Tensor,
        dtype: DType,
    ) -> Result<Self> {
        let (batch, seq) = attention_mask.dims2()?;
        let device = attention_mask.device();
        let min = crate::encoder::mask_minimum(dtype);
        let keys = attention_mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut window = Vec::with_capacity(batch * seq * seq);
        for row in &keys {
            for q in 0..seq {
                window.extend(row.iter().enumerate().map(|(k, &real)| {
                    if real == 0.0 || q.abs_diff(k) > settings.half_window {
                        min as f32
                    } else {
                        0.0
                    }
                }));
            }
        }
        Ok(Self {
            global: rotary_tables(seq, head_size, settings.global_theta, device)?,
            local: rotary_tables(seq, head_size, settings.local_theta, device)?,
            mask: crate::encoder::mask_bias(attention_mask, dtype)?,
            window_mask: Tensor::from_vec(window, (batch, 1, seq, seq), device)?.to_dtype(dtype)?,
        })
    }
}

/// `layers.{i}` of a ModernBERT checkpoint (canonical `encoder.layer.{i}`).
#[derive(Debug, Clone)]
pub struct ModernLayer {
    /// Absent in the first layer (transformers' `nn.Identity`).
    attn_norm: Option<LayerNorm>,
    qkv: Linear,
    attn_out: Linear,
    mlp_norm: LayerNorm,
    mlp_in: Linear,
    mlp_out: Linear,
    activation: Activation,
    heads: usize,
    head_size: usize,
    sliding: bool,
    attention_dropout: Dropout,
    mlp_dropout: Dropout,
}

impl ModernLayer {
    /// Loads `attn_norm`, `attn.{Wqkv,Wo}`, `mlp_norm` and `mlp.{Wi,Wo}` under `vb`.
    pub(crate) fn load(vb: VarBuilder, cfg: &EncoderConfig, settings: &ModernSettings, index: usize) -> Result<Self> {
        let (h, i, std, eps) = (cfg.hidden_size, cfg.intermediate_size(), cfg.initializer_range, cfg.layer_norm_eps);
        let attn_norm = if index == 0 { None } else { Some(norm(vb.pp("attn_norm"), h, eps, settings.norm_bias)?) };
        Ok(Self {
            attn_norm,
            qkv: linear_with_bias(vb.pp("attn").pp("Wqkv"), h, 3 * h, std, settings.attention_bias)?,
            attn_out: linear_with_bias(vb.pp("attn").pp("Wo"), h, h, std, settings.attention_bias)?,
            mlp_norm: norm(vb.pp("mlp_norm"), h, eps, settings.norm_bias)?,
            mlp_in: linear_with_bias(vb.pp("mlp").pp("Wi"), h, 2 * i, std, settings.mlp_bias)?,
            mlp_out: linear_with_bias(vb.pp("mlp").pp("Wo"), i, h, std, settings.mlp_bias)?,
            activation: cfg.activation(),
            heads: cfg.num_attention_heads,
            head_size: cfg.head_size(),
            sliding: settings.sliding.get(index).copied().unwrap_or(false),
            attention_dropout: Dropout::new(cfg.attention_probs_dropout_prob),
            mlp_dropout: Dropout::new(settings.mlp_dropout),
        })
    }

    /// Switches every dense layer to int8 products (inference) or back to f32.
    pub(crate) fn quantize_int8(&mut self, on: bool) -> Result<()> {
        for layer in [&mut self.qkv, &mut self.attn_out, &mut self.mlp_in, &mut self.mlp_out] {
            layer.quantize_int8(on)?;
        }
        Ok(())
    }

    /// # Shapes
    /// `xs: [batch, seq, hidden]` → `[batch, seq, hidden]`
    pub(crate) fn forward(&self, xs: &Tensor, context: &ModernContext, mode: Mode) -> Result<Tensor> {
        let normed = match &self.attn_norm {
            Some(norm) => norm.forward(xs, mode)?,
            None => xs.clone(),
        };
        let attended = self.attention(&normed, context, mode)?;
        let xs = (xs + attended)?;
        let inner = self.mlp_in.forward_in(&self.mlp_norm.forward(&xs, mode)?, mode)?;
        let width = inner.dim(D::Minus1)? / 2;
        let gated =
            (self.activation.forward(&inner.narrow(D::Minus1, 0, width)?)? * inner.narrow(D::Minus1, width, width)?)?;
        let out = self.mlp_out.forward_in(&self.mlp_dropout.forward(&gated, mode)?, mode)?;
        xs + out
    }

    /// Rotary self-attention over the layer's keys, then `Wo` and dropout.
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]` → `[batch, seq, hidden]`
    fn attention(&self, xs: &Tensor, context: &ModernContext, mode: Mode) -> Result<Tensor> {
        let (b, s, h) = xs.dims3()?;
        let qkv = self.qkv.forward_in(xs, mode)?.reshape((b, s, 3, self.heads, self.head_size))?;
        let part = |i: usize| qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous();
        let (cos, sin) = if self.sliding { &context.local } else { &context.global };
        let q = rotate(&part(0)?, cos, sin)?;
        let k = rotate(&part(1)?, cos, sin)?;
        let v = part(2)?;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        let bias = if self.sliding { &context.window_mask } else { &context.mask };
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(bias)?;
        let mut probs = softmax(&scores, mode)?;
        if let Some(dropout) = self.attention_dropout.seeded(mode) {
            probs = dropout.apply(&probs)?;
        }
        let context = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))?;
        self.attention_dropout.forward(&self.attn_out.forward_in(&context, mode)?, mode)
    }
}
