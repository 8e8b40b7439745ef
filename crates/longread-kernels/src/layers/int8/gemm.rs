//! `y = dequantise(xq · Wqᵀ) + b` for int8 activations and weights: a register-tiled kernel
//! on AVX-512 VNNI (`vpdpbusd`: 64 byte products per instruction, 4× the multiply-adds of an
//! f32 FMA), one on AVX2 (`vpmaddwd` on bytes widened to 16 bits: 16 products per
//! instruction, 2× an f32 FMA's), and a portable kernel with the same integer arithmetic (all
//! give identical results; tested) for other CPUs.

use rayon::prelude::*;

use crate::layers::fused::{gelu_in_place, SharedMut};
use crate::layers::int8::packed::{PackedWeights, QuantizedRows, GROUP, PANEL};

/// Rows of a register tile.
const TILE_ROWS: usize = 6;
/// Panels (of 16 outputs) of a register tile: 6 × 4 accumulators + 4 weight registers.
const TILE_PANELS: usize = 4;
/// Rows of the AVX2 kernel's tile (one panel): 2 × 4 accumulators + 4 weight registers + 1.
const AVX2_ROWS: usize = 2;
/// Rows per task on the thread pool (their activations stay in L2 while every panel passes).
const TASK_ROWS: usize = 96;

/// Whether this CPU runs the VNNI kernel.
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU has AVX-512 BW and VL (byte-granular masked stores on 128-bit vectors).
pub fn has_avx512_bw_vl() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the AVX2 kernel.
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Which kernel computes the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI.
    Vnni,
    /// AVX2 and FMA.
    Avx2,
    /// Plain loops (any CPU).
    Portable,
}

impl Kernel {
    /// Whether the activations are quantised with AVX-512 (F, BW and VL: every CPU with VNNI
    /// has them, but each is checked).
    pub fn vectorised(self) -> bool {
        self == Self::Vnni && has_vnni() && has_avx512_bw_vl()
    }

    /// The fastest kernel this CPU runs.
    pub fn best() -> Self {
        if has_vnni() {
            Self::Vnni
        } else if has_avx2() {
            Self::Avx2
        } else {
            Self::Portable
        }
    }

    /// Whether this CPU runs the kernel.
    pub fn available(self) -> bool {
        match self {
            Self::Vnni => has_vnni(),
            Self::Avx2 => has_avx2(),
            Self::Portable => true,
        }
    }
}

/// One tile's operands: `rows` activation rows from `a` and `panels` weight panels from `w`.
/// What the product's output goes through before it is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// Nothing: `x · Wᵀ + b`.
    None,
    /// Exact GELU of `x · Wᵀ + b` (a feed-forward block's first layer).
    GeluErf,
}

#[derive(Clone, Copy)]
struct Tile {
    a: *const u8,
    w: *const i8,
    /// Output of the tile's first row and first panel; row stride `out_stride`.
    out: *mut f32,
    /// Index of the first panel (for the per-output scale, correction and bias).
    panel: usize,
    /// Index of the first row within the activations (for its scale).
    row: usize,
}

/// `[rows, out]` = the layer applied to the quantised rows, then `activation` (in each task's
/// rows while they are in cache).
pub fn matmul(x: &QuantizedRows, w: &PackedWeights, kernel: Kernel, activation: Epilogue) -> Vec<f32> {
    let padded_out = w.panels * PANEL;
    let mut y: Vec<f32> = Vec::with_capacity(x.rows * padded_out);
    let kernel = if kernel.available() { kernel } else { Kernel::Portable };
    // The tiles below write every element of every row (all panels of all rows) before anything
    // reads them, so the output is not zero-filled first.
    let out = SharedMut(y.spare_capacity_mut().as_mut_ptr() as *mut f32);
    let tasks = x.rows.div_ceil(TASK_ROWS);
    (0..tasks).into_par_iter().for_each(|chunk| {
        let (first_row, rows) = (chunk * TASK_ROWS, (x.rows - chunk * TASK_ROWS).min(TASK_ROWS));
        // SAFETY: tasks own disjoint row ranges of the allocation (rows × padded_out values).
        let y = unsafe { std::slice::from_raw_parts_mut(out.get().add(first_row * padded_out), rows * padded_out) };
        for panel in (0..w.panels).step_by(TILE_PANELS) {
            let panels = (w.panels - panel).min(TILE_PANELS);
            for r in (0..rows).step_by(TILE_ROWS) {
                let tile_rows = (rows - r).min(TILE_ROWS);
                let tile = Tile {
                    a: x.data[(first_row + r) * x.stride..].as_ptr(),
                    w: w.data[panel * w.panel_len()..].as_ptr(),
                    out: y[r * padded_out + panel * PANEL..].as_mut_ptr(),
                    panel,
                    row: first_row + r,
                };
                // SAFETY: the tile's rows and panels lie inside x, w and y (counted above).
                unsafe { run_tile(kernel, tile, (tile_rows, panels), x, w, padded_out) };
            }
        }
        if activation == Epilogue::GeluErf {
            gelu_in_place(y);
        }
    });
    // SAFETY: every element was written above.
    unsafe { y.set_len(x.rows * padded_out) };
    if padded_out == w.out {
        return y;
    }
    y.chunks(padded_out).flat_map(|row| row[..w.out].iter().copied()).collect()
}

/// Dispatches a tile of `rows × panels` to a kernel monomorphised for its size.
///
/// # Safety
/// The tile must lie inside the buffers.
unsafe fn run_tile(
    kernel: Kernel,
    t: Tile,
    (rows, panels): (usize, usize),
    x: &QuantizedRows,
    w: &PackedWeights,
    out_stride: usize,
) {
    // SAFETY: the tile lies inside the buffers (the caller's contract) and so do its shifted sub-tiles; the VNNI and AVX2 kernels run only where `Kernel::best` found their CPU features.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        if kernel == Kernel::Vnni {
            return match (rows, panels) {
                (TILE_ROWS, TILE_PANELS) => vnni::tile::<TILE_ROWS, TILE_PANELS>(t, x, w, out_stride),
                (TILE_ROWS, _) => (0..panels)
                    .for_each(|p| vnni::tile::<TILE_ROWS, 1>(t.shifted(0, p, w, x, out_stride), x, w, out_stride)),
                (_, TILE_PANELS) => (0..rows)
                    .for_each(|r| vnni::tile::<1, TILE_PANELS>(t.shifted(r, 0, w, x, out_stride), x, w, out_stride)),
                _ => (0..rows).for_each(|r| {
                    (0..panels).for_each(|p| vnni::tile::<1, 1>(t.shifted(r, p, w, x, out_stride), x, w, out_stride))
                }),
            };
        }
        #[cfg(target_arch = "x86_64")]
        if kernel == Kernel::Avx2 {
            for p in 0..panels {
                for r in (0..rows).step_by(AVX2_ROWS) {
                    let tile = t.shifted(r, p, w, x, out_stride);
                    match rows - r {
                        1 => avx2::tile::<1>(tile, x, w, out_stride),
                        _ => avx2::tile::<AVX2_ROWS>(tile, x, w, out_stride),
                    }
                }
            }
            return;
        }
        let _ = kernel;
        portable_tile(t, (rows, panels), x, w, out_stride);
    }
}

impl Tile {
    /// The tile `rows` rows down and `panels` panels right.
    ///
    /// # Safety
    /// The shifted tile must lie inside the buffers.
    unsafe fn shifted(
        self,
        rows: usize,
        panels: usize,
        w: &PackedWeights,
        x: &QuantizedRows,
        out_stride: usize,
    ) -> Self {
        // SAFETY: the shifted tile lies inside the buffers (the caller's contract).
        unsafe {
            Self {
                a: self.a.add(rows * x.stride),
                w: self.w.add(panels * w.panel_len()),
                out: self.out.add(rows * out_stride + panels * PANEL),
                panel: self.panel + panels,
                row: self.row + rows,
            }
        }
    }
}

/// Dequantises one accumulator: `(acc − 128·Σ Wq) · x_scale · w_scale + bias` (one fused
/// multiply-add, as the VNNI kernel rounds it).
#[inline(always)]
fn dequantise(acc: i32, o: usize, x_scale: f32, w: &PackedWeights) -> f32 {
    ((acc - w.offset_correction[o]) as f32).mul_add(x_scale * w.scale[o], w.bias[o])
}

/// The tile with plain integer loops.
///
/// # Safety
/// The tile must lie inside the buffers.
unsafe fn portable_tile(
    t: Tile,
    (rows, panels): (usize, usize),
    x: &QuantizedRows,
    w: &PackedWeights,
    out_stride: usize,
) {
    // SAFETY: the tile lies inside the buffers (the caller's contract): its rows hold `groups × GROUP` bytes and its panels `panel_len` bytes.
    unsafe {
        for r in 0..rows {
            let a = std::slice::from_raw_parts(t.a.add(r * x.stride), w.groups * GROUP);
            for p in 0..panels {
                let panel = std::slice::from_raw_parts(t.w.add(p * w.panel_len()), w.panel_len());
                for lane in 0..PANEL {
                    let mut acc = 0i32;
                    for g in 0..w.groups {
                        for b in 0..GROUP {
                            acc += a[g * GROUP + b] as i32 * panel[(g * PANEL + lane) * GROUP + b] as i32;
                        }
                    }
                    let o = (t.panel + p) * PANEL + lane;
                    *t.out.add(r * out_stride + p * PANEL + lane) = dequantise(acc, o, x.scale[t.row + r], w);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{PackedWeights, QuantizedRows, Tile, GROUP, PANEL};

    /// An `R × C·16` tile: per input group, C weight registers and R broadcast activations
    /// feed R·C `vpdpbusd`s into registers that hold the whole tile.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and VNNI; the tile must lie inside the buffers.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn tile<const R: usize, const C: usize>(
        t: Tile,
        x: &QuantizedRows,
        w: &PackedWeights,
        out_stride: usize,
    ) {
        // SAFETY: the CPU has AVX-512F and VNNI and the tile lies inside the buffers (the caller's contract); loads and stores are unaligned.
        unsafe {
            let mut acc = [[_mm512_setzero_si512(); C]; R];
            let panel_len = w.panel_len();
            for g in 0..w.groups {
                let mut weights = [_mm512_setzero_si512(); C];
                for (c, wv) in weights.iter_mut().enumerate() {
                    *wv = _mm512_loadu_si512(t.w.add(c * panel_len + g * PANEL * GROUP) as *const __m512i);
                }
                for (r, acc_row) in acc.iter_mut().enumerate() {
                    let bytes = (t.a.add(r * x.stride + g * GROUP) as *const i32).read_unaligned();
                    let a = _mm512_set1_epi32(bytes);
                    for (acc, wv) in acc_row.iter_mut().zip(&weights) {
                        *acc = _mm512_dpbusd_epi32(*acc, a, *wv);
                    }
                }
            }
            for c in 0..C {
                let o = (t.panel + c) * PANEL;
                let w_scale = _mm512_loadu_ps(w.scale[o..].as_ptr());
                let correction = _mm512_loadu_si512(w.offset_correction[o..].as_ptr() as *const __m512i);
                let bias = _mm512_loadu_ps(w.bias[o..].as_ptr());
                for (r, acc_row) in acc.iter().enumerate() {
                    let scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x.scale[t.row + r]));
                    let value = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc_row[c], correction));
                    _mm512_storeu_ps(t.out.add(r * out_stride + c * PANEL), _mm512_fmadd_ps(value, scale, bias));
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{PackedWeights, QuantizedRows, Tile, GROUP, PANEL};

    /// An `R × 16` tile (one panel). Per input group, the panel's 64 weight bytes are widened
    /// to 16 bits in 4 registers (4 outputs × 4 bytes each) and each row's 4 activation bytes
    /// to 16 bits repeated 4 times; `vpmaddwd` multiplies them and adds pairs into i32 lanes
    /// (exactly), so each accumulator holds two partial sums per output, added at the end.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; the tile must lie inside the buffers.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile<const R: usize>(t: Tile, x: &QuantizedRows, w: &PackedWeights, out_stride: usize) {
        // SAFETY: the CPU has AVX2 and FMA and the tile lies inside the buffers (the caller's contract); loads and stores are unaligned.
        unsafe {
            let mut acc = [[_mm256_setzero_si256(); 4]; R];
            for g in 0..w.groups {
                let base = t.w.add(g * PANEL * GROUP);
                let mut weights = [_mm256_setzero_si256(); 4];
                for (q, wv) in weights.iter_mut().enumerate() {
                    *wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(base.add(q * 16) as *const __m128i));
                }
                for (r, acc_row) in acc.iter_mut().enumerate() {
                    let bytes = (t.a.add(r * x.stride + g * GROUP) as *const i32).read_unaligned();
                    let a = _mm256_cvtepu8_epi16(_mm_set1_epi32(bytes));
                    for (acc, wv) in acc_row.iter_mut().zip(&weights) {
                        *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(*wv, a));
                    }
                }
            }
            for (r, acc_row) in acc.iter().enumerate() {
                let x_scale = _mm256_set1_ps(x.scale[t.row + r]);
                for half in 0..2 {
                    // hadd gives outputs [0, 1, 4, 5 | 2, 3, 6, 7] of the half; the permutation
                    // puts them in order.
                    let sums = _mm256_hadd_epi32(acc_row[2 * half], acc_row[2 * half + 1]);
                    let sums = _mm256_permute4x64_epi64::<0b11_01_10_00>(sums);
                    let o = t.panel * PANEL + 8 * half;
                    let scale = _mm256_mul_ps(_mm256_loadu_ps(w.scale[o..].as_ptr()), x_scale);
                    let correction = _mm256_loadu_si256(w.offset_correction[o..].as_ptr() as *const __m256i);
                    let bias = _mm256_loadu_ps(w.bias[o..].as_ptr());
                    let value = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, correction));
                    _mm256_storeu_ps(t.out.add(r * out_stride + 8 * half), _mm256_fmadd_ps(value, scale, bias));
                }
            }
        }
    }
}
