//! Fused CPU kernels with backward passes, as candle custom ops. Composed from candle ops, each
//! is several kernels whose intermediates all stay alive for the backward pass; fused, each is
//! one pass forward and one backward, in parallel, and each is gradient-checked against its
//! composition:
//! - `softmax`: softmax over the last dimension; `layer_norm`: LayerNorm; `gelu`: exact GELU;
//! - `attention`: scaled, masked multi-head attention (FlashAttention-style, no `seq × seq`
//!   tensor kept for the backward pass); `packed_attention`: the same over sequences packed
//!   without padding (inference);
//! - `bias_add`: a dense layer's bias (its gradient summed in one vectorised pass);
//!   `bias_gelu`: a dense layer's bias + GELU; `residual_norm`: bias + dropout + residual +
//!   LayerNorm at the end of a transformer block;
//! - `math`: the vectorisable f32 math they share; `storage`: reading their arguments.

pub mod attention;
pub mod bias_add;
pub mod bias_gelu;
pub mod gelu;
pub mod layer_norm;
pub mod math;
pub mod packed_attention;
pub mod product;
pub mod residual_norm;
pub mod softmax;
pub mod storage;

pub use attention::{FusedAttention, SharedMut};
pub use bias_add::FusedBiasAdd;
pub use bias_gelu::FusedBiasGeluErf;
pub use gelu::{gelu_in_place, FusedGeluErf};
pub use layer_norm::FusedLayerNorm;
pub use packed_attention::PackedAttention;
pub use product::DenseProduct;
pub use residual_norm::FusedResidualNorm;
pub use softmax::FusedSoftmax;
pub use storage::{f32_data, f32_slice, f32_slices};

/// Defines a function whose body is compiled three times, for the build's baseline (SSE2),
/// AVX2 + FMA and AVX-512 (F + DQ: DQ's 64-bit multiply vectorises the dropout-mask hash), and
/// runs the widest build the CPU has: the element-wise loops then vectorise 8 or 16 lanes wide
/// instead of SSE's 4. Rust does not contract `a * b + c` into
/// FMA, so every build performs the same operations in the same order: the same results.
#[macro_export]
#[doc(hidden)]
macro_rules! multiversion {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
                    // SAFETY: the CPU has AVX-512F and DQ.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}
pub use crate::multiversion;

/// Largest absolute difference between two tensors (tests of the fused ops).
#[cfg(test)]
pub fn max_diff(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}
