//! `longread embed`: sentence embeddings for JSON lines.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use longread_model::sentence_pooling::SentencePooling;
use longread_model::{DeviceChoice, Embedder, EmbedderOptions, Precision};
use serde_json::{Map, Value};

use longread_text::{Document, DocumentSource};

use crate::commands::counts::counted;
use crate::io::Output;

/// Arguments of `longread embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Model directory (config.json, model.safetensors, tokenizer.json), or a Hugging Face Hub
    /// id such as sentence-transformers/all-MiniLM-L6-v2 (downloaded into the Hugging Face cache).
    #[arg(long)]
    model: String,
    /// JSON lines, one object per line with a "text" field, or a .csv/.tsv file with a header
    /// row and a "text" column; `-` reads JSON lines from standard input; a .txt file or a
    /// directory of them is one text per file (id = file name). Every other field (e.g. "id")
    /// is copied to the output line. Read, embedded and written 4,096 texts at a time.
    #[arg(long)]
    input: PathBuf,
    /// Where to write JSON lines `{"id": ..., "embedding": [...]}` in input order
    /// (default: standard output). Written atomically: the file appears only when complete.
    #[arg(long, visible_alias = "out")]
    output: Option<PathBuf>,
    /// How token vectors become one vector: mean over tokens, or the first token's. Default:
    /// what the model's sentence-transformers Pooling module says (`1_Pooling/config.json`: CLS
    /// for the BGE models, mean for all-MiniLM-L6-v2), else mean; a mode longread does not
    /// compute (max, last token) is an error unless this overrides it.
    #[arg(long, value_enum)]
    pooling: Option<SentencePooling>,
    /// Scale each embedding to unit L2 norm (as sentence-transformers' Normalize module).
    /// Default: when the model has that module (its modules.json lists it, as
    /// all-MiniLM-L6-v2's does), as sentence-transformers' `encode` does.
    #[arg(long, overrides_with = "no_normalize")]
    normalize: bool,
    /// Keep each embedding's length, even when the model has a Normalize module.
    #[arg(long, overrides_with = "normalize")]
    no_normalize: bool,
    /// Texts per forward pass, longest first. On the CPU their tokens are packed end to end
    /// without padding (each text attends to itself); elsewhere a batch is padded to its longest.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=65536))]
    batch_size: u64,
    /// Encoder precision: f32 or bf16. Default: f32 on the CPU, bf16 on a GPU (as
    /// text-embeddings-inference runs half precision there).
    #[arg(long, value_enum)]
    precision: Option<Precision>,
}

/// One output line: the input's fields (id first, text dropped) and the embedding, written as
/// f32 so that each value prints in its shortest round-trip form.
#[derive(serde::Serialize)]
struct OutputLine<'a> {
    #[serde(flatten)]
    fields: &'a Map<String, Value>,
    embedding: &'a [f32],
}

/// Texts embedded at a time: the input is read, embedded and written a window at a time, so
/// that memory holds one window's texts and vectors whatever the input's size (each window's
/// texts are batched longest first; results do not depend on batching).
const WINDOW: usize = 4096;

/// Runs `longread embed`.
pub fn run(args: EmbedArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    crate::io::refuse_output_over_input(&args.input, args.output.as_deref(), "--output")?;
    let source = DocumentSource::open(&args.input, crate::io::stdin_reader, true, None).context("opening input")?;
    // A file is read through once first: its bad line is the error before anything is written,
    // and the bar gets its length (standard input is read whole when opened, for the same check).
    let total = source.count()?;
    let name = source.name().to_owned();
    let dir = longread_model::resolve_model_dir(&args.model)?;
    let normalize = match (args.normalize, args.no_normalize) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    };
    let options = EmbedderOptions { pooling: args.pooling, normalize, device, precision: args.precision };
    let embedder = Embedder::open(&dir, options).with_context(|| format!("loading model {}", dir.display()))?;

    // A bar on a terminal, plain lines every 10 s otherwise (as predict's).
    let progress = crate::commands::predict::progress_bar(total, quiet);
    let started = std::time::Instant::now();
    let mut out = Output::create(args.output.as_deref())?;
    let (mut count, mut tokens) = (0usize, 0usize);
    let mut truncated: Option<(usize, String)> = None;
    let mut documents = source.documents();
    loop {
        let window = documents.by_ref().take(WINDOW).map(|d| usable(d?, &name)).collect::<Result<Vec<_>>>()?;
        if window.is_empty() {
            break;
        }
        let texts: Vec<&str> = window.iter().map(|d| d.text.as_str()).collect();
        let result = embedder.embed(&texts, args.batch_size as usize, |n| progress.inc(n as u64))?;
        tokens += result.token_counts.iter().sum::<usize>();
        for (document, (vector, cut)) in window.iter().zip(result.vectors.iter().zip(&result.truncated)) {
            if *cut {
                let first = truncated.get_or_insert_with(|| (0, place(document, &name)));
                first.0 += 1;
            }
            let mut line = Map::new();
            line.insert("id".into(), document.id.clone());
            line.extend(document.fields.iter().map(|(k, v)| (k.clone(), v.clone())));
            serde_json::to_writer(&mut out, &OutputLine { fields: &line, embedding: vector })
                .context("writing output")?;
            out.write_all(b"\n").context("writing output")?;
        }
        count += window.len();
    }
    progress.finish_and_clear();
    out.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    if !quiet {
        eprintln!(
            "embedded {} ({}) in {seconds:.2} s: {:.1} texts/s, {:.0} tokens/s on {} ({} pooling{})",
            counted(count, "text"),
            counted(tokens, "token"),
            count as f64 / seconds,
            tokens as f64 / seconds,
            longread_model::device::describe(embedder.device()),
            embedder.pooling().name(),
            if embedder.normalizes() { ", unit length" } else { "" }
        );
    }
    if let Some((n, first)) = truncated {
        tracing::warn!(
            "{n} of {} {} longer than the model's {} tokens and were truncated (first: {first}); \
             use `longread predict` with a hierarchical model to read whole documents",
            counted(count, "text"),
            if n == 1 { "was" } else { "were" },
            embedder.max_length(),
        );
    }
    Ok(())
}

/// A document to embed, or the error that names it: one read with a problem (a `.txt` file that
/// is not UTF-8) or with an empty text.
fn usable(document: Document, name: &str) -> Result<Document> {
    let why = match &document.error {
        Some(why) => why.clone(),
        None if document.text.trim().is_empty() => "\"text\" is empty".into(),
        None => return Ok(document),
    };
    bail!("{}: {why}", place(&document, name))
}

/// Where a document is in the input, for messages: `NAME:LINE`, or `NAME: ID` for a file of a
/// directory.
fn place(document: &Document, name: &str) -> String {
    match document.line {
        Some(line) => format!("{name}:{line}"),
        None => format!("{name}: {}", crate::commands::predict::id_text(document)),
    }
}
