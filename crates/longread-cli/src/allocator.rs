//! The binary's allocator: mimalloc, told to keep freed memory for reuse.
//!
//! Training and prediction free and reallocate the same large buffers every batch. By default
//! mimalloc returns ("purges") freed pages to the OS after a delay (10 ms in mimalloc v2, 1 s in
//! v3, which libmimalloc-sys builds), and the kernel then zeroes them again on the next
//! touch: 19% of a BERT-base training step's profile was
//! `clear_page`. With purging off, the step took 9.4 s instead of 11.3 s (BENCHMARKS.md); the
//! peak memory is the same, but the process keeps it until it exits. `longread serve` keeps
//! mimalloc's default (purge after 1 s): a server runs for days and should not keep a peak's
//! memory; with purging off its RSS grew in steps over a 10-minute soak (BENCHMARKS.md).

/// Reuses freed memory across encoder batches (measured: see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (index 15 in v2 and v3; not exported by
/// libmimalloc-sys: the test below checks the index against the option's documented default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Turns purging off (purge delay −1), unless the user set `MIMALLOC_PURGE_DELAY`.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a global integer option; mimalloc reads it on its next purge decision.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_index_is_the_documented_one() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the environment sets it: the default cannot be checked
        }
        // SAFETY: reads a global integer option.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert!(
            default == 10 || default == 1000,
            "mimalloc's purge_delay defaults to 10 ms (v2) or 1000 ms (v3), got {default}: another index means another option"
        );
        keep_freed_memory();
        // SAFETY: as above.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }, -1);
    }
}
