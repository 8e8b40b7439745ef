//! Documents in pieces, for a queue that batches the work of many requests together
//! ([`crate::queue`]): a document is prepared once (tokenized and chunked), its units — an
//! encoder model's chunks, or a HAN's whole document — are encoded in batches shared with
//! other documents, and its prediction is made from its units' outputs. A unit's output does
//! not depend on what else was in its batch, so a document gets the scores it gets alone. An
//! ensemble's document is its members' prepared documents, one after the other: an encoder
//! member's chunks are queued like any chunks (fair round-robin, cancellation between
//! batches), and the members' predictions are combined when the last unit is in.
//!
//! These are the [`DocumentModel`](crate::kinds::DocumentModel) protocol that every model
//! kind implements; `predict` drives the same protocol ([`crate::route`]).

use longread_model::batching::UnitKey;
use longread_model::error::Result;

pub use crate::kinds::{PreparedDocument, UnitOutput};
use crate::{Classifier, DocError, DocResult};

impl Classifier {
    /// Tokenizes and chunks `text` (a HAN or a bag of words keeps it whole; an ensemble's
    /// members each prepare it); an unusable text is a [`DocError`].
    pub fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        self.model.prepare(text)
    }

    /// What unit `unit` of `doc` costs in a batch whose padded size (units × the costliest)
    /// stays within `max_batch_tokens`: its tokens, or for a HAN a share that fits the HAN's
    /// batch.
    pub fn unit_cost(&self, doc: &PreparedDocument, unit: usize) -> usize {
        self.unit_key(doc, unit).cost
    }

    /// Which model encodes unit `unit` of `doc` and what it costs.
    pub(crate) fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey {
        self.model.unit_key(doc, unit)
    }

    /// Encodes units of several documents in one batch (split where padding would waste work:
    /// [`longread_model::batching::plan_batches`]), an output per unit in order.
    ///
    /// # Shapes
    /// `units`: (document, unit index) pairs → one output per pair
    pub fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        self.model.encode_units(units)
    }

    /// The prediction of `doc` from its units' outputs, in unit order (a non-finite score is
    /// the document's error: [`crate::prediction::finite_or_error`]).
    pub fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        Ok(crate::prediction::finite_or_error(self.finish_unchecked(doc, outputs)?))
    }

    /// [`Classifier::finish`] without the finiteness check (an ensemble checks the combination).
    pub(crate) fn finish_unchecked(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        self.model.finish(doc, outputs)
    }

    /// [`Classifier::finish_unchecked`] of several documents, in order (an encoder model runs
    /// every head, then reads all the scores back at once).
    pub(crate) fn finish_many_unchecked(
        &self,
        docs: Vec<(&PreparedDocument, Vec<UnitOutput>)>,
    ) -> Result<Vec<DocResult>> {
        self.model.finish_many(docs)
    }

    /// Outputs of `doc`'s units kept by the vector cache (`None`: to encode).
    pub(crate) fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        self.model.recall(doc)
    }

    /// Keeps `doc`'s unit outputs in the vector cache (`fresh`: encoded now).
    pub(crate) fn remember(&self, doc: &PreparedDocument, outputs: &[UnitOutput], fresh: &[bool]) -> Result<()> {
        self.model.remember(doc, outputs, fresh)
    }
}
