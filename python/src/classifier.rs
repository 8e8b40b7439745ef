//! `longread.Classifier`: any model directory, predictions as the CLI's JSON.

use std::path::PathBuf;
use std::sync::Arc;

use longread_classifier::PredictionLine;
use longread_classifier::{Classifier as RustClassifier, ClassifierOptions};
use longread_report::{render_html, DocumentView};
use longread_text::Document;
use pyo3::prelude::*;

use crate::convert::{classifier_options, from_json, off_gil, set_threads, texts};
use crate::{InvalidDocumentError, ModelLoadError};

/// A model that classifies long documents: any directory `longread train` or `longread init`
/// writes (hierarchical, single-chunk sequence or HAN).
///
/// Classifier(model_dir, threads=None, precision=None, max_batch_tokens=None, device="auto",
///            occlusion=False)
///
/// threads: CPU threads for the whole process (default: every core; set once).
/// precision: "f32", "int8" (CPU only; faster than f32 with AVX-512 VNNI, about level on
/// AVX2-only CPUs) or "bf16"; default f32 on the CPU, bf16 on a GPU.
/// max_batch_tokens: most tokens (chunks x padded length) per encoder batch; default 2048 on
/// the CPU, on a GPU what a quarter of its memory holds (65536 to 256000).
/// device: "auto" (a GPU when built with `cuda` and one is visible, else the CPU), "cpu",
/// "cuda" or "cuda:N". HAN and bag-of-words models run on the CPU.
/// occlusion: each chunk of a prediction also gets "occlusion", the predicted label's
/// probability minus its probability without that chunk (positive: the chunk supports the
/// label); hierarchical models only, as `longread predict --occlusion`.
///
/// A Classifier pickles as its settings (the directory's absolute path, precision,
/// max_batch_tokens, device; not threads, which each process sets): unpickling loads the model
/// again, so multiprocessing, joblib or Spark workers on machines that see the same path get
/// their own copy.
#[pyclass(module = "longread._longread", frozen)]
pub(crate) struct Classifier {
    pub(crate) inner: Arc<RustClassifier>,
    /// What `__reduce__` gives back: (absolute model_dir, precision, max_batch_tokens, device,
    /// occlusion).
    settings: (PathBuf, Option<String>, Option<usize>, String, bool),
}

#[pymethods]
impl Classifier {
    #[new]
    #[pyo3(signature = (model_dir, threads=None, precision=None, max_batch_tokens=None, device="auto", occlusion=false))]
    pub(crate) fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        threads: Option<usize>,
        precision: Option<&str>,
        max_batch_tokens: Option<usize>,
        device: &str,
        occlusion: bool,
    ) -> PyResult<Self> {
        set_threads(threads)?;
        let options = ClassifierOptions { occlusion, ..classifier_options(precision, max_batch_tokens, device)? };
        let loaded = off_gil(py, || RustClassifier::load(&model_dir, options));
        let inner =
            loaded.map_err(|e| ModelLoadError::new_err(format!("loading model {}: {e}", model_dir.display())))?;
        let absolute = std::path::absolute(&model_dir).unwrap_or(model_dir);
        let settings = (absolute, precision.map(str::to_owned), max_batch_tokens, device.to_owned(), occlusion);
        Ok(Self { inner: Arc::new(inner), settings })
    }

    /// Pickles as `Classifier(model_dir, None, precision, max_batch_tokens, device, occlusion)`.
    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(
        Bound<'py, pyo3::types::PyType>,
        (PathBuf, Option<usize>, Option<String>, Option<usize>, String, bool),
    )> {
        let (dir, precision, max_batch_tokens, device, occlusion) = slf.get().settings.clone();
        Ok((slf.get_type(), (dir, None, precision, max_batch_tokens, device, occlusion)))
    }

    /// Where the encoder runs: "cpu", or "cuda:N (GPU name)".
    #[getter]
    fn device(&self) -> String {
        longread_model::device::describe(self.inner.device())
    }

    /// Labels of the primary task, in id order.
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    /// Whether each document carries any number of the labels (its predictions then have
    /// "labels", the list, and a probability of its own per label).
    #[getter]
    fn multi_label(&self) -> bool {
        self.inner.multi_label()
    }

    /// What a prediction's evidence is made of: "chunk" or "sentence".
    #[getter]
    fn evidence_unit(&self) -> &'static str {
        self.inner.evidence_unit()
    }

    /// predict(texts) -> list[dict]
    ///
    /// Classifies every text; one dict per text, as `longread predict` writes it ("id" is
    /// the text's position): label, scores, logits, and the chunks (or a HAN's sentences and
    /// words) with character offsets and attention. A text that cannot be classified raises
    /// InvalidDocumentError naming it; see predict_batch to get an "error" entry instead.
    fn predict(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        self.run(py, texts, true)
    }

    /// predict_batch(texts) -> list[dict]
    ///
    /// As predict, but a text that cannot be classified gets {"id": i, "error": "..."} and
    /// the others go on (as `longread predict` does).
    fn predict_batch(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        self.run(py, texts, false)
    }

    /// report(texts) -> str
    ///
    /// `longread report` for these texts: one self-contained HTML page with each text's
    /// prediction, a bar chart of its chunks' attention (sentences for a HAN) and the text
    /// shaded by that attention; a text that cannot be classified shows why. In a notebook:
    /// `IPython.display.HTML(clf.report(texts))`.
    fn report(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<String> {
        let texts = self::texts(texts)?;
        let classifier = Arc::clone(&self.inner);
        let html = off_gil(py, move || -> Result<String, String> {
            let documents: Vec<Document> = texts.into_iter().enumerate().map(|(i, t)| Document::new(i, t)).collect();
            let mut views = Vec::with_capacity(documents.len());
            classifier
                .classify_documents(&documents, |document, result| {
                    views.push(DocumentView::of_result(document.id.to_string(), &document.text, result));
                    Ok::<(), longread_model::ModelError>(())
                })
                .map_err(|e| format!("classifying: {e}"))?;
            Ok(render_html("longread report", &classifier.dir().display().to_string(), &views))
        });
        html.map_err(InvalidDocumentError::new_err)
    }

    fn __repr__(&self) -> String {
        format!("Classifier({:?}, labels={:?})", self.inner.dir().display().to_string(), self.inner.labels())
    }
}

impl Classifier {
    fn run(&self, py: Python<'_>, items: &Bound<'_, PyAny>, strict: bool) -> PyResult<PyObject> {
        let texts = texts(items)?;
        let classifier = Arc::clone(&self.inner);
        let json = off_gil(py, move || -> Result<String, String> {
            let documents: Vec<Document> = texts.into_iter().enumerate().map(|(i, t)| Document::new(i, t)).collect();
            let mut lines = Vec::with_capacity(documents.len());
            let mut first_error: Option<String> = None;
            classifier
                .classify_documents(&documents, |document, result| {
                    if let (Err(e), None) = (&result, &first_error) {
                        first_error = Some(format!("document {}: {}", document.id, e.message));
                    }
                    lines.push(serde_json::to_string(&PredictionLine::new(document, &result)).unwrap_or_default());
                    Ok::<(), longread_model::ModelError>(())
                })
                .map_err(|e| format!("classifying: {e}"))?;
            match first_error {
                Some(message) if strict => Err(message),
                _ => Ok(format!("[{}]", lines.join(","))),
            }
        });
        match json {
            Ok(json) => from_json(py, &json),
            Err(message) => Err(InvalidDocumentError::new_err(message)),
        }
    }
}
