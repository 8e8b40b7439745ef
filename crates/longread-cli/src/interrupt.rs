//! Ctrl-C during `train` and `pretrain`: the first asks the run to stop at its next step
//! boundary and save a checkpoint there (`longread_train::interrupt`), so that `--resume auto`
//! continues it; a second quits at once (exit status 130), as Ctrl-C does elsewhere.

/// What the first Ctrl-C prints (written from the handler with one `write`): the command's
/// own notice (reading a set `OnceLock` is one atomic load).
static NOTICE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// The notice of `train`: a checkpoint follows the step in progress.
pub const AFTER_THIS_STEP: &str =
    "\nCtrl-C: stopping after the current step and saving a checkpoint (Ctrl-C again quits at once)\n";

/// The notice of `pretrain`: checkpoints are taken at evaluations only.
pub const AT_NEXT_EVALUATION: &str =
    "\nCtrl-C: stopping at the next evaluation and saving a checkpoint there (Ctrl-C again quits at once)\n";

/// Exit status of a run that was interrupted: 128 + SIGINT, as shells report it.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Installs the handler, which prints `notice` on the first Ctrl-C (Unix; elsewhere Ctrl-C
/// keeps its default action).
pub fn stop_cleanly_on_ctrl_c(notice: &'static str) {
    let _ = NOTICE.set(notice);
    #[cfg(unix)]
    // SAFETY: installs a handler that only does async-signal-safe work: atomic swaps and
    // loads, write(2) and _exit(2).
    unsafe {
        libc::signal(libc::SIGINT, on_ctrl_c as *const () as libc::sighandler_t);
    }
}

#[cfg(unix)]
extern "C" fn on_ctrl_c(_: libc::c_int) {
    if longread_train::interrupt::request_stop() {
        // The second Ctrl-C. SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(EXIT_INTERRUPTED) }
    }
    if let Some(notice) = NOTICE.get() {
        // SAFETY: write(2) on stderr with a valid buffer is async-signal-safe; its result does
        // not matter.
        unsafe {
            libc::write(2, notice.as_ptr().cast(), notice.len());
        }
    }
}

/// Whether `err` says a run stopped because it was asked to.
pub fn is_interrupted(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        matches!(e.downcast_ref::<longread_train::TrainError>(), Some(longread_train::TrainError::Interrupted(_)))
    })
}
