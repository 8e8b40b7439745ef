//! What classifying one document gives: the one serialisable type that `predict`, `eval`,
//! `report`, the server and the Python package share.

use std::collections::BTreeMap;

use longread_text::Document;
use serde::Serialize;
use serde_json::Value;

/// The prediction for one document: its label, the probability of every label, the logits and
/// the evidence the model attended to (chunks for encoder models, sentences and words for HAN).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prediction {
    /// The most probable label (the first on ties). A multi-label model decides each label on
    /// its own: read [`Prediction::labels`]; this is then the most probable label, carried or not.
    pub label: String,
    /// Multi-label models: the labels the document carries — each whose probability reaches
    /// 0.5 — in the model's order, possibly none. Absent for single-label models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// `{label: probability}` in the model's label order.
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::HashMap<String, f32>))]
    pub scores: LabelScores,
    /// Raw logits, one per label.
    pub logits: Vec<f32>,
    /// What the model read and how much each part weighed: chunks (encoder models), sentences
    /// and words (HAN), or nothing (a bag of words). Serialised in place as `chunks`, or
    /// `total_sentences` and `sentences`, or no field.
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub parts: Parts,
    /// Multi-task models: the other tasks' predictions, by task name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<BTreeMap<String, TaskPrediction>>,
    /// Ensembles: what each member model predicted, in the ensemble's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<MemberPrediction>>,
    /// Tokens the encoder read (encoder models; not part of the JSON output).
    #[serde(skip)]
    pub tokens: Option<usize>,
}

impl Prediction {
    /// The decision as text: the label, or a multi-label model's labels joined by `;` (empty
    /// when the document carries none).
    pub fn decision_text(&self) -> String {
        match &self.labels {
            Some(labels) => labels.join(";"),
            None => self.label.clone(),
        }
    }

    /// Sets each chunk's `occlusion` from the probabilities it was read `without`: the
    /// predicted label's probability minus its probability there. Called whenever the label
    /// or the probabilities are settled (by the model, then by a calibration or decision rule).
    /// A multi-label model's chunks also get every label's (`label_occlusion`).
    pub fn settle_occlusion(&mut self) {
        let Some(label) = self.scores.labels.iter().position(|l| *l == self.label) else { return };
        let Some(&p) = self.scores.probabilities.get(label) else { return };
        let multi_label = self.labels.is_some();
        let scores = &self.scores;
        if let Parts::Chunks { chunks } = &mut self.parts {
            for chunk in chunks {
                chunk.occlusion = chunk.without.as_ref().and_then(|row| row.get(label)).map(|q| p - q);
                chunk.label_occlusion = match (multi_label, &chunk.without) {
                    (true, Some(row)) if row.len() == scores.probabilities.len() => Some(
                        scores
                            .labels
                            .iter()
                            .zip(&scores.probabilities)
                            .zip(row)
                            .map(|((l, p), q)| (l.clone(), p - q))
                            .collect(),
                    ),
                    _ => None,
                };
            }
        }
    }

    /// Chooses a bag of words' terms for the decided label (multi-label: for each carried
    /// label) from every label's. Called whenever the labels are settled, as
    /// [`Self::settle_occlusion`] is.
    pub fn settle_terms(&mut self) {
        let decided: Vec<&String> = match &self.labels {
            Some(labels) => labels.iter().collect(),
            None => vec![&self.label],
        };
        if let Parts::Terms { terms, every } = &mut self.parts {
            *terms = every.iter().filter(|t| decided.contains(&&t.label)).cloned().collect();
        }
    }

    /// Applies `f` to the primary task's probabilities without each chunk, as a calibration
    /// applies it to the document's own.
    pub fn map_without(&mut self, f: impl Fn(&[f32]) -> Vec<f32>) {
        if let Parts::Chunks { chunks } = &mut self.parts {
            for row in chunks.iter_mut().filter_map(|c| c.without.as_mut()) {
                *row = f(row);
            }
        }
    }
}

/// The parts of a document a model read, with their weights: one kind per model kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Parts {
    /// Encoder models: the chunks read, with their character spans and attention.
    Chunks {
        /// In chunk order.
        chunks: Vec<ChunkEvidence>,
    },
    /// HAN models: the sentences read, with their words.
    Sentences {
        /// Sentences in the whole text (those beyond the model's `doc_size` are not read).
        total_sentences: usize,
        /// The sentences read.
        sentences: Vec<SentenceEvidence>,
    },
    /// A HAN's prediction with its sentences left out (the server's `"chunks": false`): how
    /// many the text has.
    Counted {
        /// Sentences in the whole text.
        total_sentences: usize,
    },
    /// A bag of words: the terms that raised the predicted label (multi-label: each carried
    /// label) most, with where they occur.
    Terms {
        /// The decided label's terms, largest contribution first (multi-label: each carried
        /// label's in the model's label order).
        terms: Vec<TermEvidence>,
        /// Every label's terms, from which `terms` is chosen once the labels are settled; not in
        /// the JSON.
        #[serde(skip)]
        #[cfg_attr(feature = "openapi", schema(ignore))]
        every: Vec<TermEvidence>,
    },
    /// A model that reads no parts, or a prediction with its evidence left out.
    Whole {},
}

/// A term of a document read by a bag of words, and how far it raised a label's score: its
/// TF-IDF value × the label's weight of it (log-odds units; see `longread_bow::evidence`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TermEvidence {
    /// The label it raised.
    pub label: String,
    /// A word n-gram (`"human rights"`), or a character n-gram prefixed `c:`.
    pub term: String,
    /// value × weight.
    pub contribution: f32,
    /// The label's weight of the term.
    pub weight: f32,
    /// Its TF-IDF value in the document.
    pub value: f32,
    /// Where a word n-gram occurs: `[start, end)` in characters; empty for character n-grams.
    pub spans: Vec<[usize; 2]>,
}

impl Parts {
    /// The chunks, for an encoder model's prediction.
    pub fn chunks(&self) -> Option<&[ChunkEvidence]> {
        match self {
            Self::Chunks { chunks } => Some(chunks),
            _ => None,
        }
    }

    /// The sentences read, for a HAN's prediction.
    pub fn sentences(&self) -> Option<&[SentenceEvidence]> {
        match self {
            Self::Sentences { sentences, .. } => Some(sentences),
            _ => None,
        }
    }

    /// The terms that raised the decided label(s), for a bag of words' prediction.
    pub fn terms(&self) -> Option<&[TermEvidence]> {
        match self {
            Self::Terms { terms, .. } => Some(terms),
            _ => None,
        }
    }

    /// Whether there is evidence to show (chunks, sentences or terms).
    pub fn any(&self) -> bool {
        matches!(self, Self::Chunks { .. } | Self::Sentences { .. } | Self::Terms { .. })
    }

    /// The same without the chunks or sentences themselves (a HAN's sentence count stays).
    pub fn without_evidence(&self) -> Self {
        match self {
            Self::Sentences { total_sentences, .. } | Self::Counted { total_sentences } => {
                Self::Counted { total_sentences: *total_sentences }
            }
            Self::Chunks { .. } | Self::Terms { .. } | Self::Whole {} => Self::Whole {},
        }
    }
}

/// One more task's prediction in a multi-task model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskPrediction {
    /// The most probable label.
    pub label: String,
    /// `{label: probability}` in the task's label order.
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::HashMap<String, f32>))]
    pub scores: LabelScores,
    /// Raw logits.
    pub logits: Vec<f32>,
    /// This task's attention over the chunks, in chunk order.
    pub attention: Vec<f32>,
}

/// What one member of an ensemble predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberPrediction {
    /// The member's directory inside the ensemble's (`members/…`).
    pub model: String,
    /// Its weight in the average (the weights sum to 1).
    pub weight: f64,
    /// Its most probable label.
    pub label: String,
    /// Its `{label: probability}`, in the ensemble's label order.
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::HashMap<String, f32>))]
    pub scores: LabelScores,
}

/// A chunk the encoder read; offsets in characters (Unicode scalar values).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChunkEvidence {
    /// Index of the window among all of the document's windows.
    pub index: usize,
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the pooled document vector.
    pub attention: f32,
    /// Occlusion (a classifier loaded with `occlusion` on; absent otherwise, and for a document
    /// of one chunk): the predicted label's probability minus its probability when the
    /// document is read without this chunk. Positive: the chunk supports the label; negative:
    /// it speaks against it. Unlike attention, it says which way and how far the chunk moved
    /// the decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occlusion: Option<f32>,
    /// A model with label-wise attention: each label's weight of this chunk (each label's
    /// weights over the chunks sum to 1), so each label shows the chunks that drove it.
    /// Absent for the other poolings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, f32>>,
    /// A multi-label model with occlusion on: each label's probability minus its probability
    /// without this chunk, so each label shows the chunks that moved it (positive: the chunk
    /// supports the label). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_occlusion: Option<BTreeMap<String, f32>>,
    /// The primary task's probabilities without this chunk (occlusion on), from which
    /// `occlusion` is computed once the label is settled; not in the JSON.
    #[serde(skip)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub without: Option<Vec<f32>>,
}

impl ChunkEvidence {
    /// A chunk with its attention, without occlusion.
    pub fn new(index: usize, start: usize, end: usize, attention: f32) -> Self {
        Self { index, start, end, attention, occlusion: None, labels: None, label_occlusion: None, without: None }
    }
}

/// A sentence a HAN read; offsets in characters.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SentenceEvidence {
    /// Position among the sentences read.
    pub index: usize,
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the document, averaged over the attention hops.
    pub attention: f32,
    /// Its weight under each hop, when there are several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hops: Option<Vec<f32>>,
    /// The words read, with their weights in the sentence.
    pub words: Vec<WordEvidence>,
}

/// A word a HAN read; offsets in characters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WordEvidence {
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in its sentence.
    pub attention: f32,
}

/// The part of a document that weighed most in its prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// What it is: `"chunk"` or `"sentence"`.
    pub unit: &'static str,
    /// Its index (the chunk's window index, the sentence's position).
    pub index: usize,
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its attention weight.
    pub attention: f32,
    /// How many such parts were read.
    pub count: usize,
}

impl Prediction {
    /// Probabilities in label order.
    pub fn probabilities(&self) -> &[f32] {
        &self.scores.probabilities
    }

    /// Index of the predicted label: the most probable one, or the one a decision threshold
    /// chose ([`crate::decision`]).
    pub fn label_index(&self) -> usize {
        self.scores.labels.iter().position(|l| *l == self.label).unwrap_or_else(|| argmax(&self.scores.probabilities))
    }

    /// The predicted label index of task `task` (0 = the primary task), when the model has it.
    pub fn task_label_index(&self, task: usize, name: &str) -> Option<usize> {
        if task == 0 {
            return Some(self.label_index());
        }
        self.task_probabilities(task, name).map(argmax)
    }

    /// The probabilities of task `task` (0 = the primary task) in its label order, when the
    /// model has it.
    pub fn task_probabilities(&self, task: usize, name: &str) -> Option<&[f32]> {
        if task == 0 {
            return Some(self.probabilities());
        }
        self.tasks.as_ref()?.get(name).map(|t| t.scores.probabilities.as_slice())
    }

    /// The most attended chunk or sentence (none for a prediction without evidence).
    pub fn top_evidence(&self) -> Option<Evidence> {
        if let Some(chunks) = self.parts.chunks() {
            let attention: Vec<f32> = chunks.iter().map(|c| c.attention).collect();
            let c = chunks.get(argmax(&attention))?;
            return Some(Evidence {
                unit: "chunk",
                index: c.index,
                start: c.start,
                end: c.end,
                attention: c.attention,
                count: chunks.len(),
            });
        }
        let sentences = self.parts.sentences()?;
        let attention: Vec<f32> = sentences.iter().map(|s| s.attention).collect();
        let s = sentences.get(argmax(&attention))?;
        Some(Evidence {
            unit: "sentence",
            index: s.index,
            start: s.start,
            end: s.end,
            attention: s.attention,
            count: sentences.len(),
        })
    }
}

/// `{label: probability}` in label order (serialised as a JSON object).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelScores {
    /// Label names.
    pub labels: Vec<String>,
    /// Their probabilities.
    pub probabilities: Vec<f32>,
}

impl Serialize for LabelScores {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.labels.len()))?;
        for (label, p) in self.labels.iter().zip(&self.probabilities) {
            map.serialize_entry(label, p)?;
        }
        map.end()
    }
}

/// Why one document has no prediction (unreadable, empty, no words); the others go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DocError {
    /// What was wrong with the document.
    pub message: String,
}

impl DocError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

/// A document's result: its prediction or why it has none.
pub type DocResult = std::result::Result<Prediction, DocError>;

/// A prediction whose scores are all finite, or the document's error: a NaN or an infinity in
/// the logits, probabilities or attention (broken weights or arithmetic) must not come out as
/// a confident label.
pub fn finite_or_error(result: DocResult) -> DocResult {
    let prediction = result?;
    let finite = |values: &[f32]| values.iter().all(|v| v.is_finite());
    let tasks_finite = prediction
        .tasks
        .as_ref()
        .is_none_or(|tasks| tasks.values().all(|t| finite(&t.logits) && finite(&t.scores.probabilities)));
    let chunks_finite = prediction.parts.chunks().is_none_or(|chunks| chunks.iter().all(|c| c.attention.is_finite()));
    if finite(&prediction.logits) && finite(&prediction.scores.probabilities) && tasks_finite && chunks_finite {
        Ok(prediction)
    } else {
        Err(DocError::new(
            "the model produced non-finite scores (NaN or infinity) for this document: its weights or arithmetic are broken",
        ))
    }
}

/// The JSON line `predict` writes for one document: `{"id", ...prediction}`, `{"id", "error"}`,
/// or `{"line", "error"}` for an input line that could not be read as a document.
#[derive(Debug, Serialize)]
pub struct PredictionLine<'r> {
    /// The document's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'r Value>,
    /// The input line, for a line that could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The prediction's fields, at the top level.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<&'r Prediction>,
    /// Why there is no prediction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'r str>,
}

impl<'r> PredictionLine<'r> {
    /// The line of `document` with `result`.
    pub fn new(document: &'r Document, result: &'r DocResult) -> Self {
        let (id, line) = if document.is_unreadable_line() { (None, document.line) } else { (Some(&document.id), None) };
        match result {
            Ok(prediction) => Self { id, line, prediction: Some(prediction), error: None },
            Err(e) => Self { id, line, prediction: None, error: Some(&e.message) },
        }
    }
}

/// A multi-label model's default threshold: a label is carried when its probability is at
/// least this.
pub const MULTI_LABEL_THRESHOLD: f32 = 0.5;

/// The labels whose probability reaches [`MULTI_LABEL_THRESHOLD`], in label order (a model's
/// own rule, [`crate::decision::Decision::carried`], replaces this where it has one).
pub fn carried(labels: &[String], probabilities: &[f32]) -> Vec<String> {
    labels
        .iter()
        .zip(probabilities)
        .filter(|(_, &p)| p >= MULTI_LABEL_THRESHOLD)
        .map(|(label, _)| label.clone())
        .collect()
}

/// Index of the largest value (the first on ties; 0 when empty).
pub fn argmax(values: &[f32]) -> usize {
    values.iter().enumerate().fold(0, |best, (i, v)| if *v > values[best] { i } else { best })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prediction() -> Prediction {
        Prediction {
            label: "b".into(),
            scores: LabelScores { labels: vec!["a".into(), "b".into()], probabilities: vec![0.25, 0.75] },
            logits: vec![-1.0, 0.5],
            parts: Parts::Chunks { chunks: vec![ChunkEvidence::new(0, 0, 10, 0.2), ChunkEvidence::new(1, 5, 20, 0.8)] },
            labels: None,
            tasks: None,
            members: None,
            tokens: Some(30),
        }
    }

    #[test]
    fn a_prediction_line_keeps_the_predict_field_order() {
        let p = prediction();
        let result = Ok(p);
        let line = serde_json::to_string(&PredictionLine::new(&Document::new("d1", "text"), &result)).unwrap();
        assert_eq!(
            line,
            r#"{"id":"d1","label":"b","scores":{"a":0.25,"b":0.75},"logits":[-1.0,0.5],"chunks":[{"index":0,"start":0,"end":10,"attention":0.2},{"index":1,"start":5,"end":20,"attention":0.8}]}"#
        );
        let failed: DocResult = Err(DocError::new("empty document"));
        let line = serde_json::to_string(&PredictionLine::new(&Document::new(3, ""), &failed)).unwrap();
        assert_eq!(line, r#"{"id":3,"error":"empty document"}"#);
        let unreadable =
            Document { id: Value::Null, line: Some(9), error: Some("invalid JSON".into()), ..Document::new(0, "") };
        let failed: DocResult = Err(DocError::new("invalid JSON"));
        let line = serde_json::to_string(&PredictionLine::new(&unreadable, &failed)).unwrap();
        assert_eq!(line, r#"{"line":9,"error":"invalid JSON"}"#);
    }

    /// Without this check, NaN weights gave exit 0 with label "general" and null scores.
    #[test]
    fn a_non_finite_score_makes_the_document_an_error() {
        assert!(finite_or_error(Ok(prediction())).is_ok());
        let mut nan = prediction();
        nan.logits[1] = f32::NAN;
        assert!(finite_or_error(Ok(nan)).unwrap_err().message.contains("non-finite scores"));
        let mut inf = prediction();
        inf.scores.probabilities[0] = f32::INFINITY;
        assert!(finite_or_error(Ok(inf)).is_err());
        let mut attention = prediction();
        if let Parts::Chunks { chunks } = &mut attention.parts {
            chunks[0].attention = f32::NAN;
        }
        assert!(finite_or_error(Ok(attention)).is_err());
        assert_eq!(finite_or_error(Err(DocError::new("empty"))).unwrap_err().message, "empty");
    }

    #[test]
    fn top_evidence_is_the_most_attended_chunk() {
        let e = prediction().top_evidence().unwrap();
        assert_eq!((e.unit, e.index, e.start, e.end, e.count), ("chunk", 1, 5, 20, 2));
        assert_eq!(prediction().label_index(), 1);
    }
}
