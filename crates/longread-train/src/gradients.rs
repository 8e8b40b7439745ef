//! A step's running gradients. A step back-propagates in parts — each batch of `--grad-accum`,
//! within a batch each kept group of documents and each recomputed chunk batch — and every part
//! adds into the same totals as back-propagation reaches each variable
//! (`Tensor::backward_into`, vendor/README.md): a part's gradients never exist in full beside
//! the totals, as they would if each part's finished gradients were summed afterwards (a
//! second f32 copy of every trainable weight's gradient: 0.5 GB for roberta-base). PyTorch's
//! `.grad` accumulates the same way.
//!
//! Weights joined for one op once per step (`weight_casts::joined`: the fused q/k/v weight and
//! bias, a block end's bias, γ and β) are leaves of the parts' graphs: each part adds the joined
//! tensor's gradient into one running total (in place where a bf16 gradient meets an f32 total,
//! as the casts' backward pass does), and [`StepGradients::into_map`] hands each weight its rows
//! at the end — the same sums, in the same order, as each part splitting it.

use std::collections::{HashMap, HashSet};

use candle_core::backprop::GradStore;
use candle_core::{Tensor, TensorId, Var};
use longread_model::layers::cuda;
use longread_model::layers::weight_casts::{self, JoinedLeaf};

use crate::error::Result;

/// The gradients of one optimizer step, summed over its parts.
#[derive(Debug)]
pub struct StepGradients {
    /// Gradient of every variable that took part so far, by tensor id.
    totals: HashMap<TensorId, Tensor>,
    /// Each joined leaf met so far and its gradient's running total (in its parts' dtype), by
    /// the leaf's id.
    joined: HashMap<TensorId, (JoinedLeaf, Tensor)>,
    /// The variables asked for so far: the parts of a joined leaf that get its rows.
    wanted: HashSet<TensorId>,
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
        Self { totals: HashMap::new(), joined: HashMap::new(), wanted: HashSet::new(), scale }
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
    /// is freed as its sum replaces it) and takes `vars`' gradients back out, and the joined
    /// leaves' into their running totals.
    fn backward(&mut self, root: &Tensor, vars: &[Var]) -> Result<GradStore> {
        let mut store = GradStore::default();
        for (id, g) in self.totals.drain() {
            store.insert_id(id, g);
        }
        let mut store = root.backward_into(store)?;
        for v in vars {
            self.wanted.insert(v.as_tensor().id());
            if let Some(g) = store.remove(v.as_tensor()) {
                self.totals.insert(v.as_tensor().id(), g);
            }
        }
        for leaf in weight_casts::joined_leaves() {
            let id = leaf.leaf.as_tensor().id();
            let Some(grad) = store.remove(leaf.leaf.as_tensor()) else { continue };
            // A join of weights none of which is asked for (frozen) keeps no total.
            if !leaf.parts.iter().any(|p| self.wanted.contains(&p.weight.id())) {
                continue;
            }
            let total = match self.joined.remove(&id) {
                Some((_, total)) => add_into_total(total, &grad)?,
                None => {
                    let dtype = leaf.parts.first().map_or(grad.dtype(), |p| p.weight.dtype());
                    grad.to_dtype(dtype)?.contiguous()?
                }
            };
            self.joined.insert(id, (leaf, total));
        }
        Ok(store)
    }

    /// Whether no variable has a gradient yet.
    pub fn is_empty(&self) -> bool {
        self.totals.is_empty() && self.joined.is_empty()
    }

    /// The totals, by tensor id: each joined leaf's rows handed to its parts (those asked for).
    pub fn into_map(mut self) -> Result<HashMap<TensorId, Tensor>> {
        for (_, (leaf, total)) in self.joined.drain() {
            for (id, rows) in leaf.spread(&total)? {
                if !self.wanted.contains(&id) {
                    continue;
                }
                let sum = match self.totals.remove(&id) {
                    Some(other) => other.add(&rows)?,
                    None => rows,
                };
                self.totals.insert(id, sum);
            }
        }
        Ok(self.totals)
    }
}

/// `total + grad`: in place where `grad` is bf16 and `total` f32 (`cuda::accumulate_cast`, one
/// rounding, the bits of casting then adding), else a new sum in `total`'s dtype.
fn add_into_total(total: Tensor, grad: &Tensor) -> Result<Tensor> {
    if cuda::cast_accumulate_in_place() && cuda::accumulate_cast(&total, grad)? {
        return Ok(total);
    }
    Ok(total.add(&grad.to_dtype(total.dtype())?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

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
        let totals = grads.into_map().unwrap();
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
        assert_eq!(values(&grads.into_map().unwrap()[&w.as_tensor().id()]), vec![5.0]);
    }

    /// Weights joined as a leaf of the step's graphs (`weight_casts::joined`, in a scope) get,
    /// from two parts' backward passes, the bits of the same two parts joined with their graph
    /// (outside a scope) and summed: a bf16 join of f32 weights (each part's gradient added into
    /// the f32 total in place) and an f32 stack; a part not asked for gets nothing, and a part
    /// that also has a gradient of its own gets the sum.
    #[test]
    fn joined_leaves_hand_their_parts_the_sums_of_joining_with_the_graph() {
        use longread_model::layers::weight_casts::{joined, Join, StepCasts};
        let dev = Device::Cpu;
        let var = |shape: &[usize], seed: f32| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|i| ((i as f32 + 1.0) * seed).sin()).collect();
            Var::from_tensor(&Tensor::from_vec(values, shape, &dev).unwrap()).unwrap()
        };
        let (a, b, c) = (var(&[2, 3], 0.7), var(&[1, 3], 1.3), var(&[3], 2.1));
        let (g, h) = (var(&[3], 0.4), var(&[3], 0.9));
        let xs: Vec<Tensor> = [0.3f32, -1.1].iter().map(|&k| Tensor::full(k, (4, 3), &dev).unwrap()).collect();
        // A part's loss: a bf16 product with the joined weight, and the stacked [c; g; h] used
        // as a scale and shift; c also on its own.
        let loss = |x: &Tensor, weight: &Tensor, stacked: &Tensor| {
            let y =
                x.to_dtype(DType::BF16).unwrap().matmul(&weight.t().unwrap()).unwrap().to_dtype(DType::F32).unwrap();
            let z = y.sum_keepdim(1).unwrap().broadcast_mul(&stacked.get(1).unwrap()).unwrap();
            let z = z.broadcast_add(&stacked.get(2).unwrap()).unwrap().sqr().unwrap().sum_all().unwrap();
            (z + stacked.get(0).unwrap().sum_all().unwrap() + c.as_tensor().sqr().unwrap().sum_all().unwrap()).unwrap()
        };
        let vars = [a.clone(), b.clone(), c.clone(), g.clone()];
        let join = || {
            (
                joined(&[a.as_tensor(), b.as_tensor()], Join::Cat, DType::BF16, "w").unwrap(),
                joined(&[c.as_tensor(), g.as_tensor(), h.as_tensor()], Join::Stack, DType::F32, "cgh").unwrap(),
            )
        };
        // Joined with the graph (no scope): each part back-propagates on its own, then the sums.
        let mut want: HashMap<TensorId, Tensor> = HashMap::new();
        for x in &xs {
            let (w, s) = join();
            assert!(!w.is_variable(), "outside a scope the join keeps its graph");
            let grads = loss(x, &w, &s).backward().unwrap();
            for v in &vars {
                let gv = grads.get(v.as_tensor()).unwrap().clone();
                let sum = match want.remove(&v.as_tensor().id()) {
                    Some(t) => (t + gv).unwrap(),
                    None => gv,
                };
                want.insert(v.as_tensor().id(), sum);
            }
        }
        // Joined leaves (a scope): the step's totals.
        let got = {
            let _scope = StepCasts::begin();
            let mut step = StepGradients::new();
            for x in &xs {
                let (w, s) = join();
                assert!(w.is_variable() && s.is_variable(), "in a scope the joins are leaves");
                step.backward_loss(&loss(x, &w, &s), &vars).unwrap();
            }
            step.into_map().unwrap()
        };
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for v in &vars {
            let id = v.as_tensor().id();
            assert_eq!(got[&id].dtype(), DType::F32);
            assert_eq!(got[&id].shape(), v.as_tensor().shape());
            assert_eq!(flat(&got[&id]), flat(&want[&id]), "{:?}", v.as_tensor().shape());
        }
        assert!(!got.contains_key(&h.as_tensor().id()), "h was not asked for");
        // A join none of whose parts is asked for keeps no running total.
        let _scope = StepCasts::begin();
        let mut step = StepGradients::new();
        let (w, s) = join();
        step.backward_loss(&loss(&xs[0], &w, &s), std::slice::from_ref(&c)).unwrap();
        assert_eq!(step.joined.len(), 1, "only the stack holds c");
        assert_eq!(step.into_map().unwrap().len(), 1);
    }
}
