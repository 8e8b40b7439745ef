//! `longread train`: fine-tune a classifier made by `longread init`, or one built on a
//! pretrained encoder (`--arch`).

mod args;
mod data;
mod output;
mod start;

use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use longread_text::{Chunker, TextTokenizer};
use longread_train::trainer::{train, EpochLog, PhaseLog, Progress, Resume, Split};

pub use args::{LogFormat, Precision, TrainArgs};
use output::{RunOutput, CHECKPOINT};

use crate::checkpoints::{read_checkpoint, resume_from};

/// Runs `longread train`.
pub fn run(args: TrainArgs, quiet: bool) -> Result<()> {
    let checkpoint = resume_from(&args.out, args.resume.as_deref())?;
    let device = Device::Cpu;
    let source = checkpoint.as_deref().unwrap_or(&args.model);
    let mut model = start::starting_model(&args, source, &device)?;
    model.set_precision(args.precision.dtype())?;
    let resume = checkpoint
        .as_deref()
        .map(|dir| read_checkpoint(dir).map(|(state, steps, moments)| Resume { state, moments, steps }))
        .transpose()?;
    let chunker = Chunker::new(TextTokenizer::from_file(model.tokenizer_path())?, model.config().longread.chunking())?;
    let (train_data, dev_data) = data::load_data(&args, &mut model, &chunker, &device)?;
    let model = model;
    let labels = model.labels().to_vec();
    let tasks: Vec<String> = model.config().tasks().into_iter().map(|t| t.name).collect();
    let primary: Vec<usize> = train_data.labels[0].iter().flatten().copied().collect();
    let cfg = args.config(&primary, &labels, &tasks)?;
    let (train_docs, dev_docs) = (&train_data.docs, &dev_data.docs);

    let json = args.log_format == LogFormat::Json;
    let text = !quiet && !json;
    if text {
        eprintln!(
            "training on {} documents ({} chunks), dev {} documents; {}",
            train_docs.len(),
            train_docs.iter().map(|d| d.chunks.len()).sum::<usize>(),
            dev_docs.len(),
            model
                .config()
                .tasks()
                .iter()
                .map(|t| format!("task {} (column \"{}\"): {}", t.name, t.column, t.labels.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut output = match &resume {
        None => {
            let training_args = serde_json::to_string_pretty(&args)? + "\n";
            model.save_replacing(&args.out, &[("training_args.json", training_args.as_bytes())])?;
            RunOutput::new(&args.out, 0)
        }
        Some(r) => RunOutput::new(&args.out, r.state.epoch),
    };
    // Both callbacks report: the reporter is shared.
    let reporter = std::cell::RefCell::new(Reporter::new(text, json));
    let logs = train(
        &model,
        Split { docs: train_docs, labels: train_data.labels.clone() },
        Split { docs: dev_docs, labels: dev_data.labels.clone() },
        &cfg,
        &device,
        resume,
        |p| reporter.borrow_mut().progress(p),
        |end| {
            output.epoch_end(&end)?;
            reporter.borrow_mut().epoch(end.log);
            Ok(())
        },
    );
    reporter.borrow().finish();
    let logs = logs.map_err(|e| match e {
        longread_train::TrainError::Diverged(why) => {
            anyhow::anyhow!("{why} Checkpoint: {}", args.out.join(CHECKPOINT).display())
        }
        other => other.into(),
    })?;
    let stopped_early = logs.last().is_some_and(|l| Some(l.epoch) == args.stop_after_epoch && l.epoch < args.epochs);
    let best = logs.iter().rfind(|l| l.best);
    if json {
        let done = serde_json::json!({
            "event": "done",
            "epochs_run": logs.len(),
            "best_epoch": best.map(|b| b.epoch),
            "stopped_for_resume": stopped_early,
            "out": args.out,
        });
        println!("{done}");
    }
    if stopped_early {
        if text {
            eprintln!("stopped after epoch {}; continue with --resume auto", logs.last().map_or(0, |l| l.epoch));
        }
    } else {
        // The run is complete: the resumable checkpoint is no longer needed.
        output::remove_other_checkpoints(&args.out, None)?;
    }
    if let (true, Some(best)) = (text, best) {
        eprintln!("best epoch {} (macro-F1 {:.4}); model in {}", best.epoch, best.dev.macro_f1, args.out.display());
    }
    Ok(())
}

/// Progress for people (bar and lines on stderr) or machines (JSON lines on stdout).
struct Reporter {
    text: bool,
    json: bool,
    bar: ProgressBar,
    /// When the last step (or phase set-up) ended, for chunks/s.
    since: Instant,
}

impl Reporter {
    fn new(text: bool, json: bool) -> Self {
        let bar = if text { ProgressBar::new(0) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("{spinner} step {pos}/{len} [{elapsed_precise}, eta {eta}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self { text, json, bar, since: Instant::now() }
    }

    fn progress(&mut self, p: Progress) {
        match p {
            Progress::Phase(phase) => {
                self.since = Instant::now();
                self.phase(&phase);
            }
            Progress::Caching { done, total } => {
                self.bar.set_message(format!("caching frozen layers: {done}/{total} chunks"));
                if done == total {
                    if self.json {
                        println!("{}", serde_json::json!({"event": "cached", "chunks": total}));
                    }
                    self.since = Instant::now();
                }
            }
            Progress::Step(s) => {
                let seconds = self.since.elapsed().as_secs_f64().max(1e-9);
                self.since = Instant::now();
                let chunks_per_second = s.chunks as f64 / seconds;
                self.bar.set_length(s.total_steps as u64);
                self.bar.set_position(s.step as u64);
                self.bar.set_message(format!("loss {:.4}, lr {:.2e}, {chunks_per_second:.1} chunks/s", s.loss, s.lr));
                if self.json {
                    let line = serde_json::json!({
                        "event": "step", "step": s.step, "total_steps": s.total_steps, "loss": s.loss,
                        "lr": s.lr, "chunks": s.chunks, "chunks_per_second": chunks_per_second,
                    });
                    println!("{line}");
                }
            }
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
                    "epoch {}: train loss {:.4}, dev loss {:.4}, accuracy {:.4}, macro-F1 {:.4}{} ({:.0} s{})",
                    log.epoch,
                    log.train_loss,
                    log.dev_loss,
                    log.dev.accuracy,
                    log.dev.macro_f1,
                    if log.best { ", best so far: saved" } else { "" },
                    log.seconds,
                    if log.skipped_steps > 0 {
                        format!(", {} NaN/inf steps skipped", log.skipped_steps)
                    } else {
                        String::new()
                    }
                );
            });
        }
        self.since = Instant::now();
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
