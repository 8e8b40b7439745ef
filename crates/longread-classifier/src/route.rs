//! The one inference route for many documents, whatever the model kind: documents are
//! prepared on another thread (a window of them in parallel) while the model works through the
//! groups already prepared, so that tokenization overlaps the encoder (on a GPU it otherwise
//! idles while one core tokenizes). A group of about [`Classifier::group_units`] units is planned into
//! batches by the one planner ([`plan_batches`]), encoded (units the vector cache holds are
//! skipped), and each document finished in input order.

use std::borrow::Borrow;
use std::sync::mpsc::sync_channel;

use longread_model::batching::{plan_batches, Split, UnitKey};
use longread_model::error::{ModelError, Result};
use longread_text::Document;
use rayon::prelude::*;

use crate::kinds::{DocumentModel, PreparedDocument, UnitOutput};
use crate::{prediction, Classifier, DocError, DocResult};

/// Documents prepared in parallel at a time.
const CUT_WINDOW: usize = 32;
/// Prepared documents waiting for the model, at most (bounds memory).
const CUT_AHEAD: usize = 64;

/// What the preparing thread hands the model for one document.
enum Cut {
    /// Prepared into units.
    Prepared(PreparedDocument),
    /// Too long to hold prepared: the model streams it ([`DocumentModel::classify_streamed`]).
    Stream,
    /// Why it could not be prepared.
    Failed(DocError),
}

impl Classifier {
    /// Classifies `documents` in groups (memory bounded whatever their number), calling
    /// `on_result` once per document in input order; a document read with an error, or one
    /// that cannot be classified, gets a [`DocError`]. Stops at the first error `on_result`
    /// returns.
    pub fn classify_documents<'d, E: From<ModelError>>(
        &self,
        documents: &'d [Document],
        on_result: impl FnMut(&'d Document, DocResult) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.classify_each(|| documents.iter(), on_result)
    }

    /// As [`Classifier::classify_documents`], for documents read as they are classified: the
    /// iterator `documents()` makes is walked on the preparing thread, a few windows ahead of
    /// the model, so that only the documents in flight are held (a directory or JSON-lines
    /// input of any size; see `longread_text::DocumentSource`). Each document is handed back
    /// with its result.
    pub fn classify_stream<I, E>(
        &self,
        documents: impl FnOnce() -> I + Send,
        on_result: impl FnMut(Document, DocResult) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        I: Iterator<Item = Document>,
        E: From<ModelError>,
    {
        self.classify_each(documents, on_result)
    }

    /// The route of both: documents are taken from `documents()` on a thread of their own, a
    /// window at a time prepared in parallel, and scored here in groups.
    fn classify_each<D, I, E>(
        &self,
        documents: impl FnOnce() -> I + Send,
        mut on_result: impl FnMut(D, DocResult) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        D: Borrow<Document> + Send + Sync,
        I: Iterator<Item = D>,
        E: From<ModelError>,
    {
        let model: &dyn DocumentModel = &*self.model;
        std::thread::scope(|scope| {
            let (sender, cut) = sync_channel::<(D, Cut)>(CUT_AHEAD);
            // (On a pool of its own in a forked Python process: see `threads::on_side_pool`.)
            scope.spawn(move || {
                longread_model::threads::on_side_pool(move || {
                    let mut documents = documents();
                    loop {
                        let window: Vec<D> = documents.by_ref().take(CUT_WINDOW).collect();
                        if window.is_empty() {
                            return;
                        }
                        let done: Vec<Cut> = window.par_iter().map(|doc| cut_one(model, doc.borrow())).collect();
                        for one in window.into_iter().zip(done) {
                            if sender.send(one).is_err() {
                                return; // the model side stopped (an error)
                            }
                        }
                    }
                })
            });
            // `group` holds the next documents, prepared, and `waiting` the documents themselves.
            let mut units = 0;
            let group_units = self.group_units();
            let mut group: Vec<std::result::Result<PreparedDocument, DocError>> = Vec::new();
            let mut waiting: Vec<D> = Vec::new();
            // Scores `group` and hands its results on, then `streamed`'s (the document after it).
            let mut flush = |group: &mut Vec<_>, waiting: &mut Vec<D>, streamed: Option<(D, DocResult)>| {
                let results = self.score_prepared(std::mem::take(group))?;
                for (document, result) in waiting.drain(..).zip(results).chain(streamed) {
                    on_result(document, prediction::finite_or_error(result))?;
                }
                Ok::<(), E>(())
            };
            for (document, one) in cut {
                let one = match one {
                    Cut::Prepared(doc) => Ok(doc),
                    Cut::Failed(e) => Err(e),
                    Cut::Stream => {
                        let result = model.classify_streamed(&document.borrow().text)?;
                        flush(&mut group, &mut waiting, Some((document, result)))?;
                        units = 0;
                        continue;
                    }
                };
                units += one.as_ref().map_or(0, PreparedDocument::units);
                group.push(one);
                waiting.push(document);
                if units >= group_units {
                    flush(&mut group, &mut waiting, None)?;
                    units = 0;
                }
            }
            if !group.is_empty() {
                flush(&mut group, &mut waiting, None)?;
            }
            Ok(())
        })
    }

    /// Scores prepared documents (those that failed keep their error): the units the vector
    /// cache lacks are encoded in shared batches ([`plan_batches`]), then each document is
    /// finished from its units' outputs.
    pub(crate) fn score_prepared(
        &self,
        group: Vec<std::result::Result<PreparedDocument, DocError>>,
    ) -> Result<Vec<DocResult>> {
        let docs: Vec<&PreparedDocument> = group.iter().filter_map(|d| d.as_ref().ok()).collect();
        let mut slots: Vec<Vec<Option<UnitOutput>>> = docs.iter().map(|d| self.recall(d)).collect();
        let fresh: Vec<Vec<bool>> = slots.iter().map(|s| s.iter().map(Option::is_none).collect()).collect();
        let todo: Vec<(usize, usize)> = fresh
            .iter()
            .enumerate()
            .flat_map(|(d, units)| units.iter().enumerate().filter(|(_, f)| **f).map(move |(u, _)| (d, u)))
            .collect();
        let keys: Vec<UnitKey> = todo.iter().map(|&(d, u)| self.unit_key(docs[d], u)).collect();
        longread_model::profile::timed("encoder, every batch (total)", &self.device, || -> Result<()> {
            for batch in plan_batches(&keys, self.max_batch_tokens(), Split::Padding) {
                let units: Vec<(&PreparedDocument, usize)> =
                    batch.iter().map(|&i| (docs[todo[i].0], todo[i].1)).collect();
                for (&i, output) in batch.iter().zip(self.encode_units(&units)?) {
                    slots[todo[i].0][todo[i].1] = Some(output);
                }
            }
            Ok(())
        })?;
        let mut finished = Vec::with_capacity(docs.len());
        for ((doc, slots), fresh) in docs.iter().zip(slots).zip(&fresh) {
            let outputs: Vec<UnitOutput> = slots.into_iter().map(|o| o.expect("every unit encoded")).collect();
            self.remember(doc, &outputs, fresh)?;
            finished.push((*doc, outputs));
        }
        let mut results = self.finish_many_unchecked(finished)?.into_iter();
        Ok(group
            .iter()
            .map(|d| match d {
                Err(e) => Err(e.clone()),
                Ok(_) => results.next().expect("one result per prepared document"),
            })
            .collect())
    }
}

/// One document prepared, or why not.
fn cut_one(model: &dyn DocumentModel, doc: &Document) -> Cut {
    match &doc.error {
        Some(e) => Cut::Failed(DocError::new(e.clone())),
        None if model.streams(&doc.text) => Cut::Stream,
        None => match model.prepare(&doc.text) {
            Ok(doc) => Cut::Prepared(doc),
            Err(e) => Cut::Failed(e),
        },
    }
}
