//! A step's running gradients. A step back-propagates in parts — each batch of `--grad-accum`,
//! within a batch each kept group of documents and each recomputed chunk batch — and every part
//! adds into the same totals as back-propagation reaches each variable
//! (`Tensor::backward_into`, vendor/README.md): a part's gradients never exist in full beside
//! the totals, as they would if each part's finished gradients were summed afterwards (a
//! second f32 copy of every trainable weight's gradient: 0.5 GB for roberta-base). PyTorch's
//! `.grad` accumulates the same way.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, TensorId, Var};

use crate::error::Result;

/// The gradients of one optimizer step, summed over its parts.
#[derive(Debug)]
pub struct StepGradients {
    /// Gradient of every variable that took part so far, by tensor id.
    totals: HashMap<TensorId, Tensor>,
    /// Factor of each loss back-propagated ([`StepGradients::backward_loss`]): 1/N for a step of
    /// N batches, whose gradient is the mean of theirs.
    scale: f64,
}

impl Default for StepGradients {
    fn default() -> Self {
        Self::new()
    }
}

impl StepGradients {
    /// No gradient yet; losses count whole.
    pub fn new() -> Self {
        Self::scaled(1.0)
    }

    /// No gradient yet; each loss back-propagated counts `scale` times (1/N for the mean of N
    /// batches).
    pub fn scaled(scale: f64) -> Self {
        Self { totals: HashMap::new(), scale }
    }

    /// Adds the gradients of `scale · loss` (a scalar) for `vars`.
    pub fn backward_loss(&mut self, loss: &Tensor, vars: &[Var]) -> Result<()> {
        self.backward_loss_keeping(loss, vars).map(drop)
    }

    /// As [`StepGradients::backward_loss`], returning the loss's value (read back from the
    /// device after the back-propagation is queued): a batch's whole part of a step.
    pub fn backward_loss_value(&mut self, loss: &Tensor, vars: &[Var]) -> Result<f32> {
        self.backward_loss(loss, vars)?;
        Ok(loss.to_scalar::<f32>()?)
    }

    /// As [`StepGradients::backward_loss`], returning the back-propagation's other gradients
    /// (of leaves that are not among `vars`, such as recomputation's chunk vectors; `vars`'
    /// own are in the totals alone).
    pub fn backward_loss_keeping(&mut self, loss: &Tensor, vars: &[Var]) -> Result<GradStore> {
        if self.scale == 1.0 {
            self.backward(loss, vars)
        } else {
            self.backward(&loss.affine(self.scale, 0.0)?, vars)
        }
    }

    /// Adds the gradients of `surrogate` for `vars` as they are: a sum whose seed gradients
    /// already carry the scale (recomputation's `Σ vectors · d loss / d vectors`, taken from a
    /// scaled loss).
    pub fn backward_surrogate(&mut self, surrogate: &Tensor, vars: &[Var]) -> Result<()> {
        self.backward(surrogate, vars).map(drop)
    }

    /// Back-propagates `root` into the totals (moved into the store, not cloned, so that each
    /// is freed as its sum replaces it) and takes `vars`' gradients back out.
    fn backward(&mut self, root: &Tensor, vars: &[Var]) -> Result<GradStore> {
        let mut store = GradStore::default();
        for (id, g) in self.totals.drain() {
            store.insert_id(id, g);
        }
        let mut store = root.backward_into(store)?;
        for v in vars {
            if let Some(g) = store.remove(v.as_tensor()) {
                self.totals.insert(v.as_tensor().id(), g);
            }
        }
        Ok(store)
    }

    /// Whether no variable has a gradient yet.
    pub fn is_empty(&self) -> bool {
        self.totals.is_empty()
    }

    /// The totals, by tensor id.
    pub fn into_map(self) -> HashMap<TensorId, Tensor> {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn values(t: &Tensor) -> Vec<f32> {
        t.to_vec1::<f32>().unwrap()
    }

    /// Two halves of a loss, each scaled by ½, add up to the gradient of the whole loss's mean;
    /// a surrogate adds unscaled; variables outside a part keep their totals.
    #[test]
    fn parts_add_up_to_the_gradient_of_their_mean() {
        let dev = Device::Cpu;
        let w = Var::new(&[1.0f32, 2.0], &dev).unwrap();
        let other = Var::new(&[3.0f32], &dev).unwrap();
        let vars = [w.clone(), other.clone()];
        let mut grads = StepGradients::scaled(0.5);
        // part 1: Σ 4w → 4 each (½ → 2); part 2: Σ w² + 3·other → 2w, 3 (½ → 1, 2; 1.5).
        grads.backward_loss(&w.as_tensor().affine(4.0, 0.0).unwrap().sum_all().unwrap(), &vars).unwrap();
        let part2 = (w.as_tensor().sqr().unwrap().sum_all().unwrap()
            + other.as_tensor().affine(3.0, 0.0).unwrap().sum_all().unwrap())
        .unwrap();
        grads.backward_loss(&part2, &vars).unwrap();
        // A surrogate: Σ w · [10, 20] → 10, 20, not halved.
        let seed = Tensor::new(&[10.0f32, 20.0], &dev).unwrap();
        grads.backward_surrogate(&w.as_tensor().mul(&seed).unwrap().sum_all().unwrap(), &vars).unwrap();
        assert!(!grads.is_empty());
        let totals = grads.into_map();
        assert_eq!(values(&totals[&w.as_tensor().id()]), vec![2.0 + 1.0 + 10.0, 2.0 + 2.0 + 20.0]);
        assert_eq!(values(&totals[&other.as_tensor().id()]), vec![1.5]);
    }

    /// What a back-propagation leaves besides the variables' gradients is returned: the
    /// gradient of a leaf that is not among `vars`.
    #[test]
    fn the_other_leaves_gradients_come_back() {
        let dev = Device::Cpu;
        let w = Var::new(&[2.0f32], &dev).unwrap();
        let leaf = Var::new(&[5.0f32], &dev).unwrap();
        let mut grads = StepGradients::new();
        let loss = w.as_tensor().mul(leaf.as_tensor()).unwrap().sum_all().unwrap();
        let store = grads.backward_loss_keeping(&loss, std::slice::from_ref(&w)).unwrap();
        assert_eq!(values(store.get(leaf.as_tensor()).unwrap()), vec![2.0]);
        assert!(store.get(w.as_tensor()).is_none(), "the variables' gradients live in the totals alone");
        assert_eq!(values(&grads.into_map()[&w.as_tensor().id()]), vec![5.0]);
    }
}
