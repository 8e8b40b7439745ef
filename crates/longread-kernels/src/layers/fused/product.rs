//! A dense layer's product `x · Wᵀ`, without the serial passes candle's matmul makes on the
//! calling thread while the worker threads wait — zeroing the output (`vec![0; m·n]`, which the
//! product then overwrites) and packing the whole activation matrix (gemm packs its left operand
//! on the calling thread when it has few rows). Here every output is written once, and the
//! product is computed transposed (`(W · xᵀ)ᵀ`), so the operand gemm packs up front is the
//! small weight matrix and the activations are read in place.
//! [`DenseProduct`] runs without a backward pass (`apply_op2_no_bwd`: inference, inputs that
//! carry no gradient) or with one (`apply_op2`). Composed from candle ops (`x.matmul(&w.t())`),
//! the weight's gradient comes out as `xᵀ · g` and is transposed back by a strided copy (one
//! element at a time: ~8% of a small MLM pretraining step); here it is computed in the weight's
//! own layout (`gᵀ · x`), and the input's (`g · W`) into an unzeroed buffer, as PyTorch's
//! `linear` does.
//!
//! Same values as `x.matmul(&w.t())` and its gradients up to the order of the k-sums (tests below).

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};
use gemm::{gemm, Parallelism};

use crate::layers::fused::f32_slices;

/// `x · Wᵀ` over the rows of `x: [..., k]` with `W: [n, k]` (f32, contiguous) → `[..., n]`;
/// its backward pass (with `apply_op2`): `dx = g · W`, `dW = gᵀ · x` (each only where its
/// argument carries gradients), both computed in their own layouts.
#[derive(Debug, Clone, Copy)]
pub struct DenseProduct;

impl CustomOp2 for DenseProduct {
    fn name(&self) -> &'static str {
        "dense-product"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let [x, w] = f32_slices([(s1, l1), (s2, l2)], self.name())?;
        let (n, k) = l2.shape().dims2()?;
        let m = rows(self.name(), l1.shape(), k)?;
        // outᵀ (n × m) = W (n × k) · xᵀ (k × m), stored column-major: out [m, n] row-major.
        let (n_, k_) = (n as isize, k as isize);
        let out = product(
            n,
            m,
            k,
            Operand { data: w, col_stride: 1, row_stride: k_ },
            Operand { data: x, col_stride: k_, row_stride: 1 },
            n_,
            1,
        );
        let mut shape = l1.shape().dims().to_vec();
        *shape.last_mut().expect("checked by rows") = n;
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }

    /// # Shapes
    /// `x: [..., k]`, `w: [n, k]`, `grad: [..., n]` → (`[..., k]`, `[n, k]`)
    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let dx = if x.track_op() { Some(grad.apply_op2_no_bwd(w, &InputGradient)?) } else { None };
        let dw = if w.track_op() { Some(grad.apply_op2_no_bwd(x, &WeightGradient)?) } else { None };
        Ok((dx, dw))
    }
}

/// `g · W`: the input's gradient, `g: [..., n]`, `W: [n, k]` → `[..., k]`.
#[derive(Debug, Clone, Copy)]
struct InputGradient;

impl CustomOp2 for InputGradient {
    fn name(&self) -> &'static str {
        "dense-product-input-gradient"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let [g, w] = f32_slices([(s1, l1), (s2, l2)], self.name())?;
        let (n, k) = l2.shape().dims2()?;
        let m = rows(self.name(), l1.shape(), n)?;
        // dxᵀ (k × m) = Wᵀ (k × n) · gᵀ (n × m): the weights are packed, g is read in place.
        let (n_, k_) = (n as isize, k as isize);
        let dx = product(
            k,
            m,
            n,
            Operand { data: w, col_stride: k_, row_stride: 1 },
            Operand { data: g, col_stride: n_, row_stride: 1 },
            k_,
            1,
        );
        let mut shape = l1.shape().dims().to_vec();
        *shape.last_mut().expect("checked by rows") = k;
        Ok((CpuStorage::F32(dx), Shape::from(shape)))
    }
}

/// `gᵀ · x`: the weights' gradient, `g: [..., n]`, `x: [..., k]` → `[n, k]`.
#[derive(Debug, Clone, Copy)]
struct WeightGradient;

impl CustomOp2 for WeightGradient {
    fn name(&self) -> &'static str {
        "dense-product-weight-gradient"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let [g, x] = f32_slices([(s1, l1), (s2, l2)], self.name())?;
        let n = *l1.shape().dims().last().unwrap_or(&0);
        let k = *l2.shape().dims().last().unwrap_or(&0);
        let m = rows(self.name(), l1.shape(), n)?;
        if k == 0 || x.len() != m * k {
            candle_core::bail!("{}: gradient {:?} against input {:?}", self.name(), l1.shape(), l2.shape());
        }
        // dWᵀ (k × m · m × n) = xᵀ · g, stored column-major, which is dW [n, k] row-major.
        let (n_, k_) = (n as isize, k as isize);
        let dw = product(
            k,
            n,
            m,
            Operand { data: x, col_stride: k_, row_stride: 1 },
            Operand { data: g, col_stride: 1, row_stride: n_ },
            k_,
            1,
        );
        Ok((CpuStorage::F32(dw), Shape::from((n, k))))
    }
}

/// The number of rows of `shape` whose last dimension must be `width` (> 0).
fn rows(name: &str, shape: &Shape, width: usize) -> Result<usize> {
    match shape.dims().last() {
        Some(&last) if last == width && width > 0 => Ok(shape.elem_count() / width),
        _ => candle_core::bail!("{name}: rows of {:?} against a width of {width}", shape),
    }
}

/// A matrix operand: its data and the distance, in elements, between neighbouring columns and
/// rows.
struct Operand<'a> {
    data: &'a [f32],
    col_stride: isize,
    row_stride: isize,
}

/// `dst (rows × cols) = lhs (rows × depth) · rhs (depth × cols)` in a new buffer of rows × cols
/// values laid out with the given strides, written once (never zeroed first).
fn product(
    rows: usize,
    cols: usize,
    depth: usize,
    lhs: Operand,
    rhs: Operand,
    dst_col_stride: isize,
    dst_row_stride: isize,
) -> Vec<f32> {
    let reach = |op: &Operand, r: usize, c: usize| {
        (r.saturating_sub(1) as isize * op.row_stride + c.saturating_sub(1) as isize * op.col_stride) as usize
    };
    assert!(
        (rows == 0 || depth == 0 || reach(&lhs, rows, depth) < lhs.data.len())
            && (depth == 0 || cols == 0 || reach(&rhs, depth, cols) < rhs.data.len()),
        "product operands smaller than their shapes"
    );
    let mut out: Vec<f32> = Vec::with_capacity(rows * cols);
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
    // SAFETY: the operands hold the elements their strides reach (asserted above) and `out` has
    // room for rows × cols values, which the strides address one to one; gemm writes every
    // element of dst without reading it (`read_dst = false`), so `out` is initialised after.
    unsafe {
        let dst = out.spare_capacity_mut().as_mut_ptr() as *mut f32;
        gemm(
            rows,
            cols,
            depth,
            dst,
            dst_col_stride,
            dst_row_stride,
            false,
            lhs.data.as_ptr(),
            lhs.col_stride,
            lhs.row_stride,
            rhs.data.as_ptr(),
            rhs.col_stride,
            rhs.row_stride,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
        out.set_len(rows * cols);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::fused::max_diff;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    /// Row counts below and above gemm's blocking, widths not multiples of the SIMD lanes.
    const SHAPES: [(usize, usize, usize, usize); 3] = [(1, 1, 7, 5), (2, 37, 384, 384), (1, 1031, 96, 161)];

    #[test]
    fn the_product_is_matmul_by_the_transposed_weights() {
        let normals = Normals::new(203);
        let device = Device::Cpu;
        for (batch, rows, k, n) in SHAPES {
            let x = normals.tensor(0f32, 1.0, (batch, rows, k), &device).unwrap();
            let w = normals.tensor(0f32, 1.0, (n, k), &device).unwrap();
            let want = x.broadcast_matmul(&w.t().unwrap()).unwrap();
            for got in [x.apply_op2_no_bwd(&w, &DenseProduct).unwrap(), x.apply_op2(&w, DenseProduct).unwrap()] {
                assert_eq!(got.dims(), want.dims());
                let d = max_diff(&got, &want);
                assert!(d < 1e-4, "{batch}×{rows}×{k} · {n}: max abs diff {d}");
            }
        }
    }

    #[test]
    fn the_gradients_are_those_of_the_composed_matmul() {
        let normals = Normals::new(218);
        let device = Device::Cpu;
        for (batch, rows, k, n) in SHAPES {
            let x = Var::randn(0f32, 1.0, (batch, rows, k), &device).unwrap();
            let w = Var::randn(0f32, 1.0, (n, k), &device).unwrap();
            // A non-uniform upstream gradient, through a strided view (a transpose) of the output.
            let up = normals.tensor(0f32, 1.0, (batch, n, rows), &device).unwrap();
            let loss = |y: Tensor| y.transpose(1, 2).unwrap().mul(&up).unwrap().sum_all().unwrap();
            let fused = loss(x.as_tensor().apply_op2(w.as_tensor(), DenseProduct).unwrap()).backward().unwrap();
            let composed = loss(x.broadcast_matmul(&w.t().unwrap()).unwrap()).backward().unwrap();
            for (name, var) in [("x", &x), ("w", &w)] {
                let (a, b) = (fused.get(var).unwrap(), composed.get(var).unwrap());
                assert_eq!(a.dims(), var.dims());
                assert!(a.is_contiguous(), "{name}'s gradient is made in its own layout");
                let d = max_diff(a, b);
                assert!(d < 1e-3, "{batch}×{rows}×{k} · {n}: d{name} max abs diff {d}");
            }
        }
    }

    #[test]
    fn arguments_without_gradients_get_none() {
        let normals = Normals::new(239);
        let device = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (4, 6), &device).unwrap();
        let frozen = normals.tensor(0f32, 1.0, (3, 6), &device).unwrap();
        let grads = x.as_tensor().apply_op2(&frozen, DenseProduct).unwrap().sum_all().unwrap().backward().unwrap();
        assert!(grads.get(&frozen).is_none());
        // d(sum(x·Wᵀ))/dx = the column sums of W, for every row.
        let want = frozen.sum_keepdim(0).unwrap().broadcast_as((4, 6)).unwrap();
        assert!(max_diff(grads.get(&x).unwrap(), &want) < 1e-5);
    }

    #[test]
    fn mismatched_widths_are_errors() {
        let x = Tensor::zeros((3, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        let w = Tensor::zeros((4, 7), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = x.apply_op2_no_bwd(&w, &DenseProduct).unwrap_err().to_string();
        assert!(err.contains("dense-product"), "{err}");
        let err = x.apply_op2(&w, DenseProduct).unwrap_err().to_string();
        assert!(err.contains("dense-product"), "{err}");
    }
}
