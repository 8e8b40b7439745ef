//! `longread`: classify long documents with hierarchical transformers.

mod allocator;
mod commands;
mod config_file;
mod interrupt;
mod io;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// longread — long-document classification with hierarchical transformers.
#[derive(Debug, Parser)]
#[command(
    name = "longread",
    version = version_line(),
    about = "longread: classify long documents with hierarchical transformers (BERT, RoBERTa, DistilBERT, ELECTRA, MPNet, ModernBERT, DeBERTa-v2/v3 encoders)",
    long_about = None
)]
struct Cli {
    /// Number of CPU threads for tensor work, 1 to 4 × the cores (default: all cores; also
    /// RAYON_NUM_THREADS).
    #[arg(long, global = true, env = "LONGREAD_THREADS")]
    threads: Option<usize>,
    /// Only print errors (no progress bars, no warnings).
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Where encoders run for predict, eval, report, embed, serve, train, pretrain and bench:
    /// auto (a GPU when this longread was built with `cuda` and one is visible, else the CPU),
    /// cpu, cuda or cuda:N. HAN and bag-of-words models run and train on the CPU.
    #[arg(long, global = true, env = "LONGREAD_DEVICE", default_value = "auto", value_name = "auto|cpu|cuda[:N]")]
    device: longread_model::DeviceChoice,
    #[command(subcommand)]
    command: Command,
}

/// `longread --version`: the version and the optional features this binary was built with
/// ("longread 0.1.0 (features: cuda)"), so that a report of a problem says which build ran.
fn version_line() -> &'static str {
    let features: Vec<&str> = [("cuda", cfg!(feature = "cuda")), ("hub", cfg!(feature = "hub"))]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
    let features = if features.is_empty() { "none".to_string() } else { features.join(", ") };
    // Built once per run, for clap's static string.
    Box::leak(format!("{} (features: {features})", env!("CARGO_PKG_VERSION")).into_boxed_str())
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sentence embeddings for JSON lines, as sentence-transformers computes them.
    Embed(commands::embed::EmbedArgs),
    /// Show a model's configuration and parameter counts.
    Inspect(commands::inspect::InspectArgs),
    /// Create a hierarchical classifier on a pretrained encoder.
    Init(commands::init::InitArgs),
    /// Classify documents of any length; shows which chunks drove each decision.
    /// Exit code 2 when some documents failed (their lines carry an "error").
    Predict(commands::predict::PredictArgs),
    /// Fine-tune a classifier made by `init` on labelled documents.
    /// `--config FILE.toml` supplies any flag (keys = flag names); command-line flags win.
    /// Ctrl-C stops after the current step and saves a checkpoint (`--resume auto` continues).
    #[command(args_override_self = true)]
    Train(Box<commands::train::TrainArgs>),
    /// Accuracy, per-class precision/recall/F1, macro/weighted F1 and confusion matrix on
    /// labelled documents.
    Eval(commands::eval::EvalArgs),
    /// Combine trained models (any kinds, same labels) into one whose probabilities are their
    /// weighted mean, e.g. a fine-tuned hierarchical model and the bag-of-words baseline.
    Ensemble(commands::ensemble::EnsembleArgs),
    /// Tune a model's decision rule on held-out labelled documents (two labels: the probability
    /// its second label needs; more: a bias per label), and keep it in the model: predict,
    /// eval, report, serve and Python then label by it. `--set` keeps a given threshold or
    /// biases, `--clear` removes the rule.
    Threshold(commands::threshold::ThresholdArgs),
    /// Calibrate a model's probabilities on held-out labelled documents (temperature scaling:
    /// the temperature of least log loss), and keep it in the model: predict, eval, report,
    /// serve and Python then give calibrated probabilities; labels do not change. `--clear`
    /// removes it.
    Calibrate(commands::calibrate::CalibrateArgs),
    /// Write one HTML page (`--out FILE.html`) showing each document's prediction and its chunks' attention.
    Report(commands::report::ReportArgs),
    /// Tokenizers: `tokenizer train` learns a byte-level BPE (RoBERTa) or WordPiece (BERT)
    /// tokenizer from a corpus.
    #[command(subcommand)]
    Tokenizer(commands::tokenizer::TokenizerCommand),
    /// Encoders: `encoder new --preset tiny|small|roberta-base|roberta-large` writes a freshly
    /// initialised RoBERTa (RobertaForMaskedLM layout) for a tokenizer.
    #[command(subcommand)]
    Encoder(commands::encoder::EncoderCommand),
    /// Masked-language-model pretraining on a corpus, with dynamic masking: of a new RoBERTa
    /// (preset or config.json), or continued from a pretrained BERT/RoBERTa (`--model`, e.g. to
    /// adapt it to your documents before fine-tuning); the output loads in transformers as
    /// RobertaForMaskedLM (BertForMaskedLM). Ctrl-C stops at the next evaluation, where a
    /// checkpoint is saved (`--resume auto` continues).
    Pretrain(Box<commands::pretrain::PretrainArgs>),
    /// Start here: builds a synthetic long-document task, trains a tokenizer and a tiny
    /// RoBERTa with MLM, fine-tunes a hierarchical classifier and the single-chunk baseline,
    /// and compares them; the README's first example says how long it takes. Prints every
    /// command it runs.
    #[command(args_override_self = true)]
    Quickstart(commands::quickstart::QuickstartArgs),
    /// HTTP server: POST /classify (whole documents with their evidence), TEI's /predict and
    /// /embed, OpenAI's /v1/embeddings, /health, /info, /metrics, /openapi.json and a web page
    /// at /. Chunks of concurrent requests share encoder batches.
    Serve(commands::serve::ServeArgs),
    /// What this machine offers: the CPU's kernels, NVIDIA GPUs (driver, cards, compute
    /// capability, CUDA libraries) and what keeps `--device cuda` from working.
    Doctor(commands::doctor::DoctorArgs),
    /// Time one workload (encoder forward, training step, optimizer step) and report the
    /// median and peak memory; `scripts/bench_compare.py` runs it next to PyTorch.
    Bench(commands::bench::BenchArgs),
    /// Write the command reference made from these definitions: a markdown page, man pages
    /// and shell completions (bash, zsh, fish, elvish, PowerShell).
    Reference(commands::reference::ReferenceArgs),
}

fn main() {
    restore_sigpipe();
    let cli = match parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(err) => {
            eprintln!("error: {}", format_error(&err));
            std::process::exit(1);
        }
    };
    init_logging(cli.quiet);
    // Batch jobs keep freed memory for the next batch; a long-running server gives it back
    // (mimalloc's default), so that its RSS does not keep a peak's high-water mark.
    if !matches!(cli.command, Command::Serve(_)) {
        allocator::keep_freed_memory();
    }
    if let Some(n) = cli.threads {
        if let Err(why) = longread_model::threads::check_thread_count(n) {
            eprintln!("error: --{why}");
            std::process::exit(2);
        }
        let cores = longread_model::threads::available_cores();
        if n > cores {
            tracing::warn!("--threads {n} is more than the {cores} cores available: tensor work slows down");
        }
        // Read by the tensor library's and rayon's thread pools on first use; nothing has started yet.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    match dispatch(cli.command, cli.quiet, cli.device) {
        Ok(0) => {}
        Ok(_) => std::process::exit(2),
        Err(err) => {
            eprintln!("error: {}", format_error(&err));
            std::process::exit(if interrupt::is_interrupted(&err) { interrupt::EXIT_INTERRUPTED } else { 1 });
        }
    }
}

/// Parses the command line; a `train --config FILE.toml` found by clap is expanded into the
/// file's flags (the command line's own win) before the real parse, so that the file may
/// supply required flags too. Clap's own errors (and `--help`) exit here as clap prints them.
fn parse(args: Vec<std::ffi::OsString>) -> anyhow::Result<Cli> {
    // A first, lenient pass only to learn whether `train` has a --config (required flags may
    // still be in the file).
    let first = Cli::command().ignore_errors(true).try_get_matches_from(args.clone());
    let config = first
        .ok()
        .and_then(|m| m.subcommand_matches("train").and_then(|t| t.get_one::<std::path::PathBuf>("config").cloned()));
    let (args, file_flags) = match &config {
        Some(config) => config_file::expand(args, config)?,
        None => (args, Vec::new()),
    };
    let matches = Cli::command().try_get_matches_from(args).unwrap_or_else(|e| {
        let note = config.as_deref().and_then(|c| config_file::note_on_error(&e, &file_flags, c));
        let _ = e.print();
        if let (Some(note), true) = (note, e.use_stderr()) {
            eprintln!("{note}");
        }
        std::process::exit(e.exit_code())
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    Ok(cli.with_given_flags(&matches))
}

/// Parses one `longread …` command line (without the program name) and runs it, as the
/// quickstart runs its steps; global flags other than `--quiet` are ignored here.
pub(crate) fn run_command_line(args: &[String], quiet: bool) -> anyhow::Result<usize> {
    let matches =
        Cli::command().try_get_matches_from(std::iter::once("longread".to_string()).chain(args.iter().cloned()))?;
    let cli = Cli::from_arg_matches(&matches)?.with_given_flags(&matches);
    dispatch(cli.command, quiet || cli.quiet, cli.device)
}

impl Cli {
    /// Records which flags of `train` and `init` were given (on the command line or in a
    /// `--config` file) rather than left at their defaults, so that flags that do not apply
    /// can be refused.
    fn with_given_flags(mut self, matches: &clap::ArgMatches) -> Self {
        let given = |name: &str| {
            matches.subcommand_matches(name).map(longread_train::run::flags::flags_given).unwrap_or_default()
        };
        match &mut self.command {
            Command::Train(args) => args.spec.given = given("train"),
            Command::Init(args) => args.spec.given = given("init"),
            _ => {}
        }
        self
    }
}

/// Runs a command; `Ok(n > 0)` when some inputs failed (exit status 2).
fn dispatch(command: Command, quiet: bool, device: longread_model::DeviceChoice) -> anyhow::Result<usize> {
    match command {
        Command::Embed(args) => commands::embed::run(args, quiet, device).map(|_| 0),
        Command::Serve(args) => commands::serve::run(args, device).map(|_| 0),
        Command::Inspect(args) => commands::inspect::run(args).map(|_| 0),
        Command::Init(args) => commands::init::run(args, quiet).map(|_| 0),
        Command::Predict(args) => commands::predict::run(args, quiet, device),
        Command::Report(args) => commands::report::run(args, quiet, device),
        Command::Eval(args) => commands::eval::run(args, quiet, device).map(|_| 0),
        Command::Ensemble(args) => commands::ensemble::run(args, quiet).map(|_| 0),
        Command::Threshold(args) => commands::threshold::run(args, quiet, device).map(|_| 0),
        Command::Calibrate(args) => commands::calibrate::run(args, quiet, device).map(|_| 0),
        Command::Train(args) => commands::train::run(*args, quiet, device).map(|_| 0),
        Command::Tokenizer(command) => commands::tokenizer::run(command, quiet).map(|_| 0),
        Command::Encoder(command) => commands::encoder::run(command, quiet).map(|_| 0),
        Command::Pretrain(args) => commands::pretrain::run(*args, quiet, device).map(|_| 0),
        Command::Quickstart(args) => commands::quickstart::run(args, quiet).map(|_| 0),
        Command::Bench(args) => commands::bench::run(args, device).map(|_| 0),
        Command::Doctor(args) => commands::doctor::run(args, device).map(|_| 0),
        Command::Reference(args) => commands::reference::run(args, Cli::command()).map(|_| 0),
    }
}

/// One line: the context chain joined with ": ".
/// A cause already quoted by the message before it (`path: error` wrapping `error`) is not
/// repeated.
fn format_error(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain().map(|e| e.to_string()) {
        if parts.last().is_none_or(|last| !last.ends_with(&cause)) {
            parts.push(cause);
        }
    }
    parts.join(": ")
}

/// Rust ignores SIGPIPE, so writing to a closed pipe (`longread predict … | head`) fails and
/// `println!` panics; the default action ends the process quietly, as other Unix tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: sets the disposition of one signal to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn init_logging(quiet: bool) {
    // The server's info lines are its reloads (SIGHUP).
    let default = if quiet { "error" } else { "warn,longread_server=info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LONGREAD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
