//! `longread predict`: classify documents and say which chunks mattered.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::Device;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use longread_model::han::is_han_dir;
use longread_model::hierarchical::{DocumentScores, HierarchicalClassifier, TaskSpec};
use longread_text::{read_documents, ChunkedDocument, Chunker, Document, TextTokenizer};
use serde_json::Value;

use crate::commands::han_scoring;
use crate::io::Output;

/// Arguments of `longread predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Model directory made by `longread init` or `longread train` (any --arch, HAN included).
    #[arg(long)]
    pub model: PathBuf,
    /// Documents: a JSON-lines file (one {"text": ..., "id"?: ...} per line), a .txt file (one
    /// document), a directory (every *.txt, id = file name) or `-` (JSON lines on stdin).
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the results (default: standard output); written atomically.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// `json`: one JSON line per document; `table`: a readable table.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Most tokens (chunks × padded length) per encoder batch; chunks of several documents
    /// share batches, longest first. Lower it to save memory.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch_tokens: u64,
    /// Encoder precision: f32; int8 (the dense layers' products in int8: measured 1.35–2.1×
    /// faster end to end on CPUs with AVX-512 VNNI, 1.1× with AVX2 only, accuracy change in
    /// BENCHMARKS.md); or bf16 (bf16 activations and matmuls, for parity with a model trained
    /// in bf16: on the CPU it is several times slower than f32, even with AVX512_BF16, since
    /// candle has no fast bf16 CPU matmul).
    #[arg(long, value_enum, default_value_t = ScoringPrecision::F32)]
    pub precision: ScoringPrecision,
}

/// Precision of the encoder when scoring (inference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScoringPrecision {
    /// 32-bit floats throughout.
    F32,
    /// bfloat16 activations and matmuls, f32 weights.
    Bf16,
    /// int8 weights (one scale per output) and int8 activations (one scale per token) in the
    /// encoder's dense layers, summed exactly in i32; attention, LayerNorm and head in f32.
    Int8,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per line.
    Json,
    /// A table for people.
    Table,
}

/// The prediction for one document, or why there is none.
pub struct DocumentResult<'a> {
    /// The document.
    pub document: &'a Document,
    /// Its chunks and the primary task's scores, or an error message.
    pub outcome: std::result::Result<(ChunkedDocument, DocumentScores), String>,
    /// Scores of the other tasks of a multi-task model (in task order, from the second task).
    pub tasks: Vec<DocumentScores>,
}

/// Documents are chunked and scored in groups of about this many chunks, so that memory
/// stays bounded whatever the input size.
const GROUP_CHUNKS: usize = 256;

/// Loads the model (encoder in `precision`) and its chunker.
pub fn load(model_dir: &std::path::Path, precision: ScoringPrecision) -> Result<(HierarchicalClassifier, Chunker)> {
    let mut model = HierarchicalClassifier::load(model_dir, false, &Device::Cpu)
        .with_context(|| format!("loading model {}", model_dir.display()))?;
    match precision {
        ScoringPrecision::F32 => {}
        ScoringPrecision::Bf16 => {
            tracing::warn!(
                "--precision bf16 on the CPU is slower than f32 (candle has no fast bf16 CPU matmul; \
                 measured 4.6× slower); --precision int8 is the fast reduced-precision mode"
            );
            model.set_precision(candle_core::DType::BF16)?
        }
        ScoringPrecision::Int8 => model.set_int8(true)?,
    }
    let tokenizer = TextTokenizer::from_file(model.tokenizer_path())?;
    let chunker = Chunker::new(tokenizer, model.config().longread.chunking())?;
    Ok((model, chunker))
}

/// Scores every document, calling `emit` in input order; a document that cannot be read or
/// chunked gets an error result instead of stopping the others.
pub fn score_documents<'a>(
    model: &HierarchicalClassifier,
    chunker: &Chunker,
    documents: &'a [Document],
    max_batch_tokens: usize,
    progress: &ProgressBar,
    mut emit: impl FnMut(DocumentResult<'a>) -> Result<()>,
) -> Result<()> {
    let mut start = 0;
    while start < documents.len() {
        let mut group: Vec<(usize, std::result::Result<ChunkedDocument, String>)> = Vec::new();
        let mut chunks = 0;
        while start < documents.len() && (group.is_empty() || chunks < GROUP_CHUNKS) {
            let doc = &documents[start];
            let chunked = match &doc.error {
                Some(e) => Err(e.clone()),
                None => chunker.chunk(&doc.text).map_err(|e| e.to_string()),
            };
            chunks += chunked.as_ref().map_or(0, |c| c.chunks.len());
            group.push((start, chunked));
            start += 1;
        }
        let ok: Vec<&ChunkedDocument> = group.iter().filter_map(|(_, c)| c.as_ref().ok()).collect();
        let vectors = model.encode_documents(&ok, max_batch_tokens, &Device::Cpu, |_| {})?;
        let mut scores =
            vectors.iter().map(|v| model.score_tasks(v)).collect::<longread_model::Result<Vec<_>>>()?.into_iter();
        for (i, chunked) in group {
            let (outcome, tasks) = match chunked {
                Ok(c) => {
                    let mut all = scores.next().expect("one score set per chunked document");
                    let primary = all.remove(0);
                    (Ok((c, primary)), all)
                }
                Err(e) => (Err(e), Vec::new()),
            };
            emit(DocumentResult { document: &documents[i], outcome, tasks })?;
            progress.inc(1);
        }
    }
    Ok(())
}

/// A document's result as the JSON line `predict` prints (floats as f32, labels in id order);
/// `tasks` are the model's tasks (the first is the primary one, printed at the top level).
pub fn result_json<'r>(tasks: &'r [TaskSpec], result: &'r DocumentResult) -> PredictionLine<'r> {
    match &result.outcome {
        Err(message) => PredictionLine { id: &result.document.id, error: Some(message), scored: None, tasks: None },
        Ok((chunked, scores)) => {
            let labels = &tasks[0].labels;
            let other = (tasks.len() > 1).then(|| {
                tasks[1..]
                    .iter()
                    .zip(&result.tasks)
                    .map(|(spec, s)| {
                        let task = TaskLine {
                            label: &spec.labels[argmax(&s.probabilities)],
                            scores: LabelScores(&spec.labels, &s.probabilities),
                            logits: &s.logits,
                            attention: &s.attention,
                        };
                        (spec.name.as_str(), task)
                    })
                    .collect()
            });
            PredictionLine {
                id: &result.document.id,
                error: None,
                scored: Some(Scored {
                    label: &labels[argmax(&scores.probabilities)],
                    scores: LabelScores(labels, &scores.probabilities),
                    logits: &scores.logits,
                    chunks: chunked
                        .chunks
                        .iter()
                        .zip(&scores.attention)
                        .map(|(c, &attention)| ChunkLine { index: c.index, start: c.start, end: c.end, attention })
                        .collect(),
                }),
                tasks: other,
            }
        }
    }
}

/// One output line of `predict`.
#[derive(serde::Serialize)]
pub struct PredictionLine<'r> {
    id: &'r Value,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    scored: Option<Scored<'r>>,
    /// The other tasks of a multi-task model, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    tasks: Option<std::collections::BTreeMap<&'r str, TaskLine<'r>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'r String>,
}

/// One more task's prediction: its label, scores, logits and attention over the chunks.
#[derive(serde::Serialize)]
struct TaskLine<'r> {
    label: &'r String,
    scores: LabelScores<'r>,
    logits: &'r [f32],
    attention: &'r [f32],
}

#[derive(serde::Serialize)]
struct Scored<'r> {
    label: &'r String,
    scores: LabelScores<'r>,
    logits: &'r [f32],
    chunks: Vec<ChunkLine>,
}

#[derive(serde::Serialize)]
struct ChunkLine {
    index: usize,
    start: usize,
    end: usize,
    attention: f32,
}

/// `{label: probability}` in label order.
pub struct LabelScores<'r>(pub &'r [String], pub &'r [f32]);

impl serde::Serialize for LabelScores<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (label, p) in self.0.iter().zip(self.1) {
            map.serialize_entry(label, p)?;
        }
        map.end()
    }
}

/// Index of the largest value (the first on ties; 0 when empty).
pub fn argmax(values: &[f32]) -> usize {
    values.iter().enumerate().fold(0, |best, (i, v)| if *v > values[best] { i } else { best })
}

/// A progress bar over documents on stderr (hidden when quiet).
pub fn progress_bar(len: usize, quiet: bool) -> ProgressBar {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(len as u64) };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {pos}/{len} documents [{elapsed_precise}, {per_sec}, eta {eta}] {wide_bar}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Runs `longread predict`; returns the number of documents that failed.
pub fn run(args: PredictArgs, quiet: bool) -> Result<usize> {
    if is_han_dir(&args.model) {
        return run_han(args, quiet);
    }
    let (model, chunker) = load(&args.model, args.precision)?;
    let documents = read_documents(&args.input, crate::io::stdin_reader)?;
    let labels = model.labels().to_vec();
    let tasks = model.config().tasks();
    let progress = progress_bar(documents.len(), quiet);
    let mut out = Output::create(args.output.as_deref())?;
    let mut failed = 0;
    if args.format == Format::Table {
        writeln!(out, "{}", table_header(&labels, "chunks", "most attended chunk"))?;
    }
    let started = std::time::Instant::now();
    let mut tokens = 0usize;
    score_documents(&model, &chunker, &documents, args.max_batch_tokens as usize, &progress, |result| {
        if let Ok((chunked, _)) = &result.outcome {
            tokens += chunked.total_tokens;
        } else {
            failed += 1;
        }
        match args.format {
            Format::Json => serde_json::to_writer(&mut out, &result_json(&tasks, &result))?,
            Format::Table => write!(out, "{}", table_row(&tasks, &result))?,
        }
        out.write_all(b"\n").context("writing output")
    })?;
    progress.finish_and_clear();
    out.commit()?;
    if !quiet {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "classified {} documents ({tokens} tokens) in {secs:.2} s: {:.2} documents/s, {:.0} tokens/s",
            documents.len() - failed,
            (documents.len() - failed) as f64 / secs,
            tokens as f64 / secs
        );
    }
    warn_failed(failed, documents.len());
    Ok(failed)
}

/// `predict` with a HAN model (no encoder: --max-batch-tokens and --precision do not apply).
fn run_han(args: PredictArgs, quiet: bool) -> Result<usize> {
    if args.precision != ScoringPrecision::F32 {
        anyhow::bail!("--precision {:?} applies to encoder models; {} is a HAN", args.precision, args.model.display());
    }
    let model = han_scoring::load(&args.model)?;
    let documents = read_documents(&args.input, crate::io::stdin_reader)?;
    let labels = model.labels().to_vec();
    let progress = progress_bar(documents.len(), quiet);
    let mut out = Output::create(args.output.as_deref())?;
    if args.format == Format::Table {
        writeln!(out, "{}", table_header(&labels, "sents", "most attended sentence"))?;
    }
    let started = std::time::Instant::now();
    let mut failed = 0;
    han_scoring::score_documents(&model, &documents, &progress, |result| {
        failed += usize::from(result.outcome.is_err());
        match args.format {
            Format::Json => serde_json::to_writer(&mut out, &han_scoring::result_json(&labels, &result))?,
            Format::Table => {
                let id = truncate(&id_text(&result.document.id), 24);
                write!(out, "{}", han_scoring::table_row(&labels, &result, &id))?
            }
        }
        out.write_all(b"\n").context("writing output")
    })?;
    progress.finish_and_clear();
    out.commit()?;
    if !quiet {
        let secs = started.elapsed().as_secs_f64();
        let done = documents.len() - failed;
        eprintln!("classified {done} documents in {secs:.2} s: {:.2} documents/s", done as f64 / secs);
    }
    warn_failed(failed, documents.len());
    Ok(failed)
}

/// Warns when some of `total` documents could not be classified.
fn warn_failed(failed: usize, total: usize) {
    if failed > 0 {
        tracing::warn!("{failed} of {total} documents could not be classified (see their \"error\" field)");
    }
}

/// A document id as text (strings without quotes).
pub fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table_header(labels: &[String], count: &str, top: &str) -> String {
    let scores: String = labels.iter().map(|l| format!(" {:>8}", truncate(l, 8))).collect();
    format!("{:<24} {:<12}{scores} {count:>6}  {top}", "id", "label")
}

fn table_row(tasks: &[TaskSpec], result: &DocumentResult) -> String {
    let labels = &tasks[0].labels;
    let id = id_text(&result.document.id);
    match &result.outcome {
        Err(message) => format!("{:<24} error: {message}", truncate(&id, 24)),
        Ok((chunked, scores)) => {
            let best = argmax(&scores.probabilities);
            let probs: String = scores.probabilities.iter().map(|p| format!(" {p:>8.3}")).collect();
            let top = argmax(&scores.attention);
            let c = &chunked.chunks[top];
            let other: String = tasks[1..]
                .iter()
                .zip(&result.tasks)
                .map(|(spec, s)| format!("  {}={}", spec.name, spec.labels[argmax(&s.probabilities)]))
                .collect();
            format!(
                "{:<24} {:<12}{probs} {:>6}  #{} (chars {}–{}, attention {:.2}){other}",
                truncate(&id, 24),
                truncate(&labels[best], 12),
                chunked.chunks.len(),
                c.index,
                c.start,
                c.end,
                scores.attention[top]
            )
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}
