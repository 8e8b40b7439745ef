//! `predict`, `eval` and `report` on a HAN model directory: documents scored in batches, one
//! result per document in input order (a document without words gets an error of its own).

use std::path::Path;

use anyhow::{Context, Result};
use candle_core::Device;
use indicatif::ProgressBar;
use longread_model::han::{score_texts, HanClassifier, HanScores};
use longread_report::{SentenceView, WordView};
use longread_text::Document;
use serde_json::Value;

use crate::commands::predict::{argmax, LabelScores};

/// Documents per forward pass.
const BATCH: usize = 32;

/// A document's HAN scores, or why there are none.
pub struct HanResult<'a> {
    /// The document.
    pub document: &'a Document,
    /// Its scores and attention, or an error message.
    pub outcome: std::result::Result<HanScores, String>,
}

/// Loads a HAN model directory.
pub fn load(dir: &Path) -> Result<HanClassifier> {
    HanClassifier::load(dir, &Device::Cpu).with_context(|| format!("loading HAN model {}", dir.display()))
}

/// Scores `documents` in batches, calling `emit` in input order.
pub fn score_documents<'a>(
    model: &HanClassifier,
    documents: &'a [Document],
    progress: &ProgressBar,
    mut emit: impl FnMut(HanResult<'a>) -> Result<()>,
) -> Result<()> {
    for group in documents.chunks(BATCH) {
        let texts: Vec<&str> = group.iter().map(|d| d.text.as_str()).collect();
        let scored = score_texts(model, &texts, BATCH, &Device::Cpu)?;
        for (document, outcome) in group.iter().zip(scored) {
            let outcome = match &document.error {
                Some(e) => Err(e.clone()),
                None => outcome,
            };
            emit(HanResult { document, outcome })?;
            progress.inc(1);
        }
    }
    Ok(())
}

/// The JSON line `predict` prints: label, scores, logits and every sentence read with its
/// attention and its words' attention (offsets in characters; floats as f32).
pub fn result_json<'r>(labels: &'r [String], result: &'r HanResult) -> HanLine<'r> {
    let id = &result.document.id;
    match &result.outcome {
        Err(message) => HanLine { id, error: Some(message), scored: None },
        Ok(scores) => HanLine {
            id,
            error: None,
            scored: Some(HanScored {
                label: &labels[argmax(&scores.probabilities)],
                scores: LabelScores(labels, &scores.probabilities),
                logits: &scores.logits,
                total_sentences: scores.total_sentences,
                sentences: scores
                    .sentences
                    .iter()
                    .enumerate()
                    .map(|(index, s)| SentenceLine {
                        index,
                        start: s.start,
                        end: s.end,
                        attention: s.attention,
                        hops: if s.hops.len() > 1 { Some(&s.hops) } else { None },
                        words: s
                            .words
                            .iter()
                            .map(|w| WordLine { start: w.start, end: w.end, attention: w.attention })
                            .collect(),
                    })
                    .collect(),
            }),
        },
    }
}

/// One output line of `predict` for a HAN model.
#[derive(serde::Serialize)]
pub struct HanLine<'r> {
    id: &'r Value,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    scored: Option<HanScored<'r>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'r String>,
}

#[derive(serde::Serialize)]
struct HanScored<'r> {
    label: &'r String,
    scores: LabelScores<'r>,
    logits: &'r [f32],
    /// Sentences in the whole text (those beyond the model's doc_size are not read).
    total_sentences: usize,
    sentences: Vec<SentenceLine<'r>>,
}

#[derive(serde::Serialize)]
struct SentenceLine<'r> {
    index: usize,
    start: usize,
    end: usize,
    attention: f32,
    /// Per attention hop, when there are several.
    #[serde(skip_serializing_if = "Option::is_none")]
    hops: Option<&'r Vec<f32>>,
    words: Vec<WordLine>,
}

#[derive(serde::Serialize)]
struct WordLine {
    start: usize,
    end: usize,
    attention: f32,
}

/// A row of `predict --format table`: label, probabilities, sentences read and the most
/// attended sentence's start.
pub fn table_row(labels: &[String], result: &HanResult, id: &str) -> String {
    match &result.outcome {
        Err(message) => format!("{id:<24} error: {message}"),
        Ok(scores) => {
            let probs: String = scores.probabilities.iter().map(|p| format!(" {p:>8.3}")).collect();
            let attention: Vec<f32> = scores.sentences.iter().map(|s| s.attention).collect();
            let top = argmax(&attention);
            let s = &scores.sentences[top];
            let excerpt: String = result.document.text.chars().skip(s.start).take(s.end - s.start).take(40).collect();
            format!(
                "{id:<24} {:<12}{probs} {:>6}  sentence #{top} ({:.2}): {}",
                labels[argmax(&scores.probabilities)],
                scores.sentences.len(),
                s.attention,
                excerpt.replace(['\n', '\r', '\t'], " ")
            )
        }
    }
}

/// The report's view of a document's sentences and words.
pub fn sentence_views(scores: &HanScores) -> Vec<SentenceView> {
    scores
        .sentences
        .iter()
        .map(|s| SentenceView {
            start: s.start,
            end: s.end,
            attention: s.attention,
            words: s.words.iter().map(|w| WordView { start: w.start, end: w.end, attention: w.attention }).collect(),
        })
        .collect()
}
