//! Where cuDNN's attention backward pass writes dq, dk and dv
//! ([`crate::layers::cuda::cudnn_gradient_layout`]), and how the blocks it wrote become the
//! q/k/v product's gradient: one layout-only copy, written for any backend's storage so that
//! the CPU tests the same code the GPU runs.

use candle_core::backend::BackendStorage;
use candle_core::{Layout, Result};

/// The three gradients' places: the element offsets of their blocks, the row stride the cuDNN
/// shim is given (0: head-major, each head's `[seq, dim]` rows contiguous) and the elements
/// from one sequence's first gradient row to the next's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GradientLayout {
    pub blocks: [usize; 3],
    pub row_stride: usize,
    pub sequence: usize,
}

/// The sizes of a call: `batch` sequences of `seq` rows, `heads` heads of `dim`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub dim: usize,
}

impl Sizes {
    fn hidden(&self) -> usize {
        self.heads * self.dim
    }

    fn rows(&self) -> usize {
        self.batch * self.seq
    }
}

impl GradientLayout {
    /// `packed`: `[rows, 3 · hidden]`, the q/k/v product's gradient itself; `dense`: three
    /// `[rows, hidden]` blocks one after the other; `heads`: three `[batch, heads, seq, dim]`
    /// blocks.
    pub fn named(name: &str, s: Sizes) -> Self {
        let (hidden, block) = (s.hidden(), s.rows() * s.hidden());
        match name {
            "dense" => Self { blocks: [0, block, 2 * block], row_stride: hidden, sequence: s.seq * hidden },
            "heads" => Self { blocks: [0, block, 2 * block], row_stride: 0, sequence: s.seq * hidden },
            _ => Self { blocks: [0, hidden, 2 * hidden], row_stride: 3 * hidden, sequence: s.seq * 3 * hidden },
        }
    }

    /// Whether the gradients are the product's gradient already (nothing to copy).
    pub fn packed(&self, s: Sizes) -> bool {
        self.row_stride == 3 * s.hidden()
    }

    /// The q/k/v product's gradient (`[rows, 3 · hidden]`, written whole into `packed`) from
    /// `grad` laid out as `self` (not packed).
    pub fn interleave<S: BackendStorage>(&self, grad: &S, packed: &mut S, s: Sizes) -> Result<()> {
        let hidden = s.hidden();
        if self.row_stride == 0 {
            // [3, batch, heads, seq, dim] read as [batch, seq, 3, heads, dim]: the packed rows.
            let blocks = Layout::contiguous((3, s.batch, s.heads, s.seq, s.dim)).permute(&[1, 3, 0, 2, 4])?;
            return grad.copy_strided_src(packed, 0, &blocks);
        }
        for (i, start) in self.blocks.into_iter().enumerate() {
            grad.copy2d(packed, s.rows(), hidden, self.row_stride, 3 * hidden, start, i * hidden)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::CpuStorage;

    /// Each layout's blocks, filled with the values of a known packed gradient at the places
    /// the layout names, come back as that packed gradient.
    #[test]
    fn each_layout_interleaves_into_the_packed_gradient() {
        let s = Sizes { batch: 2, seq: 3, heads: 2, dim: 4 };
        let hidden = s.heads * s.dim;
        let rows = s.batch * s.seq;
        // packed[row][i · hidden + h · dim + e], distinct values.
        let packed: Vec<f32> = (0..rows * 3 * hidden).map(|v| v as f32).collect();
        for name in ["dense", "heads"] {
            let layout = GradientLayout::named(name, s);
            assert!(!layout.packed(s));
            assert_eq!(layout.sequence, s.seq * hidden, "{name}: a sequence's rows in one block");
            let mut blocks = vec![f32::NAN; rows * 3 * hidden];
            for b in 0..s.batch {
                for t in 0..s.seq {
                    for i in 0..3 {
                        for h in 0..s.heads {
                            for e in 0..s.dim {
                                let row = b * s.seq + t;
                                let at = match layout.row_stride {
                                    0 => layout.blocks[i] + ((b * s.heads + h) * s.seq + t) * s.dim + e,
                                    stride => layout.blocks[i] + row * stride + h * s.dim + e,
                                };
                                blocks[at] = packed[row * 3 * hidden + i * hidden + h * s.dim + e];
                            }
                        }
                    }
                }
            }
            let grad = CpuStorage::F32(blocks);
            let mut out = CpuStorage::F32(vec![f32::NAN; rows * 3 * hidden]);
            layout.interleave(&grad, &mut out, s).unwrap();
            let CpuStorage::F32(out) = out else { unreachable!() };
            assert_eq!(out, packed, "{name}");
        }
        let packed_layout = GradientLayout::named("packed", s);
        assert!(packed_layout.packed(s));
        assert_eq!(packed_layout.sequence, s.seq * 3 * hidden);
    }
}
