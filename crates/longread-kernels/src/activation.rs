//! Feed-forward activations named by `hidden_act` in config.json
//! (transformers `activations.py: ACT2FN`).

use candle_core::Tensor;

/// A supported `hidden_act`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `"gelu"`: exact GELU, `x · Φ(x)` with the error function.
    GeluErf,
    /// `"gelu_new"`, `"gelu_pytorch_tanh"`, `"gelu_fast"`: the tanh approximation.
    GeluTanh,
    /// `"relu"`.
    Relu,
    /// `"silu"` / `"swish"`.
    Silu,
}

impl Activation {
    /// Parses a Hugging Face activation name.
    pub fn from_hf_name(name: &str) -> Result<Self, String> {
        match name {
            "gelu" => Ok(Self::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Self::GeluTanh),
            "relu" => Ok(Self::Relu),
            "silu" | "swish" => Ok(Self::Silu),
            other => Err(format!(
                "hidden_act \"{other}\" is not supported (use gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu or silu)"
            )),
        }
    }

    /// Applies the activation element-wise.
    ///
    /// # Shapes
    /// any → same shape
    pub fn forward(self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::GeluErf if xs.device().is_cpu() && xs.dtype() == candle_core::DType::F32 => {
                xs.contiguous()?.apply_op1(crate::layers::fused::FusedGeluErf)
            }
            Self::GeluErf => xs.gelu_erf(),
            Self::GeluTanh => xs.gelu(),
            Self::Relu => xs.relu(),
            Self::Silu => xs.silu(),
        }
    }
}
