//! A hierarchical or single-chunk sequence classifier on a transformer encoder: a document's
//! units are its chunks, each encoded to one vector; the document is pooled and classified
//! from its chunk vectors, which the vector cache can keep between runs.

use std::path::Path;

use candle_core::{Device, Tensor};
use longread_model::batching::{plan_by_cost, Split, UnitKey};
use longread_model::error::Result;
use longread_model::hierarchical::{DocumentScores, HierarchicalClassifier, TaskSpec, VectorCache};
use longread_model::mode::Mode;
use longread_text::{pad_batch, ChunkedDocument, Chunker};

use super::{mismatch, DocumentModel, Output, Prepared, PreparedDocument, UnitOutput};
use crate::prediction::{argmax, carried, ChunkEvidence, LabelScores, Parts, Prediction, TaskPrediction};
use crate::{DocError, DocResult, Precision};

/// An encoder model ready to classify.
pub(crate) struct EncoderModel {
    pub(super) model: HierarchicalClassifier,
    pub(super) chunker: Chunker,
    tasks: Vec<TaskSpec>,
    pub(super) device: Device,
    pub(super) max_batch_tokens: usize,
    precision: Precision,
    vector_cache: Option<VectorCache>,
    /// Whether predictions carry occlusion evidence ([`crate::ClassifierOptions::occlusion`]).
    pub(crate) occlusion: bool,
}

impl EncoderModel {
    /// `model` with the chunker of its tokenizer and settings.
    pub(crate) fn new(
        model: HierarchicalClassifier,
        chunker: Chunker,
        device: Device,
        max_batch_tokens: usize,
        precision: Precision,
    ) -> Self {
        let tasks = model.config().tasks();
        Self { model, chunker, tasks, device, max_batch_tokens, precision, vector_cache: None, occlusion: false }
    }

    /// Token ids of chunk `unit` of `doc`.
    fn chunk_ids(doc: &PreparedDocument, unit: usize) -> Result<&[u32]> {
        match &doc.kind {
            Prepared::Chunks(d) => d.chunks.get(unit).map(|c| c.ids.as_slice()).ok_or_else(mismatch),
            Prepared::Whole(_) | Prepared::Members(_) => Err(mismatch()),
        }
    }

    /// The prediction of a document from its chunk vectors, `[n_chunks, hidden]`.
    pub(super) fn predict(&self, doc: &ChunkedDocument, vectors: &Tensor) -> Result<Prediction> {
        Ok(self.predict_many(&[doc], std::slice::from_ref(vectors))?.pop().expect("one prediction per document"))
    }

    /// The predictions of documents from their chunk vectors (`vectors[i]: [n_chunks_i,
    /// hidden]`), every head run before the scores are read back once.
    fn predict_many(&self, docs: &[&ChunkedDocument], vectors: &[Tensor]) -> Result<Vec<Prediction>> {
        let scores = longread_model::profile::timed("pooling + head, every document", &self.device, || {
            self.model.score_tasks_many(vectors)
        })?;
        let mut predictions: Vec<Prediction> =
            docs.iter().zip(scores).map(|(doc, scores)| self.prediction(doc, scores)).collect();
        if self.occlusion {
            for (prediction, chunks) in predictions.iter_mut().zip(vectors) {
                self.add_occlusion(prediction, chunks)?;
            }
        }
        Ok(predictions)
    }

    /// A document's prediction from its score sets (one per task, the primary first).
    fn prediction(&self, doc: &ChunkedDocument, scores: Vec<DocumentScores>) -> Prediction {
        encoder_prediction(&self.tasks, self.model.is_multi_label(0), doc, scores)
    }

    /// Fills `prediction`'s occlusion evidence from its document's chunk vectors `[n_chunks,
    /// hidden]` (none past [`crate::MAX_OCCLUSION_CHUNKS`] chunks).
    fn add_occlusion(&self, prediction: &mut Prediction, chunks: &Tensor) -> Result<()> {
        let Parts::Chunks { chunks: evidence } = &mut prediction.parts else { return Ok(()) };
        if evidence.len() > crate::MAX_OCCLUSION_CHUNKS {
            return Ok(());
        }
        let rows = longread_model::profile::timed("occlusion", &self.device, || self.model.leave_one_out(chunks))?;
        for (chunk, row) in evidence.iter_mut().zip(rows) {
            chunk.without = Some(row);
        }
        prediction.settle_occlusion();
        Ok(())
    }
}

impl DocumentModel for EncoderModel {
    fn tasks(&self) -> &[TaskSpec] {
        &self.tasks
    }

    fn multi_label(&self) -> bool {
        self.model.is_multi_label(0)
    }

    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        let chunked = self.chunker.chunk(text).map_err(|e| DocError::new(e.to_string()))?;
        Ok(PreparedDocument::new(Prepared::Chunks(chunked)))
    }

    fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey {
        UnitKey { lane: 0, cost: Self::chunk_ids(doc, unit).map_or(0, <[u32]>::len) }
    }

    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        let seqs = units.iter().map(|(d, u)| Self::chunk_ids(d, *u)).collect::<Result<Vec<&[u32]>>>()?;
        let mut outputs: Vec<Option<UnitOutput>> = (0..seqs.len()).map(|_| None).collect();
        // The batch a caller hands over is within the budget; it is split where padding would
        // waste work (the outputs do not depend on the split).
        for batch in plan_by_cost(seqs.iter().map(|s| s.len()), self.max_batch_tokens, Split::Padding) {
            let chosen: Vec<&[u32]> = batch.iter().map(|&i| seqs[i]).collect();
            let (ids, mask, seq) = pad_batch(&chosen, self.model.config().encoder.pad_token_id);
            let n = chosen.len();
            // On the CPU: the encoder checks them there and copies them to its device, reading
            // nothing back from a GPU (so this batch is prepared while the last one runs).
            let ids = Tensor::from_vec(ids, (n, seq), &Device::Cpu)?;
            let mask = Tensor::from_vec(mask, (n, seq), &Device::Cpu)?;
            // Detached: nothing here is differentiated, and no graph is kept alive.
            let vectors = self.model.chunk_vectors(&ids, &mask, Mode::Eval)?.detach();
            for (row, &i) in batch.iter().enumerate() {
                outputs[i] = Some(UnitOutput(Output::Vector { rows: vectors.clone(), row }));
            }
        }
        Ok(outputs.into_iter().map(|o| o.expect("every unit is in a batch")).collect())
    }

    fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        Ok(self.finish_many(vec![(doc, outputs)])?.pop().expect("one result per document"))
    }

    fn finish_many(&self, docs: Vec<(&PreparedDocument, Vec<UnitOutput>)>) -> Result<Vec<DocResult>> {
        let mut chunked = Vec::with_capacity(docs.len());
        let mut vectors = Vec::with_capacity(docs.len());
        for (doc, outputs) in &docs {
            let Prepared::Chunks(c) = &doc.kind else { return Err(mismatch()) };
            chunked.push(c);
            vectors.push(UnitOutput::stack_vectors(outputs)?);
        }
        Ok(self.predict_many(&chunked, &vectors)?.into_iter().map(Ok).collect())
    }

    fn evidence_unit(&self) -> &'static str {
        "chunk"
    }

    fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        let cached = match (&self.vector_cache, &doc.kind) {
            (Some(cache), Prepared::Chunks(chunked)) => cache.get(chunked, &self.device),
            _ => None,
        };
        match cached.filter(|v| v.dims().first() == Some(&doc.units())) {
            Some(v) => (0..doc.units()).map(|row| Some(UnitOutput(Output::Vector { rows: v.clone(), row }))).collect(),
            None => (0..doc.units()).map(|_| None).collect(),
        }
    }

    fn remember(&self, doc: &PreparedDocument, outputs: &[UnitOutput], fresh: &[bool]) -> Result<()> {
        let (Some(cache), Prepared::Chunks(chunked)) = (&self.vector_cache, &doc.kind) else { return Ok(()) };
        if !fresh.iter().all(|&f| f) || outputs.is_empty() {
            return Ok(());
        }
        cache.put(chunked, &UnitOutput::stack_vectors(outputs)?)
    }

    fn set_vector_cache(&mut self, dir: &Path) -> Result<()> {
        self.vector_cache = Some(VectorCache::open(dir, &self.model, &format!("{:?}", self.precision))?);
        Ok(())
    }

    fn streams(&self, text: &str) -> bool {
        super::streamed::streams(&self.chunker, text)
    }

    fn classify_streamed(&self, text: &str) -> Result<DocResult> {
        super::streamed::classify_streamed(self, text)
    }

    fn chunk_layout(&self) -> Option<(usize, usize)> {
        Some((self.model.config().longread.chunking().chunk_size, self.model.config().encoder.vocab_size))
    }
}

/// An encoder model's prediction: `scores` holds one score set per task, the primary first; a
/// `multi_label` primary task carries each label whose probability is at least
/// [`crate::prediction::MULTI_LABEL_THRESHOLD`].
fn encoder_prediction(
    tasks: &[TaskSpec],
    multi_label: bool,
    doc: &ChunkedDocument,
    scores: Vec<DocumentScores>,
) -> Prediction {
    let mut scores = scores.into_iter();
    let primary = scores.next().expect("one score set per task");
    let other: std::collections::BTreeMap<String, TaskPrediction> = tasks[1..]
        .iter()
        .zip(scores)
        .map(|(spec, s)| {
            let task = TaskPrediction {
                label: spec.labels[argmax(&s.probabilities)].clone(),
                scores: LabelScores { labels: spec.labels.clone(), probabilities: s.probabilities },
                logits: s.logits,
                attention: s.attention,
            };
            (spec.name.clone(), task)
        })
        .collect();
    let labels = &tasks[0].labels;
    let carried_labels = multi_label.then(|| carried(labels, &primary.probabilities));
    Prediction {
        label: labels[argmax(&primary.probabilities)].clone(),
        parts: Parts::Chunks {
            chunks: doc
                .chunks
                .iter()
                .zip(&primary.attention)
                .enumerate()
                .map(|(i, (c, &attention))| ChunkEvidence {
                    labels: primary.label_attention.as_ref().map(|rows| {
                        labels
                            .iter()
                            .zip(rows)
                            .map(|(l, row)| (l.clone(), row.get(i).copied().unwrap_or(0.0)))
                            .collect()
                    }),
                    ..ChunkEvidence::new(c.index, c.start, c.end, attention)
                })
                .collect(),
        },
        scores: LabelScores { labels: labels.clone(), probabilities: primary.probabilities },
        logits: primary.logits,
        labels: carried_labels,
        tasks: (!other.is_empty()).then_some(other),
        members: None,
        tokens: Some(doc.total_tokens),
    }
}
