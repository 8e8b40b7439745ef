//! Encoder models over many documents: documents are cut into chunks on another thread (a
//! window of them in parallel) while the encoder works through the groups already cut, so that
//! tokenization overlaps the encoder (on a GPU it otherwise idles while one core tokenizes).
//! Groups are the same as cutting and encoding in turn would make: the same batches, the same
//! numbers.

use std::sync::mpsc::sync_channel;

use longread_text::{ChunkedDocument, Chunker, Document};
use rayon::prelude::*;

use crate::{prediction, streamed, Classifier, DocError, DocResult, GROUP_CHUNKS};
use longread_model::error::ModelError;
use longread_model::hierarchical::HierarchicalClassifier;

/// Documents cut in parallel at a time.
const CUT_WINDOW: usize = 32;
/// Cut documents waiting for the encoder, at most (bounds memory).
const CUT_AHEAD: usize = 64;

/// What the cutting thread hands the encoder for one document.
enum Cut {
    /// Cut into chunks.
    Chunked(ChunkedDocument),
    /// Too long to hold cut: the encoder side streams its chunks ([`streamed`]).
    Stream,
    /// Why it could not be cut.
    Failed(DocError),
}

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
            // Documents before `start` have their results; `group` holds the next ones, cut.
            let (mut start, mut chunks) = (0, 0);
            let mut group: Vec<std::result::Result<ChunkedDocument, DocError>> = Vec::new();
            // Scores `group` and hands its results on, then `streamed`'s (the document after it).
            let mut flush = |group: &mut Vec<_>, start: &mut usize, streamed: Option<DocResult>| {
                let results = self.score_chunked(model, std::mem::take(group))?;
                for result in results.into_iter().chain(streamed) {
                    on_result(&documents[*start], prediction::finite_or_error(result))?;
                    *start += 1;
                }
                Ok::<(), E>(())
            };
            for one in cut {
                let one = match one {
                    Cut::Chunked(doc) => Ok(doc),
                    Cut::Failed(e) => Err(e),
                    Cut::Stream => {
                        let text = &documents[start + group.len()].text;
                        let result = self.classify_streamed(model, chunker, text)?;
                        flush(&mut group, &mut start, Some(result))?;
                        chunks = 0;
                        continue;
                    }
                };
                chunks += one.as_ref().map_or(0, |c| c.chunks.len());
                group.push(one);
                if chunks >= GROUP_CHUNKS {
                    flush(&mut group, &mut start, None)?;
                    chunks = 0;
                }
            }
            if !group.is_empty() {
                flush(&mut group, &mut start, None)?;
            }
            Ok(())
        })
    }
}

/// One document cut into chunks, or its read error.
fn cut_one(chunker: &Chunker, doc: &Document) -> Cut {
    match &doc.error {
        Some(e) => Cut::Failed(DocError::new(e.clone())),
        None if streamed::streams(chunker, &doc.text) => Cut::Stream,
        None => match chunker.chunk(&doc.text) {
            Ok(doc) => Cut::Chunked(doc),
            Err(e) => Cut::Failed(DocError::new(e.to_string())),
        },
    }
}
