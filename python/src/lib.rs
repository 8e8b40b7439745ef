//! The `longread` Python package's native module (`longread._longread`): thin bindings over
//! the library API every front uses (`longread_classifier::Classifier`, `Embedder`, evaluation,
//! ensembles, and `longread_train`'s new classifiers and training run).
//! Predictions cross into Python as the JSON `longread predict` writes, so the two agree to
//! the digit; the GIL is released while the model runs; bad input raises a
//! `longread.LongreadError` subclass with the CLI's message, never a crash.

use std::path::PathBuf;
use std::sync::Arc;

use longread_classifier::ensemble::{build_calibrated_ensemble, build_ensemble};
use longread_classifier::evaluate::evaluate_reader;
use longread_classifier::Classifier as RustClassifier;
use longread_classifier::ClassifierOptions;
use longread_classifier::PredictionLine;
use longread_model::{DeviceChoice, Embedder as RustEmbedder, EmbedderOptions, Precision};
use longread_report::{render_html, DocumentView};
use longread_text::Document;
use longread_train::run::stacking::{build_stacked_ensemble, StackSettings};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

create_exception!(_longread, LongreadError, PyException, "Base class of every error longread raises.");
create_exception!(_longread, ModelLoadError, LongreadError, "A model directory that is missing or cannot be loaded.");
create_exception!(
    _longread,
    InvalidDocumentError,
    LongreadError,
    "A document that cannot be classified: not text, not UTF-8, empty, or with no words."
);

/// Sizes the thread pools on first use: `threads` applies to the whole process and can be
/// set once (a later, different value is an error).
fn set_threads(threads: Option<usize>) -> PyResult<()> {
    let Some(n) = threads else { return Ok(()) };
    if n == 0 {
        return Err(LongreadError::new_err("threads must be at least 1"));
    }
    // The tensor library reads RAYON_NUM_THREADS at each call; rayon's pool is built once.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    if rayon::ThreadPoolBuilder::new().num_threads(n).build_global().is_err() && rayon::current_num_threads() != n {
        return Err(LongreadError::new_err(format!(
            "threads is set once per process; this one already runs {} threads",
            rayon::current_num_threads()
        )));
    }
    Ok(())
}

/// Classifier options from Python's arguments (`None`: the device's default).
fn classifier_options(
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    device: &str,
) -> PyResult<ClassifierOptions> {
    Ok(ClassifierOptions {
        precision: precision.map(parse_precision).transpose()?,
        max_batch_tokens,
        device: parse_device(device)?,
    })
}

/// `"auto"`, `"cpu"`, `"cuda"` or `"cuda:N"`.
fn parse_device(device: &str) -> PyResult<DeviceChoice> {
    device.parse().map_err(LongreadError::new_err)
}

fn parse_precision(precision: &str) -> PyResult<Precision> {
    match precision {
        "f32" => Ok(Precision::F32),
        "int8" => Ok(Precision::Int8),
        "bf16" => Ok(Precision::Bf16),
        other => Err(LongreadError::new_err(format!("precision must be \"f32\", \"int8\" or \"bf16\", not {other:?}"))),
    }
}

/// The texts of a list (or other iterable) of `str` (or UTF-8 `bytes`); a single string is
/// refused rather than read as characters.
fn texts(items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if items.is_instance_of::<PyString>() || items.is_instance_of::<PyBytes>() {
        return Err(InvalidDocumentError::new_err("texts must be a list of strings, not one string"));
    }
    let iter = items.try_iter().map_err(|_| {
        InvalidDocumentError::new_err(format!("texts must be a list of strings, not {}", type_name(items)))
    })?;
    iter.enumerate()
        .map(|(i, item)| {
            let item = item?;
            if let Ok(s) = item.downcast::<PyString>() {
                return s.to_cow().map(|c| c.into_owned()).map_err(|_| {
                    InvalidDocumentError::new_err(format!("document {i} is not valid UTF-8 text (lone surrogates)"))
                });
            }
            if let Ok(b) = item.downcast::<PyBytes>() {
                return std::str::from_utf8(b.as_bytes())
                    .map(str::to_owned)
                    .map_err(|e| InvalidDocumentError::new_err(format!("document {i} is not valid UTF-8: {e}")));
            }
            Err(InvalidDocumentError::new_err(format!("document {i} is {}, not str", type_name(&item))))
        })
        .collect()
}

fn type_name(item: &Bound<'_, PyAny>) -> String {
    item.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

/// `json.loads(text)`.
fn from_json(py: Python<'_>, text: &str) -> PyResult<PyObject> {
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// A model that classifies long documents: any directory `longread train` or `longread init`
/// writes (hierarchical, single-chunk sequence or HAN).
///
/// Classifier(model_dir, threads=None, precision=None, max_batch_tokens=None, device="auto")
///
/// threads: CPU threads for the whole process (default: every core; set once).
/// precision: "f32", "int8" (CPU only; faster than f32 with AVX-512 VNNI, about level on
/// AVX2-only CPUs) or "bf16"; default f32 on the CPU, bf16 on a GPU.
/// max_batch_tokens: most tokens (chunks x padded length) per encoder batch; default 2048 on
/// the CPU, 65536 on a GPU.
/// device: "auto" (a GPU when built with `cuda` and one is visible, else the CPU), "cpu",
/// "cuda" or "cuda:N". HAN and bag-of-words models run on the CPU.
#[pyclass(module = "longread._longread", frozen)]
struct Classifier {
    inner: Arc<RustClassifier>,
}

#[pymethods]
impl Classifier {
    #[new]
    #[pyo3(signature = (model_dir, threads=None, precision=None, max_batch_tokens=None, device="auto"))]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        threads: Option<usize>,
        precision: Option<&str>,
        max_batch_tokens: Option<usize>,
        device: &str,
    ) -> PyResult<Self> {
        set_threads(threads)?;
        let options = classifier_options(precision, max_batch_tokens, device)?;
        let loaded = py.allow_threads(|| RustClassifier::load(&model_dir, options));
        let inner =
            loaded.map_err(|e| ModelLoadError::new_err(format!("loading model {}: {e}", model_dir.display())))?;
        Ok(Self { inner: Arc::new(inner) })
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
        let html = py.allow_threads(move || -> Result<String, String> {
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
        let json = py.allow_threads(move || -> Result<String, String> {
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

/// Sentence embeddings (mean pooling, as sentence-transformers computes them).
///
/// Embedder(model_dir, threads=None)
#[pyclass(module = "longread._longread", frozen)]
struct Embedder {
    inner: Arc<RustEmbedder>,
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model_dir, threads=None, device="auto", precision=None))]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        threads: Option<usize>,
        device: &str,
        precision: Option<&str>,
    ) -> PyResult<Self> {
        set_threads(threads)?;
        let options = EmbedderOptions {
            normalize: false,
            device: parse_device(device)?,
            precision: precision.map(parse_precision).transpose()?,
            ..EmbedderOptions::default()
        };
        let loaded = py.allow_threads(|| RustEmbedder::open(&model_dir, options));
        let inner =
            loaded.map_err(|e| ModelLoadError::new_err(format!("loading model {}: {e}", model_dir.display())))?;
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Size of the vectors.
    #[getter]
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    /// embed(texts, normalize=True, batch_size=32) -> numpy.ndarray
    ///
    /// One float32 row per text (shape [len(texts), dimension]); normalize scales each to
    /// unit length. Texts longer than the model's positions are truncated.
    #[pyo3(signature = (texts, normalize=true, batch_size=32))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        normalize: bool,
        batch_size: usize,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let texts = texts_checked(texts)?;
        let embedder = Arc::clone(&self.inner);
        let dim = embedder.dimension();
        let embedded = py.allow_threads(move || {
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

/// Texts that are not empty (embedding an empty text is refused as predict refuses it).
fn texts_checked(items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let texts = texts(items)?;
    if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
        return Err(InvalidDocumentError::new_err(format!("document {i} is empty")));
    }
    Ok(texts)
}

/// evaluate(model_dir, data, threads=None, precision=None, max_batch_tokens=None, device="auto") -> dict
///
/// `longread eval` on one model: classifies the labelled JSON lines in `data` (each task's
/// label in its column) and returns {"documents": n, "tasks": [{"name", "labels", "report"}]}
/// with accuracy, per-class precision/recall/F1, macro/weighted F1 and the confusion matrix.
#[pyfunction]
#[pyo3(signature = (model_dir, data, threads=None, precision=None, max_batch_tokens=None, device="auto"))]
fn evaluate(
    py: Python<'_>,
    model_dir: PathBuf,
    data: PathBuf,
    threads: Option<usize>,
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    device: &str,
) -> PyResult<PyObject> {
    let classifier = Classifier::new(py, model_dir, threads, precision, max_batch_tokens, device)?.inner;
    let result = py.allow_threads(move || -> Result<String, String> {
        let file = std::fs::File::open(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let mut documents = 0usize;
        let reports =
            evaluate_reader(&classifier, std::io::BufReader::new(file), &data.display().to_string(), || documents += 1)
                .map_err(|e| e.to_string())?;
        let tasks: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| serde_json::json!({"name": r.task.name, "labels": r.task.labels, "report": r.report}))
            .collect();
        Ok(serde_json::json!({"documents": documents, "tasks": tasks}).to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// compare(models, data, threads=None, precision=None, max_batch_tokens=None, bootstrap=1000,
/// seed=0, device="auto") -> dict
///
/// `longread eval --model A --model B ... --json`: the models (directories, same labels) on the
/// same labelled documents: accuracy, macro-F1 and per-label recall with 95% bootstrap
/// intervals (`bootstrap` resamples, seeded), and paired bootstrap p-values against the first
/// model. Returns the JSON the command line prints.
#[pyfunction]
#[pyo3(signature = (models, data, threads=None, precision=None, max_batch_tokens=None, bootstrap=1000, seed=0, device="auto"))]
#[allow(clippy::too_many_arguments)]
fn compare(
    py: Python<'_>,
    models: Vec<PathBuf>,
    data: PathBuf,
    threads: Option<usize>,
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    bootstrap: usize,
    seed: u64,
    device: &str,
) -> PyResult<PyObject> {
    let settings = longread_metrics::bootstrap::Bootstrap::new(bootstrap, seed).map_err(LongreadError::new_err)?;
    let loaded = models
        .iter()
        .map(|dir| {
            Ok((
                dir.display().to_string(),
                Classifier::new(py, dir.clone(), threads, precision, max_batch_tokens, device)?.inner,
            ))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let result = py.allow_threads(move || -> Result<String, String> {
        let named: Vec<(String, &RustClassifier)> = loaded.iter().map(|(n, c)| (n.clone(), c.as_ref())).collect();
        let file = std::fs::File::open(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        let comparison = longread_classifier::evaluate::compare(
            &named,
            std::io::BufReader::new(file),
            &data.display().to_string(),
            settings,
            || {},
        )
        .map_err(|e| e.to_string())?;
        serde_json::to_string(&comparison).map_err(|e| e.to_string())
    });
    match result {
        Ok(json) => from_json(py, &json),
        Err(message) => Err(InvalidDocumentError::new_err(message)),
    }
}

/// ensemble(models, out, weights=None, calibrate=None, fit_weights=False, folds=5, stack=None,
///          vector_cache=None, seed=42) -> dict
///
/// `longread ensemble`: copies the model directories `models` (any kinds, the same labels,
/// one task each) into the new directory `out`, a model whose probabilities are their weighted
/// mean (`weights`, one per model, divided by their sum; default equal). With `calibrate` (a
/// labelled held-out JSON lines file) each member's temperature is fitted on it first, and
/// with `fit_weights=True` the weights too, kept when they beat equal weights over `folds`
/// folds (`calibration` in the result says how each way scored). With `stack` (the members'
/// labelled training data) they are fitted instead on out-of-fold scores: every member is
/// retrained `folds` times with its recorded settings on stratified folds (seeded by `seed`)
/// and scores the fold it did not see. `vector_cache` lets encoder members reuse chunk
/// vectors. Returns ensemble.json as a dict; `Classifier(out)` loads it.
#[pyfunction]
#[pyo3(signature = (models, out, weights=None, calibrate=None, fit_weights=false, folds=5, stack=None, vector_cache=None, seed=42))]
#[allow(clippy::too_many_arguments)]
fn ensemble(
    py: Python<'_>,
    models: Vec<PathBuf>,
    out: PathBuf,
    weights: Option<Vec<f64>>,
    calibrate: Option<PathBuf>,
    fit_weights: bool,
    folds: usize,
    stack: Option<PathBuf>,
    vector_cache: Option<PathBuf>,
    seed: u64,
) -> PyResult<PyObject> {
    let scored = calibrate.is_some() || stack.is_some();
    if fit_weights && (!scored || weights.is_some()) {
        return Err(LongreadError::new_err("fit_weights=True needs calibrate=DEV or stack=TRAIN, and no weights"));
    }
    if calibrate.is_some() && stack.is_some() {
        return Err(LongreadError::new_err("give calibrate=DEV or stack=TRAIN, not both"));
    }
    if vector_cache.is_some() && !scored {
        return Err(LongreadError::new_err("vector_cache needs calibrate=DEV or stack=TRAIN"));
    }
    if folds < 2 {
        return Err(LongreadError::new_err(format!("folds={folds}: at least 2")));
    }
    let weights = weights.unwrap_or_else(|| vec![1.0; models.len()]);
    if weights.len() != models.len() {
        return Err(LongreadError::new_err(format!(
            "{} weights for {} models: give one per model, or none",
            weights.len(),
            models.len()
        )));
    }
    let members: Vec<(PathBuf, f64)> = models.into_iter().zip(weights).collect();
    let cache = vector_cache.as_deref();
    let built = py.allow_threads(|| match (&calibrate, &stack) {
        (Some(data), _) => build_calibrated_ensemble(&members, &out, data, fit_weights, folds, cache, |_| {})
            .map_err(|e| e.to_string()),
        (None, Some(train)) => {
            let settings = StackSettings { folds, seed, vector_cache: cache };
            build_stacked_ensemble(&members, &out, train, fit_weights, settings, |_, _| {}).map_err(|e| e.to_string())
        }
        (None, None) => build_ensemble(&members, &out).map_err(|e| e.to_string()),
    });
    let spec = built.map_err(|e| ModelLoadError::new_err(format!("writing ensemble {}: {e}", out.display())))?;
    from_json(py, &serde_json::to_string(&spec).unwrap_or_default())
}

/// Keyword arguments as command-line flags (`freeze_base=True` → `--freeze-base`,
/// `lr=2e-5` → `--lr 2e-05`, a list repeats the flag; False and None leave it out), for the
/// library's own flag parser.
fn flag_args(flags: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let mut args = Vec::new();
    for (key, value) in flags.into_iter().flat_map(|d| d.iter()) {
        let flag = format!("--{}", key.extract::<String>()?.replace('_', "-"));
        if value.is_none() {
            continue;
        }
        if value.is_instance_of::<PyBool>() {
            if value.extract::<bool>()? {
                args.push(flag);
            }
            continue;
        }
        args.extend(repeated(&flag, &value)?);
    }
    Ok(args)
}

/// init(encoder, labels, out, **flags) -> dict
///
/// `longread init --encoder ENCODER --labels LABELS --out OUT ...`: a new classifier on a
/// pretrained encoder directory; every flag of `longread init --help` as a keyword,
/// underscores for dashes (`arch="sequence"`, `pooling="max-logits"`, `attention_top_k=3`,
/// `stride=0`, `seed=1`). `labels` is a list of names in id order (or one comma-separated
/// string). The same checks and model as the command line's; `out` must not exist. Returns the
/// new model's config.json as a dict; `train(..., model=out)` fine-tunes it.
#[pyfunction]
#[pyo3(signature = (encoder, labels, out, **flags))]
fn init(
    py: Python<'_>,
    encoder: PathBuf,
    labels: &Bound<'_, PyAny>,
    out: PathBuf,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    let labels: Vec<String> = if labels.is_instance_of::<PyString>() {
        vec![labels.extract()?]
    } else {
        labels
            .extract()
            .map_err(|_| LongreadError::new_err("labels must be a list of names or a comma-separated string"))?
    };
    let mut args =
        vec!["--encoder".to_string(), encoder.display().to_string(), "--out".to_string(), out.display().to_string()];
    for label in labels {
        args.extend(["--labels".to_string(), label]);
    }
    args.extend(flag_args(flags)?);
    let spec = longread_train::run::flags::init_spec_from_flags(&args).map_err(LongreadError::new_err)?;
    let made = py.allow_threads(|| longread_train::run::init::init_run(&spec));
    let model = made.map_err(|e| match e {
        longread_train::TrainError::Model(e) => ModelLoadError::new_err(e.to_string()),
        other => LongreadError::new_err(other.to_string()),
    })?;
    from_json(py, &model.config().to_json().to_string())
}

/// train(train, out, threads=None, quiet=False, device="auto", **flags) -> dict
///
/// `longread train --train TRAIN --out OUT ...`: every flag of `longread train --help` as a
/// keyword, underscores for dashes (`arch="bow"`, `model="init"`, `freeze_base=True`,
/// `lr=2e-5`, `c_values=[0.1, 1, 10]`); True gives a switch, False or None leaves it out, a
/// list repeats the flag. The same run as the command line's (checkpoints, resume, metrics
/// files in OUT); set-up notes, a progress line at most every 10 s (step, loss, time left) and
/// a line per epoch go to stderr unless `quiet`. Ctrl-C (KeyboardInterrupt) stops the run
/// after the step in progress and saves a checkpoint there before it is raised: the same call
/// with `resume="auto"` continues the run. Returns {"out", "epochs" (one dict per epoch run),
/// "best_epoch", "kept_epoch" (the model in OUT: the best, or the last with keep="last"),
/// "stopped_for_resume", "bow" (a bag-of-words run's C search), "cv" (a --cv
/// run's folds)}. `device` as for `Classifier`: where the encoder trains (the HAN and the bag
/// of words train on the CPU).
#[pyfunction]
#[pyo3(signature = (train, out, threads=None, quiet=false, device="auto", **flags))]
#[allow(clippy::too_many_arguments)]
fn train(
    py: Python<'_>,
    train: PathBuf,
    out: PathBuf,
    threads: Option<usize>,
    quiet: bool,
    device: &str,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    set_threads(threads)?;
    let mut args =
        vec!["--train".to_string(), train.display().to_string(), "--out".to_string(), out.display().to_string()];
    args.extend(flag_args(flags)?);
    let mut spec = longread_train::run::flags::spec_from_flags(&args).map_err(LongreadError::new_err)?;
    spec.device = parse_device(device)?;
    run_interruptibly(py, quiet, move |hooks| {
        let summary = longread_train::run::train_run(&mut spec, serde_json::Map::new(), hooks)?;
        Ok(serde_json::json!({
            "out": spec.out,
            "epochs": summary.logs,
            "best_epoch": summary.best().map(|l| l.epoch),
            "kept_epoch": summary.kept().map(|l| l.epoch),
            "stopped_for_resume": summary.stopped_for_resume,
            "bow": summary.bow,
            "cv": summary.cv,
        }))
    })
}

/// `[flag, value, flag, value, ...]` for each value of a list or tuple, or `[flag, value]`.
fn repeated(flag: &str, values: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let items: Vec<Bound<'_, PyAny>> = if values.is_instance_of::<PyList>() || values.is_instance_of::<PyTuple>() {
        values.try_iter()?.collect::<PyResult<_>>()?
    } else {
        vec![values.clone()]
    };
    let mut args = Vec::new();
    for item in items {
        args.extend([flag.to_string(), item.str()?.to_string()]);
    }
    Ok(args)
}

/// train_tokenizer(corpus, out, **flags) -> dict
///
/// `longread tokenizer train --corpus CORPUS... --out OUT ...`: a byte-level BPE (RoBERTa,
/// `kind="bpe"`, the default) or WordPiece (`kind="wordpiece"`) tokenizer learned from
/// `corpus` (a file or directory, or a list of them), written as OUT/tokenizer.json;
/// `vocab_size`, `min_frequency`, `lowercase` as the command line's flags. Returns {"path",
/// "vocab_size", "texts", "bytes", "seconds"}.
#[pyfunction]
#[pyo3(signature = (corpus, out, **flags))]
fn train_tokenizer(
    py: Python<'_>,
    corpus: &Bound<'_, PyAny>,
    out: PathBuf,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    let mut args = repeated("--corpus", corpus)?;
    args.extend(["--out".to_string(), out.display().to_string()]);
    args.extend(flag_args(flags)?);
    let spec = longread_train::run::flags::tokenizer_spec_from_flags(&args).map_err(LongreadError::new_err)?;
    let made = py.allow_threads(|| longread_train::run::kit::train_tokenizer_run(&spec));
    let made = made.map_err(|e| LongreadError::new_err(e.to_string()))?;
    from_json(py, &serde_json::to_string(&made).unwrap_or_default())
}

/// new_encoder(preset, tokenizer, out, seed=0) -> dict
///
/// `longread encoder new`: a freshly initialised RoBERTa (`preset`: roberta-base,
/// roberta-large, small or tiny) for `tokenizer` (a tokenizer.json or a directory holding one;
/// its size sets the vocabulary), written to `out` (which must not exist) in
/// RobertaForMaskedLM's layout. Returns {"config" (its config.json), "parameters"}.
#[pyfunction]
#[pyo3(signature = (preset, tokenizer, out, seed=0))]
fn new_encoder(py: Python<'_>, preset: String, tokenizer: PathBuf, out: PathBuf, seed: u64) -> PyResult<PyObject> {
    let spec = longread_train::run::kit::EncoderSpec { preset, tokenizer, out, seed };
    let made = py.allow_threads(|| longread_train::run::kit::new_encoder_run(&spec));
    let made = made.map_err(|e| LongreadError::new_err(e.to_string()))?;
    from_json(py, &serde_json::to_string(&made).unwrap_or_default())
}

/// pretrain(corpus, tokenizer, out, threads=None, quiet=False, device="auto", **flags) -> dict
///
/// `longread pretrain --corpus CORPUS... --tokenizer TOKENIZER --out OUT ...`: masked-language-
/// model pretraining with dynamic masking, of a new RoBERTa (`preset="small"`) or continued
/// from a pretrained encoder (`model="DIR"`, with `tokenizer=None` for the model's own); every
/// flag of `longread pretrain --help` as a keyword (`max_steps=2000`, `eval_every=200`,
/// `resume="auto"`). An evaluation line per --eval-every steps goes to stderr unless `quiet`;
/// Ctrl-C stops at the next evaluation (where a checkpoint is saved) and raises
/// KeyboardInterrupt. Returns {"out", "evaluations" (one dict each), "stopped_for_resume"}.
/// `device` as for `train`.
#[pyfunction]
#[pyo3(signature = (corpus, tokenizer, out, threads=None, quiet=false, device="auto", **flags))]
#[allow(clippy::too_many_arguments)]
fn pretrain(
    py: Python<'_>,
    corpus: &Bound<'_, PyAny>,
    tokenizer: Option<PathBuf>,
    out: PathBuf,
    threads: Option<usize>,
    quiet: bool,
    device: &str,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    set_threads(threads)?;
    let mut args = repeated("--corpus", corpus)?;
    if let Some(tokenizer) = tokenizer {
        args.extend(["--tokenizer".to_string(), tokenizer.display().to_string()]);
    }
    args.extend(["--out".to_string(), out.display().to_string()]);
    args.extend(flag_args(flags)?);
    let mut spec = longread_train::run::flags::pretrain_spec_from_flags(&args).map_err(LongreadError::new_err)?;
    spec.device = parse_device(device)?;
    run_interruptibly(py, quiet, |hooks| {
        let summary = longread_train::run::pretrain_run(&spec, serde_json::Map::new(), hooks)?;
        Ok(serde_json::json!({
            "out": spec.out,
            "evaluations": summary.logs,
            "stopped_for_resume": summary.stopped_for_resume,
        }))
    })
}

/// Runs a training `run` without the GIL, with [`Lines`] as its hooks (a Ctrl-C asks it to
/// stop cleanly); returns its JSON summary, or its error: after a Ctrl-C, the
/// KeyboardInterrupt (with the message that says how to resume on stderr).
fn run_interruptibly(
    py: Python<'_>,
    quiet: bool,
    run: impl FnOnce(&mut Lines) -> Result<serde_json::Value, longread_train::TrainError> + Send,
) -> PyResult<PyObject> {
    longread_train::interrupt::clear_stop();
    let (run, interrupted) = py.allow_threads(|| {
        let mut hooks = Lines { quiet, interrupted: None, last_line: None, first_step: None };
        let result = run(&mut hooks).map(|json| json.to_string());
        (result, hooks.interrupted)
    });
    longread_train::interrupt::clear_stop();
    match (run, interrupted) {
        (Ok(json), None) => from_json(py, &json),
        // Ctrl-C during a run that ended anyway (its last step, or a bag of words): saved.
        (Ok(_), Some(signal)) => Err(signal),
        (Err(e @ longread_train::TrainError::Interrupted(_)), Some(signal)) => {
            eprintln!("{e}");
            Err(signal)
        }
        (Err(e), _) => Err(LongreadError::new_err(e.to_string())),
    }
}

/// Training hooks for a Python session: the set-up notes, a progress line at most every
/// [`PROGRESS_EVERY`] (steps with loss and time left, cache building) and one line per epoch on
/// stderr (nothing when `quiet`); the summary and OUT's metrics files hold the rest. At every
/// report it lets Python handle pending signals: a Ctrl-C (KeyboardInterrupt) asks the run to
/// stop after the step in progress and save a checkpoint, then is raised when the run returns.
struct Lines {
    quiet: bool,
    interrupted: Option<PyErr>,
    /// When the last progress line was printed.
    last_line: Option<std::time::Instant>,
    /// The first step this call took, and when (for the time left).
    first_step: Option<(usize, std::time::Instant)>,
}

/// Least time between two progress lines (a notebook's output stays readable).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Lines {
    /// Whether a progress line is due (the first one, then every [`PROGRESS_EVERY`]).
    fn line_due(&mut self, last: bool) -> bool {
        let due = !self.quiet && (last || self.last_line.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY));
        if due {
            self.last_line = Some(std::time::Instant::now());
        }
        due
    }

    /// A line for an optimizer step: where the run is, the step's loss and the time left at
    /// this call's pace so far.
    fn step_line(&mut self, step: &longread_train::trainer::StepLog) {
        let (first, started) = *self.first_step.get_or_insert((step.step, std::time::Instant::now()));
        if !self.line_due(step.step == step.total_steps) {
            return;
        }
        let done = step.step.saturating_sub(first);
        let left = match done {
            0 => String::new(),
            _ => {
                let per_step = started.elapsed().as_secs_f64() / done as f64;
                format!(", ~{:.0} s left", per_step * step.total_steps.saturating_sub(step.step) as f64)
            }
        };
        eprintln!("step {}/{}: loss {:.4}, lr {:.2e}{left}", step.step, step.total_steps, step.loss, step.lr);
    }

    /// Runs Python's signal handlers; the first exception they raise stops the run.
    fn poll_signals(&mut self) {
        if self.interrupted.is_some() {
            return;
        }
        if let Err(signal) = Python::with_gil(|py| py.check_signals()) {
            self.interrupted = Some(signal);
            longread_train::interrupt::request_stop();
            if !self.quiet {
                eprintln!(
                    "interrupted: stopping at the next step boundary (pretraining: evaluation) and saving a checkpoint"
                );
            }
        }
    }
}

impl longread_train::run::RunHooks for Lines {
    fn progress(&mut self, progress: longread_train::trainer::Progress) {
        use longread_train::trainer::Progress;
        match &progress {
            Progress::Step(step) => self.step_line(step),
            Progress::PretrainStep(step) => {
                let as_step = longread_train::trainer::StepLog {
                    step: step.step,
                    total_steps: step.total_steps,
                    loss: step.loss,
                    lr: step.lr,
                    chunks: step.tokens,
                };
                self.step_line(&as_step)
            }
            Progress::Caching { done, total } if self.line_due(done == total) => {
                eprintln!("caching frozen layers: {done}/{total} chunks")
            }
            Progress::Fits { done, total } if self.line_due(done == total) => {
                eprintln!("bag of words: {done}/{total} fits (cross-validation, then the final model)")
            }
            _ => {}
        }
        self.poll_signals();
    }
    fn epoch(&mut self, log: &longread_train::trainer::EpochLog) {
        if !self.quiet {
            let best = match (log.best, log.saved) {
                (true, _) => " (best)",
                (false, true) => " (kept: last)",
                (false, false) => "",
            };
            eprintln!(
                "epoch {}: train loss {:.4}, dev loss {:.4}, dev macro-F1 {:.4}{best}, {:.0} s",
                log.epoch, log.train_loss, log.dev_loss, log.dev.macro_f1, log.seconds
            );
        }
        self.poll_signals();
    }
    fn note(&mut self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
        self.poll_signals();
    }

    fn evaluation(&mut self, log: &longread_train::pretrain::PretrainLog) {
        if !self.quiet {
            eprintln!(
                "step {}: train loss {:.4}, held-out loss {:.4}, perplexity {:.2}, {:.0} tokens/s",
                log.step, log.train_loss, log.eval_loss, log.perplexity, log.tokens_per_second
            );
        }
        self.poll_signals();
    }
}

#[pymodule]
fn _longread(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Classifier>()?;
    m.add_class::<Embedder>()?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(ensemble, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(pretrain, m)?)?;
    m.add_function(wrap_pyfunction!(train_tokenizer, m)?)?;
    m.add_function(wrap_pyfunction!(new_encoder, m)?)?;
    m.add("LongreadError", m.py().get_type::<LongreadError>())?;
    m.add("ModelLoadError", m.py().get_type::<ModelLoadError>())?;
    m.add("InvalidDocumentError", m.py().get_type::<InvalidDocumentError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
