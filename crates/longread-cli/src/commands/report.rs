//! `longread report`: one self-contained HTML page with every document's prediction, a bar
//! chart of its chunks' attention and its text shaded by that attention.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use longread_model::han::is_han_dir;
use longread_report::{render_html, ChunkView, DocumentView};
use longread_text::{read_documents, Document};

use crate::commands::han_scoring;
use crate::commands::predict::{id_text, load, progress_bar, score_documents};
use crate::io::Output;

/// Arguments of `longread report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Model directory made by `longread init` or `longread train`.
    #[arg(long)]
    model: PathBuf,
    /// Documents, as for `predict`: JSON lines, a .txt file, a directory of .txt files, or `-`.
    #[arg(long)]
    input: PathBuf,
    /// The HTML file to write (atomically).
    #[arg(long)]
    out: PathBuf,
    /// Most tokens per encoder batch (as for `predict`).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_tokens: u64,
}

/// Runs `longread report`; returns the number of documents that failed.
pub fn run(args: ReportArgs, quiet: bool) -> Result<usize> {
    let documents = read_documents(&args.input, crate::io::stdin_reader)?;
    let progress = progress_bar(documents.len(), quiet);
    let mut views = Vec::with_capacity(documents.len());
    if is_han_dir(&args.model) {
        let model = han_scoring::load(&args.model)?;
        let labels = model.labels().to_vec();
        han_scoring::score_documents(&model, &documents, &progress, |result| {
            let mut v = view(result.document);
            match result.outcome {
                Err(message) => v.error = Some(message),
                Ok(scores) => {
                    v.sentences = han_scoring::sentence_views(&scores);
                    v.scores = labels.iter().cloned().zip(scores.probabilities).collect();
                }
            }
            views.push(v);
            Ok(())
        })?;
        return write_report(&args, &views, &progress, quiet);
    }
    let (model, chunker) = load(&args.model, crate::commands::predict::ScoringPrecision::F32)?;
    let labels = model.labels().to_vec();
    score_documents(&model, &chunker, &documents, args.max_batch_tokens as usize, &progress, |result| {
        let mut view = view(result.document);
        match result.outcome {
            Err(message) => view.error = Some(message),
            Ok((chunked, scores)) => {
                view.scores = labels.iter().cloned().zip(scores.probabilities).collect();
                view.chunks = chunked
                    .chunks
                    .iter()
                    .zip(scores.attention)
                    .map(|(c, attention)| ChunkView { index: c.index, start: c.start, end: c.end, attention })
                    .collect();
            }
        }
        views.push(view);
        Ok(())
    })?;
    write_report(&args, &views, &progress, quiet)
}

/// A document's view before scoring.
fn view(document: &Document) -> DocumentView<'_> {
    DocumentView {
        id: id_text(&document.id),
        text: &document.text,
        scores: vec![],
        chunks: vec![],
        sentences: vec![],
        error: None,
    }
}

/// Writes the page atomically; returns the number of documents that failed.
fn write_report(args: &ReportArgs, views: &[DocumentView], progress: &ProgressBar, quiet: bool) -> Result<usize> {
    progress.finish_and_clear();
    let failed = views.iter().filter(|v| v.error.is_some()).count();
    let html = render_html("longread report", &args.model.display().to_string(), views);
    let mut out = Output::create(Some(&args.out))?;
    out.write_all(html.as_bytes()).context("writing the report")?;
    out.commit()?;
    if !quiet {
        eprintln!("wrote {} ({} documents, {failed} failed)", args.out.display(), views.len());
    }
    Ok(failed)
}
