//! Any model wrapped so that its primary task's probabilities are calibrated by a
//! [`Temperature`] and its primary label chosen by a [`Decision`] (in that order: a rule kept
//! with a calibration applies to the calibrated probabilities).

use std::path::Path;

use longread_model::batching::UnitKey;
use longread_model::error::Result;
use longread_model::hierarchical::TaskSpec;

use super::{Decision, Temperature};
use crate::kinds::{DocumentModel, PreparedDocument, UnitOutput};
use crate::{DocError, DocResult};

/// A model whose primary task's probabilities are tempered and whose primary label is
/// chosen by a rule (everything else is the inner model's).
pub(crate) struct Adjusted {
    inner: Box<dyn DocumentModel>,
    temperature: Option<Temperature>,
    decision: Option<Decision>,
}

impl Adjusted {
    /// `inner` itself when there is nothing to adjust.
    pub(crate) fn wrap(
        inner: Box<dyn DocumentModel>,
        temperature: Option<Temperature>,
        decision: Option<Decision>,
    ) -> Box<dyn DocumentModel> {
        if temperature.is_none() && decision.is_none() {
            return inner;
        }
        Box::new(Self { inner, temperature, decision })
    }

    fn relabel(&self, result: DocResult) -> DocResult {
        result.map(|mut p| {
            if let Some(temperature) = &self.temperature {
                p = temperature.calibrate(p);
            }
            if let Some(decision) = &self.decision {
                p = decision.relabel(p);
            }
            // Occlusion and terms are of the labels and probabilities as they are now.
            p.settle_occlusion();
            p.settle_terms();
            p
        })
    }
}

impl DocumentModel for Adjusted {
    fn tasks(&self) -> &[TaskSpec] {
        self.inner.tasks()
    }

    fn multi_label(&self) -> bool {
        self.inner.multi_label()
    }
    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        self.inner.prepare(text)
    }
    fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey {
        self.inner.unit_key(doc, unit)
    }
    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        self.inner.encode_units(units)
    }
    fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        self.inner.finish(doc, outputs).map(|r| self.relabel(r))
    }
    fn finish_many(&self, docs: Vec<(&PreparedDocument, Vec<UnitOutput>)>) -> Result<Vec<DocResult>> {
        Ok(self.inner.finish_many(docs)?.into_iter().map(|r| self.relabel(r)).collect())
    }
    fn evidence_unit(&self) -> &'static str {
        self.inner.evidence_unit()
    }
    fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        self.inner.recall(doc)
    }
    fn remember(&self, doc: &PreparedDocument, outputs: &[UnitOutput], fresh: &[bool]) -> Result<()> {
        self.inner.remember(doc, outputs, fresh)
    }
    fn set_vector_cache(&mut self, dir: &Path) -> Result<()> {
        self.inner.set_vector_cache(dir)
    }
    fn streams(&self, text: &str) -> bool {
        self.inner.streams(text)
    }
    fn classify_streamed(&self, text: &str) -> Result<DocResult> {
        self.inner.classify_streamed(text).map(|r| self.relabel(r))
    }
    fn chunk_layout(&self) -> Option<(usize, usize)> {
        self.inner.chunk_layout()
    }
}
