//! Models that read a document whole (the HAN, the bag of words): a document is one unit, and
//! a batch of units is a batch of texts.

use longread_model::batching::UnitKey;
use longread_model::error::Result;
use longread_model::hierarchical::TaskSpec;

use super::{mismatch, single_task, DocumentModel, Output, Prepared, PreparedDocument, UnitOutput};
use crate::{DocError, DocResult, HAN_BATCH};

/// Scores whole texts.
pub(crate) trait TextScorer: Send + Sync {
    /// Each text's result (one that cannot be classified gets its own error).
    fn score(&self, texts: &[&str]) -> Result<Vec<DocResult>>;

    /// What its predictions' evidence is made of.
    fn evidence_unit(&self) -> &'static str;

    /// Its labels, in id order.
    fn labels(&self) -> &[String];

    /// Whether a document carries any number of its labels (decided one by one).
    fn multi_label(&self) -> bool {
        false
    }
}

/// A [`TextScorer`] as a [`DocumentModel`].
pub(crate) struct WholeText<S> {
    scorer: S,
    /// Its one task.
    tasks: Vec<TaskSpec>,
    /// A unit's cost: [`HAN_BATCH`] of them fill the batch budget.
    unit_cost: usize,
}

impl<S: TextScorer> WholeText<S> {
    /// `scorer` batched [`HAN_BATCH`] texts to `max_batch_tokens`.
    pub(crate) fn new(scorer: S, max_batch_tokens: usize) -> Self {
        let tasks = single_task(scorer.labels().to_vec());
        Self { scorer, tasks, unit_cost: max_batch_tokens.div_ceil(HAN_BATCH) }
    }
}

impl<S: TextScorer> DocumentModel for WholeText<S> {
    fn tasks(&self) -> &[TaskSpec] {
        &self.tasks
    }

    fn multi_label(&self) -> bool {
        self.scorer.multi_label()
    }

    /// The text as it is: the scorer says why one cannot be classified.
    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        Ok(PreparedDocument::new(Prepared::Whole(text.to_owned())))
    }

    fn unit_key(&self, _doc: &PreparedDocument, _unit: usize) -> UnitKey {
        UnitKey { lane: 0, cost: self.unit_cost }
    }

    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        let texts = units
            .iter()
            .map(|(d, _)| match &d.kind {
                Prepared::Whole(text) => Ok(text.as_str()),
                Prepared::Chunks(_) | Prepared::Members(_) => Err(mismatch()),
            })
            .collect::<Result<Vec<&str>>>()?;
        Ok(self.scorer.score(&texts)?.into_iter().map(|r| UnitOutput(Output::Done(Box::new(r)))).collect())
    }

    fn finish(&self, _doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        match outputs.into_iter().next().map(|o| o.0) {
            Some(Output::Done(result)) => Ok(*result),
            _ => Err(mismatch()),
        }
    }

    fn evidence_unit(&self) -> &'static str {
        self.scorer.evidence_unit()
    }
}
