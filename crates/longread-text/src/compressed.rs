//! Gzip-compressed inputs: datasets of transcripts often come as `docs.jsonl.gz`. Every line
//! input (JSON lines, CSV, TSV: files, standard input, pipes) and every text file is read
//! through [`decompressed`], which inflates what starts with gzip's magic bytes, whatever its
//! name; a name's `.gz` is left out when its format is read from it ([`format_name`]).

use std::io::{BufRead, BufReader};

use flate2::bufread::MultiGzDecoder;

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

/// Whether `bytes` (a whole file) are gzip-compressed.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// The bytes of a whole file, inflated if they are gzip's.
pub fn inflate_if_gzip(bytes: Vec<u8>) -> std::io::Result<Vec<u8>> {
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut MultiGzDecoder::new(&bytes[..]), &mut out)?;
    Ok(out)
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
    use std::io::{Read, Write};

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
        assert_eq!(inflate_if_gzip(gzip(b"hello")).unwrap(), b"hello");
        assert_eq!(inflate_if_gzip(b"hello".to_vec()).unwrap(), b"hello");
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
