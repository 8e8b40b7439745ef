//! The frozen bottom of the encoder. When the embeddings and the bottom K layers do not train,
//! they run without dropout and without a graph; their outputs never change, so they can be
//! computed once per chunk and reused every epoch ([`PrefixCache`]: in memory up to a limit,
//! then in a scratch file on disk).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use longread_model::hierarchical::predictor::{batch_tensors, chunk_batches};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::Mode;
use longread_text::ChunkedDocument;

use crate::error::{Result, TrainError};

/// How chunk batches are encoded.
#[derive(Debug, Clone, Copy)]
pub enum Prefix<'a> {
    /// The embeddings train: the whole encoder runs in the caller's mode.
    None,
    /// The embeddings and the bottom `layers` layers are frozen: computed in inference mode.
    Frozen {
        /// Frozen layers above the embeddings.
        layers: usize,
    },
    /// As `Frozen`, read from a cache; `doc_ids[d]` is document d's index in the cache.
    Cached {
        /// The cached outputs.
        cache: &'a PrefixCache,
        /// Cache index of each document of the batch.
        doc_ids: &'a [usize],
    },
}

/// Chunk vectors of one encoder batch (`batch` indexes `refs`, from [`chunk_batches`]).
///
/// # Shapes
/// → `[batch.len(), hidden]`
pub fn encode_batch(
    model: &HierarchicalClassifier,
    docs: &[&ChunkedDocument],
    refs: &[(usize, usize)],
    batch: &[usize],
    prefix: Prefix,
    mode: Mode,
    device: &Device,
) -> Result<Tensor> {
    let (ids, mask) = batch_tensors(docs, refs, batch, model.config().encoder.pad_token_id, device)?;
    Ok(match prefix {
        Prefix::None => model.chunk_vectors(&ids, &mask, mode)?,
        Prefix::Frozen { layers } => {
            let states = model.encoder().prefix(&ids, &mask, layers)?;
            model.chunk_vectors_from(&states, &mask, layers, mode)?
        }
        Prefix::Cached { cache, doc_ids } => {
            let seq = ids.dim(1)?;
            let states: Vec<Tensor> =
                batch.iter().map(|&i| cache.get(doc_ids[refs[i].0], refs[i].1, seq)).collect::<Result<_>>()?;
            model.chunk_vectors_from(&Tensor::stack(&states, 0)?, &mask, cache.layers, mode)?
        }
    })
}

/// Where one chunk's states are.
enum Entry {
    Memory(Tensor),
    /// `len` token rows at byte `offset` of the scratch file.
    Disk {
        offset: u64,
        len: usize,
    },
}

/// Outputs of the frozen prefix (embeddings + bottom `layers` layers) for every chunk of a set
/// of documents, real tokens only.
pub struct PrefixCache {
    layers: usize,
    hidden: usize,
    /// dtype of the states (the encoder's compute dtype); kept in it in memory, f32 on disk.
    dtype: DType,
    /// Where the encoder runs (entries read back from the scratch file go there).
    device: Device,
    entries: Vec<Vec<Entry>>,
    /// Scratch file for what did not fit in memory (deleted when the cache is dropped).
    file: Option<tempfile::NamedTempFile>,
    bytes_in_memory: usize,
    bytes_on_disk: u64,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("layers", &self.layers)
            .field("bytes_in_memory", &self.bytes_in_memory)
            .field("bytes_on_disk", &self.bytes_on_disk)
            .finish_non_exhaustive()
    }
}

impl PrefixCache {
    /// Encodes every chunk of `docs` through the frozen prefix once. Up to `memory_limit`
    /// bytes stay in memory; the rest goes to a scratch file in `spill_dir`.
    /// `on_chunks(n)` is called after each encoder batch.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        model: &HierarchicalClassifier,
        docs: &[ChunkedDocument],
        layers: usize,
        max_batch_tokens: usize,
        memory_limit: usize,
        spill_dir: &Path,
        device: &Device,
        mut on_chunks: impl FnMut(usize),
    ) -> Result<Self> {
        let hidden = model.config().encoder.hidden_size;
        let refs_docs: Vec<&ChunkedDocument> = docs.iter().collect();
        let (refs, batches) = chunk_batches(&refs_docs, max_batch_tokens);
        let mut entries: Vec<Vec<Option<Entry>>> =
            docs.iter().map(|d| d.chunks.iter().map(|_| None).collect()).collect();
        let dtype = model.encoder().compute_dtype();
        let mut cache = Self {
            layers,
            hidden,
            dtype,
            device: device.clone(),
            entries: Vec::new(),
            file: None,
            bytes_in_memory: 0,
            bytes_on_disk: 0,
        };
        let mut writer: Option<BufWriter<File>> = None;
        for batch in &batches {
            let (ids, mask) = batch_tensors(&refs_docs, &refs, batch, model.config().encoder.pad_token_id, device)?;
            let states = model.encoder().prefix(&ids, &mask, layers)?;
            for (row, &i) in batch.iter().enumerate() {
                let (d, c) = refs[i];
                let len = docs[d].chunks[c].ids.len();
                let rows = states.get(row)?.narrow(0, 0, len)?;
                let bytes = len * hidden * dtype.size_in_bytes();
                let entry = if cache.bytes_in_memory + bytes <= memory_limit {
                    cache.bytes_in_memory += bytes;
                    // `contiguous` copies the rows so the batch's states can be freed.
                    Entry::Memory(rows.contiguous()?)
                } else {
                    cache.spill(&rows, spill_dir, &mut writer)?
                };
                entries[d][c] = Some(entry);
            }
            on_chunks(batch.len());
        }
        if let Some(mut w) = writer {
            w.flush().map_err(|e| scratch_error(spill_dir, e))?;
        }
        cache.entries = entries.into_iter().map(|d| d.into_iter().flatten().collect()).collect();
        Ok(cache)
    }

    /// Appends one chunk's states to the scratch file.
    fn spill(&mut self, rows: &Tensor, dir: &Path, writer: &mut Option<BufWriter<File>>) -> Result<Entry> {
        if writer.is_none() {
            let file = tempfile::Builder::new()
                .prefix(".longread-prefix-cache-")
                .tempfile_in(dir)
                .map_err(|e| scratch_error(dir, e))?;
            *writer = Some(BufWriter::new(file.reopen().map_err(|e| scratch_error(dir, e))?));
            self.file = Some(file);
        }
        let w = writer.as_mut().expect("the writer was just created");
        let values = rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        for v in &values {
            w.write_all(&v.to_le_bytes()).map_err(|e| scratch_error(dir, e))?;
        }
        let entry = Entry::Disk { offset: self.bytes_on_disk, len: rows.dim(0)? };
        self.bytes_on_disk += values.len() as u64 * 4;
        Ok(entry)
    }

    /// Frozen layers above the embeddings.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Bytes held in memory.
    pub fn bytes_in_memory(&self) -> usize {
        self.bytes_in_memory
    }

    /// Bytes written to the scratch file.
    pub fn bytes_on_disk(&self) -> u64 {
        self.bytes_on_disk
    }

    /// The states of chunk `chunk` of document `doc`, zero-padded to `seq` rows (padding rows
    /// are masked out of attention and pooling, so their values do not matter).
    ///
    /// # Shapes
    /// → `[seq, hidden]`
    pub fn get(&self, doc: usize, chunk: usize, seq: usize) -> Result<Tensor> {
        let entry = self.entries.get(doc).and_then(|d| d.get(chunk)).ok_or_else(|| {
            TrainError::InvalidSetting(format!("prefix cache has no chunk {chunk} of document {doc}"))
        })?;
        let rows = match entry {
            Entry::Memory(t) => t.clone(),
            Entry::Disk { offset, len } => self.read(*offset, *len)?,
        };
        let len = rows.dim(0)?;
        Ok(if seq > len { rows.pad_with_zeros(0, 0, seq - len)? } else { rows })
    }

    fn read(&self, offset: u64, len: usize) -> Result<Tensor> {
        use std::os::unix::fs::FileExt;
        let file = self.file.as_ref().expect("disk entries exist only with a scratch file");
        let mut bytes = vec![0u8; len * self.hidden * 4];
        file.as_file().read_exact_at(&mut bytes, offset).map_err(|e| scratch_error(file.path(), e))?;
        let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Tensor::from_vec(values, (len, self.hidden), &self.device)?.to_dtype(self.dtype)?)
    }
}

fn scratch_error(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io { path: path.to_owned(), source }
}
