//! Classifying texts with a HAN: each text split into sentences of words, gridded, scored in
//! batches; the word and sentence attention mapped back to where the words and sentences are.

use candle_core::{Device, D};
use longread_text::words::{split_document, Sentence};

use crate::error::Result;
use crate::han::batch::grid_batch;
use crate::han::model::HanClassifier;
use crate::layers::softmax_last_dim;
use crate::mode::Mode;

/// A word's attention within its sentence; offsets in characters (Unicode scalar values).
#[derive(Debug, Clone, PartialEq)]
pub struct WordAttention {
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the sentence (the weights of a sentence's words sum to 1).
    pub attention: f32,
}

/// A sentence the model read, with its attention; offsets in characters.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceAttention {
    /// First character.
    pub start: usize,
    /// End character (exclusive).
    pub end: usize,
    /// Its weight in the document, averaged over the attention hops (sums to 1 over sentences).
    pub attention: f32,
    /// Its weight under each hop (one entry per context vector).
    pub hops: Vec<f32>,
    /// The words read (at most `sent_size`).
    pub words: Vec<WordAttention>,
}

/// A HAN's scores for one text.
#[derive(Debug, Clone, PartialEq)]
pub struct HanScores {
    /// Raw logits, one per label.
    pub logits: Vec<f32>,
    /// Softmax of the logits (a multi-label model: each logit's sigmoid).
    pub probabilities: Vec<f32>,
    /// The sentences read (at most `doc_size`), in order.
    pub sentences: Vec<SentenceAttention>,
    /// Sentences in the whole text (more than read when it was cut).
    pub total_sentences: usize,
}

/// Scores `texts` in batches of `batch_size`; a text without any word gets an error message
/// instead of scores.
pub fn score_texts(
    model: &HanClassifier,
    texts: &[&str],
    batch_size: usize,
    device: &Device,
) -> Result<Vec<std::result::Result<HanScores, String>>> {
    let shape = model.config().grid_shape();
    let mut results = Vec::with_capacity(texts.len());
    for group in texts.chunks(batch_size.max(1)) {
        let split: Vec<Vec<Sentence>> = group.iter().map(|t| split_document(t)).collect();
        let scored: Vec<usize> = (0..group.len()).filter(|&i| !split[i].is_empty()).collect();
        let grids: Vec<Vec<u32>> = scored.iter().map(|&i| shape.grid(&split[i], model.vocabulary()).ids).collect();
        let mut outputs = Vec::new();
        if !grids.is_empty() {
            let refs: Vec<&[u32]> = grids.iter().map(Vec::as_slice).collect();
            let out = model.forward(&grid_batch(&refs, shape, device)?, Mode::Eval)?;
            let probabilities = match model.is_multi_label() {
                true => candle_nn::ops::sigmoid(&out.logits)?.to_vec2::<f32>()?,
                false => softmax_last_dim(&out.logits)?.to_vec2::<f32>()?,
            };
            let logits = out.logits.to_vec2::<f32>()?;
            let words = out.word_attention.to_vec3::<f32>()?;
            let hops = out.sentence_attention.to_vec3::<f32>()?;
            let mean = out.sentence_attention.mean(D::Minus2)?.to_vec2::<f32>()?;
            let per_doc = logits.into_iter().zip(probabilities).zip(words).zip(hops).zip(mean);
            outputs.extend(per_doc.map(|((((l, p), w), h), m)| (l, p, w, h, m)));
        }
        let mut outputs = outputs.into_iter();
        for (i, text) in group.iter().enumerate() {
            if split[i].is_empty() {
                results.push(Err("the text has no words to classify".to_string()));
                continue;
            }
            let (logits, probabilities, words, hops, mean) = outputs.next().expect("one output per scored text");
            let chars = CharOffsets::new(text);
            let sentences = split[i]
                .iter()
                .take(shape.doc_size)
                .enumerate()
                .map(|(s, sentence)| SentenceAttention {
                    start: chars.of(sentence.start),
                    end: chars.of(sentence.end),
                    attention: mean[s],
                    hops: hops.iter().map(|h| h[s]).collect(),
                    words: sentence
                        .words
                        .iter()
                        .take(shape.sent_size)
                        .enumerate()
                        .map(|(w, word)| WordAttention {
                            start: chars.of(word.start),
                            end: chars.of(word.end),
                            attention: words[s][w],
                        })
                        .collect(),
                })
                .collect();
            results.push(Ok(HanScores { logits, probabilities, sentences, total_sentences: split[i].len() }));
        }
    }
    Ok(results)
}

/// Byte offset → character offset in one text.
struct CharOffsets(Vec<usize>);

impl CharOffsets {
    fn new(text: &str) -> Self {
        let mut map = vec![0; text.len() + 1];
        let mut chars = 0;
        for (b, c) in text.char_indices() {
            for slot in &mut map[b..b + c.len_utf8()] {
                *slot = chars;
            }
            chars += 1;
        }
        map[text.len()] = chars;
        Self(map)
    }

    fn of(&self, byte: usize) -> usize {
        self.0[byte.min(self.0.len() - 1)]
    }
}
