//! Time per kind of step of a forward pass, for finding where a GPU spends it: with
//! `LONGREAD_PROFILE=1`, each step wrapped in [`timed`] waits for the device before and after
//! itself (so the device does nothing else meanwhile: the total is slower than a normal run,
//! the shares are what matters), and [`report`] gives the sums. Off (the default), [`timed`]
//! only runs the step.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use candle_core::Device;

/// Seconds and calls per step name.
static TOTALS: Mutex<BTreeMap<&'static str, (f64, usize)>> = Mutex::new(BTreeMap::new());

/// Whether `LONGREAD_PROFILE` is set (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LONGREAD_PROFILE").is_some_and(|v| v != "0" && !v.is_empty()))
}

/// Runs `step`; when profiling, timed on its own between two waits for `device`.
pub fn timed<T, E: From<candle_core::Error>>(
    name: &'static str,
    device: &Device,
    step: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    if !enabled() {
        return step();
    }
    device.synchronize()?;
    let started = Instant::now();
    let out = step()?;
    device.synchronize()?;
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = totals.entry(name).or_insert((0.0, 0));
    entry.0 += started.elapsed().as_secs_f64();
    entry.1 += 1;
    Ok(out)
}

/// The sums so far: (step, seconds, calls), longest first.
pub fn report() -> Vec<(&'static str, f64, usize)> {
    let totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let mut rows: Vec<_> = totals.iter().map(|(k, (s, n))| (*k, *s, *n)).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows
}

/// Forgets the sums (after a warm-up run).
pub fn reset() {
    TOTALS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

thread_local! {
    /// When this thread first waited for a result of its queued device work since
    /// [`take_first_wait`] (see [`note_wait`]).
    static FIRST_WAIT: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Notes that the host has queued its work and now waits for a result (a value read back from
/// the device): the first such moment since [`take_first_wait`] is kept. A GPU runs the work
/// queued before it while the host goes on queueing, so the time from a step's start to its
/// first wait is the host's share; when it is close to the whole step, the GPU waited on the
/// host (`bench --workload train`'s `queued_s`).
pub fn note_wait() {
    FIRST_WAIT.with(|first| {
        if first.get().is_none() {
            first.set(Some(Instant::now()));
        }
    });
}

/// The first wait noted on this thread since the last call (see [`note_wait`]), forgotten.
pub fn take_first_wait() -> Option<Instant> {
    FIRST_WAIT.with(std::cell::Cell::take)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first wait since the last take is kept; later ones are not; a take forgets it.
    #[test]
    fn the_first_wait_is_kept_until_taken() {
        let _ = take_first_wait();
        assert_eq!(take_first_wait(), None, "nothing noted");
        note_wait();
        let first = FIRST_WAIT.with(std::cell::Cell::get).expect("noted");
        std::thread::sleep(std::time::Duration::from_millis(2));
        note_wait();
        assert_eq!(take_first_wait(), Some(first), "the first wait, not the last");
        assert_eq!(take_first_wait(), None, "taken: forgotten");
    }
}
