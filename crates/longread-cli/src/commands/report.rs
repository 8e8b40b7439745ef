//! `longread report`: one self-contained HTML page with every document's prediction, a bar
//! chart of its chunks' attention and its text shaded by that attention.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use longread_classifier::{ClassifierOptions, DocResult};
use longread_model::DeviceChoice;
use longread_report::{render_html, DocumentView};
use longread_text::{read_documents, Document};

use crate::commands::counts::counted;
use crate::commands::predict::{id_text, load, progress_bar, EncodingArgs};
use crate::io::Output;

/// Arguments of `longread report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Model directory made by `longread init` or `longread train`.
    #[arg(long)]
    model: PathBuf,
    /// Documents, as for `predict`: JSON lines, CSV/TSV with a header row, a .txt file, a
    /// directory of .txt files, or `-`.
    #[arg(long)]
    input: PathBuf,
    /// The HTML file to write (atomically).
    #[arg(long, visible_alias = "output")]
    out: PathBuf,
    /// Stop at the first JSON line that cannot be read (invalid JSON, no "text"), writing no
    /// page. Without it such a line is shown in the page as a failed document ("line N" and
    /// why), the others are classified, and the exit code is 2 — as `predict` does.
    #[arg(long)]
    strict: bool,
    /// Add each document's occlusion chart (hierarchical models; see `predict --occlusion`):
    /// the label's probability lost without each chunk, bars up where a chunk supports the
    /// label and down where it speaks against it. A multi-label document also names, for each
    /// label it carries, the chunk whose removal lowered that label's probability most.
    #[arg(long)]
    occlusion: bool,
    /// Read chunk vectors from DIR, and keep new ones there (see `train --vector-cache`), as
    /// `predict` and `eval` do.
    #[arg(long, value_name = "DIR")]
    vector_cache: Option<PathBuf>,
    #[command(flatten)]
    encoding: EncodingArgs,
}

/// Runs `longread report`; returns the number of documents that failed.
pub fn run(args: ReportArgs, quiet: bool, device: DeviceChoice) -> Result<usize> {
    crate::io::refuse_output_over_input(&args.input, Some(&args.out), "--out")?;
    let options = ClassifierOptions { occlusion: args.occlusion, ..args.encoding.options(device) };
    let classifier = load(&args.model, options, args.vector_cache.as_deref())?;
    let documents = read_documents(&args.input, crate::io::stdin_reader, args.strict)?;
    let progress = progress_bar(documents.len(), quiet);
    let mut views = Vec::with_capacity(documents.len());
    classifier.classify_documents(&documents, |document, result| {
        views.push(view(document, result));
        progress.inc(1);
        Ok::<(), anyhow::Error>(())
    })?;
    progress.finish_and_clear();
    let failed = views.iter().filter(|v| v.error.is_some()).count();
    let html = render_html("longread report", &args.model.display().to_string(), &views);
    let mut out = Output::create(Some(&args.out))?;
    out.write_all(html.as_bytes()).context("writing the report")?;
    out.commit()?;
    if !quiet {
        eprintln!("wrote {} ({}, {failed} failed)", args.out.display(), counted(views.len(), "document"));
    }
    Ok(failed)
}

/// What the page shows of one document: its scores and the chunks or sentences (with words)
/// the model attended to, or why it has no prediction.
fn view(document: &Document, result: DocResult) -> DocumentView<'_> {
    DocumentView::of_result(id_text(document), &document.text, result)
}
