//! bf16 copies of f32 activations, written by the kernel that made them. In bf16 inference on a
//! GPU the residual stream stays f32 (as under PyTorch's autocast) while each block's products
//! read bf16: every block end's output would be cast once for the next product (a read of 4
//! bytes and a write of 2 per element, [`Tensor::to_dtype`]). The block end's kernel writes the
//! bf16 copy as it writes the f32 output (2 more bytes per element) and keeps it here for that
//! product, which takes it through [`product_input`].
//!
//! One copy is kept per thread, for the tensor it was written beside (by id): the next product
//! takes it, and a tensor made since (a reshape, another block's output) is cast as before.

use std::cell::RefCell;

use candle_core::{DType, Result, Tensor, TensorId};

thread_local! {
    static KEPT: RefCell<Option<(TensorId, Tensor)>> = const { RefCell::new(None) };
}

/// Keeps `copy` as `of` in `copy`'s dtype, for [`product_input`]; replaces the copy kept before.
pub fn keep(of: &Tensor, copy: Tensor) {
    KEPT.with(|kept| *kept.borrow_mut() = Some((of.id(), copy)));
}

/// Drops the copy kept on this thread, if any (the encoder calls this after its last layer, whose
/// output no product reads: the copy would hold its memory until the next pass).
pub fn forget() {
    KEPT.with(|kept| kept.borrow_mut().take());
}

/// `xs` in `dtype`, as a product reads it: the copy kept for `xs` (taken: one product reads it),
/// else a cast.
///
/// # Shapes
/// `xs: [...]` → the same shape
pub fn product_input(xs: &Tensor, dtype: DType) -> Result<Tensor> {
    if xs.dtype() != dtype {
        let kept = KEPT.with(|kept| {
            let mut kept = kept.borrow_mut();
            match kept.as_ref() {
                Some((id, copy)) if *id == xs.id() && copy.dtype() == dtype && copy.shape() == xs.shape() => {
                    kept.take().map(|(_, copy)| copy)
                }
                _ => None,
            }
        });
        if let Some(copy) = kept {
            return Ok(copy);
        }
    }
    xs.to_dtype(dtype)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// The copy kept for a tensor serves that tensor once; other tensors (a reshape of it
    /// included) and other dtypes are cast.
    #[test]
    fn a_kept_copy_serves_its_tensor_once() {
        let x = Tensor::arange(0f32, 12., &Device::Cpu).unwrap().reshape((3, 4)).unwrap();
        // A stand-in copy whose values tell it from a cast.
        let copy = (x.clone() + 100.0).unwrap().to_dtype(DType::BF16).unwrap();
        keep(&x, copy.clone());
        let reshaped = x.reshape((4, 3)).unwrap();
        let cast = product_input(&reshaped, DType::BF16).unwrap();
        assert_eq!(cast.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()[0], 0.0);
        let f32 = product_input(&x, DType::F32).unwrap();
        assert_eq!(f32.id(), x.id(), "no cast to the tensor's own dtype");
        let first = product_input(&x, DType::BF16).unwrap();
        assert_eq!(first.id(), copy.id(), "the kept copy");
        let second = product_input(&x, DType::BF16).unwrap();
        assert_ne!(second.id(), copy.id(), "taken: the second read is a cast");
        assert_eq!(second.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()[0], 0.0);
        keep(&x, copy.clone());
        forget();
        assert_ne!(product_input(&x, DType::BF16).unwrap().id(), copy.id(), "forgotten: a cast");
    }
}
