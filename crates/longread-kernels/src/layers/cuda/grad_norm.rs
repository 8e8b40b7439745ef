//! The global gradient norm's sum of squares on a GPU in one launch (clipping, as
//! `torch.nn.utils.clip_grad_norm_`'s foreach norm): candle's ops take a square and a sum per
//! gradient, about 400 kernel launches for roberta-base's 200 gradients, each queued by the host
//! after the backward pass and before the step's one wait.

use std::sync::OnceLock;

use candle_core::{Result, Tensor};

/// Elements of one span of [`squares_tiles`] (one GPU block's work).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) const SQUARES_TILE: usize = 1 << 15;

/// Whether the global gradient norm of GPU training sums every gradient's squares in one
/// kernel launch ([`sum_of_squares`], the default), or, with `LONGREAD_CUDA_GRAD_NORM=candle`,
/// through candle's ops: a square and a sum per gradient, about 400 launches for roberta-base
/// (kept to compare the two on a GPU).
pub fn grad_norm_kernel() -> bool {
    static CANDLE: OnceLock<bool> = OnceLock::new();
    !super::env_is(&CANDLE, "LONGREAD_CUDA_GRAD_NORM", "candle")
}

/// The sum of the squares of every element of `tensors`, in f64, on a GPU in one kernel launch
/// and one wait: the squares of each span of 32,768 elements summed in f32 on the GPU, in a
/// fixed order, and the spans' sums added here in order (the same bits every time). `None`
/// where it does not apply — a tensor not f32, not contiguous or not on the first one's GPU, no
/// `cuda` feature, no tensors, or `LONGREAD_CUDA_GRAD_NORM=candle` — and the caller sums
/// another way (`longread_train::clip::grad_norm`).
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
        if !grad_norm_kernel() || !tensors.iter().all(fits) {
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

/// The spans `(part, start, len)` of at most `tile` elements that cover parts of `lens`
/// elements, in order (empty parts have none).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) fn squares_tiles(lens: &[usize], tile: usize) -> Vec<(usize, usize, usize)> {
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
        assert_eq!(squares_tiles(&[3, 0, 8, 4], 4), vec![(0, 0, 3), (2, 0, 4), (2, 4, 4), (3, 0, 4)]);
        assert!(squares_tiles(&[0, 0], 4).is_empty());
        let lens = [1, SQUARES_TILE, SQUARES_TILE + 1, 768 * 3072];
        let tiles = squares_tiles(&lens, SQUARES_TILE);
        for (part, &len) in lens.iter().enumerate() {
            let mine: Vec<_> = tiles.iter().filter(|t| t.0 == part).collect();
            assert_eq!(mine.iter().map(|t| t.2).sum::<usize>(), len);
            assert!(mine.windows(2).all(|w| w[0].1 + w[0].2 == w[1].1), "contiguous, in order");
            assert!(mine.iter().all(|t| t.2 <= SQUARES_TILE && t.2 > 0));
        }
    }

    /// Without a GPU (CPU tensors) the caller sums another way.
    #[test]
    fn cpu_tensors_are_left_to_the_caller() {
        let t = Tensor::ones(4, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        assert_eq!(sum_of_squares(&[&t]).unwrap(), None);
        assert_eq!(sum_of_squares(&[]).unwrap(), None);
    }
}
