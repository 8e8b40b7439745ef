//! Inverted dropout (as `torch.nn.Dropout`): active only in [`Mode::Train`].

use candle_core::{Result, Tensor};

use crate::mode::Mode;

/// Zeroes each element with probability `p` in training and scales the rest by `1 / (1 - p)`.
#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    p: f64,
}

impl Dropout {
    /// Dropout with drop probability `p` in `[0, 1)`.
    pub fn new(p: f64) -> Self {
        Self { p }
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Applies dropout in training mode; identity otherwise.
    ///
    /// # Shapes
    /// any → same shape
    pub fn forward(&self, xs: &Tensor, mode: Mode) -> Result<Tensor> {
        match mode {
            Mode::Train(rng) if self.p > 0.0 => {
                let scale = (1.0 / (1.0 - self.p)) as f32;
                let mask = rng.keep_mask(xs.elem_count(), self.p, scale);
                let mask = Tensor::from_vec(mask, xs.shape(), xs.device())?.to_dtype(xs.dtype())?;
                xs.mul(&mask)
            }
            _ => Ok(xs.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DropoutRng;
    use candle_core::Device;

    #[test]
    fn eval_is_identity_and_train_drops_about_p() {
        let x = Tensor::ones((100, 100), candle_core::DType::F32, &Device::Cpu).unwrap();
        let d = Dropout::new(0.25);
        let same = d.forward(&x, Mode::Eval).unwrap();
        assert_eq!(same.sum_all().unwrap().to_scalar::<f32>().unwrap(), 10_000.0);
        let rng = DropoutRng::new(7);
        let y = d.forward(&x, Mode::Train(&rng)).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let dropped = y.iter().filter(|v| **v == 0.0).count();
        assert!((2_200..2_800).contains(&dropped), "dropped {dropped}");
        assert!(y.iter().all(|v| *v == 0.0 || (*v - 1.0 / 0.75).abs() < 1e-6));
    }
}
