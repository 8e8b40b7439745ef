//! `longread embed`: sentence embeddings for JSON lines.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use longread_model::sentence_pooling::SentencePooling;
use longread_model::{DeviceChoice, Embedder, EmbedderOptions, Precision};
use serde_json::{Map, Value};

use crate::io::{input_name, open_input, Output};

/// Arguments of `longread embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Model directory (config.json, model.safetensors, tokenizer.json), or a Hugging Face
    /// repository id when built with `--features hub`.
    #[arg(long)]
    model: String,
    /// JSON lines, one object per line with a "text" field, or a .csv/.tsv file with a header
    /// row and a "text" column; `-` reads JSON lines from standard input.
    /// Every other field (e.g. "id") is copied to the output line.
    #[arg(long)]
    input: PathBuf,
    /// Where to write JSON lines `{"id": ..., "embedding": [...]}` in input order
    /// (default: standard output). Written atomically: the file appears only when complete.
    #[arg(long)]
    output: Option<PathBuf>,
    /// How token vectors become one vector: mean over tokens, or the first token's.
    #[arg(long, value_enum, default_value_t = SentencePooling::Mean)]
    pooling: SentencePooling,
    /// Scale each embedding to unit L2 norm (as sentence-transformers' Normalize module).
    #[arg(long)]
    normalize: bool,
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

/// Runs `longread embed`.
pub fn run(args: EmbedArgs, quiet: bool, device: DeviceChoice) -> Result<()> {
    crate::io::refuse_output_over_input(&args.input, args.output.as_deref(), "--output")?;
    let name = input_name(&args.input);
    let records = longread_text::read_records(open_input(&args.input)?, &name)?;
    let dir = longread_model::resolve_model_dir(&args.model)?;
    let options =
        EmbedderOptions { pooling: args.pooling, normalize: args.normalize, device, precision: args.precision };
    let embedder = Embedder::open(&dir, options).with_context(|| format!("loading model {}", dir.display()))?;

    // A bar on a terminal, plain lines every 10 s otherwise (as predict's).
    let progress = crate::commands::predict::progress_bar(records.len(), quiet);
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let started = std::time::Instant::now();
    let result = embedder.embed(&texts, args.batch_size as usize, |n| progress.inc(n as u64))?;
    let seconds = started.elapsed().as_secs_f64();
    progress.finish_and_clear();
    if !quiet {
        let tokens: usize = result.token_counts.iter().sum();
        eprintln!(
            "embedded {} texts ({tokens} tokens) in {seconds:.2} s: {:.1} texts/s, {:.0} tokens/s on {}",
            texts.len(),
            texts.len() as f64 / seconds,
            tokens as f64 / seconds,
            longread_model::device::describe(embedder.device())
        );
    }

    let truncated: Vec<usize> = result.truncated.iter().enumerate().filter(|(_, t)| **t).map(|(i, _)| i).collect();
    if let Some(&first) = truncated.first() {
        tracing::warn!(
            "{} of {} texts were longer than the model's {} tokens and were truncated (first: {name} line {}); \
             use `longread predict` with a hierarchical model to read whole documents",
            truncated.len(),
            records.len(),
            embedder.max_length(),
            records[first].line
        );
    }

    let mut out = Output::create(args.output.as_deref())?;
    for (i, (record, vector)) in records.iter().zip(&result.vectors).enumerate() {
        let mut line = Map::new();
        line.insert("id".into(), record.fields.get("id").cloned().unwrap_or(Value::from(i)));
        for (k, v) in &record.fields {
            if k != "id" {
                line.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_writer(&mut out, &OutputLine { fields: &line, embedding: vector }).context("writing output")?;
        out.write_all(b"\n").context("writing output")?;
    }
    out.commit()
}
