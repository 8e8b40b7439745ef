//! Every window of a long text, one at a time: the text is tokenized segment by segment (as in
//! `segmented`) and each window is handed out as soon as its tokens are known, so a caller that
//! encodes chunks as they come holds one segment's tokens and one window at a time, whatever
//! the text's length. For models that read every chunk (`max_chunks` 0); the chunks equal
//! [`Chunker::chunk`]'s.

use crate::chunking::segmented::{segments, CharSpan, Segment, SEGMENT_CHARS};
use crate::chunking::{Chunk, Chunker};
use crate::error::{Result, TextError};

/// Iterator over every window of a text as a [`Chunk`] (see the module). After the last,
/// [`ChunkStream::totals`] gives the document's token and window counts.
#[derive(Debug)]
pub struct ChunkStream<'a> {
    chunker: &'a Chunker,
    text: &'a str,
    segments: std::vec::IntoIter<Segment>,
    /// Ids and character spans of the tokens from `buffer_start` on that are known so far.
    ids: Vec<u32>,
    offsets: Vec<CharSpan>,
    buffer_start: usize,
    /// Token where the next window starts, and its index.
    next_start: usize,
    next_index: usize,
    /// `(total tokens, total windows)` once the last window is out.
    totals: Option<(usize, usize)>,
    failed: bool,
}

impl Chunker {
    /// Every window of `text`, tokenized as it goes (see [`ChunkStream`]). Selection does not
    /// apply: every window is a chunk, as with `max_chunks` 0. An empty or whitespace-only
    /// text is an error.
    pub fn chunk_stream<'a>(&'a self, text: &'a str) -> Result<ChunkStream<'a>> {
        self.chunk_stream_in(text, SEGMENT_CHARS)
    }

    pub(super) fn chunk_stream_in<'a>(&'a self, text: &'a str, segment_chars: usize) -> Result<ChunkStream<'a>> {
        if text.trim().is_empty() {
            return Err(TextError::EmptyDocument);
        }
        Ok(ChunkStream {
            chunker: self,
            text,
            segments: segments(text, segment_chars).into_iter(),
            ids: Vec::new(),
            offsets: Vec::new(),
            buffer_start: 0,
            next_start: 0,
            next_index: 0,
            totals: None,
            failed: false,
        })
    }
}

impl ChunkStream<'_> {
    /// `(tokens in the document, windows)`, once every chunk has been handed out.
    pub fn totals(&self) -> Option<(usize, usize)> {
        self.totals
    }

    /// Tokenizes segments until the buffer reaches past token `needed` (or the text ends).
    /// Returns whether the text ended.
    fn fill_past(&mut self, needed: usize) -> Result<bool> {
        while self.buffer_start + self.ids.len() <= needed {
            let Some(segment) = self.segments.next() else { return Ok(true) };
            let (ids, offsets) = self.chunker.encode_segment(self.text, segment)?;
            self.ids.extend_from_slice(&ids);
            self.offsets.extend_from_slice(&offsets);
        }
        Ok(false)
    }

    fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if self.totals.is_some() {
            return Ok(None);
        }
        let window = self.chunker.window_len();
        let step = window - self.chunker.config.stride;
        // A window is the last when it reaches the end: the text must be known one token past it.
        let ended = self.fill_past(self.next_start + window)?;
        let known = self.buffer_start + self.ids.len();
        if known == 0 {
            return Err(TextError::EmptyDocument);
        }
        let (start, end) = (self.next_start, (self.next_start + window).min(known));
        let (from, to) = (start - self.buffer_start, end - self.buffer_start);
        let prefix = &self.chunker.prefix;
        let suffix = &self.chunker.suffix;
        let mut ids = Vec::with_capacity(to - from + prefix.len() + suffix.len());
        ids.extend_from_slice(prefix);
        ids.extend_from_slice(&self.ids[from..to]);
        ids.extend_from_slice(suffix);
        let chunk = Chunk { index: self.next_index, ids, start: self.offsets[from].0, end: self.offsets[to - 1].1 };
        self.next_index += 1;
        if ended && start + window >= known {
            self.totals = Some((known, self.next_index));
            self.ids = Vec::new();
            self.offsets = Vec::new();
        } else {
            self.next_start += step;
            let drop = self.next_start - self.buffer_start;
            self.ids.drain(..drop);
            self.offsets.drain(..drop);
            self.buffer_start = self.next_start;
        }
        Ok(Some(chunk))
    }
}

impl Iterator for ChunkStream<'_> {
    type Item = Result<Chunk>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.next_chunk();
        self.failed = next.is_err();
        next.transpose()
    }
}

#[cfg(test)]
mod tests {
    use crate::chunking::{ChunkSelection, Chunker, ChunkingConfig};
    use crate::error::TextError;
    use crate::tokenizer::TextTokenizer;

    /// Streamed chunks equal whole-text chunking with every window kept, for every fixture
    /// tokenizer, with segments shorter and longer than a window, with and without overlap.
    #[test]
    fn streamed_chunks_equal_whole_text_chunks() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let text = super::super::segmented::tests::long_text();
        for fixture in ["tiny-bert", "tiny-roberta", "tiny-deberta-v3", "tiny-mpnet", "tiny-modernbert"] {
            let tokenizer = TextTokenizer::from_file(&root.join(fixture).join("tokenizer.json")).unwrap();
            for stride in [0, 8] {
                let config = ChunkingConfig { chunk_size: 32, stride, max_chunks: 0, selection: ChunkSelection::Head };
                let chunker = Chunker::new(tokenizer.clone(), config).unwrap();
                let whole = chunker.chunk_whole(&text).unwrap();
                for size in [100, 300, 1001, super::SEGMENT_CHARS] {
                    let mut stream = chunker.chunk_stream_in(&text, size).unwrap();
                    let chunks: Vec<_> = stream.by_ref().collect::<Result<_, _>>().unwrap();
                    let context = format!("{fixture}, stride {stride}, segments of {size}");
                    assert_eq!(chunks, whole.chunks, "{context}");
                    assert_eq!(stream.totals(), Some((whole.total_tokens, whole.total_windows)), "{context}");
                    assert!(stream.next().is_none(), "{context}: the stream ends");
                }
                // A text of exactly one window, and one a token longer.
                let short = "word ".repeat(10);
                let one: Vec<_> = chunker.chunk_stream(&short).unwrap().collect::<Result<_, _>>().unwrap();
                assert_eq!(one, chunker.chunk_whole(&short).unwrap().chunks, "{fixture}: a short text");
            }
        }
    }

    #[test]
    fn an_empty_text_is_refused() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let tokenizer = TextTokenizer::from_file(&root.join("tiny-bert/tokenizer.json")).unwrap();
        let config = ChunkingConfig { chunk_size: 32, stride: 8, max_chunks: 0, selection: ChunkSelection::Head };
        let chunker = Chunker::new(tokenizer, config).unwrap();
        assert!(matches!(chunker.chunk_stream(" \n\t ").unwrap_err(), TextError::EmptyDocument));
    }
}
