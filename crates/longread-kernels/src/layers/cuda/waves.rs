//! Grids that run as one wave: a grid-stride kernel launched with more blocks than the GPU
//! holds at once runs them as a full wave and then a partial one, the rest of the GPU idle while
//! the last blocks finish. The register-heavy LayerNorm backward (`residual_norm_train_grad_regs6`:
//! ~200 registers a thread, 2 blocks of 4 warps per multiprocessor) showed it: 10,240 rows in
//! blocks of 32 rows made 320 blocks where an H200 holds 264, a second wave of 56.

/// Blocks of `warps_per_block` warps for a kernel whose warps take `rows` rows in turn: one row
/// per warp where that fits in one wave of `resident` blocks (how many the GPU holds at once),
/// else exactly one wave, every warp taking its share of the rows.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) fn one_wave_blocks(rows: usize, warps_per_block: usize, resident: usize) -> usize {
    rows.div_ceil(warps_per_block.max(1)).clamp(1, resident.max(1))
}

/// How many blocks of `threads` threads of `func` the GPU of `dev` holds at once (its
/// multiprocessors times the blocks each holds for the kernel's registers and shared memory),
/// asked of the driver once per GPU and kernel.
#[cfg(feature = "cuda")]
pub(super) fn resident_blocks(
    dev: &candle_core::CudaDevice,
    name: &str,
    func: &candle_core::cuda_backend::cudarc::driver::CudaFunction,
    threads: u32,
) -> usize {
    use std::sync::Mutex;
    /// (GPU ordinal, kernel, threads a block) → blocks held at once.
    type Known = Vec<((usize, String, u32), usize)>;
    static KNOWN: Mutex<Known> = Mutex::new(Vec::new());
    let ordinal = dev.cuda_stream().context().ordinal();
    let mut known = KNOWN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, blocks)) = known.iter().find(|((o, n, t), _)| (*o, n.as_str(), *t) == (ordinal, name, threads)) {
        return *blocks;
    }
    // The query needs the GPU's context current on this thread. A driver that cannot say: one
    // block per multiprocessor, the least any kernel that launches at all gets (logged).
    let asked = dev
        .cuda_stream()
        .context()
        .bind_to_thread()
        .and_then(|()| func.occupancy_max_active_blocks_per_multiprocessor(threads, 0, None));
    let per_multiprocessor = match asked {
        Ok(n) if n > 0 => n,
        other => {
            tracing::warn!(
                "{name}: the driver did not say how many blocks fit a multiprocessor ({other:?}); assuming 1"
            );
            1
        }
    };
    let blocks = crate::layers::cuda::flash::multiprocessors_of(dev) * per_multiprocessor as usize;
    tracing::debug!("{name}: {per_multiprocessor} blocks of {threads} threads per multiprocessor, {blocks} at once");
    known.push(((ordinal, name.to_string(), threads), blocks));
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_is_one_row_per_warp_up_to_one_wave() {
        // 10,240 rows, 4 warps a block, an H200 holding 2 blocks on each of 132 multiprocessors:
        // one wave of 264 blocks (the old 32 rows a block made 320, a second wave of 56).
        assert_eq!(one_wave_blocks(10_240, 4, 264), 264);
        // Few rows: a warp each, no block idle.
        assert_eq!(one_wave_blocks(1_000, 4, 264), 250);
        assert_eq!(one_wave_blocks(1_001, 4, 264), 251);
        // Never an empty grid, whatever the inputs.
        assert_eq!(one_wave_blocks(0, 4, 264), 1);
        assert_eq!(one_wave_blocks(5, 0, 0), 1);
    }
}
