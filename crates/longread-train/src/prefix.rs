//! The frozen bottom of the encoder. When the embeddings and the bottom K layers do not train,
//! they run without dropout and without a graph; their outputs never change, so they can be
//! computed once per chunk and reused every epoch ([`PrefixCache`]: in memory up to a limit,
//! then in a scratch file on disk, or kept between runs in a [`DocumentStore`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use longread_model::hierarchical::predictor::{batch_tensors, chunk_batches};
use longread_model::hierarchical::{
    chunk_groups, probe_batch, DocumentStore, HierarchicalClassifier, CACHE_GROUP_CHUNKS,
};
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
) -> Result<Tensor> {
    // Made on the CPU: the encoder checks the ids there and copies them to its device once,
    // reading nothing back from a GPU (which would wait for the previous batch's pass).
    let (ids, host_mask) = batch_tensors(docs, refs, batch, model.config().encoder.pad_token_id, &Device::Cpu)?;
    Ok(match prefix {
        Prefix::None => model.chunk_vectors(&ids, &host_mask, mode)?,
        Prefix::Frozen { layers } => {
            let states = model.encoder().prefix(&ids, &host_mask, layers)?;
            model.chunk_vectors_from(&states, &host_mask, layers, mode)?
        }
        Prefix::Cached { cache, doc_ids } => {
            let seq = ids.dim(1)?;
            let states: Vec<Tensor> =
                batch.iter().map(|&i| cache.get(doc_ids[refs[i].0], refs[i].1, seq)).collect::<Result<_>>()?;
            model.chunk_vectors_from(&Tensor::stack(&states, 0)?, &host_mask, cache.layers, mode)?
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
    /// `len` token rows at byte `offset` of a document's file in the store.
    Stored {
        path: Arc<Path>,
        offset: u64,
        len: usize,
    },
}

/// Where a [`PrefixCache`] keeps what it computes.
#[derive(Debug, Clone, Copy)]
pub struct Storage<'a> {
    /// Bytes kept in memory; the rest is read from disk when needed.
    pub memory_limit: usize,
    /// Directory of the scratch file (deleted with the cache) used without a store.
    pub spill_dir: &'a Path,
    /// Keeps each document's states between runs ([`open_store`]): filled as the encoder goes,
    /// so an interrupted fill resumes where it stopped; without it the states live as long as
    /// the cache.
    pub store: Option<&'a DocumentStore>,
}

/// Opens the store in `dir` for the outputs of `model`'s embeddings + bottom `layers` layers
/// as they are now, keyed by what they compute (their output for a fixed probe sequence) and
/// `variant` (the precision): a change is a miss, never a stale hit.
pub fn open_store(model: &HierarchicalClassifier, dir: &Path, layers: usize, variant: &str) -> Result<DocumentStore> {
    let (ids, mask) = probe_batch(model)?;
    let states = model.encoder().prefix(&ids, &mask, layers)?;
    let fingerprint: Vec<f32> = states.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    Ok(DocumentStore::open(dir, &fingerprint, &format!("{variant}/prefix{layers}"), "pfx")?)
}

/// Outputs of the frozen prefix (embeddings + bottom `layers` layers) for every chunk of a set
/// of documents, real tokens only.
pub struct PrefixCache {
    layers: usize,
    hidden: usize,
    /// dtype of the states (the encoder's compute dtype); kept in it in memory, f32 on disk.
    dtype: DType,
    /// Where the encoder runs (entries read back from disk go there).
    device: Device,
    entries: Vec<Vec<Option<Entry>>>,
    /// Scratch file for what did not fit in memory (deleted when the cache is dropped).
    file: Option<tempfile::NamedTempFile>,
    writer: Option<BufWriter<File>>,
    memory_limit: usize,
    bytes_in_memory: usize,
    bytes_on_disk: u64,
    /// Chunks read back from the store instead of encoded.
    chunks_reused: usize,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("layers", &self.layers)
            .field("bytes_in_memory", &self.bytes_in_memory)
            .field("bytes_on_disk", &self.bytes_on_disk)
            .field("chunks_reused", &self.chunks_reused)
            .finish_non_exhaustive()
    }
}

/// File header of a stored document: magic, then chunks and hidden size as u32 LE, then each
/// chunk's token count as u32 LE, then the states as f32 LE, chunk after chunk.
const MAGIC: &[u8; 8] = b"LRPFX001";

impl PrefixCache {
    /// Encodes every chunk of `docs` through the frozen prefix once (documents found in the
    /// store are read instead). `on_chunks(n)` is called after each encoder batch and for the
    /// chunks read back.
    pub fn build(
        model: &HierarchicalClassifier,
        docs: &[ChunkedDocument],
        layers: usize,
        max_batch_tokens: usize,
        storage: Storage,
        device: &Device,
        mut on_chunks: impl FnMut(usize),
    ) -> Result<Self> {
        let mut cache = Self {
            layers,
            hidden: model.config().encoder.hidden_size,
            dtype: model.encoder().compute_dtype(),
            device: device.clone(),
            entries: docs.iter().map(|d| d.chunks.iter().map(|_| None).collect()).collect(),
            file: None,
            writer: None,
            memory_limit: storage.memory_limit,
            bytes_in_memory: 0,
            bytes_on_disk: 0,
            chunks_reused: 0,
        };
        let mut todo = Vec::new();
        for (d, doc) in docs.iter().enumerate() {
            match storage.store.and_then(|s| cache.read_stored(s, d, doc)) {
                Some(()) => on_chunks(doc.chunks.len()),
                None => todo.push(d),
            }
        }
        // With a store, documents are encoded and written group by group (an interrupted
        // fill keeps what was written); without one, all in one go.
        let group_chunks = if storage.store.is_some() { CACHE_GROUP_CHUNKS } else { usize::MAX };
        let total: usize = docs.iter().map(|d| d.chunks.len()).sum();
        let mut done = total - todo.iter().map(|&d| docs[d].chunks.len()).sum::<usize>();
        let sizes: Vec<usize> = todo.iter().map(|&d| docs[d].chunks.len()).collect();
        for range in chunk_groups(&sizes, group_chunks) {
            // A stop asked for (Ctrl-C) ends the fill here; what the store holds is kept.
            if storage.store.is_some() {
                crate::interrupt::check_filling("storing the frozen layers' outputs", done, total)?;
            }
            done += sizes[range.clone()].iter().sum::<usize>();
            cache.encode_group(model, docs, &todo[range], max_batch_tokens, storage, &mut on_chunks)?;
        }
        if let Some(mut w) = cache.writer.take() {
            w.flush().map_err(|e| scratch_error(storage.spill_dir, e))?;
        }
        Ok(cache)
    }

    /// Encodes the documents `group` (indices into `docs`) and places their states.
    fn encode_group(
        &mut self,
        model: &HierarchicalClassifier,
        docs: &[ChunkedDocument],
        group: &[usize],
        max_batch_tokens: usize,
        storage: Storage,
        on_chunks: &mut impl FnMut(usize),
    ) -> Result<()> {
        let group_docs: Vec<&ChunkedDocument> = group.iter().map(|&d| &docs[d]).collect();
        let (refs, batches) = chunk_batches(&group_docs, max_batch_tokens);
        let mut rows: Vec<Vec<Option<Tensor>>> = group_docs.iter().map(|d| vec![None; d.chunks.len()]).collect();
        for batch in &batches {
            let pad = model.config().encoder.pad_token_id;
            let (ids, mask) = batch_tensors(&group_docs, &refs, batch, pad, &self.device)?;
            let states = model.encoder().prefix(&ids, &mask, self.layers)?;
            for (row, &i) in batch.iter().enumerate() {
                let (g, c) = refs[i];
                let len = group_docs[g].chunks[c].ids.len();
                // `contiguous` copies the rows so the batch's states can be freed.
                let chunk = states.get(row)?.narrow(0, 0, len)?.contiguous()?;
                match storage.store {
                    Some(_) => rows[g][c] = Some(chunk),
                    None => {
                        let entry = self.place(chunk, storage.spill_dir)?;
                        self.entries[group[g]][c] = Some(entry);
                    }
                }
            }
            on_chunks(batch.len());
        }
        let Some(store) = storage.store else { return Ok(()) };
        for (g, chunks) in rows.into_iter().enumerate() {
            let chunks: Vec<Tensor> = chunks.into_iter().map(|c| c.expect("every chunk encoded")).collect();
            let d = group[g];
            store.write(&docs[d], &self.stored_bytes(&chunks)?)?;
            let path: Arc<Path> = store.path(&docs[d]).into();
            let mut offset = (16 + 4 * chunks.len()) as u64;
            for (c, chunk) in chunks.into_iter().enumerate() {
                let len = chunk.dim(0)?;
                let entry = match self.fits(len) {
                    true => Entry::Memory(chunk),
                    false => Entry::Stored { path: path.clone(), offset, len },
                };
                self.entries[d][c] = Some(entry);
                offset += (len * self.hidden * 4) as u64;
            }
        }
        Ok(())
    }

    /// Whether `len` more token rows fit in memory (counted as held when they do).
    fn fits(&mut self, len: usize) -> bool {
        let bytes = len * self.hidden * self.dtype.size_in_bytes();
        let fits = self.bytes_in_memory + bytes <= self.memory_limit;
        if fits {
            self.bytes_in_memory += bytes;
        }
        fits
    }

    /// Keeps one chunk's states in memory, or appends them to the scratch file.
    fn place(&mut self, rows: Tensor, dir: &Path) -> Result<Entry> {
        let len = rows.dim(0)?;
        if self.fits(len) {
            return Ok(Entry::Memory(rows));
        }
        if self.writer.is_none() {
            let file = tempfile::Builder::new()
                .prefix(".longread-prefix-cache-")
                .tempfile_in(dir)
                .map_err(|e| scratch_error(dir, e))?;
            self.writer = Some(BufWriter::new(file.reopen().map_err(|e| scratch_error(dir, e))?));
            self.file = Some(file);
        }
        let w = self.writer.as_mut().expect("the writer was just created");
        let values = rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_all(&bytes).map_err(|e| scratch_error(dir, e))?;
        let entry = Entry::Disk { offset: self.bytes_on_disk, len };
        self.bytes_on_disk += bytes.len() as u64;
        Ok(entry)
    }

    /// A document's file in the store: see [`MAGIC`].
    fn stored_bytes(&self, chunks: &[Tensor]) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(self.hidden as u32).to_le_bytes());
        for chunk in chunks {
            bytes.extend_from_slice(&(chunk.dim(0)? as u32).to_le_bytes());
        }
        for chunk in chunks {
            let values = chunk.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
        Ok(bytes)
    }

    /// Places document `d`'s states from the store; `None` when it has no valid entry (a
    /// damaged or foreign file counts as missing).
    fn read_stored(&mut self, store: &DocumentStore, d: usize, doc: &ChunkedDocument) -> Option<()> {
        let bytes = store.read(doc)?;
        let u32_at = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
        if bytes.get(..8)? != MAGIC || u32_at(8)? != doc.chunks.len() || u32_at(12)? != self.hidden {
            return None;
        }
        let lens: Vec<usize> = (0..doc.chunks.len()).map(|c| u32_at(16 + 4 * c)).collect::<Option<_>>()?;
        let header = 16 + 4 * lens.len();
        let expected = header + lens.iter().sum::<usize>() * self.hidden * 4;
        if bytes.len() != expected || lens.iter().zip(&doc.chunks).any(|(&l, c)| l != c.ids.len()) {
            return None;
        }
        let path: Arc<Path> = store.path(doc).into();
        let mut offset = header;
        for (c, &len) in lens.iter().enumerate() {
            let size = len * self.hidden * 4;
            let entry = match self.fits(len) {
                true => Entry::Memory(self.rows_from_bytes(&bytes[offset..offset + size], len).ok()?),
                false => Entry::Stored { path: path.clone(), offset: offset as u64, len },
            };
            self.entries[d][c] = Some(entry);
            offset += size;
        }
        self.chunks_reused += lens.len();
        Some(())
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

    /// Chunks read back from the store instead of encoded.
    pub fn chunks_reused(&self) -> usize {
        self.chunks_reused
    }

    /// The states of chunk `chunk` of document `doc`, zero-padded to `seq` rows (padding rows
    /// are masked out of attention and pooling, so their values do not matter).
    ///
    /// # Shapes
    /// → `[seq, hidden]`
    pub fn get(&self, doc: usize, chunk: usize, seq: usize) -> Result<Tensor> {
        let entry = self.entries.get(doc).and_then(|d| d.get(chunk)).and_then(Option::as_ref).ok_or_else(|| {
            TrainError::InvalidSetting(format!("prefix cache has no chunk {chunk} of document {doc}"))
        })?;
        let rows = match entry {
            Entry::Memory(t) => t.clone(),
            Entry::Disk { offset, len } => {
                let file = self.file.as_ref().expect("disk entries exist only with a scratch file");
                self.read_rows(file.as_file(), file.path(), *offset, *len)?
            }
            Entry::Stored { path, offset, len } => {
                let file = File::open(path).map_err(|e| scratch_error(path, e))?;
                self.read_rows(&file, path, *offset, *len)?
            }
        };
        let len = rows.dim(0)?;
        Ok(if seq > len { rows.pad_with_zeros(0, 0, seq - len)? } else { rows })
    }

    fn read_rows(&self, file: &File, path: &Path, offset: u64, len: usize) -> Result<Tensor> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; len * self.hidden * 4];
        file.read_exact_at(&mut bytes, offset).map_err(|e| scratch_error(path, e))?;
        self.rows_from_bytes(&bytes, len)
    }

    /// `len` token rows from f32 LE bytes, in the compute dtype.
    fn rows_from_bytes(&self, bytes: &[u8], len: usize) -> Result<Tensor> {
        let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Tensor::from_vec(values, (len, self.hidden), &self.device)?.to_dtype(self.dtype)?)
    }
}

fn scratch_error(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io { path: path.to_owned(), source }
}
