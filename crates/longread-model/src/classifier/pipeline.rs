//! Encoder models over many documents: documents are cut into chunks on another thread (a
//! window of them in parallel) while the encoder works through the groups already cut, so that
//! tokenization overlaps the encoder (on a GPU it otherwise idles while one core tokenizes).
//! Groups are the same as cutting and encoding in turn would make: the same batches, the same
//! numbers.

use std::sync::mpsc::sync_channel;

use longread_text::{ChunkedDocument, Chunker, Document};
use rayon::prelude::*;

use super::{prediction, Classifier, DocError, DocResult, GROUP_CHUNKS};
use crate::error::ModelError;
use crate::hierarchical::HierarchicalClassifier;

/// Documents cut in parallel at a time.
const CUT_WINDOW: usize = 32;
/// Cut documents waiting for the encoder, at most (bounds memory).
const CUT_AHEAD: usize = 64;

/// A document cut into chunks, or why it could not be.
type Cut = std::result::Result<ChunkedDocument, DocError>;

impl Classifier {
    /// [`Classifier::classify_documents`] for an encoder model: groups of about
    /// [`GROUP_CHUNKS`] chunks (at least one document), encoded together and scored, while the
    /// next documents are cut.
    pub(super) fn classify_encoder_documents<'d, E: From<ModelError>>(
        &self,
        model: &HierarchicalClassifier,
        chunker: &Chunker,
        documents: &'d [Document],
        on_result: &mut impl FnMut(&'d Document, DocResult) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        std::thread::scope(|scope| {
            let (sender, cut) = sync_channel::<Cut>(CUT_AHEAD);
            scope.spawn(move || {
                for window in documents.chunks(CUT_WINDOW) {
                    let done: Vec<Cut> = window.par_iter().map(|doc| cut_one(chunker, doc)).collect();
                    for one in done {
                        if sender.send(one).is_err() {
                            return; // the encoder side stopped (an error)
                        }
                    }
                }
            });
            let (mut start, mut chunks) = (0, 0);
            let mut group: Vec<Cut> = Vec::new();
            let mut flush = |group: &mut Vec<Cut>, start: &mut usize| -> std::result::Result<(), E> {
                let n = group.len();
                let results = self.score_chunked(model, std::mem::take(group))?;
                for (document, result) in documents[*start..*start + n].iter().zip(results) {
                    on_result(document, prediction::finite_or_error(result))?;
                }
                *start += n;
                Ok(())
            };
            for one in cut {
                chunks += one.as_ref().map_or(0, |c| c.chunks.len());
                group.push(one);
                if chunks >= GROUP_CHUNKS {
                    flush(&mut group, &mut start)?;
                    chunks = 0;
                }
            }
            if !group.is_empty() {
                flush(&mut group, &mut start)?;
            }
            Ok(())
        })
    }
}

/// One document cut into chunks, or its read error.
fn cut_one(chunker: &Chunker, doc: &Document) -> Cut {
    match &doc.error {
        Some(e) => Err(DocError::new(e.clone())),
        None => chunker.chunk(&doc.text).map_err(|e| DocError::new(e.to_string())),
    }
}
