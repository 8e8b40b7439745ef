//! Ops over every parameter of a model in one GPU launch, as PyTorch's multi-tensor (`foreach`,
//! fused) kernels: the global gradient norm's sum of squares (clipping) and the AdamW update.
//! One launch per parameter costs roberta-base ~200 launches per op (the norm through candle's
//! ops, a square and a sum each: ~400), queued by the host at the end of each step while the
//! GPU waits. Here each op is one launch over a table of spans — (address, length) pieces of at
//! most [`SPAN`] elements of the tensors — copied to the GPU with it, one block per span.

use std::sync::OnceLock;

use candle_core::{Result, Tensor};

/// Elements of one span of [`spans`] (one GPU block's work).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) const SPAN: usize = 1 << 15;

/// The sum of the squares of every element of `tensors`, in f64, on a GPU in one kernel launch
/// and one wait: the squares of each span of 32,768 elements summed in f32 on the GPU, in a
/// fixed order, and the spans' sums added here in order (the same bits every time). `None`
/// where it does not apply — a tensor not f32, not contiguous or not on the first one's GPU, no
/// `cuda` feature, or no tensors — and the caller sums another way
/// (`longread_train::clip::grad_norm`).
///
/// # Shapes
/// `tensors: n × [...]` → a scalar
pub fn sum_of_squares(tensors: &[&Tensor]) -> Result<Option<f64>> {
    #[cfg(feature = "cuda")]
    {
        let Some(first) = tensors.first() else { return Ok(None) };
        let candle_core::Device::Cuda(dev) = first.device() else { return Ok(None) };
        let fits = |t: &&Tensor| {
            t.dtype() == candle_core::DType::F32 && t.is_contiguous() && t.device().same_device(first.device())
        };
        if !tensors.iter().all(fits) {
            return Ok(None);
        }
        let guards: Vec<_> = tensors.iter().map(|t| t.storage_and_layout()).collect();
        let mut parts = Vec::with_capacity(guards.len());
        for (storage, layout) in &guards {
            match &**storage {
                candle_core::Storage::Cuda(s) => parts.push((s, *layout)),
                _ => return Ok(None),
            }
        }
        let sums = super::launch::sum_squares(dev, &parts)?;
        Ok(Some(sums.iter().map(|&s| f64::from(s)).sum()))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = tensors;
        Ok(None)
    }
}

/// Whether GPU training's AdamW updates every parameter in one launch ([`adamw_multi`], the
/// default), or, with `LONGREAD_CUDA_ADAMW=per-tensor`, with a launch per parameter
/// ([`super::AdamWStep`]; kept to compare the two on a GPU).
pub fn adamw_multi_kernel() -> bool {
    static PER_TENSOR: OnceLock<bool> = OnceLock::new();
    !super::env_is(&PER_TENSOR, "LONGREAD_CUDA_ADAMW", "per-tensor")
}

/// One parameter's part of [`adamw_multi`]: the f32 parameter (updated in place), its f32
/// gradient, its moments `[2, n]` (first, then second; updated too) and the step's constants.
#[derive(Debug, Clone, Copy)]
pub struct AdamWParts<'a> {
    /// The parameter, `n` elements.
    pub param: &'a Tensor,
    /// Its gradient, `n` elements.
    pub grad: &'a Tensor,
    /// Its moments, `[2, n]`: the optimizer's own buffer, which nothing else holds.
    pub moments: &'a Tensor,
    /// The update's constants for this parameter.
    pub step: super::AdamWStep,
}

/// [`super::AdamWStep`]'s update of every parameter of `parts` in one launch (`adamw_tiles_f32`:
/// the same arithmetic per element, so the same bits as a launch per parameter). `false` where
/// it does not apply — a tensor not f32, not contiguous or not on the first parameter's GPU, a
/// moments buffer not twice its parameter, a parameter given twice, no `cuda` feature, no parts,
/// or `LONGREAD_CUDA_ADAMW=per-tensor` — and nothing was updated: the caller updates each
/// parameter itself.
///
/// # Shapes
/// each part: `param, grad: [n]` (any shape of n elements), `moments: [2, n]`
pub fn adamw_multi(parts: &[AdamWParts]) -> Result<bool> {
    #[cfg(feature = "cuda")]
    {
        let Some(first) = parts.first() else { return Ok(false) };
        let candle_core::Device::Cuda(dev) = first.param.device() else { return Ok(false) };
        let fits = |t: &Tensor| {
            t.dtype() == candle_core::DType::F32 && t.is_contiguous() && t.device().same_device(first.param.device())
        };
        let sizes_agree = |p: &AdamWParts| {
            let n = p.param.elem_count();
            p.grad.elem_count() == n && p.moments.elem_count() == 2 * n
        };
        if !adamw_multi_kernel()
            || !parts.iter().all(|p| fits(p.param) && fits(p.grad) && fits(p.moments) && sizes_agree(p))
        {
            return Ok(false);
        }
        // A parameter given twice would have two blocks update its elements at once.
        let mut seen = std::collections::HashSet::new();
        if !parts.iter().all(|p| seen.insert(p.param.id())) {
            return Ok(false);
        }
        let guards: Vec<_> =
            parts.iter().map(|p| [p.param, p.grad, p.moments].map(Tensor::storage_and_layout)).collect();
        let mut storages = Vec::with_capacity(guards.len());
        for [param, grad, moments] in &guards {
            match (&*param.0, &*grad.0, &*moments.0) {
                (candle_core::Storage::Cuda(p), candle_core::Storage::Cuda(g), candle_core::Storage::Cuda(m)) => {
                    storages.push([(p, param.1), (g, grad.1), (m, moments.1)])
                }
                _ => return Ok(false),
            }
        }
        let steps: Vec<super::AdamWStep> = parts.iter().map(|p| p.step).collect();
        super::launch::adamw_tiles(dev, &storages, &steps)?;
        Ok(true)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = parts;
        Ok(false)
    }
}

/// The spans `(part, start, len)` of at most `tile` elements that cover parts of `lens`
/// elements, in order (empty parts have none).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) fn spans(lens: &[usize], tile: usize) -> Vec<(usize, usize, usize)> {
    let mut tiles = Vec::new();
    for (part, &len) in lens.iter().enumerate() {
        let mut start = 0;
        while start < len {
            let n = tile.min(len - start);
            tiles.push((part, start, n));
            start += n;
        }
    }
    tiles
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans cover every element of every part once, in order, none longer than a tile.
    #[test]
    fn spans_cover_each_part_in_order() {
        assert_eq!(spans(&[3, 0, 8, 4], 4), vec![(0, 0, 3), (2, 0, 4), (2, 4, 4), (3, 0, 4)]);
        assert!(spans(&[0, 0], 4).is_empty());
        let lens = [1, SPAN, SPAN + 1, 768 * 3072];
        let tiles = spans(&lens, SPAN);
        for (part, &len) in lens.iter().enumerate() {
            let mine: Vec<_> = tiles.iter().filter(|t| t.0 == part).collect();
            assert_eq!(mine.iter().map(|t| t.2).sum::<usize>(), len);
            assert!(mine.windows(2).all(|w| w[0].1 + w[0].2 == w[1].1), "contiguous, in order");
            assert!(mine.iter().all(|t| t.2 <= SPAN && t.2 > 0));
        }
    }

    /// Without a GPU (CPU tensors) the caller sums and updates another way.
    #[test]
    fn cpu_tensors_are_left_to_the_caller() {
        let t = Tensor::ones(4, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        assert_eq!(sum_of_squares(&[&t]).unwrap(), None);
        assert_eq!(sum_of_squares(&[]).unwrap(), None);
        let moments = Tensor::zeros((2, 4), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let step = super::super::AdamWStep {
            grad_scale: 1.0,
            decay: 1.0,
            one_minus_beta1: 0.1,
            beta2: 0.999,
            one_minus_beta2: 0.001,
            bias2_sqrt: 1.0,
            eps: 1e-8,
            step_size: 1e-3,
        };
        assert!(!adamw_multi(&[AdamWParts { param: &t, grad: &t, moments: &moments, step }]).unwrap());
        assert!(!adamw_multi(&[]).unwrap());
        assert_eq!(t.to_vec1::<f32>().unwrap(), [1.0; 4], "nothing updated");
    }
}
