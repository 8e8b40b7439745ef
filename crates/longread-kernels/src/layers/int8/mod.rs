//! int8 inference for dense layers (`--precision int8`): weights quantised once per output
//! row, activations per row as they arrive (dynamic quantisation), products summed exactly in
//! i32 by a VNNI kernel and scaled back to f32. Inference only: no backward pass.

mod gemm;
mod packed;

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

use gemm::Epilogue;
pub use gemm::Kernel;
use packed::{PackedWeights, QuantizedRows};

use crate::layers::fused::f32_slice;

/// A dense layer's weights and bias, quantised and packed.
#[derive(Debug, Clone)]
pub struct Int8Weights {
    packed: PackedWeights,
}

impl Int8Weights {
    /// Quantises `weight` (`[out, in]`) and `bias` (`[out]`).
    pub fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<Self> {
        let (out, inputs) = weight.dims2()?;
        let w = weight.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let b = bias.map(|b| b.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()).transpose()?;
        if b.as_ref().is_some_and(|b| b.len() != out) {
            candle_core::bail!("int8 layer: a bias of {} for {out} outputs", b.map_or(0, |b| b.len()));
        }
        Ok(Self { packed: PackedWeights::new(&w, out, inputs, b.as_deref()) })
    }

    /// `xs · Wᵀ + b` with int8 products (f32 in, f32 out; CPU).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.forward_with(xs, Kernel::best())
    }

    /// `GELU(xs · Wᵀ + b)` (exact GELU), the activation applied to each block of rows as the
    /// product finishes it, while it is in cache (no second pass over the output).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward_gelu(&self, xs: &Tensor) -> Result<Tensor> {
        self.op(xs, Kernel::best(), Epilogue::GeluErf)
    }

    /// [`Self::forward`] with a chosen kernel (benchmarks and tests compare them).
    ///
    /// # Shapes
    /// `xs: [..., in]` → `[..., out]`
    pub fn forward_with(&self, xs: &Tensor, kernel: Kernel) -> Result<Tensor> {
        self.op(xs, kernel, Epilogue::None)
    }

    fn op(&self, xs: &Tensor, kernel: Kernel, activation: Epilogue) -> Result<Tensor> {
        xs.contiguous()?.apply_op1_no_bwd(&Int8Matmul { weights: self, kernel, activation })
    }
}

/// The op behind [`Int8Weights::forward`].
struct Int8Matmul<'a> {
    weights: &'a Int8Weights,
    kernel: Kernel,
    activation: Epilogue,
}

impl CustomOp1 for Int8Matmul<'_> {
    fn name(&self) -> &'static str {
        "int8-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = f32_slice(storage, layout, self.name())?;
        let w = &self.weights.packed;
        let dims = layout.shape().dims();
        if dims.last() != Some(&w.inputs) {
            candle_core::bail!("int8-matmul: input {:?} for a layer of {} inputs", layout.shape(), w.inputs);
        }
        let rows = QuantizedRows::new(xs, w.inputs, w.groups, self.kernel.vectorised());
        let y = gemm::matmul(&rows, w, self.kernel, self.activation);
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("checked above") = w.out;
        Ok((CpuStorage::F32(y), Shape::from(out_dims)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, D};

    fn layer(out: usize, inputs: usize) -> (Tensor, Tensor) {
        let normals = Normals::new(96);
        let device = Device::Cpu;
        (normals.tensor(0f32, 0.05, (out, inputs), &device).unwrap(), normals.tensor(0f32, 0.1, out, &device).unwrap())
    }

    /// Odd sizes: partial tiles of rows and panels, inputs not a multiple of 4, outputs not a
    /// multiple of 16.
    const SHAPES: [(usize, usize, usize); 4] = [(200, 384, 96), (7, 33, 21), (1, 5, 1), (97, 64, 80)];

    #[test]
    fn int8_layers_are_close_to_f32() {
        let normals = Normals::new(106);
        for (rows, inputs, out) in SHAPES {
            let (w, b) = layer(out, inputs);
            let xs = normals.tensor(0f32, 1.0, (rows, inputs), &Device::Cpu).unwrap();
            let exact = xs.matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
            let int8 = Int8Weights::new(&w, Some(&b)).unwrap().forward(&xs).unwrap();
            assert_eq!(int8.dims(), exact.dims());
            // Error of each output relative to its Cauchy–Schwarz bound ‖x_r‖·‖w_o‖.
            let norms = |t: &Tensor| t.sqr().unwrap().sum_keepdim(D::Minus1).unwrap().sqrt().unwrap();
            let bound = norms(&xs).matmul(&norms(&w).t().unwrap()).unwrap();
            let relative = ((&int8 - &exact).unwrap().abs().unwrap() / bound).unwrap();
            let worst = relative.flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(worst < 0.02, "{rows}×{inputs}→{out}: relative error {worst}");
        }
        // A batch dimension is kept.
        let (w, b) = layer(16, 8);
        let xs = normals.tensor(0f32, 1.0, (2, 3, 8), &Device::Cpu).unwrap();
        assert_eq!(Int8Weights::new(&w, Some(&b)).unwrap().forward(&xs).unwrap().dims(), [2, 3, 16]);
    }

    #[test]
    fn the_gelu_epilogue_is_gelu_of_the_product_exactly() {
        let normals = Normals::new(127);
        // More rows than one task and a partial one, outputs not a multiple of the panels.
        let (w, b) = layer(37, 24);
        let xs = normals.tensor(0f32, 1.0, (2, 150, 24), &Device::Cpu).unwrap();
        let weights = Int8Weights::new(&w, Some(&b)).unwrap();
        let fused = weights.forward_gelu(&xs).unwrap();
        let apart = crate::activation::Activation::GeluErf.forward(&weights.forward(&xs).unwrap()).unwrap();
        assert_eq!(fused.dims(), [2, 150, 37]);
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(flat(&fused), flat(&apart));
    }

    #[test]
    fn the_vector_kernels_and_the_portable_ones_agree_exactly() {
        let normals = Normals::new(140);
        let kernels: Vec<Kernel> = [Kernel::Vnni, Kernel::Avx2].into_iter().filter(|k| k.available()).collect();
        if kernels.is_empty() {
            eprintln!("neither AVX-512 VNNI nor AVX2 on this CPU: only the portable kernel runs");
        }
        for (rows, inputs, out) in SHAPES {
            let (w, b) = layer(out, inputs);
            let xs = normals.tensor(0f32, 1.0, (rows, inputs), &Device::Cpu).unwrap();
            let weights = Int8Weights::new(&w, Some(&b)).unwrap();
            let run =
                |kernel| weights.forward_with(&xs, kernel).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let slow = run(Kernel::Portable);
            for &kernel in &kernels {
                assert_eq!(run(kernel), slow, "{kernel:?}: {rows}×{inputs}→{out}");
            }
            let quantized = |vectorised| {
                let rows = QuantizedRows::new(
                    &xs.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    inputs,
                    inputs.div_ceil(4),
                    vectorised,
                );
                (rows.data, rows.scale)
            };
            if gemm::has_vnni() {
                assert_eq!(quantized(true), quantized(false), "quantised rows");
            }
        }
    }

    #[test]
    fn zero_rows_and_weights_give_the_bias() {
        let w = Tensor::zeros((3, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::new(&[1f32, -2.0, 0.5], &Device::Cpu).unwrap();
        let xs = Tensor::zeros((2, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        let y = Int8Weights::new(&w, Some(&b)).unwrap().forward(&xs).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(y, vec![vec![1.0, -2.0, 0.5]; 2]);
    }

    #[test]
    fn a_wrong_input_width_is_an_error() {
        let (w, b) = layer(4, 8);
        let xs = Tensor::zeros((2, 9), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = Int8Weights::new(&w, Some(&b)).unwrap().forward(&xs).unwrap_err().to_string();
        assert!(err.contains("9") && err.contains("8 inputs"), "{err}");
    }
}
