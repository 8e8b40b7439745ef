//! Inverted dropout (as `torch.nn.Dropout`): active only in [`Mode::Train`]. Every mask is a
//! hash of a seed drawn from the run's generator and the element's position ([`SeededDropout`]),
//! so fused kernels generate it themselves, regenerate it in their backward passes, and give
//! the same mask as the composed path.

use candle_core::{Result, Tensor};
use rayon::prelude::*;

use crate::layers::fused::multiversion;
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

    /// This call's mask in training (a seed drawn from the run's generator); `None` in
    /// inference or when `p` is 0.
    pub fn seeded(&self, mode: Mode) -> Option<SeededDropout> {
        match mode {
            Mode::Train(rng) if self.p > 0.0 => Some(SeededDropout { p: self.p as f32, seed: rng.next_seed() }),
            _ => None,
        }
    }

    /// Applies dropout in training mode; identity otherwise.
    ///
    /// # Shapes
    /// any → same shape
    pub fn forward(&self, xs: &Tensor, mode: Mode) -> Result<Tensor> {
        match self.seeded(mode) {
            Some(dropout) => dropout.apply(xs),
            None => Ok(xs.clone()),
        }
    }
}

/// One dropout mask: element `i` is kept (and scaled by `1 / (1 − p)`) when 24 bits of
/// SplitMix64's output of `seed + i·γ` reach the drop threshold.
#[derive(Debug, Clone, Copy)]
pub struct SeededDropout {
    /// Drop probability in `(0, 1)`.
    pub p: f32,
    /// Seed of this mask (drawn from the training run's dropout generator).
    pub seed: u64,
}

impl SeededDropout {
    /// The hash value below which an element is dropped (24-bit uniform numbers).
    pub fn threshold(&self) -> u32 {
        (self.p as f64 * (1u64 << 24) as f64).round() as u32
    }

    /// The factor of kept elements.
    pub fn scale(&self) -> f32 {
        1.0 / (1.0 - self.p)
    }

    /// The mask's factor for elements `first..first + out.len()`: `1/(1−p)` where kept, 0
    /// where dropped.
    pub fn factors(&self, first: u64, out: &mut [f32]) {
        self.for_each_factor(first, out, false);
    }

    /// Multiplies elements `first..first + values.len()` of a tensor by the mask, in place.
    pub fn multiply(&self, first: u64, values: &mut [f32]) {
        self.for_each_factor(first, values, true);
    }

    /// `values[j] = factor(first + j)` or, with `multiply`, `values[j] *= factor(first + j)`.
    fn for_each_factor(&self, first: u64, values: &mut [f32], multiply: bool) {
        mask_kernel(
            self.seed.wrapping_add(first.wrapping_mul(GAMMA)),
            self.threshold(),
            self.scale(),
            values,
            multiply,
        );
    }

    /// The whole mask of `n` elements (in parallel).
    ///
    /// # Shapes
    /// → `[n]`
    pub fn keep_mask(&self, n: usize) -> Vec<f32> {
        const CHUNK: usize = 1 << 14;
        let mut mask = vec![0f32; n];
        mask.par_chunks_mut(CHUNK).enumerate().for_each(|(i, chunk)| self.factors((i * CHUNK) as u64, chunk));
        mask
    }

    /// `xs ⊙ mask` (the mask indexes `xs` in row-major order).
    ///
    /// # Shapes
    /// any → same shape
    pub fn apply(&self, xs: &Tensor) -> Result<Tensor> {
        if xs.device().is_cuda() {
            // The same mask, made on the GPU instead of uploaded.
            let op =
                crate::layers::cuda::DropoutMask { seed: self.seed, threshold: self.threshold(), scale: self.scale() };
            return xs.mul(&xs.apply_op1_no_bwd(&op)?);
        }
        let mask = Tensor::from_vec(self.keep_mask(xs.elem_count()), xs.shape(), xs.device())?;
        xs.mul(&mask.to_dtype(xs.dtype())?)
    }
}

/// SplitMix64's increment γ.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The factors of elements `first..first + out.len()` of the mask with this seed, drop
/// threshold and keep factor (what the CUDA kernels receive: [`SeededDropout::threshold`],
/// [`SeededDropout::scale`]); threshold 0 keeps every element.
pub fn mask_factors(seed: u64, threshold: u32, scale: f32, first: u64, out: &mut [f32]) {
    mask_kernel(seed.wrapping_add(first.wrapping_mul(GAMMA)), threshold, scale, out, false);
}

multiversion! {
    /// The mask loop: element `j` has hash state `start + j·γ`; its factor is `scale` where
    /// kept, 0 where dropped, written to `values[j]` or (`multiply`) multiplied into it.
    fn mask_kernel(start: u64, threshold: u32, scale: f32, values: &mut [f32], multiply: bool) {
        let factor = |j: usize| if kept(start.wrapping_add((j as u64).wrapping_mul(GAMMA)), threshold) { scale } else { 0.0 };
        if multiply {
            values.iter_mut().enumerate().for_each(|(j, x)| *x *= factor(j));
        } else {
            values.iter_mut().enumerate().for_each(|(j, x)| *x = factor(j));
        }
    }
}

/// Whether the element with SplitMix64 state `z` (`seed + index·γ`) is kept: 24 bits of the
/// generator's output, compared with the drop threshold.
#[inline(always)]
fn kept(mut z: u64, threshold: u32) -> bool {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as u32) >= threshold
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
        let again = d.forward(&x, Mode::Train(&rng)).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_ne!(y, again, "each call draws a new mask");
    }

    #[test]
    fn the_mask_drops_about_p_and_depends_on_the_seed() {
        let mask = |seed| SeededDropout { p: 0.1, seed }.keep_mask(120_000);
        let (a, b) = (mask(1), mask(2));
        let dropped = a.iter().filter(|&&x| x == 0.0).count() as f64 / a.len() as f64;
        assert!((0.095..0.105).contains(&dropped), "dropped {dropped}");
        assert!(a.iter().all(|&x| x == 0.0 || (x - 1.0 / 0.9).abs() < 1e-6));
        let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert!(differing > a.len() / 10, "seeds 1 and 2 gave nearly the same mask ({differing} differ)");
        assert_eq!(a, mask(1), "the same seed gives the same mask");
        let mut tail = vec![0f32; 1000];
        SeededDropout { p: 0.1, seed: 1 }.factors(50_000, &mut tail);
        assert_eq!(tail, a[50_000..51_000], "any slice of the mask can be generated on its own");
    }

    /// The vectorised mask loop against SplitMix64 written out element by element (the mask
    /// must not depend on which CPU build runs, nor on where a slice starts).
    #[test]
    fn the_mask_is_splitmix64_of_the_element_index() {
        let splitmix64 = |state: u64| {
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let (p, seed, first) = (0.3f32, u64::MAX - 5, 987_654_321u64);
        let mut factors = vec![7f32; 1003];
        SeededDropout { p, seed }.factors(first, &mut factors);
        let mut multiplied = vec![2f32; 1003];
        SeededDropout { p, seed }.multiply(first, &mut multiplied);
        for (j, (&factor, &product)) in factors.iter().zip(&multiplied).enumerate() {
            let state = seed.wrapping_add((first + j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let uniform = (splitmix64(state) >> 40) as f64 / (1u64 << 24) as f64;
            let expected = if uniform >= p as f64 { 1.0 / (1.0 - p) } else { 0.0 };
            assert_eq!(factor, expected, "element {j}");
            assert_eq!(product, 2.0 * expected, "element {j}");
        }
    }
}
