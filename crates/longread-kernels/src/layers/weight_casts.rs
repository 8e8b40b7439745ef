//! Weights cast once per training step, as `torch.autocast` caches its casts of leaf weights
//! within an autocast region. In mixed precision each dense layer's f32 master weight is cast to
//! bf16 for its product (with the cast's graph, so that its gradient reaches the f32 weight). A
//! step that encodes its documents in several groups (kept groups, recomputed chunk batches,
//! `--grad-accum` batches) would cast every weight again for each group: a launch per weight and
//! 6 bytes of traffic per parameter per group, and for the fused q/k/v product a concatenation
//! too. Within a [`StepCasts`] scope each cast is made once and shared by every group's graph;
//! each group's backward pass still reaches the f32 weight through it.
//!
//! Weights joined for one op ([`joined`]: the fused q/k/v weight and bias, a block end's bias,
//! γ and β) are made once per scope as leaves of their own ([`JoinedLeaf`]): a group's backward
//! pass stops at the joined tensor, whose gradient the step's `StepGradients` (longread-train)
//! adds into one running total, and hands each part its rows once, at the step's end. Joined
//! with their graph instead, every group's backward pass split the joined gradient into its
//! parts and added each part into its weight's total: three launches where a leaf takes one,
//! for each of roberta-base's 48 joins (36 of f32 vectors, 12 of weights) in every group.
//! `LONGREAD_JOINED_LEAVES=off` joins them with their graph, as before (to compare on a GPU).
//!
//! The casts are kept per thread and dropped when the outermost scope ends, before the optimizer
//! changes the weights (a cast made before an update would be stale after it).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use candle_core::{DType, Result, Tensor, TensorId, Var};

/// What a cached tensor is of: the tensor it was made from, the dtype, and how (`cast`, or a
/// named derivation such as the fused q/k/v weight).
type Key = (TensorId, DType, &'static str);

/// What a scope keeps: its casts and derivations, and the joined leaves among them.
#[derive(Default)]
struct Scope {
    kept: HashMap<Key, Tensor>,
    leaves: Vec<JoinedLeaf>,
}

thread_local! {
    static CASTS: RefCell<Option<Scope>> = const { RefCell::new(None) };
    /// This thread's choice of [`joined_leaves_wanted`] while [`with_joined_leaves`] runs.
    static LEAVES_CHOSEN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether [`joined`] makes leaves within a scope (unless `LONGREAD_JOINED_LEAVES=off`, or
/// [`with_joined_leaves`] says otherwise on this thread).
pub fn joined_leaves_wanted() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    LEAVES_CHOSEN
        .with(|chosen| chosen.get())
        .unwrap_or_else(|| !super::cuda::env_is(&OFF, "LONGREAD_JOINED_LEAVES", "off"))
}

/// `f()` with joined leaves on or off for the calling thread (tests compare the two routes in
/// one process; the environment variable is read once per process).
pub fn with_joined_leaves<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let before = LEAVES_CHOSEN.with(|chosen| chosen.replace(Some(on)));
    let out = f();
    LEAVES_CHOSEN.with(|chosen| chosen.set(before));
    out
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
    /// Starts sharing casts on this thread (a no-op inside a scope).
    pub fn begin() -> Self {
        // The casts' backward passes add into the weights' totals in place (`cuda::add_into`).
        super::cuda::install_cast_accumulate();
        let outermost = CASTS.with(|casts| {
            let mut casts = casts.borrow_mut();
            let outermost = casts.is_none();
            if outermost {
                *casts = Some(Scope::default());
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

/// The tensor kept under `key` in the current scope: `Some(None)` in a scope that has none yet,
/// `None` outside any scope.
fn kept_under(key: &Key) -> Option<Option<Tensor>> {
    CASTS.with(|casts| casts.borrow().as_ref().map(|scope| scope.kept.get(key).cloned()))
}

/// `make()`, kept within a scope under `(of, dtype, what)` and made once there; outside a scope
/// made at every call.
///
/// # Shapes
/// `make()`'s
pub fn shared(of: &Tensor, dtype: DType, what: &'static str, make: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    let key = (of.id(), dtype, what);
    match kept_under(&key) {
        Some(Some(tensor)) => Ok(tensor),
        Some(None) => {
            let tensor = make()?;
            CASTS.with(|casts| casts.borrow_mut().as_mut().map(|scope| scope.kept.insert(key, tensor.clone())));
            Ok(tensor)
        }
        None => make(),
    }
}

/// How many tensors the current scope shares (0 outside a scope).
pub fn kept() -> usize {
    CASTS.with(|casts| casts.borrow().as_ref().map_or(0, |scope| scope.kept.len()))
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

/// How [`joined`] puts its parts together along a first dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Concatenated along their first dimension (`Tensor::cat(parts, 0)`).
    Cat,
    /// Each part a row of a new first dimension (`Tensor::stack(parts, 0)`).
    Stack,
}

/// One part of a [`JoinedLeaf`]: the weight, and the rows of the joined tensor that are its.
#[derive(Debug, Clone)]
pub struct Part {
    /// The weight joined (a variable of the model).
    pub weight: Tensor,
    /// Its first row in the joined tensor.
    pub start: usize,
    /// Its rows there.
    pub rows: usize,
}

/// Weights joined once for a step as a leaf of the step's graphs ([`joined`]).
#[derive(Debug, Clone)]
pub struct JoinedLeaf {
    /// The joined values, a variable of their own: the step's backward passes stop here.
    pub leaf: Var,
    /// What it joins, in order.
    pub parts: Vec<Part>,
}

impl JoinedLeaf {
    /// Each part's share of the leaf's gradient `grad` (or of a running total of it): its rows,
    /// in its shape and dtype (the casts' backward pass gives a weight its gradient in its own
    /// dtype), by the weight's id.
    ///
    /// # Shapes
    /// `grad`: the leaf's shape → each part's
    pub fn spread(&self, grad: &Tensor) -> Result<Vec<(TensorId, Tensor)>> {
        self.parts
            .iter()
            .map(|part| {
                let rows = grad.narrow(0, part.start, part.rows)?.reshape(part.weight.shape())?;
                Ok((part.weight.id(), rows.to_dtype(part.weight.dtype())?.contiguous()?))
            })
            .collect()
    }
}

/// The joined leaves made in the current scope (none outside a scope).
pub fn joined_leaves() -> Vec<JoinedLeaf> {
    CASTS.with(|casts| casts.borrow().as_ref().map_or_else(Vec::new, |scope| scope.leaves.clone()))
}

/// `parts` (each cast to `dtype`) joined as `join` says. Within a scope (and unless
/// `LONGREAD_JOINED_LEAVES=off`) made once, without a graph to the parts, as a
/// [`JoinedLeaf`] whose gradient the step hands to them itself (see the module's note); else
/// with its graph, shared within a scope under `what` (as [`shared`]).
///
/// # Shapes
/// `parts: [rows_i, ...]` (the same trailing shape) → `[Σ rows_i, ...]` (`Cat`), or
/// `parts: [...]` (one shape) → `[parts, ...]` (`Stack`)
pub fn joined(parts: &[&Tensor], join: Join, dtype: DType, what: &'static str) -> Result<Tensor> {
    let Some(first) = parts.first() else { candle_core::bail!("weight_casts::joined({what}): no parts") };
    let put_together = |tensors: &[Tensor]| match join {
        Join::Cat => Tensor::cat(tensors, 0),
        Join::Stack => Tensor::stack(tensors, 0),
    };
    let as_leaf = joined_leaves_wanted() && CASTS.with(|casts| casts.borrow().is_some());
    shared(first, dtype, what, || {
        if !as_leaf {
            let casts: Vec<Tensor> = parts.iter().map(|p| cast(p, dtype)).collect::<Result<_>>()?;
            return put_together(&casts);
        }
        let values: Vec<Tensor> = parts.iter().map(|p| p.detach().to_dtype(dtype)).collect::<Result<_>>()?;
        let leaf = Var::from_tensor(&put_together(&values)?)?;
        let mut start = 0;
        let parts = parts
            .iter()
            .map(|p| {
                let rows = match join {
                    Join::Cat => p.dim(0)?,
                    Join::Stack => 1,
                };
                start += rows;
                Ok(Part { weight: (*p).clone(), start: start - rows, rows })
            })
            .collect::<Result<_>>()?;
        let tensor = leaf.as_tensor().clone();
        CASTS.with(|casts| casts.borrow_mut().as_mut().map(|scope| scope.leaves.push(JoinedLeaf { leaf, parts })));
        Ok(tensor)
    })
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
