//! Documents that a model reads whole (`max_chunks` 0) and that are too long to hold cut into
//! chunks: their windows are tokenized as the encoder needs them ([`Chunker::chunk_stream`])
//! and encoded group by group, so that only the chunk vectors and each chunk's span outlive a
//! group. The prediction is the one of cutting the document first (the same chunks, and the
//! vectors do not depend on batching).

use candle_core::Tensor;
use longread_text::{Chunk, ChunkedDocument, Chunker};

use crate::{encoder_prediction, Classifier, DocError, DocResult, GROUP_CHUNKS};
use longread_model::error::Result;
use longread_model::hierarchical::HierarchicalClassifier;

/// Texts over this many bytes are streamed when the model reads every chunk.
pub(super) const STREAM_TEXT_BYTES: usize = 1 << 20;

/// Whether `text` is streamed with `chunker`'s settings.
pub(super) fn streams(chunker: &Chunker, text: &str) -> bool {
    chunker.config().max_chunks == 0 && text.len() > STREAM_TEXT_BYTES
}

impl Classifier {
    /// Classifies one long text chunk group by chunk group (see the module). A text that
    /// cannot be tokenized gets its own error; encoder failures end the run.
    pub(super) fn classify_streamed(
        &self,
        model: &HierarchicalClassifier,
        chunker: &Chunker,
        text: &str,
    ) -> Result<DocResult> {
        let mut stream = match chunker.chunk_stream(text) {
            Ok(stream) => stream,
            Err(e) => return Ok(Err(DocError::new(e.to_string()))),
        };
        let mut vectors: Vec<Tensor> = Vec::new();
        // Each chunk's window and span, without its ids: what the prediction reports.
        let mut spans: Vec<Chunk> = Vec::new();
        let mut group: Vec<Chunk> = Vec::new();
        loop {
            let next = stream.next();
            let ended = next.is_none();
            match next {
                Some(Ok(chunk)) => group.push(chunk),
                Some(Err(e)) => return Ok(Err(DocError::new(e.to_string()))),
                None => {}
            }
            if group.len() >= GROUP_CHUNKS || ended && !group.is_empty() {
                let part = ChunkedDocument { chunks: std::mem::take(&mut group), total_tokens: 0, total_windows: 0 };
                let encoded = model.encode_documents(&[&part], self.options.batch_tokens(), &self.device, |_| {})?;
                vectors.extend(encoded);
                spans.extend(part.chunks.into_iter().map(|c| Chunk { ids: Vec::new(), ..c }));
            }
            if ended {
                break;
            }
        }
        let (total_tokens, total_windows) = stream.totals().expect("a stream that ended without error has totals");
        let scores = model.score_tasks(&Tensor::cat(&vectors, 0)?)?;
        let doc = ChunkedDocument { chunks: spans, total_tokens, total_windows };
        Ok(Ok(encoder_prediction(&self.tasks, &doc, scores)))
    }
}
