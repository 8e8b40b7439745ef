//! The labelled documents of a run: read, labelled and chunked, with the dev split.

use std::path::Path;

use anyhow::{bail, Context, Result};
use longread_text::{read_labelled, resolve_labels, stratified_split, ChunkedDocument, Chunker};

use super::args::TrainArgs;
use crate::io::{input_name, open_input};

/// Training documents and labels, then dev documents and labels.
pub(super) type Data = (Vec<ChunkedDocument>, Vec<usize>, Vec<ChunkedDocument>, Vec<usize>);

/// Reads, labels and chunks the training and dev documents.
pub(super) fn load_data(args: &TrainArgs, labels: &[String], chunker: &Chunker) -> Result<Data> {
    let read = |path: &Path| -> Result<(Vec<ChunkedDocument>, Vec<usize>)> {
        let name = input_name(path);
        let examples = read_labelled(open_input(path)?, &name)?;
        let y = resolve_labels(&examples, labels, &name)?;
        let docs = examples
            .iter()
            .map(|e| chunker.chunk(&e.text).with_context(|| format!("{name}:{}", e.line)))
            .collect::<Result<Vec<_>>>()?;
        Ok((docs, y))
    };
    let (docs, y) = read(&args.train)?;
    match &args.dev {
        Some(dev) => {
            let (dev_docs, dev_y) = read(dev)?;
            Ok((docs, y, dev_docs, dev_y))
        }
        None => {
            if !(0.0 < args.dev_split && args.dev_split < 1.0) {
                bail!("--dev-split must be between 0 and 1 (or give --dev FILE)");
            }
            let (train_idx, dev_idx) = stratified_split(&y, args.dev_split, args.seed);
            if dev_idx.is_empty() || train_idx.is_empty() {
                bail!("--dev-split {} leaves an empty training or dev set", args.dev_split);
            }
            let pick = |idx: &[usize]| -> (Vec<ChunkedDocument>, Vec<usize>) {
                (idx.iter().map(|&i| docs[i].clone()).collect(), idx.iter().map(|&i| y[i]).collect())
            };
            let (t, ty) = pick(&train_idx);
            let (d, dy) = pick(&dev_idx);
            Ok((t, ty, d, dy))
        }
    }
}
