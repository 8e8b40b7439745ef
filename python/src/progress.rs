//! What a training run started from Python reports: notes, a progress line at most every
//! 10 s, a line per epoch or evaluation; Python's signal handlers run between steps, and the
//! caller's callback after each epoch or evaluation.

use pyo3::prelude::*;

/// Training hooks for a Python session: the set-up notes, a progress line at most every
/// [`PROGRESS_EVERY`] (steps with loss and time left, cache building) and one line per epoch on
/// stderr (nothing when `quiet`); the summary and OUT's metrics files hold the rest. At every
/// report it lets Python handle pending signals: a Ctrl-C (KeyboardInterrupt) asks the run to
/// stop after the step in progress and save a checkpoint, then is raised when the run returns.
/// After each epoch (or pretraining evaluation) it calls the caller's `callback` with that
/// epoch's dict; an exception the callback raises stops the run the same way.
pub(crate) struct Lines {
    pub(crate) quiet: bool,
    /// `on_epoch` / `on_evaluation`: called with each epoch's (evaluation's) dict.
    pub(crate) callback: Option<PyObject>,
    /// The exception Python's signal handlers raised, which stopped the run.
    pub(crate) interrupted: Option<PyErr>,
    /// When the last progress line was printed.
    pub(crate) last_line: Option<std::time::Instant>,
    /// The first step this call took, and when (for the time left).
    pub(crate) first_step: Option<(usize, std::time::Instant)>,
}

/// Least time between two progress lines (a notebook's output stays readable).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Lines {
    /// Whether a progress line is due (the first one, then every [`PROGRESS_EVERY`]).
    fn line_due(&mut self, last: bool) -> bool {
        let due = !self.quiet && (last || self.last_line.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY));
        if due {
            self.last_line = Some(std::time::Instant::now());
        }
        due
    }

    /// A line for an optimizer step: where the run is, the step's loss and the time left at
    /// this call's pace so far.
    fn step_line(&mut self, step: &longread_train::trainer::StepLog) {
        let (first, started) = *self.first_step.get_or_insert((step.step, std::time::Instant::now()));
        if !self.line_due(step.step == step.total_steps) {
            return;
        }
        let done = step.step.saturating_sub(first);
        let left = match done {
            0 => String::new(),
            _ => {
                let per_step = started.elapsed().as_secs_f64() / done as f64;
                format!(", ~{:.0} s left", per_step * step.total_steps.saturating_sub(step.step) as f64)
            }
        };
        eprintln!("step {}/{}: loss {:.4}, lr {:.2e}{left}", step.step, step.total_steps, step.loss, step.lr);
    }

    /// Runs Python's signal handlers; the first exception they raise stops the run.
    fn poll_signals(&mut self) {
        if self.interrupted.is_some() {
            return;
        }
        if let Err(signal) = Python::with_gil(|py| py.check_signals()) {
            self.stop_for(signal);
        }
    }

    /// Calls the caller's callback with `log` as a dict (then runs the signal handlers); the
    /// first exception either raises stops the run.
    fn call_back(&mut self, log: serde_json::Result<serde_json::Value>) {
        if let (Some(callback), None) = (&self.callback, &self.interrupted) {
            let json = log.map(|log| log.to_string()).unwrap_or_default();
            let called = Python::with_gil(|py| {
                crate::convert::from_json(py, &json).and_then(|dict| callback.call1(py, (dict,)))
            });
            if let Err(raised) = called {
                self.stop_for(raised);
            }
        }
        self.poll_signals();
    }

    /// Asks the run to stop at the next step boundary and save a checkpoint; `raised` is
    /// raised when it returns.
    fn stop_for(&mut self, raised: PyErr) {
        self.interrupted = Some(raised);
        longread_train::interrupt::request_stop();
        if !self.quiet {
            eprintln!(
                "interrupted: stopping at the next step boundary (pretraining: evaluation) and saving a checkpoint"
            );
        }
    }
}

impl longread_train::run::RunHooks for Lines {
    fn progress(&mut self, progress: longread_train::trainer::Progress) {
        use longread_train::trainer::Progress;
        match &progress {
            Progress::Step(step) => self.step_line(step),
            Progress::PretrainStep(step) => {
                let as_step = longread_train::trainer::StepLog {
                    step: step.step,
                    total_steps: step.total_steps,
                    loss: step.loss,
                    lr: step.lr,
                    chunks: step.tokens,
                };
                self.step_line(&as_step)
            }
            Progress::Caching { done, total } if self.line_due(done == total) => {
                eprintln!("caching frozen layers: {done}/{total} chunks")
            }
            Progress::Fits { done, total } if self.line_due(done == total) => {
                eprintln!("bag of words: {done}/{total} fits (cross-validation, then the final model)")
            }
            _ => {}
        }
        self.poll_signals();
    }
    fn epoch(&mut self, log: &longread_train::trainer::EpochLog) {
        if !self.quiet {
            let best = match (log.best, log.saved) {
                (true, _) => " (best)",
                (false, true) => " (kept: last)",
                (false, false) => "",
            };
            eprintln!(
                "epoch {}: train loss {:.4}, {}{best}, {:.0} s",
                log.epoch,
                log.train_loss,
                log.dev_words(),
                log.seconds
            );
        }
        self.call_back(serde_json::to_value(log));
    }
    fn note(&mut self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
        self.poll_signals();
    }

    fn evaluation(&mut self, log: &longread_train::pretrain::PretrainLog) {
        if !self.quiet {
            eprintln!(
                "step {}: train loss {:.4}, held-out loss {:.4}, perplexity {:.2}, {:.0} tokens/s",
                log.step, log.train_loss, log.eval_loss, log.perplexity, log.tokens_per_second
            );
        }
        self.call_back(serde_json::to_value(log));
    }
}
