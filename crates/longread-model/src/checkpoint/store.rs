//! Memory-mapped safetensors files, one name space across shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

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
            let st = unsafe { MmapedSafetensors::new(path) }.map_err(|e| {
                if looks_like_pytorch_pickle(path) {
                    ModelError::PickleRefused { path: path.to_owned() }
                } else {
                    corrupt(path, e)
                }
            })?;
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

    /// Loads one tensor in its stored dtype; a floating-point tensor holding NaN or an infinity
    /// is an error naming it (corrupt weights would otherwise give confident wrong answers).
    pub fn load(&self, name: &str, device: &Device) -> Result<Tensor> {
        let (file, _) = self.index.get(name).ok_or_else(|| ModelError::MissingTensor {
            name: name.into(),
            tried: name.into(),
            model_type: "this".into(),
        })?;
        let (path, st) = &self.files[*file];
        let tensor = st.load(name, device).map_err(|e| corrupt(path, e))?;
        if !all_finite(&tensor).map_err(|e| corrupt(path, e))? {
            return Err(ModelError::CorruptWeights {
                path: path.clone(),
                message: format!("tensor `{name}` holds NaN or infinite values"),
            });
        }
        Ok(tensor)
    }
}

/// Whether every value of a floating-point tensor is finite (integer tensors always are): one
/// pass on the tensor's own device, `x − x` being 0 for a finite `x` and NaN otherwise.
fn all_finite(tensor: &Tensor) -> candle_core::Result<bool> {
    if !tensor.dtype().is_float() || tensor.elem_count() == 0 {
        return Ok(true);
    }
    let t = tensor.to_dtype(DType::F32)?;
    Ok(t.sub(&t)?.sum_all()?.to_scalar::<f32>()? == 0.0)
}

/// Whether a file begins as `torch.save` writes: a zip archive (`PK\x03\x04`, PyTorch ≥ 1.6)
/// or a pickle (protocol 2–5: `\x80` then the version), whatever its name.
fn looks_like_pytorch_pickle(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    if file.read_exact(&mut head).is_err() {
        return false;
    }
    head == *b"PK\x03\x04" || (head[0] == 0x80 && (2..=5).contains(&head[1]))
}

/// The parser's complaint about `path`, without the path candle wraps some errors in (the
/// message names the file once: it read `a.safetensors: … path: "a.safetensors" invalid header`).
fn corrupt(path: &Path, mut e: candle_core::Error) -> ModelError {
    while let candle_core::Error::WithPath { inner, .. } = e {
        e = *inner;
    }
    ModelError::CorruptWeights { path: path.to_owned(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_tensors_pass_and_nan_or_inf_do_not() {
        let t = |v: Vec<f32>| Tensor::from_vec(v, 3, &Device::Cpu).unwrap();
        assert!(all_finite(&t(vec![1.0, -2.0, 3.3e38])).unwrap());
        assert!(!all_finite(&t(vec![1.0, f32::NAN, 0.0])).unwrap());
        assert!(!all_finite(&t(vec![f32::INFINITY, 0.0, 0.0])).unwrap());
        assert!(!all_finite(&t(vec![0.0, 0.0, f32::NEG_INFINITY])).unwrap());
        assert!(all_finite(&Tensor::from_vec(vec![1u32, 2, 3], 3, &Device::Cpu).unwrap()).unwrap());
    }
}
