//! A cast weight's gradient added into its f32 total in place: the backward pass of the f32 →
//! bf16 cast of a master weight in a training step's second and later parts (kept groups,
//! recomputed chunk batches), through candle's `backprop::set_cast_accumulate` hook
//! (vendor/README.md, the fifth change).
//!
//! With the casts shared by a step's parts ([`super::super::weight_casts`]), each part's backward
//! pass reaches every weight's cast and adds its bf16 gradient into the weight's total: candle
//! cast it to a new f32 tensor, then added that into a new total — two launches, two
//! allocations and 18 bytes of traffic per parameter per part (85M parameters for roberta-base:
//! ~1.5 GB a part). [`AddInto`] writes `total += f32(grad)` in place, 10 bytes per parameter,
//! with the same one rounding (the same bits). Only a total the gradient store holds alone
//! (`Tensor::is_sole_owner`) is written in place; anything else takes candle's way.
//! `LONGREAD_CAST_ACCUMULATE=off` keeps candle's way throughout (to compare on a GPU).

use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Result, Tensor};

/// In place: `total += grad` in f32 (`total` f32, `grad` bf16, same shape, both contiguous).
#[derive(Debug, Clone, Copy)]
pub struct AddInto;

impl InplaceOp2 for AddInto {
    fn name(&self) -> &'static str {
        "add-into-f32"
    }

    fn cpu_fwd(&self, total: &mut CpuStorage, total_l: &Layout, grad: &CpuStorage, grad_l: &Layout) -> Result<()> {
        let (CpuStorage::F32(total), CpuStorage::BF16(grad)) = (total, grad) else {
            candle_core::bail!("add-into-f32: an f32 total and a bf16 gradient");
        };
        let (Some((t0, t1)), Some((g0, g1))) = (total_l.contiguous_offsets(), grad_l.contiguous_offsets()) else {
            candle_core::bail!("add-into-f32: contiguous total and gradient");
        };
        if t1 - t0 != g1 - g0 {
            candle_core::bail!("add-into-f32: a total of {} and a gradient of {} elements", t1 - t0, g1 - g0);
        }
        total[t0..t1].iter_mut().zip(&grad[g0..g1]).for_each(|(t, g)| *t += g.to_f32());
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        total: &mut candle_core::CudaStorage,
        total_l: &Layout,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
    ) -> Result<()> {
        super::launch::add_into((total, total_l), (grad, grad_l))
    }
}

/// Whether the backward pass adds cast gradients into their totals in place (unless
/// `LONGREAD_CAST_ACCUMULATE=off`).
pub fn cast_accumulate_in_place() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !super::env_is(&OFF, "LONGREAD_CAST_ACCUMULATE", "off")
}

/// candle's `CastAccumulate` hook: `total += grad` in place for an f32 total and a bf16
/// gradient of its shape on one device; `false` (candle casts and adds) for anything else.
/// (`LONGREAD_CAST_ACCUMULATE=off` is [`install_cast_accumulate`]'s to honour: it then leaves
/// the hook out.)
///
/// # Shapes
/// `total`, `grad`: the same shape
pub fn accumulate_cast(total: &Tensor, grad: &Tensor) -> Result<bool> {
    let fits = total.dtype() == DType::F32
        && grad.dtype() == DType::BF16
        && total.shape() == grad.shape()
        && total.is_contiguous()
        && total.device().same_device(grad.device());
    if !fits {
        return Ok(false);
    }
    total.inplace_op2(&grad.contiguous()?, &AddInto)?;
    Ok(true)
}

/// Installs [`accumulate_cast`] as candle's backward hook (once per process; a no-op with
/// `LONGREAD_CAST_ACCUMULATE=off`).
pub fn install_cast_accumulate() {
    if cast_accumulate_in_place() {
        candle_core::backprop::set_cast_accumulate(accumulate_cast);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    /// Two parts' backward passes through one shared bf16 cast of f32 weights: the totals are
    /// the bits of casting and adding (the hook installed or not), the second part's added in
    /// place (the total keeps its storage); a total someone else also holds is left alone and
    /// a new one made.
    #[test]
    fn cast_gradients_add_into_their_totals_in_place_with_the_same_bits() {
        let normals = Normals::new(97);
        let device = Device::Cpu;
        let w = Var::from_tensor(&normals.tensor(0f32, 1.0, (7, 5), &device).unwrap()).unwrap();
        let parts: Vec<Tensor> = (0..2).map(|_| normals.tensor(0f32, 1.0, (3, 7), &device).unwrap()).collect();
        let cast = w.as_tensor().to_dtype(DType::BF16).unwrap();
        let loss = |x: &Tensor| {
            let y = x.to_dtype(DType::BF16).unwrap().matmul(&cast).unwrap();
            y.to_dtype(DType::F32).unwrap().sqr().unwrap().sum_all().unwrap()
        };
        // Candle's way: each part's gradient cast, then the totals added.
        let g0 = loss(&parts[0]).backward().unwrap().get(w.as_tensor()).unwrap().clone();
        let g1 = loss(&parts[1]).backward().unwrap().get(w.as_tensor()).unwrap().clone();
        let want = (&g0 + &g1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        install_cast_accumulate();
        let grads = loss(&parts[0]).backward().unwrap();
        let first = grads.get(w.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let grads = loss(&parts[1]).backward_into(grads).unwrap();
        let total = grads.get(w.as_tensor()).unwrap();
        assert_eq!(total.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
        // A total held elsewhere too (here: a clone kept after the first part) is not written.
        let grads = loss(&parts[0]).backward().unwrap();
        let kept = grads.get(w.as_tensor()).unwrap().clone();
        let grads = loss(&parts[1]).backward_into(grads).unwrap();
        assert_eq!(kept.flatten_all().unwrap().to_vec1::<f32>().unwrap(), first, "a shared total changed");
        let total = grads.get(w.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(total, want);
    }

    /// The op adds in f32 with one rounding; what does not fit is left to candle or an error.
    #[test]
    fn the_op_adds_bf16_into_f32_and_declines_what_does_not_fit() {
        let device = Device::Cpu;
        let total = Tensor::new(&[1.0f32, 2.0, 3.0], &device).unwrap().affine(1.0, 0.0).unwrap();
        let grad = Tensor::new(&[0.5f32, -1.0, 0.25], &device).unwrap().to_dtype(DType::BF16).unwrap();
        assert!(accumulate_cast(&total, &grad).unwrap());
        assert_eq!(total.to_vec1::<f32>().unwrap(), [1.5, 1.0, 3.25]);
        let f32_grad = grad.to_dtype(DType::F32).unwrap();
        assert!(!accumulate_cast(&total, &f32_grad).unwrap(), "an f32 gradient: candle's add");
        let short = Tensor::new(&[1.0f32], &device).unwrap().to_dtype(DType::BF16).unwrap();
        assert!(!accumulate_cast(&total, &short).unwrap(), "another shape: candle's add");
        let err = total.inplace_op2(&f32_grad, &AddInto).unwrap_err().to_string();
        assert!(err.contains("add-into-f32"), "{err}");
    }
}
