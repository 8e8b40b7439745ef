//! Building blocks with backward passes (candle-nn's fused LayerNorm has none), and the kernels
//! behind them by backend: `fused` (CPU, with backward passes), `int8` (CPU inference), `cuda`
//! (NVIDIA GPUs: inference and training ops, with CPU reference kernels for tests); which of
//! them a tensor runs is `crate::route`'s decision.

pub mod cuda;
pub mod dropout;
pub mod fused;
pub mod int8;
mod layer_norm;
mod linear;
mod softmax;
pub mod weight_casts;

pub use cuda::AdamWStep;
pub use dropout::Dropout;
pub use layer_norm::LayerNorm;
pub use linear::{linear, linear_with_bias, Linear};
pub use softmax::{softmax, softmax_last_dim};
