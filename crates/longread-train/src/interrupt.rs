//! Stopping a training run cleanly from outside (Ctrl-C in the CLI, KeyboardInterrupt in
//! Python): a front calls [`request_stop`]; the training loop notices after the optimizer
//! step in progress, saves a checkpoint there (or, when that step ended a round, after the
//! round's evaluation and save) and returns [`TrainError::Interrupted`], so that
//! `--resume auto` continues the run where it stopped and nothing trained is lost.
//!
//! One flag per process: a run in progress stops whichever front asked.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, TrainError};

static STOP: AtomicBool = AtomicBool::new(false);

/// Asks the training run in progress (or the next one) to stop at its next step boundary;
/// returns whether a stop had already been asked for. Cheap and lock-free: safe to call from
/// a signal handler.
pub fn request_stop() -> bool {
    STOP.swap(true, Ordering::SeqCst)
}

/// Whether a stop was asked for and not yet cleared.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Forgets an earlier request (a front starting a new run after an interrupted one).
pub fn clear_stop() {
    STOP.store(false, Ordering::SeqCst);
}

/// `Err(Interrupted)` saying where the run stopped (after `step` optimizer steps), when a
/// stop was asked for.
pub(crate) fn check(step: usize) -> Result<()> {
    check_flag(&STOP, step)
}

/// `Err(Interrupted)` saying what was being filled and how far (`done` of `total` chunks), when
/// a stop was asked for: long cache fills stop between groups instead of running to the end.
pub(crate) fn check_filling(what: &str, done: usize, total: usize) -> Result<()> {
    match stop_requested() {
        true => Err(TrainError::Interrupted(format!("interrupted while {what} ({done} of {total} chunks done)"))),
        false => Ok(()),
    }
}

fn check_flag(flag: &AtomicBool, step: usize) -> Result<()> {
    match flag.load(Ordering::SeqCst) {
        true => Err(TrainError::Interrupted(format!("interrupted after optimizer step {step}"))),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The process-wide flag itself is exercised end to end (the CLI's and Python's Ctrl-C
    // tests): setting it here would stop other tests' runs in this process.
    #[test]
    fn a_set_flag_stops_with_the_step_reached() {
        let flag = AtomicBool::new(false);
        assert!(check_flag(&flag, 3).is_ok());
        flag.store(true, Ordering::SeqCst);
        let err = check_flag(&flag, 7).unwrap_err();
        assert!(matches!(err, TrainError::Interrupted(_)));
        assert_eq!(err.to_string(), "interrupted after optimizer step 7");
    }
}
