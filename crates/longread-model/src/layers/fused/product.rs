//! `x · Wᵀ` for inference (no gradient): a dense layer's product without the two serial passes
//! candle's matmul makes on the calling thread while the worker threads wait — zeroing the
//! output (`vec![0; m·n]`, which the product then overwrites) and packing the whole activation
//! matrix (gemm packs its left operand on the calling thread when it has few rows). Here the
//! output is written once, and the product is computed transposed (`(W · xᵀ)ᵀ`), so the operand
//! gemm packs up front is the small weight matrix and the activations are read in place.
//! Same values as `x.matmul(&w.t())` up to the order of the k-sums (tests below).

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape};
use gemm::{gemm, Parallelism};

use crate::layers::fused::f32_slices;

/// `x · Wᵀ` over the rows of `x: [..., k]` with `W: [n, k]` (f32, contiguous) → `[..., n]`.
/// No backward pass: for inputs that carry no gradient.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InferenceProduct;

impl CustomOp2 for InferenceProduct {
    fn name(&self) -> &'static str {
        "inference-product"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let [x, w] = f32_slices([(s1, l1), (s2, l2)], self.name())?;
        let (n, k) = l2.shape().dims2()?;
        let dims = l1.shape().dims();
        if dims.last() != Some(&k) || k == 0 {
            candle_core::bail!("{}: input {:?} against weights {:?}", self.name(), l1.shape(), l2.shape());
        }
        let m = x.len() / k;
        let mut out: Vec<f32> = Vec::with_capacity(m * n);
        let threads = rayon::current_num_threads();
        let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
        // SAFETY: `out` has room for m × n values, x holds m × k and w n × k; gemm writes every
        // element of dst without reading it (`read_dst = false`), so `out` is initialised after.
        unsafe {
            let dst = out.spare_capacity_mut().as_mut_ptr() as *mut f32;
            // outᵀ (n × m, column stride n) = W (n × k, row stride k) · xᵀ (k × m, column stride k).
            let (n_, k_) = (n as isize, k as isize);
            gemm(
                n,
                m,
                k,
                dst,
                n_,
                1,
                false,
                w.as_ptr(),
                1,
                k_,
                x.as_ptr(),
                k_,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
            out.set_len(m * n);
        }
        let mut shape = dims.to_vec();
        *shape.last_mut().expect("checked non-empty") = n;
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use candle_core::{Device, Tensor};

    #[test]
    fn the_product_is_matmul_by_the_transposed_weights() {
        let device = Device::Cpu;
        // Row counts below and above gemm's blocking, widths not multiples of the SIMD lanes.
        for (batch, rows, k, n) in [(1, 1, 7, 5), (2, 37, 384, 384), (1, 1031, 96, 161)] {
            let x = Tensor::randn(0f32, 1.0, (batch, rows, k), &device).unwrap();
            let w = Tensor::randn(0f32, 1.0, (n, k), &device).unwrap();
            let want = x.broadcast_matmul(&w.t().unwrap()).unwrap();
            let got = x.apply_op2_no_bwd(&w, &InferenceProduct).unwrap();
            assert_eq!(got.dims(), want.dims());
            let d = max_diff(&got, &want);
            assert!(d < 1e-4, "{batch}×{rows}×{k} · {n}: max abs diff {d}");
        }
    }

    #[test]
    fn mismatched_widths_are_errors() {
        let x = Tensor::zeros((3, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        let w = Tensor::zeros((4, 7), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = x.apply_op2_no_bwd(&w, &InferenceProduct).unwrap_err().to_string();
        assert!(err.contains("inference-product"), "{err}");
    }
}
