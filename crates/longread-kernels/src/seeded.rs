//! Reproducible random tensors for tests: normal draws from a seed, so that a test's inputs are
//! the same on every run (candle's CPU generator cannot be seeded, and a test whose tolerance
//! holds for most random inputs but not all fails once in many CI runs).

use std::cell::RefCell;

use candle_core::{Device, FloatDType, Result, Shape, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A seeded source of normally distributed tensors (Box–Muller over `StdRng`); each call draws
/// the next values of one stream, so the tensors of one source differ from each other.
pub struct Normals {
    rng: RefCell<StdRng>,
}

impl Normals {
    /// A source whose draws depend only on `seed`.
    pub fn new(seed: u64) -> Self {
        Self { rng: RefCell::new(StdRng::seed_from_u64(seed)) }
    }

    /// Like `Tensor::randn(mean, std, shape, device)`, from this source's stream.
    ///
    /// # Shapes
    /// `shape` → a tensor of that shape and of `T`'s dtype.
    pub fn tensor<S: Into<Shape>, T: FloatDType>(&self, mean: T, std: T, shape: S, device: &Device) -> Result<Tensor> {
        let shape = shape.into();
        let (mean, std) = (mean.to_f64(), std.to_f64());
        let mut rng = self.rng.borrow_mut();
        let values: Vec<f64> = (0..shape.elem_count()).map(|_| mean + std * standard_normal(&mut rng)).collect();
        Tensor::from_vec(values, shape, device)?.to_dtype(T::DTYPE)
    }
}

/// One standard normal draw (Box–Muller; the uniform is kept off zero for the logarithm).
fn standard_normal(rng: &mut StdRng) -> f64 {
    let u: f64 = 1.0 - rng.random::<f64>();
    let v: f64 = rng.random::<f64>();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_tensors_and_another_seed_others() {
        let draw = |seed| {
            let normals = Normals::new(seed);
            let first = normals.tensor(0f32, 1.0, (3, 4), &Device::Cpu).unwrap().flatten_all().unwrap();
            let second = normals.tensor(0f32, 1.0, (3, 4), &Device::Cpu).unwrap().flatten_all().unwrap();
            (first.to_vec1::<f32>().unwrap(), second.to_vec1::<f32>().unwrap())
        };
        let (a, b) = draw(7);
        assert_eq!((a.clone(), b.clone()), draw(7));
        assert_ne!(a, b, "two draws of one source repeat");
        assert_ne!(a, draw(8).0, "another seed gives the same values");
    }

    #[test]
    fn the_draws_have_the_asked_mean_spread_and_dtype() {
        let xs = Normals::new(1).tensor(3f64, 2.0, 20_000, &Device::Cpu).unwrap();
        assert_eq!(xs.dtype(), candle_core::DType::F64);
        let values = xs.to_vec1::<f64>().unwrap();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / values.len() as f64;
        assert!((mean - 3.0).abs() < 0.05, "mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "std {}", var.sqrt());
    }
}
