//! Chunk vectors kept on disk between runs. A frozen encoder gives a document the same chunk
//! vectors every time, so trying several heads, poolings or seeds on the same documents (and
//! evaluating them) needs the encoder once: `--vector-cache DIR` stores each document's
//! vectors under a key made of what the encoder computes (its chunk vector of a probe
//! sequence: weights, chunk pooling and precision) and the document's token ids. A change to any of them is a different key (a miss,
//! recomputed), never a stale hit.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use longread_text::ChunkedDocument;

use crate::error::{ModelError, Result};
use crate::hierarchical::HierarchicalClassifier;
use crate::mode::Mode;

/// Tokens of the probe sequence that identifies an encoder.
const PROBE_TOKENS: u32 = 48;

/// File header: magic, then chunks and hidden size as u32 LE.
const MAGIC: &[u8; 8] = b"LRVEC001";

/// A directory of per-document files for one state of what computes them, keyed by that
/// state's fingerprint and the document's token ids (shared by the chunk-vector cache and the
/// trainer's frozen-prefix store).
#[derive(Debug, Clone)]
pub struct DocumentStore {
    dir: PathBuf,
    /// Hash of the fingerprint and variant.
    key: [u64; 2],
    /// File extension of this kind of entry.
    extension: &'static str,
}

impl DocumentStore {
    /// Opens (creating) `dir` for the state whose output on a fixed probe is `fingerprint`;
    /// `variant` names anything else that changes the stored values (the precision).
    pub fn open(dir: &Path, fingerprint: &[f32], variant: &str, extension: &'static str) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ModelError::InvalidInput(format!("vector cache {}: {e}", dir.display())))?;
        let mut hashers = seeded_hashers();
        for h in &mut hashers {
            fingerprint.iter().for_each(|v| v.to_bits().hash(h));
            variant.hash(h);
        }
        Ok(Self { dir: dir.to_owned(), key: hashers.map(|h| h.finish()), extension })
    }

    /// Where the entry of `doc` lives.
    pub fn path(&self, doc: &ChunkedDocument) -> PathBuf {
        let mut hashers = seeded_hashers();
        for h in &mut hashers {
            self.key.hash(h);
            for chunk in &doc.chunks {
                chunk.ids.hash(h);
            }
        }
        let [a, b] = hashers.map(|h| h.finish());
        self.dir.join(format!("{a:016x}{b:016x}.{}", self.extension))
    }

    /// The stored bytes of `doc`, if any.
    pub fn read(&self, doc: &ChunkedDocument) -> Option<Vec<u8>> {
        std::fs::read(self.path(doc)).ok()
    }

    /// Stores `bytes` as the entry of `doc` (atomically: temporary file, then rename).
    pub fn write(&self, doc: &ChunkedDocument, bytes: &[u8]) -> Result<()> {
        let path = self.path(doc);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |e: std::io::Error| ModelError::InvalidInput(format!("vector cache {}: {e}", path.display()));
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}

/// The token ids of the probe sequence that identifies an encoder state.
///
/// # Shapes
/// → `ids, mask: [1, PROBE_TOKENS]` (u32)
pub fn probe_batch(model: &HierarchicalClassifier) -> Result<(Tensor, Tensor)> {
    let vocab = model.config().encoder.vocab_size as u32;
    let probe: Vec<u32> = (0..PROBE_TOKENS).map(|i| (i * 7919 + 3) % vocab).collect();
    let ids = Tensor::from_vec(probe, (1, PROBE_TOKENS as usize), model.device())?;
    let mask = Tensor::ones((1, PROBE_TOKENS as usize), DType::U32, model.device())?;
    Ok((ids, mask))
}

/// A directory of cached chunk vectors for one encoder state.
#[derive(Debug, Clone)]
pub struct VectorCache {
    store: DocumentStore,
}

impl VectorCache {
    /// Opens (creating) `dir` for `model` as it is now; `variant` names anything else that
    /// changes the vectors (the precision). The encoder is identified by what it computes: the
    /// exact bits of its chunk vector for a fixed probe sequence, which any change of weights,
    /// chunk pooling or precision changes. Open it again after the encoder has trained.
    pub fn open(dir: &Path, model: &HierarchicalClassifier, variant: &str) -> Result<Self> {
        let (ids, mask) = probe_batch(model)?;
        let vector: Vec<f32> =
            model.chunk_vectors(&ids, &mask, Mode::Eval)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        Ok(Self { store: DocumentStore::open(dir, &vector, variant, "vec")? })
    }

    /// The cached vectors of `doc`, if any (a damaged file counts as missing).
    ///
    /// # Shapes
    /// → `[n_chunks, hidden]`
    pub fn get(&self, doc: &ChunkedDocument, device: &Device) -> Option<Tensor> {
        let bytes = self.store.read(doc)?;
        let (header, body) = bytes.split_at_checked(16)?;
        if &header[..8] != MAGIC {
            return None;
        }
        let n = u32::from_le_bytes(header[8..12].try_into().ok()?) as usize;
        let hidden = u32::from_le_bytes(header[12..16].try_into().ok()?) as usize;
        if n != doc.chunks.len() || body.len() != n * hidden * 4 {
            return None;
        }
        let values: Vec<f32> = body.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Tensor::from_vec(values, (n, hidden), device).ok()
    }

    /// Stores the vectors of `doc` (atomically: temporary file, then rename).
    ///
    /// # Shapes
    /// `vectors: [n_chunks, hidden]`
    pub fn put(&self, doc: &ChunkedDocument, vectors: &Tensor) -> Result<()> {
        let (n, hidden) = vectors.dims2()?;
        let mut bytes = Vec::with_capacity(16 + n * hidden * 4);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(n as u32).to_le_bytes());
        bytes.extend_from_slice(&(hidden as u32).to_le_bytes());
        for v in vectors.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()? {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.store.write(doc, &bytes)
    }
}

/// Two differently seeded hashers: a 128-bit key.
fn seeded_hashers() -> [DefaultHasher; 2] {
    let mut a = DefaultHasher::new();
    let mut b = DefaultHasher::new();
    0xA5A5_u16.hash(&mut a);
    0x5A5A_u16.hash(&mut b);
    [a, b]
}

/// Chunks encoded between writes to the cache: an interrupted fill keeps what was encoded up
/// to the last group, and the next run starts there.
pub const CACHE_GROUP_CHUNKS: usize = 64;

/// Consecutive ranges of items whose chunk counts are `chunks`, each closed once it holds
/// `per_group` chunks or more (so at least one item each): the groups a cache fills by.
pub fn chunk_groups(chunks: &[usize], per_group: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut held) = (0, 0);
    for (i, &n) in chunks.iter().enumerate() {
        held += n;
        if held >= per_group {
            groups.push(start..i + 1);
            (start, held) = (i + 1, 0);
        }
    }
    if start < chunks.len() {
        groups.push(start..chunks.len());
    }
    groups
}

impl HierarchicalClassifier {
    /// [`Self::encode_documents`] through `cache`: documents found there are read, the others
    /// encoded (batched together, in groups of about [`CACHE_GROUP_CHUNKS`] chunks) and stored
    /// group by group (vectors do not depend on batching).
    pub fn encode_documents_cached(
        &self,
        docs: &[&ChunkedDocument],
        max_batch_tokens: usize,
        device: &Device,
        cache: Option<&VectorCache>,
        mut on_chunks: impl FnMut(usize),
    ) -> Result<Vec<Tensor>> {
        let Some(cache) = cache else {
            return self.encode_documents(docs, max_batch_tokens, device, on_chunks);
        };
        let mut out: Vec<Option<Tensor>> = docs.iter().map(|d| cache.get(d, device)).collect();
        let missing: Vec<usize> = (0..docs.len()).filter(|&i| out[i].is_none()).collect();
        on_chunks(docs.iter().zip(&out).filter(|(_, v)| v.is_some()).map(|(d, _)| d.chunks.len()).sum());
        let sizes: Vec<usize> = missing.iter().map(|&i| docs[i].chunks.len()).collect();
        for range in chunk_groups(&sizes, CACHE_GROUP_CHUNKS) {
            let group = &missing[range];
            let todo: Vec<&ChunkedDocument> = group.iter().map(|&i| docs[i]).collect();
            let encoded = self.encode_documents(&todo, max_batch_tokens, device, &mut on_chunks)?;
            for (&i, vectors) in group.iter().zip(encoded) {
                cache.put(docs[i], &vectors)?;
                out[i] = Some(vectors);
            }
        }
        Ok(out.into_iter().map(|v| v.expect("every document encoded or cached")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_groups;

    #[test]
    fn groups_close_once_they_hold_enough_chunks() {
        assert_eq!(chunk_groups(&[30, 30, 10, 70, 5, 5], 64), vec![0..3, 3..4, 4..6]);
        assert_eq!(chunk_groups(&[100], 64), vec![0..1]);
        assert_eq!(chunk_groups(&[], 64), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(chunk_groups(&[3, 4, 5], usize::MAX), vec![0..3], "one group when unbounded");
    }
}
