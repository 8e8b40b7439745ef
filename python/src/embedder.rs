//! `longread.Embedder`: sentence embeddings as numpy arrays.

use std::path::PathBuf;
use std::sync::Arc;

use longread_model::{Embedder as RustEmbedder, EmbedderOptions};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;

use crate::convert::{off_gil, parse_device, parse_pooling, parse_precision, set_threads, texts_checked};
use crate::{LongreadError, ModelLoadError};

/// Sentence embeddings, as sentence-transformers computes them.
///
/// Embedder(model_dir, threads=None, device="auto", precision=None, pooling=None)
///
/// pooling: "mean" or "cls"; None: what the model's sentence-transformers Pooling module says
/// (CLS for the BGE models), else mean.
///
/// Pickles as its settings (the directory's absolute path, device, precision; not threads):
/// unpickling loads the model again.
#[pyclass(module = "longread._longread", frozen)]
pub(crate) struct Embedder {
    inner: Arc<RustEmbedder>,
    /// The directory it was loaded from, as given.
    model_dir: PathBuf,
    /// What `__reduce__` gives back: (absolute model_dir, device, precision, pooling).
    settings: (PathBuf, String, Option<String>, Option<String>),
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model_dir, threads=None, device="auto", precision=None, pooling=None))]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        threads: Option<usize>,
        device: &str,
        precision: Option<&str>,
        pooling: Option<&str>,
    ) -> PyResult<Self> {
        set_threads(threads)?;
        let options = EmbedderOptions {
            pooling: pooling.map(parse_pooling).transpose()?,
            normalize: Some(false), // per call
            device: parse_device(device)?,
            precision: precision.map(parse_precision).transpose()?,
        };
        // A Hugging Face Hub id (`sentence-transformers/all-MiniLM-L6-v2`) is downloaded into
        // the Hugging Face cache, as the command line does.
        let spec = model_dir.clone();
        let resolved = off_gil(py, || longread_model::checkpoint::local_or_hub(&spec));
        let model_dir =
            resolved.map_err(|e| ModelLoadError::new_err(format!("loading model {}: {e}", model_dir.display())))?;
        let loaded = off_gil(py, || RustEmbedder::open(&model_dir, options));
        let inner =
            loaded.map_err(|e| ModelLoadError::new_err(format!("loading model {}: {e}", model_dir.display())))?;
        let absolute = std::path::absolute(&model_dir).unwrap_or_else(|_| model_dir.clone());
        let settings = (absolute, device.to_owned(), precision.map(str::to_owned), pooling.map(str::to_owned));
        Ok(Self { inner: Arc::new(inner), model_dir, settings })
    }

    /// Pickles as `Embedder(model_dir, None, device, precision, pooling)`.
    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyType>, (PathBuf, Option<usize>, String, Option<String>, Option<String>))>
    {
        let (dir, device, precision, pooling) = slf.get().settings.clone();
        Ok((slf.get_type(), (dir, None, device, precision, pooling)))
    }

    /// How token vectors become one vector: "mean" or "cls".
    #[getter]
    fn pooling(&self) -> &'static str {
        self.inner.pooling().name()
    }

    /// Size of the vectors.
    #[getter]
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn __repr__(&self) -> String {
        format!("Embedder({:?}, dimension={})", self.model_dir.display().to_string(), self.inner.dimension())
    }

    /// embed(texts, normalize=None, batch_size=32) -> numpy.ndarray
    ///
    /// One float32 row per text (shape [len(texts), dimension]); normalize scales each to
    /// unit length (None: when the model has sentence-transformers' Normalize module, as
    /// `SentenceTransformer.encode` does). Texts longer than the model's positions are truncated.
    #[pyo3(signature = (texts, normalize=None, batch_size=32))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        normalize: Option<bool>,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let normalize = normalize.unwrap_or(self.inner.has_normalize_module());
        // As the command line's --batch-size (0 was taken for 1 without a word).
        if !(1..=65536).contains(&batch_size) {
            return Err(LongreadError::new_err(format!("batch_size must be between 1 and 65536, not {batch_size}")));
        }
        let texts = texts_checked(texts)?;
        let embedder = Arc::clone(&self.inner);
        let dim = embedder.dimension();
        let embedded = off_gil(py, move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder.embed(&refs, batch_size, |_| {})
        });
        let mut embedded = embedded.map_err(|e| LongreadError::new_err(format!("embedding: {e}")))?;
        if normalize {
            embedded.normalize();
        }
        let n = embedded.vectors.len();
        let flat: Vec<f32> = embedded.vectors.into_iter().flatten().collect();
        let array = Array2::from_shape_vec((n, dim), flat).map_err(|e| LongreadError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    }
}
