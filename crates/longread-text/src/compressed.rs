//! What an input's bytes go through before they are text. Datasets of transcripts often come
//! gzip-compressed (`docs.jsonl.gz`): every line input (JSON lines, CSV, TSV: files, standard
//! input, pipes) and every text file is inflated when it starts with gzip's magic bytes,
//! whatever its name; a name's `.gz` is left out when its format is read from it
//! ([`format_name`]). And since a few kilobytes of gzip can inflate to terabytes, no line and
//! no text file may pass [`MAX_TEXT_BYTES`]: past it reading stops with an error, before memory
//! runs out.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

/// The most bytes one line of a line input (a JSON line, a line of a CSV record) or one text
/// file may hold once inflated: 256 MiB, some 60 million tokens, far past any document a
/// classifier reads (a screenplay is ~150 KB; reading a line of this size already takes about
/// three times its size in memory).
pub const MAX_TEXT_BYTES: u64 = 1 << 28;

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// `reader` as text: inflated when its first bytes are gzip's (concatenated members too, as
/// `cat a.gz b.gz` makes), else as it is.
pub fn decompressed<'a>(mut reader: impl BufRead + 'a) -> std::io::Result<Box<dyn BufRead + 'a>> {
    if reader.fill_buf()?.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(BufReader::new(MultiGzDecoder::new(reader))))
    } else {
        Ok(Box::new(reader))
    }
}

/// `reader` as the lines of a line input: inflated as [`decompressed`] does, and failing with
/// an error saying so once a line runs past `limit` bytes ([`MAX_TEXT_BYTES`]).
pub fn text_lines<'a>(reader: impl BufRead + 'a, limit: u64) -> std::io::Result<Box<dyn BufRead + 'a>> {
    Ok(Box::new(BufReader::new(LineLimit { inner: decompressed(reader)?, run: 0, limit })))
}

/// The bytes of the text file `path`, inflated if they are gzip's; more than `limit` of them
/// ([`MAX_TEXT_BYTES`]) is an error saying so.
pub fn read_text_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = BufReader::new(std::fs::File::open(path)?);
    let mut bytes = Vec::new();
    decompressed(file)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long("the text is", limit));
    }
    Ok(bytes)
}

/// Passes bytes on, failing once more than `limit` of them come without a line break (the
/// lines before that one are passed on first).
struct LineLimit<R> {
    inner: R,
    /// Bytes since the last line break.
    run: u64,
    limit: u64,
}

impl<R: Read> Read for LineLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.run > self.limit {
            return Err(too_long("a line is", self.limit));
        }
        let n = self.inner.read(buf)?;
        // Each stretch without a break: where it starts in `buf`, and the run before it.
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &buf[..n]).chain(std::iter::once(n)) {
            let run = self.run + (end - start) as u64;
            if run > self.limit {
                // Pass on the bytes before the limit was passed; the next read fails.
                let passed = start + (self.limit - self.run) as usize;
                self.run = run;
                return if passed == 0 { Err(too_long("a line is", self.limit)) } else { Ok(passed) };
            }
            self.run = if end < n { 0 } else { run };
            start = end + 1;
        }
        Ok(n)
    }
}

/// The error of a text past `limit` bytes.
fn too_long(what: &str, limit: u64) -> std::io::Error {
    let size = match limit {
        l if l >= 1 << 20 => format!("{} MiB", l >> 20),
        l => format!("{l} bytes"),
    };
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{what} longer than {size} (once inflated, if compressed); split the document"),
    )
}

/// The name an input's format is read from: `name` without a trailing `.gz` (any case).
pub fn format_name(name: &str) -> &str {
    match name.len().checked_sub(3) {
        Some(at) if name.is_char_boundary(at) && name[at..].eq_ignore_ascii_case(".gz") => &name[..at],
        _ => name,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn gzip_is_inflated_and_plain_text_passes_as_it_is() {
        let mut both = gzip(b"first\n");
        both.extend(gzip(b"second\n"));
        let mut text = String::new();
        decompressed(&both[..]).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "first\nsecond\n", "concatenated members");
        let mut plain = String::new();
        decompressed(&b"{\"text\": \"a\"}\n"[..]).unwrap().read_to_string(&mut plain).unwrap();
        assert_eq!(plain, "{\"text\": \"a\"}\n");
    }

    /// A line or a text file past the limit is an error once the limit is passed (a few KB of
    /// gzip inflate to gigabytes of one line), and lines within it pass whatever the reads'
    /// sizes.
    #[test]
    fn lines_and_text_files_past_the_limit_are_errors() {
        let bomb = gzip(&vec![b'a'; 1 << 20]);
        assert!(bomb.len() < 4096, "{} bytes", bomb.len());
        let mut sink = Vec::new();
        let err = text_lines(&bomb[..], 1000).unwrap().read_to_end(&mut sink).unwrap_err();
        assert!(err.to_string().starts_with("a line is longer than 1000 bytes"), "{err}");
        assert!(sink.len() < 1 << 16, "stopped early: {} bytes", sink.len());
        let lines = "x".repeat(999) + "\n" + &"y".repeat(1000) + "\n";
        let mut text = String::new();
        text_lines(BufReader::with_capacity(7, lines.as_bytes()), 1000).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, lines);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt.gz");
        std::fs::write(&file, &bomb).unwrap();
        let err = read_text_file(&file, 1 << 19).unwrap_err().to_string();
        assert!(err.starts_with("the text is longer than 524288 bytes"), "{err}");
        assert_eq!(read_text_file(&file, 1 << 20).unwrap().len(), 1 << 20);
    }

    /// Against the plain rule, for many inputs and read sizes: the bytes passed on are the
    /// input up to the first line's `limit + 1`-th byte, then an error; all of it when no line
    /// is longer.
    #[test]
    fn the_limit_passes_exactly_the_bytes_before_it() {
        let limit = 10;
        for seed in 0..200u64 {
            let lengths: Vec<usize> = (0..6).map(|i| ((seed * 7 + i * 13 + seed * i) % 14) as usize).collect();
            let input: Vec<u8> = lengths.iter().flat_map(|&n| std::iter::repeat_n(b'x', n).chain([b'\n'])).collect();
            let mut cut = None;
            let mut at = 0;
            for &n in &lengths {
                if n > limit {
                    cut = Some(at + limit);
                    break;
                }
                at += n + 1;
            }
            for capacity in 1..9 {
                let mut limited =
                    LineLimit { inner: BufReader::with_capacity(capacity, &input[..]), run: 0, limit: 10 };
                let mut passed = Vec::new();
                let mut chunk = [0u8; 5];
                let end = loop {
                    match limited.read(&mut chunk) {
                        Ok(0) => break None,
                        Ok(k) => passed.extend_from_slice(&chunk[..k]),
                        Err(_) => break Some(passed.len()),
                    }
                };
                assert_eq!(end, cut, "seed {seed}, capacity {capacity}, lengths {lengths:?}");
                assert_eq!(&passed[..], &input[..cut.unwrap_or(input.len())], "seed {seed}");
            }
        }
    }

    #[test]
    fn the_format_is_read_from_the_name_without_gz() {
        assert_eq!(format_name("data/train.csv.gz"), "data/train.csv");
        assert_eq!(format_name("x.jsonl.GZ"), "x.jsonl");
        assert_eq!(format_name("x.jsonl"), "x.jsonl");
        assert_eq!(format_name("gz"), "gz");
        assert_eq!(format_name("é.gz"), "é");
    }
}
