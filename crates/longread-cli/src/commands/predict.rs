//! `longread predict`: classify documents and say which chunks (or sentences) mattered.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use longread_classifier::{Classifier, ClassifierOptions};
use longread_classifier::{DocResult, PredictionLine};
use longread_metrics::terminal::printable;
use longread_model::{DeviceChoice, Precision};
use longread_text::{Document, DocumentSource, Shard};
use serde_json::Value;

use crate::commands::counts::counted;
use crate::commands::csv_rows;
use crate::io::Output;

/// Arguments of `longread predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Model directory made by `longread init` or `longread train` (any --arch, HAN included).
    #[arg(long)]
    pub model: PathBuf,
    /// Documents: a JSON-lines file (one {"text": ..., "id"?: ...} per line), a .csv/.tsv file
    /// (a header row, a "text" column, other columns as fields), a .txt file (one document), a
    /// directory (every *.txt, id = file name) or `-` (JSON lines on stdin); gzip-compressed
    /// ones too (`docs.jsonl.gz`). Read as the documents are classified: memory holds those in
    /// flight, not the input.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the results (default: standard output); written atomically.
    #[arg(long, visible_alias = "out")]
    pub output: Option<PathBuf>,
    /// `json`: one JSON line per document; `table`: a readable table; `csv`: a header row, then
    /// a row per document (id, label — a multi-label model: labels, joined by `;` —, p_LABEL
    /// for each label, the most attended chunk's or sentence's
    /// evidence_start/evidence_end/evidence_attention, other tasks' labels, error;
    /// a cell starting with = + - @ that is not a number gets a leading ', so that a
    /// spreadsheet shows it as text instead of running it as a formula).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    #[command(flatten)]
    pub encoding: EncodingArgs,
    /// Read chunk vectors from DIR, and keep new ones there (see `train --vector-cache`):
    /// documents already encoded by the same encoder weights, chunking and precision skip the
    /// encoder. Models without an encoder ignore it.
    #[arg(long, value_name = "DIR")]
    pub vector_cache: Option<PathBuf>,
    /// Stop at the first JSON line that cannot be read (invalid JSON, no "text"), writing
    /// nothing (a file is checked through first; standard input is then read whole). Without
    /// it such a line gets its own record {"line": N, "error": ...} and the others are
    /// classified (exit code 2).
    #[arg(long)]
    pub strict: bool,
    /// Classify only shard I of N (0-based, e.g. 0/3): the documents whose JSON-lines line
    /// number (or place among a directory's files) minus one is I modulo N. The N shards
    /// together hold every document once; for job arrays (Kubernetes indexed jobs, Slurm).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Occlusion evidence (hierarchical models): each chunk of the JSON output gets
    /// `occlusion`, the predicted label's probability minus its probability when the document
    /// is read without that chunk — positive where the chunk supports the label, negative where
    /// it speaks against it (attention says how much the pooling looked at a chunk, not which
    /// way it pushed). The head runs once more per chunk (the encoder does not): cheap at 20
    /// chunks, growing with the square of a document's chunks; none past 2,048 chunks or for a
    /// one-chunk document. A multi-label model's `occlusion` is of its most probable label
    /// (`label`); its chunks also get `label_occlusion`, every label's probability minus its
    /// probability without the chunk.
    #[arg(long)]
    pub occlusion: bool,
}

/// How the encoder runs: the flags `predict`, `eval`, `report` and `bench --workload predict`
/// share (the device is the global `--device`; `serve` has its own, with other defaults).
#[derive(Debug, Clone, Copy, Args)]
pub struct EncodingArgs {
    /// Most tokens (chunks × padded length) per encoder batch; chunks of several documents
    /// share batches, longest first. Lower it to save memory. Default: 2048 on the CPU; on a GPU
    /// what a quarter of its memory holds, 65536 (8 GB cards) to 256000 (from about 57 GB).
    #[arg(long, value_parser = crate::commands::counts::at_least(1))]
    pub max_batch_tokens: Option<u64>,
    /// Encoder precision. Default: f32 on the CPU, bf16 on a GPU (bf16 matrix products; softmax,
    /// LayerNorm statistics, pooling and head in f32). f32 on a GPU uses TF32 matrix products.
    /// int8 (CPU only): the dense layers' products in int8, faster than f32 on CPUs with
    /// AVX-512 VNNI, about level with it on AVX2-only CPUs (BENCHMARKS.md). bf16 on the CPU is
    /// for parity with a model trained in bf16 and slower than f32 (no fast bf16 CPU matmul).
    /// HAN and bag-of-words models take f32 only and run on the CPU.
    #[arg(long, value_enum)]
    pub precision: Option<Precision>,
}

impl EncodingArgs {
    /// The classifier options these flags give on `device`.
    pub fn options(&self, device: DeviceChoice) -> ClassifierOptions {
        ClassifierOptions {
            precision: self.precision,
            max_batch_tokens: self.max_batch_tokens.map(|n| n as usize),
            device,
            occlusion: false,
        }
    }
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per line.
    Json,
    /// A table for people.
    Table,
    /// CSV for spreadsheets.
    Csv,
}

/// Loads the model in `dir` to classify with `options`, reading and keeping chunk vectors in
/// `vector_cache` when given.
pub fn load(
    dir: &std::path::Path,
    options: ClassifierOptions,
    vector_cache: Option<&std::path::Path>,
) -> Result<Classifier> {
    let mut classifier = Classifier::load(dir, options).with_context(|| format!("loading model {}", dir.display()))?;
    if let Some(cache) = vector_cache {
        classifier.set_vector_cache(cache).with_context(|| format!("opening vector cache {}", cache.display()))?;
    }
    Ok(classifier)
}

/// A progress bar over documents on stderr (hidden when quiet); when stderr is not a terminal
/// (a log file, a job scheduler) the bar draws nothing, and plain lines say how far it is, at
/// most every 10 s (`LONGREAD_PROGRESS_SECONDS`).
pub fn progress_bar(len: impl Into<Option<usize>>, quiet: bool) -> DocProgress {
    let len = len.into();
    let bar = match len {
        _ if quiet => ProgressBar::hidden(),
        Some(len) => ProgressBar::new(len as u64),
        None => ProgressBar::no_length(),
    };
    let template = match len {
        Some(_) => "{spinner} {pos}/{len} documents [{elapsed_precise}, {per_sec}, eta {eta}] {wide_bar}",
        // Standard input: how many documents come is not known in advance.
        None => "{spinner} {pos} documents [{elapsed_precise}, {per_sec}]",
    };
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    let plain = !quiet && !std::io::IsTerminal::is_terminal(&std::io::stderr());
    DocProgress {
        bar,
        plain,
        interval: plain_interval(),
        last: std::sync::Mutex::new(None),
        started: std::time::Instant::now(),
    }
}

/// Time between plain progress lines: 10 s, or `LONGREAD_PROGRESS_SECONDS` (a warning, and
/// 10 s, for a value that is not a number of seconds ≥ 0).
pub fn plain_interval() -> std::time::Duration {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let value = std::env::var("LONGREAD_PROGRESS_SECONDS").ok();
    interval_of(value.as_deref()).unwrap_or_else(|why| {
        WARNED.call_once(|| tracing::warn!("{why}; progress lines every 10 s"));
        std::time::Duration::from_secs(10)
    })
}

/// [`plain_interval`] of the variable's value (10 s when unset), or why it is not one.
fn interval_of(value: Option<&str>) -> Result<std::time::Duration, String> {
    let Some(value) = value else { return Ok(std::time::Duration::from_secs(10)) };
    value
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(|seconds| std::time::Duration::try_from_secs_f64(seconds).ok())
        .ok_or_else(|| format!("LONGREAD_PROGRESS_SECONDS={value:?} is not a number of seconds (0 or more)"))
}

/// [`progress_bar`]'s bar, with its plain lines.
pub struct DocProgress {
    bar: ProgressBar,
    plain: bool,
    interval: std::time::Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
    started: std::time::Instant,
}

impl DocProgress {
    /// Counts `n` more documents done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if !self.plain {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.unwrap_or(self.started).elapsed() >= self.interval {
            *last = Some(std::time::Instant::now());
            let done = match self.bar.length().filter(|&l| l > 0) {
                Some(total) => format!("{} of {total} documents", self.bar.position()),
                None => counted(self.bar.position() as usize, "document"),
            };
            eprintln!("{done} done ({:.0} s)", self.started.elapsed().as_secs_f64());
        }
    }

    /// Removes the bar.
    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `longread predict`; returns the number of documents that failed. Documents are read as
/// they are classified (memory holds those in flight, whatever the input's size), and each
/// result is written as it comes, in input order.
pub fn run(args: PredictArgs, quiet: bool, device: DeviceChoice) -> Result<usize> {
    crate::io::refuse_output_over_input(&args.input, args.output.as_deref(), "--output")?;
    let options = ClassifierOptions { occlusion: args.occlusion, ..args.encoding.options(device) };
    let classifier = load(&args.model, options, args.vector_cache.as_deref())?;
    let source = DocumentSource::open(&args.input, crate::io::stdin_reader, args.strict, args.shard)?;
    // A file is read through once first: the bar's length, and with --strict its bad line
    // stops the run before anything is classified.
    let progress = progress_bar(source.count()?, quiet);
    let mut out = Output::create(args.output.as_deref())?;
    let (mut done, mut failed, mut tokens) = (0usize, 0usize, 0usize);
    let started = std::time::Instant::now();
    // A reading error (an input without records, a strict line that changed since it was
    // counted) ends the documents; it is the run's error once the results before it are out.
    let read_error = std::sync::Mutex::new(None);
    let documents = || {
        source.documents().map_while(|document| {
            document.map_err(|e| *read_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e)).ok()
        })
    };
    classifier.classify_stream(documents, |document, result| {
        if done + failed == 0 {
            write_header(&mut out, &classifier, args.format)?;
        }
        match &result {
            Ok(prediction) => {
                done += 1;
                tokens += prediction.tokens.unwrap_or(0);
            }
            Err(_) => failed += 1,
        }
        match args.format {
            Format::Json => serde_json::to_writer(&mut out, &PredictionLine::new(&document, &result))?,
            Format::Table => write!(out, "{}", table_row(&classifier, &document, &result))?,
            Format::Csv => out.write_all(&csv_rows::line(&csv_rows::row(&classifier, &document, &result))?)?,
        }
        progress.inc(1);
        out.write_all(b"\n").context("writing output")
    })?;
    progress.finish_and_clear();
    if let Some(e) = read_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.into());
    }
    out.commit()?;
    if !quiet {
        let secs = started.elapsed().as_secs_f64();
        let token_rate = if tokens > 0 {
            format!(
                " ({}) in {secs:.2} s: {:.2} documents/s, {:.0} tokens/s",
                counted(tokens, "token"),
                done as f64 / secs,
                tokens as f64 / secs
            )
        } else {
            format!(" in {secs:.2} s: {:.2} documents/s", done as f64 / secs)
        };
        let on = longread_model::device::describe(classifier.device());
        eprintln!("classified {}{token_rate} on {on}, {}", counted(done, "document"), classifier.precision().name());
    }
    warn_failed(failed, done + failed);
    Ok(failed)
}

/// The table's or CSV's header row (JSON lines have none), written with the first result so
/// that an input without documents writes nothing.
fn write_header(out: &mut Output, classifier: &Classifier, format: Format) -> Result<()> {
    match format {
        Format::Table => writeln!(
            out,
            "{}",
            table_header(
                classifier.labels(),
                classifier.evidence_unit(),
                classifier.multi_label(),
                label_width(classifier)
            )
        )?,
        Format::Csv => {
            out.write_all(&csv_rows::line(&csv_rows::header(classifier))?)?;
            out.write_all(b"\n")?;
        }
        Format::Json => {}
    }
    Ok(())
}

/// Warns when some of `total` documents could not be classified.
pub fn warn_failed(failed: usize, total: usize) {
    if failed > 0 {
        tracing::warn!(
            "{failed} of {} could not be classified (see their \"error\" field)",
            counted(total, "document")
        );
    }
}

/// A document id as text (strings without quotes; `line N` for an unreadable input line).
pub fn id_text(document: &Document) -> String {
    match (&document.id, document.line) {
        (Value::Null, Some(line)) => format!("line {line}"),
        (Value::String(s), _) => s.clone(),
        (other, _) => other.to_string(),
    }
}

/// The width of the label column: 12 characters, or for a multi-label model room for every
/// label joined by `;` (at most 40).
fn label_width(classifier: &Classifier) -> usize {
    if !classifier.multi_label() {
        return 12;
    }
    let all: usize = classifier.labels().iter().map(|l| printable(l).chars().count() + 1).sum();
    all.saturating_sub(1).clamp(12, 40)
}

fn table_header(labels: &[String], unit: &str, multi_label: bool, width: usize) -> String {
    let scores: String = labels.iter().map(|l| format!(" {:>8}", truncate(&printable(l), 8))).collect();
    let label = if multi_label { "labels" } else { "label" };
    let count = match unit {
        "chunk" => "chunks",
        "sentence" => "sents",
        // A model that reads no parts (bag of words) has no evidence columns.
        _ => return format!("{:<24} {label:<width$}{scores}", "id"),
    };
    format!("{:<24} {label:<width$}{scores} {count:>6}  most attended {unit}", "id")
}

/// One table row: label, probabilities, how many parts were read, and the most attended one
/// (its index, characters, attention and the start of its text); other tasks' labels last.
fn table_row(classifier: &Classifier, document: &Document, result: &DocResult) -> String {
    let id = truncate(&printable(&id_text(document)), 24);
    let width = label_width(classifier);
    let prediction = match result {
        Err(e) => return format!("{id:<24} error: {e}"),
        Ok(p) => p,
    };
    let probs: String = prediction.probabilities().iter().map(|p| format!(" {p:>8.3}")).collect();
    let (count, top) = match prediction.top_evidence() {
        Some(e) => {
            let excerpt: String = document.text.chars().skip(e.start).take(e.end - e.start).take(40).collect();
            let excerpt = printable(&excerpt);
            (e.count, format!("#{} (chars {}–{}, attention {:.2}): {excerpt}", e.index, e.start, e.end, e.attention))
        }
        None if classifier.evidence_unit() == "none" => {
            return format!("{id:<24} {:<width$}{probs}", truncate(&printable(&prediction.decision_text()), width));
        }
        None => (0, String::new()),
    };
    let other: String = classifier.tasks()[1..]
        .iter()
        .enumerate()
        .filter_map(|(t, spec)| {
            let label = prediction.task_label_index(t + 1, &spec.name)?;
            Some(printable(&format!("  {}={}", spec.name, spec.labels[label])))
        })
        .collect();
    let label = truncate(&printable(&prediction.decision_text()), width);
    format!("{id:<24} {label:<width$}{probs} {count:>6}  {top}{other}")
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Control characters of untrusted ids and texts reach the table escaped (an id with an
    /// ANSI colour code recoloured the terminal, and one with a line break split its row).
    #[test]
    fn table_text_is_printable() {
        assert_eq!(printable("evil\u{1b}[31mRED\nrow\ttab\u{7f}\u{9b}é"), "evil\\u{1b}[31mRED row tab\\u{7f}\\u{9b}é");
        assert_eq!(printable("plain text"), "plain text");
    }

    /// A value that is not a number of seconds ≥ 0 is refused (it panicked on `inf` before),
    /// and the default is 10 s.
    #[test]
    fn the_progress_interval_takes_seconds_and_refuses_the_rest() {
        assert_eq!(interval_of(None), Ok(Duration::from_secs(10)));
        assert_eq!(interval_of(Some("2.5")), Ok(Duration::from_millis(2500)));
        assert_eq!(interval_of(Some(" 0 ")), Ok(Duration::ZERO));
        for bad in ["inf", "NaN", "-1", "ten", ""] {
            let err = interval_of(Some(bad)).unwrap_err();
            assert!(err.contains("LONGREAD_PROGRESS_SECONDS") && err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
