//! One transformer layer: self-attention then the feed-forward block, both post-LN.
//! Reference: transformers `modeling_bert.py: BertLayer`, `BertIntermediate`, `BertOutput`
//! (DistilBERT's `TransformerBlock` and MPNet's `MPNetLayer` are the same computation).

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use crate::activation::Activation;
use crate::config::EncoderConfig;
use crate::encoder::attention::SelfAttention;
use crate::encoder::block_output::BlockOutput;
use crate::encoder::Keys;
use crate::layers::cuda;
use crate::layers::{linear, Linear};
use crate::mode::Mode;
use crate::profile::timed;
use crate::route;

/// `encoder.layer.{i}` (canonical names) of an encoder checkpoint.
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    attention: SelfAttention,
    intermediate: Linear,
    activation: Activation,
    output: BlockOutput,
}

impl EncoderLayer {
    /// Loads `attention`, `intermediate.dense` and `output.{dense,LayerNorm}` under `vb`.
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let (h, i, std) = (cfg.hidden_size, cfg.intermediate_size(), cfg.initializer_range);
        Ok(Self {
            attention: SelfAttention::load(vb.pp("attention"), cfg)?,
            intermediate: linear(vb.pp("intermediate").pp("dense"), h, i, std)?,
            activation: cfg.activation(),
            output: BlockOutput::load(vb.pp("output"), cfg, i)?,
        })
    }

    /// Keeps every dense weight in `dtype` (inference; see [`crate::layers::Linear`]).
    pub(crate) fn cast_weights(&mut self, dtype: candle_core::DType) -> Result<()> {
        self.attention.cast_weights(dtype)?;
        self.intermediate.cast_weight(dtype)?;
        self.output.cast_weight(dtype)
    }

    /// Switches every dense layer to int8 products (inference) or back to f32.
    pub(crate) fn quantize_int8(&mut self, on: bool) -> Result<()> {
        self.attention.quantize_int8(on)?;
        self.intermediate.quantize_int8(on)?;
        self.output.quantize_int8(on)
    }

    /// # Shapes
    /// `xs: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]`, `position_bias` (MPNet's
    /// relative-position bias): `[1, heads, seq, seq]` → `[batch, seq, hidden]`
    pub fn forward(
        &self,
        xs: &Tensor,
        mask_bias: &Tensor,
        position_bias: Option<&Tensor>,
        mode: Mode,
    ) -> Result<Tensor> {
        self.forward_keys(
            xs,
            Keys::Masked { mask: mask_bias, position: position_bias, relative: None, lengths: None },
            mode,
        )
    }

    /// [`EncoderLayer::forward`] with each sequence's real keys, for FlashAttention-2 on the
    /// GPU route (the encoder makes them where it applies; `KeyLengths::right_padded`).
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]`, `mask_bias: [batch, 1, 1, seq]` → `[batch, seq, hidden]`
    pub fn forward_with_lengths(
        &self,
        xs: &Tensor,
        mask_bias: &Tensor,
        lengths: &cuda::KeyLengths,
        mode: Mode,
    ) -> Result<Tensor> {
        let keys = Keys::Masked { mask: mask_bias, position: None, relative: None, lengths: Some(lengths) };
        self.forward_keys(xs, keys, mode)
    }

    /// The layer over padded (`Keys::Masked`) or packed (`Keys::Packed`) sequences.
    ///
    /// # Shapes
    /// `xs: [batch, seq, hidden]` or, packed, `[tokens, hidden]` → the same shape
    pub(crate) fn forward_keys(&self, xs: &Tensor, keys: Keys, mode: Mode) -> Result<Tensor> {
        let attended = self.attention.forward(xs, keys, mode)?;
        let device = xs.device();
        if mode.is_train() && route::gpu(device) && self.activation == Activation::GeluErf {
            if let Some(out) = timed("feed-forward (training)", device, || self.feed_forward_train(&attended, mode))? {
                return Ok(out);
            }
        }
        let inner = timed("feed-forward in + GELU", device, || {
            self.intermediate.forward_activated(&attended, self.activation, mode)
        })?;
        timed("feed-forward out + residual LayerNorm", device, || self.output.forward(&inner, &attended, mode))
    }

    /// The feed-forward block in training on the GPU route: the first product, then its bias,
    /// exact GELU and the second product as one op that keeps only the first product
    /// (`layers::cuda::GeluDenseTrain`), then the block's end. `None` where a dense layer has no
    /// bias (the caller composes instead).
    ///
    /// # Shapes
    /// `attended: [batch, seq, hidden]` → `[batch, seq, hidden]`
    fn feed_forward_train(&self, attended: &Tensor, mode: Mode) -> Result<Option<Tensor>> {
        let output = self.output.dense();
        let (Some(bias), Some(_)) = (self.intermediate.parts().1, output.parts().1) else {
            return Ok(None);
        };
        let h = self.intermediate.product_train(attended)?;
        let (b, s, inner) = h.dims3()?;
        let w = output.weight_in(attended.dtype())?.contiguous()?;
        let hidden = w.dim(0)?;
        let product = h.reshape((b * s, inner))?.contiguous()?.apply_op3(
            &bias.to_dtype(candle_core::DType::F32)?,
            &w,
            cuda::GeluDenseTrain,
        )?;
        self.output.finish_train(&product.reshape((b, s, hidden))?, attended, mode)
    }
}
