//! Clipping gradients by their global L2 norm (`torch.nn.utils.clip_grad_norm_`).
//!
//! The training loops measure the norm with [`grad_norm`] and hand the factor of
//! [`clip_factor`] to the optimizer ([`crate::optim::AdamW::step_scaled`]), which scales each
//! gradient in its own pass over it: no scaled copy of every gradient is made.

use candle_core::{CpuStorage, DType, Storage, Tensor};
use rayon::prelude::*;

use crate::error::Result;

/// The global L2 norm of `grads` (summed in f64; NaN or infinite when a gradient is). GPU
/// gradients are summed on their device in one kernel launch and read back in one wait
/// (`layers::cuda::sum_of_squares`; f32 spans added in f64), or, where that does not apply,
/// each summed by candle's ops and read back together.
pub fn grad_norm<'a>(grads: impl IntoIterator<Item = &'a Tensor>) -> Result<f64> {
    let mut sum = 0f64;
    let mut gpu_grads = Vec::new();
    for g in grads {
        if g.device().is_cuda() {
            gpu_grads.push(g);
        } else {
            sum += sum_of_squares(g)?;
        }
    }
    if let Some(squares) = longread_model::layers::cuda::sum_of_squares(&gpu_grads)? {
        return Ok((sum + squares).sqrt());
    }
    let on_gpu =
        gpu_grads.iter().map(|g| g.to_dtype(DType::F32)?.sqr()?.sum_all()).collect::<candle_core::Result<Vec<_>>>()?;
    if !on_gpu.is_empty() {
        let sums = Tensor::stack(&on_gpu, 0)?.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        sum += sums.iter().sum::<f64>();
    }
    Ok(sum.sqrt())
}

/// What clipping to `max_norm` multiplies gradients of global norm `norm` by: `max_norm /
/// (norm + 1e-6)` when `norm` exceeds it, else 1 (also when `max_norm` is 0, clipping off, or
/// the norm is not finite).
pub fn clip_factor(norm: f64, max_norm: f64) -> f64 {
    if norm.is_finite() && max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

/// Elements per parallel task of the sum of squares.
const CHUNK: usize = 1 << 15;

/// The sum of the squares of `g`'s elements, in f64: for a contiguous f32 tensor on the CPU in
/// one parallel pass (partial sums per fixed-size chunk, added in order: the same result on
/// any number of threads), else through candle ops.
fn sum_of_squares(g: &Tensor) -> Result<f64> {
    if g.dtype() == DType::F32 {
        let (storage, layout) = g.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            let partial: Vec<f64> = data[start..end].par_chunks(CHUNK).map(squares).collect();
            return Ok(partial.iter().sum());
        }
    }
    Ok(g.to_dtype(DType::F64)?.sqr()?.sum_all()?.to_scalar::<f64>()?)
}

longread_model::multiversion! {
    /// The sum of the squares of `xs` in f64, over eight running sums (which vectorise; the
    /// order is fixed, so every build gives the same result).
    fn squares(xs: &[f32]) -> f64 {
        let mut lanes = [0f64; 8];
        let mut chunks = xs.chunks_exact(8);
        for c in &mut chunks {
            for (lane, &v) in lanes.iter_mut().zip(c) {
                *lane += f64::from(v) * f64::from(v);
            }
        }
        let mut total = 0f64;
        for lane in lanes {
            total += lane;
        }
        for &v in chunks.remainder() {
            total += f64::from(v) * f64::from(v);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use longread_model::seeded::Normals;

    #[test]
    fn clips_to_the_global_norm() {
        let a = Tensor::new(&[3f32, 0.0], &Device::Cpu).unwrap();
        let b = Tensor::new(&[4f32], &Device::Cpu).unwrap();
        let norm = grad_norm([&a, &b]).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let factor = clip_factor(norm, 1.0);
        let scaled = [(&a * factor).unwrap(), (&b * factor).unwrap()];
        let after: f32 = scaled.iter().map(|g| g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap()).sum();
        assert!((after.sqrt() - 1.0).abs() < 1e-5);
        let small = grad_norm([&a]).unwrap();
        let unchanged = (&a * clip_factor(small, 10.0)).unwrap();
        assert_eq!(unchanged.to_vec1::<f32>().unwrap(), vec![3.0, 0.0], "under the limit: unchanged");
    }

    #[test]
    fn the_norm_is_that_of_every_element_whatever_the_layout() {
        let normals = Normals::new(109);
        let device = Device::Cpu;
        // Longer than a chunk and not a multiple of the lanes; a strided view; an f64 tensor.
        let big = normals.tensor(0f32, 1.0, (3, CHUNK + 13), &device).unwrap();
        let strided = normals.tensor(0f32, 1.0, (5, 7), &device).unwrap().t().unwrap();
        let wide = normals.tensor(0f64, 1.0, 11, &device).unwrap();
        let exact = |t: &Tensor| -> f64 {
            t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap().iter().map(|v| v * v).sum()
        };
        let norm = grad_norm([&big, &strided, &wide]).unwrap();
        let want = (exact(&big) + exact(&strided) + exact(&wide)).sqrt();
        assert!((norm - want).abs() < 1e-9 * want, "{norm} vs {want}");
        let nan = Tensor::new(&[1f32, f32::NAN], &device).unwrap();
        assert!(grad_norm([&big, &nan]).unwrap().is_nan());
    }

    #[test]
    fn the_factor_is_one_unless_the_norm_exceeds_a_positive_limit() {
        assert_eq!(clip_factor(0.5, 1.0), 1.0);
        assert_eq!(clip_factor(5.0, 0.0), 1.0, "clipping off");
        assert_eq!(clip_factor(f64::INFINITY, 1.0), 1.0);
        assert!((clip_factor(4.0, 1.0) - 1.0 / (4.0 + 1e-6)).abs() < 1e-15);
    }
}
