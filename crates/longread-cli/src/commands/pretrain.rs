//! `longread pretrain`: masked-language-model pretraining on a corpus, with dynamic masking, of
//! a RoBERTa from a preset (or a config.json) or continued from a pretrained encoder
//! (`--model`); the output is a `RobertaForMaskedLM` (`BertForMaskedLM`) directory that
//! transformers loads and `longread init --encoder` accepts. The run is the
//! library's (`longread_train::run::pretrain_run`); this command parses flags and prints.

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use longread_train::pretrain::PretrainLog;
use longread_train::run::{pretrain_run, PretrainSpec, RunHooks};
use longread_train::trainer::Progress;

use crate::commands::predict::plain_interval;

use crate::commands::train::LogFormat;

/// Arguments of `longread pretrain`.
#[derive(Debug, Args)]
pub struct PretrainArgs {
    #[command(flatten)]
    spec: PretrainSpec,
    /// `text`: progress bar and a line per evaluation on stderr; `json`: JSON lines on stdout.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Progress for people (bar and lines on stderr) or machines (JSON lines on stdout).
struct Printer {
    text: bool,
    json: bool,
    bar: ProgressBar,
    since: std::time::Instant,
    /// Plain step lines instead of the bar (stderr is not a terminal), at most every
    /// [`plain_interval`]; when the last one was written.
    plain: Option<std::time::Instant>,
}

impl RunHooks for Printer {
    fn progress(&mut self, progress: Progress) {
        let Progress::PretrainStep(s) = progress else { return };
        let tps = s.tokens as f64 / self.since.elapsed().as_secs_f64().max(1e-9);
        self.since = std::time::Instant::now();
        self.bar.set_length(s.total_steps as u64);
        self.bar.set_position(s.step as u64);
        self.bar.set_message(format!("loss {:.4}, lr {:.2e}, {tps:.0} tokens/s", s.loss, s.lr));
        if self.json {
            let line = serde_json::json!({"event": "step", "step": s.step, "loss": s.loss, "lr": s.lr, "tokens_per_second": tps});
            println!("{line}");
        }
        if self.plain.is_some_and(|last| last.elapsed() >= plain_interval()) {
            self.plain = Some(std::time::Instant::now());
            eprintln!("step {} of {}: loss {:.4}, lr {:.2e}, {tps:.0} tokens/s", s.step, s.total_steps, s.loss, s.lr);
        }
    }

    fn evaluation(&mut self, log: &PretrainLog) {
        if self.json {
            let mut v = serde_json::to_value(log).unwrap_or_default();
            v["event"] = "eval".into();
            println!("{v}");
        }
        if self.text {
            self.bar.suspend(|| {
                eprintln!(
                    "step {}: train loss {:.4}, held-out loss {:.4}, perplexity {:.2}, {:.0} tokens/s",
                    log.step, log.train_loss, log.eval_loss, log.perplexity, log.tokens_per_second
                )
            });
        }
    }

    fn note(&mut self, line: &str) {
        if self.text {
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }
}

/// Runs `longread pretrain`.
pub fn run(mut args: PretrainArgs, quiet: bool, device: longread_model::DeviceChoice) -> Result<()> {
    args.spec.device = device;
    let json = args.log_format == LogFormat::Json;
    let text = !quiet && !json;
    let bar = if text { ProgressBar::new(args.spec.max_steps as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} step {pos}/{len} [{elapsed_precise}, eta {eta}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let plain = (text && !std::io::IsTerminal::is_terminal(&std::io::stderr())).then(std::time::Instant::now);
    let mut printer = Printer { text, json, bar, since: std::time::Instant::now(), plain };
    let mut front = serde_json::Map::new();
    front.insert("log_format".into(), serde_json::to_value(args.log_format)?);
    crate::interrupt::stop_cleanly_on_ctrl_c(crate::interrupt::AT_NEXT_EVALUATION);
    let summary = pretrain_run(&args.spec, front, &mut printer);
    printer.bar.finish_and_clear();
    let summary = summary?;
    if let (true, Some(last)) = (text, summary.logs.last()) {
        eprintln!(
            "{} at step {}: held-out perplexity {:.2}; encoder in {}",
            if summary.stopped_for_resume { "stopped (continue with --resume auto)" } else { "done" },
            last.step,
            last.perplexity,
            args.spec.out.display()
        );
    }
    Ok(())
}
