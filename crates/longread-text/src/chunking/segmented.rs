//! Chunking a long text in bounded memory: the text is tokenized in segments of about
//! [`SEGMENT_CHARS`] characters cut just before a space (where the pre-tokenizers of BERT,
//! RoBERTa and SentencePiece models split anyway: a segment that starts with a space tokenizes
//! as that word does in context), once to count the tokens, then again
//! only for the segments that the kept windows cover. Tokenizing a whole text holds ~140 bytes
//! per character (ids, offsets, token strings, masks); here a pass holds one segment's, and the
//! result only the kept windows' ids. The chunks equal whole-text chunking (tested on every
//! fixture tokenizer).

use crate::chunking::{select_windows, window_starts, Chunk, ChunkedDocument, Chunker};
use crate::error::{Result, TextError};

/// Characters per segment (a cut moves back to the last whitespace in its final quarter).
pub(crate) const SEGMENT_CHARS: usize = 65_536;

/// A token's characters in the whole text: `(start, end)`.
pub(super) type CharSpan = (usize, usize);

/// A segment of the text: its byte range and the character offset where it starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    bytes: (usize, usize),
    first_char: usize,
}

/// Cuts `text` into segments of about `size` characters, each (but the first) starting with a
/// space when one lies in the last quarter of the previous segment's span (else cut at `size`:
/// a text without spaces, where a word may then be split differently at the cut).
pub(super) fn segments(text: &str, size: usize) -> Vec<Segment> {
    let mut out = Vec::new();
    let (mut start, mut first_char) = (0, 0);
    while start < text.len() {
        let rest = &text[start..];
        let (mut full, mut cut, mut chars) = (None, None, 0);
        for (n, (byte, c)) in rest.char_indices().enumerate() {
            if n == size {
                full = Some((byte, n));
                break;
            }
            if n > 0 && n >= size * 3 / 4 && c == ' ' {
                cut = Some((byte, n));
            }
            chars = n + 1;
        }
        let (bytes, count) = match full {
            Some(full) => cut.unwrap_or(full),
            None => (rest.len(), chars),
        };
        out.push(Segment { bytes: (start, start + bytes), first_char });
        start += bytes;
        first_char += count;
    }
    out
}

impl Chunker {
    /// Ids and character offsets (in the whole text) of one segment.
    pub(super) fn encode_segment(&self, text: &str, segment: Segment) -> Result<(Vec<u32>, Vec<CharSpan>)> {
        let piece = &text[segment.bytes.0..segment.bytes.1];
        let encoding =
            self.tokenizer.inner().encode_char_offsets(piece, false).map_err(|e| TextError::Tokenize(e.to_string()))?;
        let offsets =
            encoding.get_offsets().iter().map(|&(s, e)| (s + segment.first_char, e + segment.first_char)).collect();
        Ok((encoding.get_ids().to_vec(), offsets))
    }

    /// [`Chunker::chunk`] of a long text, segment by segment (see the module).
    pub(crate) fn chunk_segmented(&self, text: &str, segment_chars: usize) -> Result<ChunkedDocument> {
        let segments = segments(text, segment_chars);
        let counts =
            segments.iter().map(|&s| Ok(self.encode_segment(text, s)?.0.len())).collect::<Result<Vec<usize>>>()?;
        let total: usize = counts.iter().sum();
        if total == 0 {
            return Err(TextError::EmptyDocument);
        }
        let window = self.window_len();
        let starts = window_starts(total, window, window - self.config.stride);
        let keep = select_windows(starts.len(), self.config.max_chunks, self.config.selection);
        let spans: Vec<(usize, usize)> = keep.iter().map(|&i| (starts[i], (starts[i] + window).min(total))).collect();
        // Second pass: only the segments the kept windows touch.
        let mut ids: Vec<Vec<u32>> = spans.iter().map(|(s, e)| Vec::with_capacity(e - s)).collect();
        let mut offsets: Vec<Vec<CharSpan>> = spans.iter().map(|_| Vec::new()).collect();
        let mut first_token = 0;
        for (&segment, &count) in segments.iter().zip(&counts) {
            let range = (first_token, first_token + count);
            first_token += count;
            if !spans.iter().any(|&(s, e)| s < range.1 && range.0 < e) {
                continue;
            }
            let (segment_ids, segment_offsets) = self.encode_segment(text, segment)?;
            for (k, &(s, e)) in spans.iter().enumerate() {
                let (from, to) = (s.max(range.0), e.min(range.1));
                if from < to {
                    ids[k].extend_from_slice(&segment_ids[from - range.0..to - range.0]);
                    offsets[k].extend_from_slice(&segment_offsets[from - range.0..to - range.0]);
                }
            }
        }
        let chunks = keep
            .into_iter()
            .zip(ids.into_iter().zip(offsets))
            .map(|(index, (window_ids, window_offsets))| {
                let mut chunk_ids = Vec::with_capacity(window_ids.len() + self.prefix.len() + self.suffix.len());
                chunk_ids.extend_from_slice(&self.prefix);
                chunk_ids.extend_from_slice(&window_ids);
                chunk_ids.extend_from_slice(&self.suffix);
                let start = window_offsets.first().map_or(0, |o| o.0);
                let end = window_offsets.last().map_or(0, |o| o.1);
                Chunk { index, ids: chunk_ids, start, end }
            })
            .collect();
        Ok(ChunkedDocument { chunks, total_tokens: total, total_windows: starts.len() })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::chunking::{ChunkSelection, ChunkingConfig};
    use crate::tokenizer::TextTokenizer;

    /// A long text of the hierarchical fixtures' documents, with newlines, runs of spaces,
    /// tabs, accents and emoji between them.
    pub(crate) fn long_text() -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let docs = std::fs::read_to_string(root.join("hier/documents.jsonl")).unwrap();
        let texts: Vec<String> = docs
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
            .collect();
        let joints = ["\n\n", "  ", "\t", " Ünïcödé 🙂 ", "\n", " — "];
        (0..40).map(|i| format!("{}{}", texts[i % texts.len()], joints[i % joints.len()])).collect()
    }

    /// Segment by segment equals the whole text at once, for every fixture tokenizer (WordPiece,
    /// byte-level BPE, SentencePiece-style Unigram), every selection, with short segments so
    /// that there are dozens of cuts.
    #[test]
    fn segmented_chunks_equal_whole_text_chunks() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let text = long_text();
        for fixture in ["tiny-bert", "tiny-roberta", "tiny-deberta-v3", "tiny-mpnet", "tiny-modernbert"] {
            let tokenizer = TextTokenizer::from_file(&root.join(fixture).join("tokenizer.json")).unwrap();
            for (max_chunks, selection) in
                [(0, ChunkSelection::Head), (3, ChunkSelection::Head), (4, ChunkSelection::Spread)]
            {
                let config = ChunkingConfig { chunk_size: 32, stride: 8, max_chunks, selection };
                let chunker = Chunker::new(tokenizer.clone(), config).unwrap();
                let whole = chunker.chunk_whole(&text).unwrap();
                for size in [300, 1001, SEGMENT_CHARS] {
                    let segmented = chunker.chunk_segmented(&text, size).unwrap();
                    assert_eq!(
                        segmented, whole,
                        "{fixture}, max_chunks {max_chunks} {selection:?}, segments of {size}"
                    );
                }
            }
        }
    }

    #[test]
    fn segments_cover_the_text_and_cut_before_whitespace() {
        let text = "abc def ghi jkl mno pqr stu vwx yza bcd efg hij klm nop qrs tuv wxy zab cde fgh";
        let segs = segments(text, 16);
        assert_eq!(segs[0].bytes.0, 0);
        assert_eq!(segs.last().unwrap().bytes.1, text.len());
        for pair in segs.windows(2) {
            assert_eq!(pair[0].bytes.1, pair[1].bytes.0, "contiguous");
            assert!(text[pair[1].bytes.0..].starts_with(' '), "cut before whitespace: {:?}", &text[pair[1].bytes.0..]);
            let chars = text[..pair[1].bytes.0].chars().count();
            assert_eq!(pair[1].first_char, chars);
        }
        // No whitespace at all: hard cuts every `size` characters, on character boundaries.
        let solid = "é".repeat(50);
        let segs = segments(&solid, 16);
        assert_eq!(segs.iter().map(|s| s.bytes.1 - s.bytes.0).collect::<Vec<_>>(), vec![32, 32, 32, 4]);
        assert_eq!(segs.iter().map(|s| s.first_char).collect::<Vec<_>>(), vec![0, 16, 32, 48]);
    }
}
