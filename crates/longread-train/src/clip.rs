//! Clipping gradients by their global L2 norm (`torch.nn.utils.clip_grad_norm_`).

use std::collections::HashMap;

use candle_core::{Tensor, TensorId};

use crate::error::Result;

/// Scales every gradient by `max_norm / (norm + 1e-6)` when the global norm exceeds
/// `max_norm`; returns the norm before clipping (NaN or infinite when a gradient is).
pub fn clip_grad_norm(grads: &mut HashMap<TensorId, Tensor>, max_norm: f64) -> Result<f64> {
    let mut sum = 0f64;
    for g in grads.values() {
        sum += g.sqr()?.sum_all()?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
    }
    let norm = sum.sqrt();
    if norm.is_finite() && max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for g in grads.values_mut() {
            *g = (&*g * scale)?;
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn clips_to_the_global_norm() {
        let a = Tensor::new(&[3f32, 0.0], &Device::Cpu).unwrap();
        let b = Tensor::new(&[4f32], &Device::Cpu).unwrap();
        let mut grads = HashMap::from([(a.id(), a.clone()), (b.id(), b.clone())]);
        let norm = clip_grad_norm(&mut grads, 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let after: f32 = grads.values().map(|g| g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap()).sum();
        assert!((after.sqrt() - 1.0).abs() < 1e-5);
        let mut small = HashMap::from([(a.id(), a.clone())]);
        clip_grad_norm(&mut small, 10.0).unwrap();
        assert_eq!(small[&a.id()].to_vec1::<f32>().unwrap(), vec![3.0, 0.0], "under the limit: unchanged");
    }
}
