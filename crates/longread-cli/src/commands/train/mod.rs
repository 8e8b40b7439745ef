//! `longread train`: fine-tune a classifier made by `longread init`, one built on a
//! pretrained encoder (`--arch`), or the HAN. The run itself is the library's
//! (`longread_train::run::train_run`); this command parses the flags and prints progress.

use std::io::IsTerminal;
use std::time::Instant;

use crate::commands::predict::plain_interval;
use anyhow::Result;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use longread_train::run::spec::MetricArg;
use longread_train::run::{train_run, RunHooks, TrainSpec};
use longread_train::trainer::{EpochLog, PhaseLog, Progress};

/// Arguments of `longread train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// `text`: a progress bar and a line per epoch on stderr; `json`: one JSON object per
    /// event (phase, step, epoch, done) on stdout, no progress bar.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Read flags from a TOML file: keys are flag names (`lr = 2e-5`, `freeze-base = true`,
    /// `task = ["a=x", "b=y"]`); flags given on the command line win.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub spec: TrainSpec,
}

/// How training reports progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// For people: progress bar and epoch lines on stderr.
    Text,
    /// For machines: JSON lines on stdout.
    Json,
}

/// Runs `longread train`.
pub fn run(mut args: TrainArgs, quiet: bool, device: longread_model::DeviceChoice) -> Result<()> {
    args.spec.device = device;
    let json = args.log_format == LogFormat::Json;
    let text = !quiet && !json;
    let mut reporter = Reporter::new(text, json, args.spec.progress_unit());
    let mut front = serde_json::Map::new();
    front.insert("log_format".into(), serde_json::to_value(args.log_format)?);
    crate::interrupt::stop_cleanly_on_ctrl_c(crate::interrupt::AFTER_THIS_STEP);
    let summary = train_run(&mut args.spec, front, &mut reporter);
    reporter.finish();
    let summary = summary?;
    let out = &args.spec.out;
    if json {
        let done = serde_json::json!({
            "event": "done",
            "epochs_run": summary.logs.len(),
            "best_epoch": summary.best().map(|l| l.epoch),
            "kept_epoch": summary.kept().map(|l| l.epoch),
            "stopped_for_resume": summary.stopped_for_resume,
            "out": out,
        });
        let mut done = done;
        if let Some(bow) = &summary.bow {
            done["bow"] = serde_json::to_value(bow)?;
        }
        if let Some(cv) = &summary.cv {
            done["cv"] = serde_json::to_value(cv)?;
        }
        if let Some(threshold) = &summary.threshold {
            done["threshold"] = serde_json::to_value(threshold)?;
        }
        if let Some(calibration) = &summary.calibration {
            done["calibration"] = serde_json::to_value(calibration)?;
        }
        println!("{done}");
    }
    if text && summary.stopped_for_resume {
        eprintln!("stopped after epoch {}; continue with --resume auto", summary.logs.last().map_or(0, |l| l.epoch));
    }
    if let (true, Some(kept)) = (text, summary.kept()) {
        // With --keep last, OUT holds the last epoch whether or not it was the best.
        // The metric that chose it (it said macro-F1 whatever --metric was).
        let chosen = |dev: &longread_metrics::Report| match args.spec.training.metric {
            MetricArg::MacroF1 => format!(" (macro-F1 {:.4})", dev.macro_f1),
            MetricArg::WeightedF1 => format!(" (weighted F1 {:.4})", dev.weighted_f1),
            MetricArg::Accuracy if dev.micro_f1.is_some() => format!(" (subset accuracy {:.4})", dev.accuracy),
            MetricArg::Accuracy => format!(" (accuracy {:.4})", dev.accuracy),
            MetricArg::MicroF1 => format!(" (micro-F1 {:.4})", dev.micro_f1.unwrap_or(dev.accuracy)),
            MetricArg::RocAuc => format!(" (ROC-AUC {:.4})", dev.roc_auc.unwrap_or(f64::NAN)),
            MetricArg::DevLoss => format!(" (dev loss {:.4})", kept.dev_loss.unwrap_or(f64::NAN)),
        };
        let (which, dev) = match &kept.dev {
            None => ("last epoch", " (no dev set)".to_string()),
            Some(dev) if kept.best => ("best epoch", chosen(dev)),
            Some(dev) => ("last epoch (--keep last)", chosen(dev)),
        };
        eprintln!("{which} {}{dev}; model in {}", kept.epoch, out.display());
    }
    Ok(())
}

impl RunHooks for Reporter {
    fn progress(&mut self, progress: Progress) {
        Reporter::progress(self, progress)
    }
    fn epoch(&mut self, log: &EpochLog) {
        Reporter::epoch(self, log)
    }
    fn note(&mut self, line: &str) {
        if self.text {
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }
}

/// Progress for people (bar and lines on stderr) or machines (JSON lines on stdout). When
/// stderr is not a terminal (a log file, a job scheduler) the bar draws nothing: plain lines
/// then say how far a long phase is, at most every [`plain_interval`].
struct Reporter {
    text: bool,
    json: bool,
    bar: ProgressBar,
    /// Plain progress lines instead of the bar (stderr is not a terminal).
    plain: bool,
    /// When the last plain line or periodic JSON event was written.
    last_report: Option<Instant>,
    /// When the run started.
    started: Instant,
    /// Time between plain lines ([`plain_interval`]).
    interval: std::time::Duration,
    /// When the last step (or phase set-up) ended, for items/s.
    since: Instant,
    /// What a step's `chunks` count: "chunks" or "documents".
    unit: &'static str,
}

impl Reporter {
    fn new(text: bool, json: bool, unit: &'static str) -> Self {
        let bar = if text { ProgressBar::new(0) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("{spinner} step {pos}/{len} [{elapsed_precise}, eta {eta}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let plain = text && !std::io::stderr().is_terminal();
        let interval = plain_interval();
        Self {
            text,
            json,
            bar,
            plain,
            last_report: None,
            started: Instant::now(),
            interval,
            since: Instant::now(),
            unit,
        }
    }

    /// Whether a periodic report is due (an interval after the start or the last one), and if
    /// so starts the next interval.
    fn report_due(&mut self) -> bool {
        let due = self.last_report.unwrap_or(self.started).elapsed() >= self.interval;
        if due {
            self.last_report = Some(Instant::now());
        }
        due
    }

    fn progress(&mut self, p: Progress) {
        match p {
            Progress::Phase(phase) => {
                self.since = Instant::now();
                self.phase(&phase);
            }
            Progress::Caching { done, total } => {
                let message = format!("caching frozen layers: {done}/{total} chunks");
                if (self.plain || self.json) && done < total && self.report_due() {
                    if self.plain {
                        eprintln!("{message}");
                    }
                    if self.json {
                        println!("{}", serde_json::json!({"event": "caching", "done": done, "total": total}));
                    }
                }
                self.bar.set_message(message);
                if done == total {
                    if self.plain {
                        eprintln!("cached {total} chunks");
                    }
                    if self.json {
                        println!("{}", serde_json::json!({"event": "cached", "chunks": total}));
                    }
                    self.since = Instant::now();
                }
            }
            Progress::Fits { done, total } => {
                self.bar.set_length(total as u64);
                self.bar.set_position(done as u64);
                self.bar.set_message("fitting (cross-validation, then the final model)");
            }
            Progress::Step(s) => {
                let seconds = self.since.elapsed().as_secs_f64().max(1e-9);
                self.since = Instant::now();
                let per_second = s.chunks as f64 / seconds;
                self.bar.set_length(s.total_steps as u64);
                self.bar.set_position(s.step as u64);
                let message = format!("loss {:.4}, lr {:.2e}, {per_second:.1} {}/s", s.loss, s.lr, self.unit);
                if self.plain && self.report_due() {
                    eprintln!("step {}/{}: {message}", s.step, s.total_steps);
                }
                self.bar.set_message(message);
                if self.json {
                    let mut line = serde_json::json!({
                        "event": "step", "step": s.step, "total_steps": s.total_steps, "loss": s.loss, "lr": s.lr,
                    });
                    line[self.unit] = s.chunks.into();
                    line[format!("{}_per_second", self.unit)] = per_second.into();
                    println!("{line}");
                }
            }
            // A training run takes no pretraining steps (`longread pretrain` reports those).
            Progress::PretrainStep(_) => {}
        }
    }

    fn phase(&self, p: &PhaseLog) {
        if self.json {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            v["event"] = "phase".into();
            println!("{v}");
        }
        if self.text {
            self.bar.suspend(|| {
                eprintln!(
                    "from epoch {}: training {} ({} of {} parameters){}",
                    p.epoch,
                    p.trains,
                    p.trainable_parameters,
                    p.total_parameters,
                    if p.cache.is_empty() { String::new() } else { format!("; cached: {}", p.cache) }
                )
            });
        }
    }

    fn epoch(&mut self, log: &EpochLog) {
        if self.json {
            let mut v = serde_json::to_value(log).unwrap_or_default();
            v["event"] = "epoch".into();
            println!("{v}");
        }
        if self.text {
            self.bar.suspend(|| {
                eprintln!(
                    "epoch {}: train loss {:.4}, {}{} ({:.0} s{})",
                    log.epoch,
                    log.train_loss,
                    log.dev_words(),
                    match (log.best, log.saved) {
                        (true, _) => ", best so far: saved",
                        (false, true) if log.dev.is_none() => ", saved",
                        (false, true) => ", saved (--keep last)",
                        (false, false) => "",
                    },
                    log.seconds,
                    if log.skipped_steps > 0 {
                        format!(", {} NaN/inf steps skipped", log.skipped_steps)
                    } else {
                        String::new()
                    } + &log.peak_gpu_bytes.map_or(String::new(), |b| format!(
                        ", peak GPU memory {:.2} GiB",
                        b as f64 / (1u64 << 30) as f64
                    ))
                );
            });
        }
        self.since = Instant::now();
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
