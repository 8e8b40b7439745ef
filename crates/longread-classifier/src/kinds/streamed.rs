//! Documents that a model reads whole (`max_chunks` 0) and that are too long to hold cut into
//! chunks: their windows are tokenized as the encoder needs them ([`Chunker::chunk_stream`])
//! and encoded group by group, so that only the chunk vectors and each chunk's span outlive a
//! group. The prediction is the one of cutting the document first (the same chunks, and the
//! vectors do not depend on batching).

use candle_core::Tensor;
use longread_text::{Chunk, ChunkedDocument, Chunker};

use super::encoder::EncoderModel;
use crate::{DocError, DocResult, GROUP_CHUNKS};
use longread_model::error::Result;

/// Texts over this many bytes are streamed when the model reads every chunk.
const STREAM_TEXT_BYTES: usize = 1 << 20;

/// Whether `text` is streamed with `chunker`'s settings.
pub(super) fn streams(chunker: &Chunker, text: &str) -> bool {
    chunker.config().max_chunks == 0 && text.len() > STREAM_TEXT_BYTES
}

/// Classifies one long text chunk group by chunk group (see the module). A text that cannot
/// be tokenized gets its own error; encoder failures end the run.
pub(super) fn classify_streamed(encoder: &EncoderModel, text: &str) -> Result<DocResult> {
    let (model, chunker) = (&encoder.model, &encoder.chunker);
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
            let encoded = model.encode_documents(&[&part], encoder.max_batch_tokens, &encoder.device, |_| {})?;
            vectors.extend(encoded);
            spans.extend(part.chunks.into_iter().map(|c| Chunk { ids: Vec::new(), ..c }));
        }
        if ended {
            break;
        }
    }
    let (total_tokens, total_windows) = stream.totals().expect("a stream that ended without error has totals");
    let doc = ChunkedDocument { chunks: spans, total_tokens, total_windows };
    Ok(Ok(encoder.predict(&doc, &Tensor::cat(&vectors, 0)?)?))
}
