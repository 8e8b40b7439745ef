//! Weights cast once per training step, as `torch.autocast` caches its casts of leaf weights
//! within an autocast region. In mixed precision each dense layer's f32 master weight is cast to
//! bf16 for its product (with the cast's graph, so that its gradient reaches the f32 weight). A
//! step that encodes its documents in several groups (kept groups, recomputed chunk batches,
//! `--grad-accum` batches) would cast every weight again for each group: a launch per weight and
//! 6 bytes of traffic per parameter per group, and for the fused q/k/v product a concatenation
//! too. Within a [`StepCasts`] scope each cast is made once and shared by every group's graph;
//! each group's backward pass still reaches the f32 weight through it.
//!
//! The casts are kept per thread and dropped when the outermost scope ends, before the optimizer
//! changes the weights (a cast made before an update would be stale after it).
//! `LONGREAD_STEP_CASTS=off` casts at every use, as before (to compare the two on a GPU).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use candle_core::{DType, Result, Tensor, TensorId};

/// What a cached tensor is of: the tensor it was made from, the dtype, and how (`cast`, or a
/// named derivation such as the fused q/k/v weight).
type Key = (TensorId, DType, &'static str);

thread_local! {
    static CASTS: RefCell<Option<HashMap<Key, Tensor>>> = const { RefCell::new(None) };
}

/// Whether casts are shared within a step (unless `LONGREAD_STEP_CASTS=off`).
pub fn wanted() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    !super::cuda::env_is(&OFF, "LONGREAD_STEP_CASTS", "off")
}

/// A scope in which weights are cast once (see the module's note): the trainer holds one over
/// the gradient passes of a step, never across an optimizer update. Scopes nest; the outermost
/// one's end drops the casts.
#[derive(Debug)]
#[must_use = "the casts are shared only while the scope is held"]
pub struct StepCasts {
    outermost: bool,
}

impl StepCasts {
    /// Starts sharing casts on this thread (a no-op inside a scope, or with
    /// `LONGREAD_STEP_CASTS=off`).
    pub fn begin() -> Self {
        // The casts' backward passes add into the weights' totals in place (`cuda::add_into`).
        super::cuda::install_cast_accumulate();
        let outermost = wanted()
            && CASTS.with(|casts| {
                let mut casts = casts.borrow_mut();
                let outermost = casts.is_none();
                if outermost {
                    *casts = Some(HashMap::new());
                }
                outermost
            });
        Self { outermost }
    }
}

impl Drop for StepCasts {
    fn drop(&mut self) {
        if self.outermost {
            CASTS.with(|casts| casts.borrow_mut().take());
        }
    }
}

/// `make()`, kept within a scope under `(of, dtype, what)` and made once there; outside a scope
/// made at every call.
///
/// # Shapes
/// `make()`'s
pub fn shared(of: &Tensor, dtype: DType, what: &'static str, make: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    let key = (of.id(), dtype, what);
    if let Some(kept) = CASTS.with(|casts| casts.borrow().as_ref().map(|c| c.get(&key).cloned())) {
        return match kept {
            Some(tensor) => Ok(tensor),
            None => {
                let tensor = make()?;
                CASTS.with(|casts| casts.borrow_mut().as_mut().map(|c| c.insert(key, tensor.clone())));
                Ok(tensor)
            }
        };
    }
    make()
}

/// How many tensors the current scope shares (0 outside a scope).
pub fn kept() -> usize {
    CASTS.with(|casts| casts.borrow().as_ref().map_or(0, HashMap::len))
}

/// `weight` in `dtype`, with the cast's graph: the weight itself when it is stored in `dtype`,
/// else a cast shared within a scope.
///
/// # Shapes
/// `weight: [...]` → the same shape
pub fn cast(weight: &Tensor, dtype: DType) -> Result<Tensor> {
    if weight.dtype() == dtype {
        return Ok(weight.clone());
    }
    shared(weight, dtype, "cast", || weight.to_dtype(dtype))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    fn weight() -> Var {
        Var::from_tensor(&Tensor::arange(0f32, 6., &Device::Cpu).unwrap().reshape((2, 3)).unwrap()).unwrap()
    }

    /// Within a scope a weight is cast once; nested scopes share it; after the outermost scope
    /// (and outside any) every use casts anew.
    #[test]
    fn a_scope_casts_each_weight_once() {
        let w = weight();
        let outside = (cast(&w, DType::BF16).unwrap(), cast(&w, DType::BF16).unwrap());
        assert_ne!(outside.0.id(), outside.1.id(), "no scope: a cast per use");
        let first = {
            let _step = StepCasts::begin();
            let first = cast(&w, DType::BF16).unwrap();
            {
                let _inner = StepCasts::begin();
                assert_eq!(cast(&w, DType::BF16).unwrap().id(), first.id(), "shared in a nested scope");
            }
            assert_eq!(cast(&w, DType::BF16).unwrap().id(), first.id(), "the inner scope's end keeps the casts");
            assert_ne!(cast(&w, DType::F16).unwrap().id(), first.id(), "another dtype, another cast");
            assert_eq!(cast(&w, DType::F32).unwrap().id(), w.as_tensor().id(), "its own dtype: the weight itself");
            first
        };
        assert_ne!(cast(&w, DType::BF16).unwrap().id(), first.id(), "the scope's end drops the casts");
    }

    /// A shared cast keeps its graph: two losses through it each give the f32 weight its
    /// gradient, as two separate casts do.
    #[test]
    fn gradients_reach_the_weight_through_a_shared_cast() {
        let w = weight();
        let x = Tensor::new(&[[1f32, -2., 0.5]], &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let loss = |w: &Tensor| x.matmul(&w.t().unwrap()).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
        let gradient = |scoped: bool| {
            let _step = scoped.then(StepCasts::begin);
            let (a, b) = (loss(&cast(&w, DType::BF16).unwrap()), loss(&cast(&w, DType::BF16).unwrap()));
            let ga = a.backward().unwrap().remove(w.as_tensor()).unwrap();
            let gb = b.backward().unwrap().remove(w.as_tensor()).unwrap();
            (ga + gb).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        assert_eq!(gradient(true), gradient(false));
        assert_eq!(gradient(true), vec![2., -4., 1., 2., -4., 1.]);
    }
}
