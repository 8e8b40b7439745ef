//! Reading a custom op's arguments: f32 data of contiguous tensors, and shape checks.

use std::ops::{Deref, Range};

use candle_core::{CpuStorage, DType, Layout, Result, Shape, Storage, StorageRef, Tensor};

/// Size of the last dimension (at least 1).
pub fn last_dim(shape: &Shape) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => candle_core::bail!("fused kernels need a non-empty last dimension, got {shape:?}"),
    }
}

/// The f32 data of several contiguous tensors (a custom op's arguments).
pub fn f32_slices<'a, const N: usize>(args: [(&'a CpuStorage, &Layout); N], op: &str) -> Result<[&'a [f32]; N]> {
    let mut out = [&[][..]; N];
    for (slot, (storage, layout)) in out.iter_mut().zip(args) {
        *slot = f32_slice(storage, layout, op)?;
    }
    Ok(out)
}

/// The f32 data of a contiguous tensor.
pub fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: the input must be contiguous");
    };
    match storage {
        CpuStorage::F32(v) => Ok(&v[start..end]),
        _ => candle_core::bail!("{op}: f32 only"),
    }
}

/// The f32 data of a contiguous tensor, to write in place (an in-place op's destination).
pub fn f32_slice_mut<'a>(storage: &'a mut CpuStorage, layout: &Layout, op: &str) -> Result<&'a mut [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: the input must be contiguous");
    };
    match storage {
        CpuStorage::F32(v) => Ok(&mut v[start..end]),
        _ => candle_core::bail!("{op}: f32 only"),
    }
}

/// Checks that `bias` is as long as the rows of `shape`; returns the row length.
pub fn check_bias(shape: &Shape, bias: &[f32], op: &str) -> Result<usize> {
    let n = last_dim(shape)?;
    if bias.len() != n {
        candle_core::bail!("{op}: a bias of {} for rows of {n}", bias.len());
    }
    Ok(n)
}

/// An in-place bias op's arguments: the destination's data, to write, and the bias, which must
/// be as long as a row.
pub fn rows_and_bias_mut<'a>(
    (dst, dst_l): (&'a mut CpuStorage, &Layout),
    (s2, l2): (&'a CpuStorage, &Layout),
    op: &str,
) -> Result<(&'a mut [f32], &'a [f32])> {
    let bias = f32_slice(s2, l2, op)?;
    check_bias(dst_l.shape(), bias, op)?;
    Ok((f32_slice_mut(dst, dst_l, op)?, bias))
}

/// The f32 data of `x` and of a bias added to each of its rows (a bias op's arguments), and the
/// row length; the bias must be as long as a row.
pub fn rows_and_bias<'a>(
    (s1, l1): (&'a CpuStorage, &Layout),
    (s2, l2): (&'a CpuStorage, &Layout),
    op: &str,
) -> Result<(&'a [f32], &'a [f32], usize)> {
    let [x, bias] = f32_slices([(s1, l1), (s2, l2)], op)?;
    let n = check_bias(l1.shape(), bias, op)?;
    Ok((x, bias, n))
}

/// A tensor's elements as f32, for a backward pass to read: borrowed in place from a
/// contiguous f32 tensor on the CPU (the usual case: no copy), else an f32 copy.
pub enum F32Data<'a> {
    /// A read lock on the tensor's storage and the range of its elements.
    Borrowed(StorageRef<'a>, Range<usize>),
    /// A contiguous f32 copy.
    Copied(Vec<f32>),
}

impl Deref for F32Data<'_> {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            F32Data::Borrowed(storage, range) => match &**storage {
                Storage::Cpu(CpuStorage::F32(values)) => &values[range.clone()],
                _ => &[], // not constructed: `f32_data` borrows f32 CPU storage only
            },
            F32Data::Copied(values) => values,
        }
    }
}

/// The elements of `t` as f32 in row-major order (see [`F32Data`]).
pub fn f32_data(t: &Tensor) -> Result<F32Data<'_>> {
    let (storage, layout) = t.storage_and_layout();
    let range = match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::F32(_)), Some((start, end))) => Some(start..end),
        _ => None,
    };
    match range {
        Some(range) => Ok(F32Data::Borrowed(storage, range)),
        None => {
            drop(storage);
            Ok(F32Data::Copied(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn contiguous_f32_tensors_are_read_in_place_others_copied_in_row_major_order() {
        let t = Tensor::arange(0f32, 12.0, &Device::Cpu).unwrap().reshape((3, 4)).unwrap();
        let row = t.narrow(0, 1, 1).unwrap(); // contiguous, at an offset
        let data = f32_data(&row).unwrap();
        assert!(matches!(data, F32Data::Borrowed(..)));
        assert_eq!(&*data, &[4.0, 5.0, 6.0, 7.0]);
        let transposed = t.t().unwrap();
        let data = f32_data(&transposed).unwrap();
        assert!(matches!(data, F32Data::Copied(_)));
        assert_eq!(&data[..4], &[0.0, 4.0, 8.0, 1.0]);
        let wide = t.to_dtype(DType::F64).unwrap();
        assert_eq!(&*f32_data(&wide).unwrap(), &*f32_data(&t).unwrap());
    }
}
