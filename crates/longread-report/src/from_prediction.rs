//! A document's view from a classifier's result, for the CLI's report and the server's page.

use longread_classifier::DocResult;

use longread_classifier::prediction::ChunkEvidence;

use std::collections::BTreeMap;

use crate::{ChunkView, DocumentView, EvidenceBy, LabelEvidence, MemberView, SentenceView, TermView, WordView};

impl<'a> DocumentView<'a> {
    /// The view of document `id` with text `text` and its classification `result`.
    pub fn of_result(id: String, text: &'a str, result: DocResult) -> Self {
        let mut view = DocumentView {
            id,
            text,
            scores: vec![],
            label: None,
            labels: None,
            chunks: vec![],
            sentences: vec![],
            members: vec![],
            terms: vec![],
            label_evidence: vec![],
            error: None,
        };
        match result {
            Err(e) => view.error = Some(e.message),
            Ok(p) => {
                view.scores = p.scores.labels.into_iter().zip(p.scores.probabilities).collect();
                view.label_evidence = label_evidence(p.labels.as_deref(), p.parts.chunks().unwrap_or_default());
                view.labels = p.labels;
                view.label = Some(p.label);
                view.members = p
                    .members
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| {
                        let index = m.scores.labels.iter().position(|l| *l == m.label).unwrap_or(0);
                        let probability = m.scores.probabilities.get(index).copied().unwrap_or(0.0);
                        MemberView { model: m.model, weight: m.weight, label: m.label, probability }
                    })
                    .collect();
                view.terms = p
                    .parts
                    .terms()
                    .unwrap_or_default()
                    .iter()
                    .map(|t| TermView {
                        label: t.label.clone(),
                        term: t.term.clone(),
                        contribution: t.contribution,
                        spans: t.spans.clone(),
                    })
                    .collect();
                view.chunks = p
                    .parts
                    .chunks()
                    .unwrap_or_default()
                    .iter()
                    .map(|c| ChunkView {
                        index: c.index,
                        start: c.start,
                        end: c.end,
                        attention: c.attention,
                        occlusion: c.occlusion,
                    })
                    .collect();
                view.sentences = p
                    .parts
                    .sentences()
                    .unwrap_or_default()
                    .iter()
                    .map(|s| SentenceView {
                        start: s.start,
                        end: s.end,
                        attention: s.attention,
                        words: s
                            .words
                            .iter()
                            .map(|w| WordView { start: w.start, end: w.end, attention: w.attention })
                            .collect(),
                    })
                    .collect();
            }
        }
        view
    }
}

/// For each carried label (`labels`), the chunk whose weight for it is the largest, when the
/// chunks have label-wise weights, and the chunk whose removal lowered its probability most,
/// when they have per-label occlusion (and it lowered it at all).
fn label_evidence(labels: Option<&[String]>, chunks: &[ChunkEvidence]) -> Vec<LabelEvidence> {
    let labels = labels.unwrap_or_default();
    let best = |by: EvidenceBy, weights: fn(&ChunkEvidence) -> Option<&BTreeMap<String, f32>>| {
        labels.iter().filter_map(move |label| {
            chunks
                .iter()
                .filter_map(|c| weights(c)?.get(label).map(|&w| (c, w)))
                .filter(|&(_, w)| by == EvidenceBy::Attention || w > 0.0)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, weight)| LabelEvidence {
                    by,
                    label: label.clone(),
                    index: c.index,
                    start: c.start,
                    end: c.end,
                    weight,
                })
        })
    };
    best(EvidenceBy::Attention, |c| c.labels.as_ref())
        .chain(best(EvidenceBy::Occlusion, |c| c.label_occlusion.as_ref()))
        .collect()
}
