//! `longread bench --workload predict`: a classifier's throughput on documents of
//! `chunks × chunk_size` deterministic token ids (no tokenization: the model alone, as the
//! PyTorch anchor in ../shared/gpu/anchor_torch.py and scripts/gpu_bench_torch.py time it),
//! encoded in batches of the classifier's token budget, pooled and classified.

use std::time::Instant;

use longread_classifier::Classifier;
use longread_text::{Chunk, ChunkedDocument};

use crate::bench::BenchResult;
use crate::error::{Result, TrainError};

/// `docs` documents of `chunks` full chunks each, ids drawn deterministically from
/// `5..vocab` (RoBERTa's and BERT's special tokens and padding lie below 5).
pub fn synthetic_documents(docs: usize, chunks: usize, chunk_size: usize, vocab: usize) -> Vec<ChunkedDocument> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let span = vocab.saturating_sub(5).max(1) as u64;
    (0..docs)
        .map(|_| ChunkedDocument {
            chunks: (0..chunks)
                .map(|index| Chunk {
                    index,
                    ids: (0..chunk_size)
                        .map(|_| {
                            state =
                                state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                            5 + ((state >> 33) % span) as u32
                        })
                        .collect(),
                    start: index,
                    end: index + 1,
                })
                .collect(),
            total_tokens: chunks * chunk_size,
            total_windows: chunks,
        })
        .collect()
}

/// Classifies `docs × chunks` synthetic documents once untimed, then `repeat` times timed.
pub fn run_predict(classifier: &Classifier, docs: usize, chunks: usize, repeat: usize) -> Result<BenchResult> {
    let (chunk_size, vocab) = classifier.chunk_layout().ok_or_else(|| {
        TrainError::Run("--workload predict needs an encoder model (hierarchical or sequence)".into())
    })?;
    let documents = synthetic_documents(docs, chunks, chunk_size, vocab);
    let run = || -> Result<f64> {
        let started = Instant::now();
        let results = classifier.classify_chunked(documents.clone()).map_err(|e| TrainError::Run(e.to_string()))?;
        if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
            return Err(TrainError::Run(format!("a synthetic document failed: {}", e.message)));
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let warmup = run()?;
    // With LONGREAD_PROFILE=1 the step times (longread_model::profile) cover the timed runs only.
    longread_model::profile::reset();
    let runs = (0..repeat.max(1)).map(|_| run()).collect::<Result<Vec<f64>>>()?;
    Ok(BenchResult::of_runs(runs, 0, None, warmup))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_documents_have_the_asked_shape_and_no_special_ids() {
        let docs = synthetic_documents(3, 4, 16, 100);
        assert_eq!(docs.len(), 3);
        for doc in &docs {
            assert_eq!(doc.chunks.len(), 4);
            assert!(doc.chunks.iter().all(|c| c.ids.len() == 16 && c.ids.iter().all(|&id| (5..100).contains(&id))));
        }
        assert_ne!(docs[0].chunks[0].ids, docs[1].chunks[0].ids, "documents differ");
    }
}
