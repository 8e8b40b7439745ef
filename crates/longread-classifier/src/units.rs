//! Documents in pieces, for a queue that batches the work of many requests together
//! ([`crate::queue`]): a document is prepared once (tokenized and chunked), its units — an
//! encoder model's chunks, or a HAN's whole document — are encoded in batches shared with
//! other documents, and its prediction is made from its units' outputs. A unit's output does
//! not depend on what else was in its batch, so a document gets the scores it gets alone. An
//! ensemble's document is its members' prepared documents, one after the other: an encoder
//! member's chunks are queued like any chunks (fair round-robin, cancellation between
//! batches), and the members' predictions are combined when the last unit is in.

use candle_core::Tensor;
use longread_text::{pad_batch, ChunkedDocument};

use crate::{classify_whole, encoder_prediction, Classifier, DocError, DocResult, Model, HAN_BATCH};
use longread_model::error::Result;
use longread_model::mode::Mode;

/// A document ready to be encoded unit by unit.
#[derive(Debug)]
pub struct PreparedDocument {
    kind: Prepared,
}

#[derive(Debug)]
enum Prepared {
    /// An encoder model's chunks.
    Chunks(ChunkedDocument),
    /// A HAN or a bag of words reads the whole text at once.
    Whole(String),
    /// An ensemble: each member's prepared document, in member order; the units are theirs,
    /// one member's after the other's.
    Members(Vec<PreparedDocument>),
}

impl PreparedDocument {
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

    /// The member and the member's unit that unit `unit` of an ensemble's document is.
    fn member_unit(&self, unit: usize) -> Option<(usize, &PreparedDocument, usize)> {
        let Prepared::Members(docs) = &self.kind else { return None };
        let mut first = 0;
        for (m, doc) in docs.iter().enumerate() {
            if unit < first + doc.units() {
                return Some((m, doc, unit - first));
            }
            first += doc.units();
        }
        None
    }
}

/// What encoding one unit gave.
#[derive(Debug)]
pub struct UnitOutput(Output);

#[derive(Debug)]
enum Output {
    /// A chunk's vector, `[hidden]`.
    Vector(Tensor),
    /// A HAN or bag-of-words document's whole result.
    Done(Box<DocResult>),
}

impl Classifier {
    /// Tokenizes and chunks `text` (a HAN checks only that it has text; an ensemble's members
    /// each prepare it); an empty or unusable text is a [`DocError`].
    pub fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        let kind = match &self.model {
            Model::Encoder { chunker, .. } => {
                Prepared::Chunks(chunker.chunk(text).map_err(|e| DocError::new(e.to_string()))?)
            }
            Model::Han(_) | Model::Bow(_) if text.trim().is_empty() => {
                return Err(DocError::new("the document is empty"))
            }
            Model::Han(_) | Model::Bow(_) => Prepared::Whole(text.to_owned()),
            Model::Ensemble(ensemble) => Prepared::Members(ensemble.prepare(text)?),
        };
        Ok(PreparedDocument { kind })
    }

    /// What unit `unit` of `doc` costs in a batch whose padded size (units × the costliest)
    /// stays within `max_batch_tokens`: its tokens, or for a HAN a share that fits the HAN's
    /// batch.
    pub fn unit_cost(&self, doc: &PreparedDocument, unit: usize) -> usize {
        match (&self.model, &doc.kind) {
            (_, Prepared::Chunks(d)) => d.chunks.get(unit).map_or(0, |c| c.ids.len()),
            (_, Prepared::Whole(_)) => self.max_batch_tokens().div_ceil(HAN_BATCH),
            (Model::Ensemble(ensemble), Prepared::Members(_)) => match doc.member_unit(unit) {
                Some((m, member_doc, u)) => ensemble.classifiers().nth(m).map_or(0, |c| c.unit_cost(member_doc, u)),
                None => 0,
            },
            (_, Prepared::Members(_)) => 0,
        }
    }

    /// Encodes units of several documents in one batch (split by length: see
    /// [`similar_lengths`]), an output per unit in order.
    ///
    /// # Shapes
    /// `units`: (document, unit index) pairs → one output per pair
    pub fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        match &self.model {
            Model::Encoder { model, .. } => {
                let seqs = units.iter().map(|(d, u)| chunk_ids(d, *u)).collect::<Result<Vec<&[u32]>>>()?;
                let mut outputs: Vec<Option<UnitOutput>> = (0..seqs.len()).map(|_| None).collect();
                for group in similar_lengths(&seqs) {
                    let chosen: Vec<&[u32]> = group.iter().map(|&i| seqs[i]).collect();
                    let (ids, mask, seq) = pad_batch(&chosen, model.config().encoder.pad_token_id);
                    let n = chosen.len();
                    let ids = Tensor::from_vec(ids, (n, seq), &self.device)?;
                    let mask = Tensor::from_vec(mask, (n, seq), &self.device)?;
                    let vectors = model.chunk_vectors(&ids, &mask, Mode::Eval)?.detach();
                    for (row, &i) in group.iter().enumerate() {
                        outputs[i] = Some(UnitOutput(Output::Vector(vectors.get(row)?)));
                    }
                }
                Ok(outputs.into_iter().map(|o| o.expect("every unit is in a group")).collect())
            }
            Model::Ensemble(ensemble) => {
                // Each member encodes its own units of the batch, together.
                let located =
                    units.iter().map(|(d, u)| d.member_unit(*u).ok_or_else(mismatch)).collect::<Result<Vec<_>>>()?;
                let mut outputs: Vec<Option<UnitOutput>> = (0..units.len()).map(|_| None).collect();
                for (m, member) in ensemble.classifiers().enumerate() {
                    let mine: Vec<usize> = (0..units.len()).filter(|&i| located[i].0 == m).collect();
                    if mine.is_empty() {
                        continue;
                    }
                    let member_units: Vec<(&PreparedDocument, usize)> =
                        mine.iter().map(|&i| (located[i].1, located[i].2)).collect();
                    for (i, output) in mine.into_iter().zip(member.encode_units(&member_units)?) {
                        outputs[i] = Some(output);
                    }
                }
                // A unit of another ensemble's document (more members) has no output here.
                outputs.into_iter().map(|o| o.ok_or_else(mismatch)).collect()
            }
            Model::Han(_) | Model::Bow(_) => {
                let docs: Vec<longread_text::Document> = units
                    .iter()
                    .enumerate()
                    .map(|(i, (d, _))| longread_text::Document::new(i, whole_text(d)))
                    .collect();
                Ok(classify_whole(&self.model, &docs)?
                    .into_iter()
                    .map(|r| UnitOutput(Output::Done(Box::new(r))))
                    .collect())
            }
        }
    }

    /// The prediction of `doc` from its units' outputs, in unit order (a non-finite score is
    /// the document's error: [`crate::prediction::finite_or_error`]).
    pub fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        Ok(crate::prediction::finite_or_error(self.finish_unchecked(doc, outputs)?))
    }

    fn finish_unchecked(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        match (&self.model, &doc.kind) {
            (Model::Encoder { model, .. }, Prepared::Chunks(chunked)) => {
                let rows = outputs
                    .into_iter()
                    .map(|o| match o.0 {
                        Output::Vector(v) => Ok(v),
                        Output::Done(_) => Err(mismatch()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let scores = model.score_tasks(&Tensor::stack(&rows, 0)?)?;
                Ok(Ok(encoder_prediction(&self.tasks, chunked, scores)))
            }
            (Model::Han(_) | Model::Bow(_), Prepared::Whole(_)) => match outputs.into_iter().next().map(|o| o.0) {
                Some(Output::Done(result)) => Ok(*result),
                _ => Err(mismatch()),
            },
            (Model::Ensemble(ensemble), Prepared::Members(docs)) => {
                if outputs.len() != doc.units() {
                    return Err(mismatch());
                }
                let mut outputs = outputs.into_iter();
                let mut results = Vec::with_capacity(docs.len());
                for (member, member_doc) in ensemble.classifiers().zip(docs) {
                    let own: Vec<UnitOutput> = outputs.by_ref().take(member_doc.units()).collect();
                    results.push(member.finish_unchecked(member_doc, own)?);
                }
                Ok(ensemble.combine(results.iter()))
            }
            _ => Err(mismatch()),
        }
    }
}

/// A padded batch wastes the work of `longest − length` tokens per sequence: the batch is
/// split, longest first, where a sequence is shorter than this fraction of its group's longest.
const SPLIT_BELOW: f64 = 0.75;

/// Indices of `seqs` in groups of similar length (longest first; see [`SPLIT_BELOW`]): the
/// queue's batch is fair across documents, and mixes their lengths; encoding each group
/// padded to its own longest saves the padding (the outputs do not depend on the grouping).
fn similar_lengths(seqs: &[&[u32]]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(seqs[i].len()));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some(group) if seqs[i].len() as f64 >= SPLIT_BELOW * seqs[group[0]].len() as f64 => group.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// Token ids of an encoder document's chunk.
fn chunk_ids(doc: &PreparedDocument, unit: usize) -> Result<&[u32]> {
    match &doc.kind {
        Prepared::Chunks(d) => d.chunks.get(unit).map(|c| c.ids.as_slice()).ok_or_else(mismatch),
        Prepared::Whole(_) | Prepared::Members(_) => Err(mismatch()),
    }
}

/// A HAN or bag-of-words document's text.
fn whole_text(doc: &PreparedDocument) -> &str {
    match &doc.kind {
        Prepared::Whole(text) => text,
        Prepared::Chunks(_) | Prepared::Members(_) => "",
    }
}

/// A prepared document or output from another model.
fn mismatch() -> longread_model::error::ModelError {
    longread_model::error::ModelError::InvalidInput("a prepared document or unit output of another model".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_split_where_padding_would_waste_a_quarter() {
        let (a, b, c, d) = (vec![1u32; 512], vec![1u32; 400], vec![1u32; 380], vec![1u32; 100]);
        let seqs: Vec<&[u32]> = vec![&d, &a, &c, &b];
        assert_eq!(similar_lengths(&seqs), vec![vec![1, 3], vec![2], vec![0]]);
        assert_eq!(similar_lengths(&[]), Vec::<Vec<usize>>::new());
    }
}
