//! Memory-mapped safetensors files, one name space across shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{Device, Tensor};

use crate::error::{ModelError, Result};

/// All tensors of a checkpoint, read lazily from memory-mapped files.
pub struct TensorStore {
    files: Vec<(PathBuf, MmapedSafetensors)>,
    /// Tensor name → (file index, shape).
    index: BTreeMap<String, (usize, Vec<usize>)>,
}

impl std::fmt::Debug for TensorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorStore").field("tensors", &self.index.len()).finish()
    }
}

impl TensorStore {
    /// Maps every file and reads its header; a truncated or corrupt file is an error naming it.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = BTreeMap::new();
        for (i, path) in paths.iter().enumerate() {
            // SAFETY: the mapping is read-only; as in every mmap-based loader, the file must not
            // be truncated by another process while the model is loaded.
            let st = unsafe { MmapedSafetensors::new(path) }.map_err(|e| corrupt(path, e))?;
            for (name, view) in st.tensors() {
                index.insert(name, (i, view.shape().to_vec()));
            }
            files.push((path.clone(), st));
        }
        Ok(Self { files, index })
    }

    /// Names of all tensors, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// Shape of a tensor, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.index.get(name).map(|(_, s)| s.as_slice())
    }

    /// True when the tensor exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Loads one tensor in its stored dtype.
    pub fn load(&self, name: &str, device: &Device) -> Result<Tensor> {
        let (file, _) = self.index.get(name).ok_or_else(|| ModelError::MissingTensor {
            name: name.into(),
            tried: name.into(),
            model_type: "this".into(),
        })?;
        let (path, st) = &self.files[*file];
        st.load(name, device).map_err(|e| corrupt(path, e))
    }
}

fn corrupt(path: &Path, e: candle_core::Error) -> ModelError {
    ModelError::CorruptWeights { path: path.to_owned(), message: e.to_string() }
}
