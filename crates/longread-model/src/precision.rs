//! The encoder's numeric precision when classifying or embedding, and its default per device.

use candle_core::Device;

/// Precision of the encoder when classifying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats throughout.
    #[default]
    F32,
    /// bfloat16 activations and matmuls, f32 weights (for parity with a model trained in
    /// bf16; on the CPU slower than f32, see BENCHMARKS.md).
    Bf16,
    /// int8 weights (one scale per output) and int8 activations (one scale per token) in the
    /// encoder's dense layers, summed exactly in i32; attention, LayerNorm and head in f32.
    Int8,
}

impl Precision {
    /// Its name as the flag takes it: "f32", "bf16" or "int8".
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
        }
    }

    /// The precision when the user does not choose: f32 on the CPU, bf16 on a GPU.
    pub fn default_on(device: &Device) -> Self {
        if device.is_cpu() {
            Self::F32
        } else {
            Self::Bf16
        }
    }
}
