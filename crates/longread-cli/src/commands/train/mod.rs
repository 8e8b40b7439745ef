//! `longread train`: fine-tune a classifier made by `longread init`, or one built on a
//! pretrained encoder (`--arch`).

mod args;
mod data;
mod han;
mod start;

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use longread_text::{Chunker, TextTokenizer};
use longread_train::run::{
    check_resume_settings, fingerprint_file, read_checkpoint, remove_other_checkpoints, resume_from, RunOutput,
    CHECKPOINT,
};
use longread_train::trainer::{train, EpochLog, PhaseLog, Progress, Resume, Split};
use longread_train::TrainError;

pub use args::{LogFormat, Precision, TrainArgs};

/// Runs `longread train`.
pub fn run(mut args: TrainArgs, quiet: bool) -> Result<()> {
    args.resolve_defaults()?;
    let checkpoint = resume_from(&args.out, args.resume.as_deref())?;
    let settings = run_settings(&args)?;
    if checkpoint.is_some() {
        check_resumed_settings(&args, &settings)?;
    }
    if args.is_han() {
        return han::run(&args, checkpoint.as_deref(), &settings, quiet);
    }
    let device = Device::Cpu;
    let model_dir = args.model.clone().context("--model is required")?;
    let source = checkpoint.as_deref().unwrap_or(&model_dir);
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

    let (text, json) = log_modes(&args, quiet);
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
    let output = start_output(&args, resume.as_ref().map(|r| r.state.epoch), &settings)?;
    let output = std::cell::RefCell::new(output);
    // Both callbacks report: the reporter is shared.
    let reporter = std::cell::RefCell::new(Reporter::new(text, json, "chunks"));
    let logs = train(
        &model,
        Split { docs: train_docs, labels: train_data.labels.clone() },
        Split { docs: dev_docs, labels: dev_data.labels.clone() },
        &cfg,
        &device,
        resume,
        |p| reporter.borrow_mut().progress(p),
        |end| {
            output.borrow_mut().epoch_end(&end)?;
            reporter.borrow_mut().epoch(end.log);
            Ok(())
        },
        |mid| output.borrow().mid_epoch(&mid),
    );
    reporter.borrow().finish();
    finish(&args, logs, text, json)
}

/// Whether to print for people (text) and for machines (JSON lines).
fn log_modes(args: &TrainArgs, quiet: bool) -> (bool, bool) {
    let json = args.log_format == LogFormat::Json;
    (!quiet && !json, json)
}

/// What training_args.json records: every flag as resolved (defaults filled in) and a
/// fingerprint of the training and dev data, so that a resumed run can be checked against it.
fn run_settings(args: &TrainArgs) -> Result<serde_json::Value> {
    let mut settings = serde_json::to_value(args)?;
    let mut data = serde_json::json!({"train": fingerprint_file(&args.train)?});
    if let Some(dev) = &args.dev {
        data["dev"] = fingerprint_file(dev)?.into();
    }
    settings["data_fingerprints"] = data;
    Ok(settings)
}

/// Settings that may differ when a run is resumed: how it is resumed, logged and stopped, and
/// how much of the frozen-layer cache stays in memory (none changes the results).
const MAY_CHANGE_ON_RESUME: [&str; 7] =
    ["resume", "out", "stop_after_epoch", "log_format", "cache_memory", "no_cache", "max_bad_steps"];

/// Refuses to resume with settings or data other than the run's own (its training_args.json);
/// settings an older longread did not record are not checked.
fn check_resumed_settings(args: &TrainArgs, settings: &serde_json::Value) -> Result<()> {
    let path = args.out.join("training_args.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let saved: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let recorded: Vec<&str> = saved.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    let unrecorded: Vec<String> = settings
        .as_object()
        .map(|o| o.keys().filter(|k| !recorded.contains(&k.as_str())).cloned().collect())
        .unwrap_or_default();
    let mut may_change: Vec<&str> = MAY_CHANGE_ON_RESUME.to_vec();
    may_change.extend(unrecorded.iter().map(String::as_str));
    Ok(check_resume_settings(&saved, settings, &may_change)?)
}

/// The output directory of a new run (training_args.json only: no model before the first
/// epoch ends) or of a resumed one (`resumed_epoch` epochs of metrics kept).
fn start_output(args: &TrainArgs, resumed_epoch: Option<usize>, settings: &serde_json::Value) -> Result<RunOutput> {
    Ok(match resumed_epoch {
        None => RunOutput::create(&args.out, settings)?,
        Some(epoch) => RunOutput::resume(&args.out, epoch),
    })
}

/// Reports how a run ended (divergence, early stop for resume, best epoch) and removes the
/// resumable checkpoint of a completed run.
fn finish(args: &TrainArgs, logs: longread_train::Result<Vec<EpochLog>>, text: bool, json: bool) -> Result<()> {
    let logs = logs.map_err(|e| match e {
        TrainError::Diverged(why) => anyhow::anyhow!("{why} Checkpoint: {}", args.out.join(CHECKPOINT).display()),
        other => other.into(),
    })?;
    let epochs = args.epochs.unwrap_or_default();
    let stopped_early = logs.last().is_some_and(|l| Some(l.epoch) == args.stop_after_epoch && l.epoch < epochs);
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
        remove_other_checkpoints(&args.out, None)?;
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
        Self { text, json, bar, since: Instant::now(), unit }
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
                let per_second = s.chunks as f64 / seconds;
                self.bar.set_length(s.total_steps as u64);
                self.bar.set_position(s.step as u64);
                self.bar.set_message(format!("loss {:.4}, lr {:.2e}, {per_second:.1} {}/s", s.loss, s.lr, self.unit));
                if self.json {
                    let mut line = serde_json::json!({
                        "event": "step", "step": s.step, "total_steps": s.total_steps, "loss": s.loss, "lr": s.lr,
                    });
                    line[self.unit] = s.chunks.into();
                    line[format!("{}_per_second", self.unit)] = per_second.into();
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
