//! Weights of a dense layer quantised to int8 (symmetric, one scale per output) and packed
//! for the VNNI dot product `vpdpbusd`, which multiplies 4 unsigned activation bytes by 4
//! signed weight bytes and adds them to one i32 lane, 16 lanes per 512-bit register (the AVX2
//! kernel reads the same layout, 4 outputs per 256-bit register after widening to 16 bits).

use crate::layers::fused::multiversion;

/// Outputs per panel: one 512-bit register of i32 lanes.
pub const PANEL: usize = 16;
/// Inputs per group: the bytes one `vpdpbusd` lane adds up.
pub const GROUP: usize = 4;

/// `W [out, in]` as int8 in panels: `data[panel][group][lane][byte]` holds
/// `Wq[panel·16 + lane, group·4 + byte]` (zero past `out` and `in`).
#[derive(Debug, Clone)]
pub struct PackedWeights {
    pub out: usize,
    pub inputs: usize,
    /// `ceil(in / 4)`.
    pub groups: usize,
    /// `ceil(out / 16)`.
    pub panels: usize,
    pub data: Vec<i8>,
    /// Per output (padded to `panels · 16`): `max |W[o, :]| / 127`.
    pub scale: Vec<f32>,
    /// Per output (padded): `128 · Σ_k Wq[o, k]`, which the kernel subtracts because the
    /// activations are stored with an offset of 128 (as unsigned bytes).
    pub offset_correction: Vec<i32>,
    /// Per output (padded): the layer's bias, 0 without one.
    pub bias: Vec<f32>,
}

impl PackedWeights {
    /// Quantises `weight` (`[out, in]`, row-major) and packs it; `bias` has `out` entries.
    pub fn new(weight: &[f32], out: usize, inputs: usize, bias: Option<&[f32]>) -> Self {
        let (groups, panels) = (inputs.div_ceil(GROUP), out.div_ceil(PANEL));
        let padded = panels * PANEL;
        let mut data = vec![0i8; panels * groups * PANEL * GROUP];
        let (mut scale, mut offset_correction, mut padded_bias) =
            (vec![0f32; padded], vec![0i32; padded], vec![0f32; padded]);
        for o in 0..out {
            let row = &weight[o * inputs..(o + 1) * inputs];
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = if max > 0.0 { max / 127.0 } else { 1.0 };
            scale[o] = s;
            let (panel, lane) = (o / PANEL, o % PANEL);
            let mut sum = 0i32;
            for (k, &w) in row.iter().enumerate() {
                let q = (w / s).round().clamp(-127.0, 127.0) as i8;
                sum += q as i32;
                data[((panel * groups + k / GROUP) * PANEL + lane) * GROUP + k % GROUP] = q;
            }
            offset_correction[o] = 128 * sum;
            padded_bias[o] = bias.map_or(0.0, |b| b[o]);
        }
        Self { out, inputs, groups, panels, data, scale, offset_correction, bias: padded_bias }
    }

    /// Bytes of one panel.
    pub fn panel_len(&self) -> usize {
        self.groups * PANEL * GROUP
    }
}

/// Activations `[rows, in]` quantised per row (symmetric, `max |x| / 127`) and stored as
/// unsigned bytes `q + 128`, rows padded to `4 · groups` bytes with the value of 0 (128).
#[derive(Debug)]
pub struct QuantizedRows {
    pub rows: usize,
    /// Bytes per row: `4 · groups`.
    pub stride: usize,
    pub data: Vec<u8>,
    pub scale: Vec<f32>,
}

impl QuantizedRows {
    /// Quantises `xs` (`[rows, inputs]`, row-major) for weights of `groups` input groups;
    /// `vectorised` uses AVX-512 (the same values: round half to even in both).
    pub fn new(xs: &[f32], inputs: usize, groups: usize, vectorised: bool) -> Self {
        use rayon::prelude::*;
        let rows = xs.len() / inputs;
        let stride = groups * GROUP;
        let mut data = vec![128u8; rows * stride];
        let mut scale = vec![0f32; rows];
        data.par_chunks_mut(stride).zip(scale.par_iter_mut()).zip(xs.par_chunks(inputs)).for_each(|((q, s), x)| {
            #[cfg(target_arch = "x86_64")]
            if vectorised {
                // SAFETY: `vectorised` is only set where the CPU has AVX-512F, BW and VL
                // (`Kernel::vectorised`), and `q` holds `stride ≥ inputs` bytes.
                *s = unsafe { avx512::quantize_row(x, q) };
                return;
            }
            let _ = vectorised;
            *s = quantize_row(x, q);
        });
        Self { rows, stride, data, scale }
    }
}

/// The scale of a row: `max |x| / 127`, or 1 for a row of zeros.
#[inline(always)]
fn row_scale(max_abs: f32) -> f32 {
    if max_abs > 0.0 {
        max_abs / 127.0
    } else {
        1.0
    }
}

multiversion! {
    /// Quantises one row into `q` (`x / scale` rounded half to even, clamped to ±127, plus
    /// 128); returns the scale.
    fn quantize_row(x: &[f32], q: &mut [u8]) -> f32 {
        let scale = row_scale(x.iter().fold(0f32, |m, v| m.max(v.abs())));
        let inv = 1.0 / scale;
        for (q, &x) in q.iter_mut().zip(x) {
            *q = ((x * inv).round_ties_even().clamp(-127.0, 127.0) as i32 + 128) as u8;
        }
        scale
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// [`super::quantize_row`] 16 values at a time (`vcvtps2dq` rounds half to even).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, BW and VL (the masked byte store of the tail); `q` holds at
    /// least `x.len()` bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row(x: &[f32], q: &mut [u8]) -> f32 {
        // SAFETY: the CPU has AVX-512F, BW and VL and `q` holds at least `x.len()` bytes (the caller's contract); full loads stay within `x`, the tail is a masked load and store.
        unsafe {
            let (chunks, tail) = (x.len() / 16, x.len() % 16);
            let tail_mask: __mmask16 = ((1u32 << tail) - 1) as __mmask16;
            let load = |i: usize| _mm512_loadu_ps(x.as_ptr().add(i * 16));
            let load_tail = || _mm512_maskz_loadu_ps(tail_mask, x.as_ptr().add(chunks * 16));
            let mut max = _mm512_setzero_ps();
            for i in 0..chunks {
                max = _mm512_max_ps(max, _mm512_abs_ps(load(i)));
            }
            max = _mm512_max_ps(max, _mm512_abs_ps(load_tail()));
            let scale = super::row_scale(_mm512_reduce_max_ps(max));
            let inv = _mm512_set1_ps(1.0 / scale);
            let (low, high, offset) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127), _mm512_set1_epi32(128));
            let bytes = |v: __m512| {
                let i = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
                _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(i, low), high), offset))
            };
            for i in 0..chunks {
                _mm_storeu_si128(q.as_mut_ptr().add(i * 16) as *mut __m128i, bytes(load(i)));
            }
            if tail > 0 {
                _mm_mask_storeu_epi8(q.as_mut_ptr().add(chunks * 16) as *mut i8, tail_mask, bytes(load_tail()));
            }
            scale
        }
    }
}
