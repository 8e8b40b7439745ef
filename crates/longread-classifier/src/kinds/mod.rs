//! The kinds of model behind a [`Classifier`](crate::Classifier), each implementing one trait,
//! [`DocumentModel`]: how a text is prepared into units (an encoder's chunks, a HAN's or a bag
//! of words' whole text, an ensemble's members' units), what a unit costs in a batch, how a
//! batch of units is encoded, how a document's prediction is made from its units' outputs, and
//! what its evidence is made of. Every front drives that one protocol — `predict` and Python
//! through [`crate::route`], the server through [`crate::queue`] — and only
//! [`Classifier::load`](crate::Classifier::load) knows which kind it loaded.

pub(crate) mod bow;
pub(crate) mod encoder;
pub(crate) mod han;
mod streamed;
pub(crate) mod whole;

use std::path::Path;

use candle_core::Tensor;
use longread_model::batching::UnitKey;
use longread_model::error::{ModelError, Result};
use longread_model::hierarchical::{TaskSpec, DEFAULT_TASK};
use longread_text::ChunkedDocument;

use crate::{DocError, DocResult};

/// A document ready to be encoded unit by unit (see [`crate::Classifier::prepare`]).
#[derive(Debug)]
pub struct PreparedDocument {
    pub(crate) kind: Prepared,
}

/// What a model kind prepared.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// An encoder model's chunks.
    Chunks(ChunkedDocument),
    /// A HAN or a bag of words reads the whole text at once.
    Whole(String),
    /// An ensemble: each member's prepared document, in member order; the units are theirs,
    /// one member's after the other's.
    Members(Vec<PreparedDocument>),
}

impl PreparedDocument {
    pub(crate) fn new(kind: Prepared) -> Self {
        Self { kind }
    }

    /// Units to encode (chunks; 1 for a HAN or a bag of words; an ensemble's members' units).
    pub fn units(&self) -> usize {
        match &self.kind {
            Prepared::Chunks(doc) => doc.chunks.len(),
            Prepared::Whole(_) => 1,
            Prepared::Members(docs) => docs.iter().map(PreparedDocument::units).sum(),
        }
    }

    /// Tokens of the document (encoder models, and ensembles with one: the first such
    /// member's; 0 for a HAN or a bag of words).
    pub fn tokens(&self) -> usize {
        match &self.kind {
            Prepared::Chunks(doc) => doc.total_tokens,
            Prepared::Whole(_) => 0,
            Prepared::Members(docs) => docs.iter().map(PreparedDocument::tokens).find(|&t| t > 0).unwrap_or(0),
        }
    }
}

/// What encoding one unit gave.
#[derive(Debug)]
pub struct UnitOutput(pub(crate) Output);

impl UnitOutput {
    /// Units' chunk vectors in order, as one tensor: consecutive rows of one source are one
    /// view of it (no copy when they are all of it), so a document whose chunks were encoded
    /// together costs one copy at most, not one per chunk. Another model's output is a
    /// mismatch.
    ///
    /// # Shapes
    /// `outputs`: n units → `[n, hidden]`
    pub(crate) fn stack_vectors(outputs: &[UnitOutput]) -> Result<Tensor> {
        // Runs of consecutive rows of one source: (source, first row, rows).
        let mut runs: Vec<(&Tensor, usize, usize)> = Vec::new();
        for output in outputs {
            let Output::Vector { rows, row } = &output.0 else { return Err(mismatch()) };
            match runs.last_mut() {
                Some((source, first, n)) if source.id() == rows.id() && *first + *n == *row => *n += 1,
                _ => runs.push((rows, *row, 1)),
            }
        }
        let views = runs
            .into_iter()
            .map(
                |(source, first, n)| {
                    if first == 0 && n == source.dim(0)? {
                        Ok(source.clone())
                    } else {
                        source.narrow(0, first, n)
                    }
                },
            )
            .collect::<candle_core::Result<Vec<Tensor>>>()?;
        Ok(match views.as_slice() {
            [one] => one.clone(),
            _ => Tensor::cat(&views, 0)?,
        })
    }
}

/// The output of one unit.
#[derive(Debug)]
pub(crate) enum Output {
    /// A chunk's vector: row `row` of `rows` (`[n, hidden]`: the encoder batch it came from,
    /// or a document's cached vectors).
    Vector { rows: Tensor, row: usize },
    /// A HAN or bag-of-words document's whole result.
    Done(Box<DocResult>),
}

/// One kind of document model (see the module).
pub(crate) trait DocumentModel: Send + Sync {
    /// Every task it predicts, the primary one first (one for all but multi-task models).
    fn tasks(&self) -> &[TaskSpec];

    /// Whether its primary task is multi-label: a document carries any number of the labels,
    /// each decided on its own (sigmoid probabilities, [`crate::Prediction::labels`]).
    fn multi_label(&self) -> bool {
        false
    }

    /// `text` prepared into units; a text this model cannot read is a [`DocError`].
    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError>;

    /// Which model encodes unit `unit` of `doc` and what it costs in a padded batch.
    fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey;

    /// Encodes units of several documents together, one output per unit in order.
    ///
    /// # Shapes
    /// `units`: (document, unit index) pairs → one output per pair
    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>>;

    /// The prediction of `doc` from its units' outputs, in unit order.
    fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult>;

    /// The predictions of several documents from their units' outputs (each in unit order),
    /// in order; by default one [`DocumentModel::finish`] after another.
    fn finish_many(&self, docs: Vec<(&PreparedDocument, Vec<UnitOutput>)>) -> Result<Vec<DocResult>> {
        docs.into_iter().map(|(doc, outputs)| self.finish(doc, outputs)).collect()
    }

    /// What a prediction's evidence is made of: `"chunk"`, `"sentence"` or `"none"`.
    fn evidence_unit(&self) -> &'static str;

    /// Outputs of `doc`'s units kept from an earlier run (the vector cache), `None` for each
    /// unit to encode.
    fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        (0..doc.units()).map(|_| None).collect()
    }

    /// Keeps `doc`'s unit outputs for later runs; `fresh` says which were encoded now.
    fn remember(&self, _doc: &PreparedDocument, _outputs: &[UnitOutput], _fresh: &[bool]) -> Result<()> {
        Ok(())
    }

    /// Reads and keeps chunk vectors in `dir` (models without an encoder ignore it).
    fn set_vector_cache(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    /// Whether `text` is too long to hold prepared and is classified as a stream instead
    /// ([`DocumentModel::classify_streamed`]).
    fn streams(&self, _text: &str) -> bool {
        false
    }

    /// Classifies a text that [`DocumentModel::streams`].
    fn classify_streamed(&self, _text: &str) -> Result<DocResult> {
        Err(ModelError::InvalidInput("this model does not stream texts".into()))
    }

    /// An encoder model's chunk size in tokens and vocabulary size.
    fn chunk_layout(&self) -> Option<(usize, usize)> {
        None
    }
}

/// The one task of a model that predicts `labels` only.
pub(crate) fn single_task(labels: Vec<String>) -> Vec<TaskSpec> {
    vec![TaskSpec { name: DEFAULT_TASK.into(), column: DEFAULT_TASK.into(), labels }]
}

/// A prepared document or output from another model.
pub(crate) fn mismatch() -> ModelError {
    ModelError::InvalidInput("a prepared document or unit output of another model".into())
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    fn row(rows: &Tensor, row: usize) -> UnitOutput {
        UnitOutput(Output::Vector { rows: rows.clone(), row })
    }

    fn values(t: &Tensor) -> Vec<Vec<f32>> {
        t.to_vec2().unwrap()
    }

    /// Rows from two encoder batches, in and out of order, join to the rows themselves; a
    /// document that is a whole batch is that batch, uncopied.
    #[test]
    fn stacked_vectors_are_the_units_rows_in_order() {
        let a = Tensor::arange(0f32, 15., &Device::Cpu).unwrap().reshape((5, 3)).unwrap();
        let b = Tensor::arange(100f32, 112., &Device::Cpu).unwrap().reshape((4, 3)).unwrap();
        let picks = [(&a, 1), (&a, 2), (&a, 3), (&b, 0), (&b, 1), (&a, 4), (&a, 0), (&b, 3)];
        let outputs: Vec<UnitOutput> = picks.iter().map(|&(t, r)| row(t, r)).collect();
        let joined = UnitOutput::stack_vectors(&outputs).unwrap();
        let want: Vec<Vec<f32>> = picks.iter().map(|&(t, r)| t.get(r).unwrap().to_vec1().unwrap()).collect();
        assert_eq!(values(&joined), want);

        let whole: Vec<UnitOutput> = (0..4).map(|r| row(&b, r)).collect();
        let joined = UnitOutput::stack_vectors(&whole).unwrap();
        assert_eq!(joined.id(), b.id(), "a whole batch is not copied");
        let part: Vec<UnitOutput> = (1..3).map(|r| row(&b, r)).collect();
        assert_eq!(values(&UnitOutput::stack_vectors(&part).unwrap()), values(&b.narrow(0, 1, 2).unwrap()));
    }

    #[test]
    fn another_models_output_is_not_a_vector() {
        let done = UnitOutput(Output::Done(Box::new(Err(DocError::new("x".to_string())))));
        let err = UnitOutput::stack_vectors(&[done]).unwrap_err().to_string();
        assert!(err.contains("another model"), "{err}");
    }
}
