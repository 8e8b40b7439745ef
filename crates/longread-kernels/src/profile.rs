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
