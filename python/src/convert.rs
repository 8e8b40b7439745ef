//! Conversions between Python values and the library's: texts, options, devices, JSON.

use longread_classifier::ClassifierOptions;
use longread_model::sentence_pooling::SentencePooling;
use longread_model::threads;
use longread_model::{DeviceChoice, Precision};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet, PyMapping, PySet, PyString};

use crate::{InvalidDocumentError, LongreadError};

/// Sizes the thread pools on first use: `threads` applies to the whole process and can be
/// set once (a later, different value is an error).
pub(crate) fn set_threads(threads: Option<usize>) -> PyResult<()> {
    let Some(n) = threads else { return Ok(()) };
    threads::check_thread_count(n).map_err(LongreadError::new_err)?;
    // The tensor library reads RAYON_NUM_THREADS at each call; rayon's pool is built once (in a
    // process forked after longread ran in its parent, its own pool is, from this variable).
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    let running = if threads::is_fork_of_a_started_process() {
        threads::pool_threads()
    } else if rayon::ThreadPoolBuilder::new().num_threads(n).build_global().is_ok() {
        n
    } else {
        rayon::current_num_threads()
    };
    if running != n {
        return Err(LongreadError::new_err(format!(
            "threads is set once per process; this one already runs {running} threads"
        )));
    }
    Ok(())
}

/// `py.allow_threads(f)` on the pool this process's tensor work runs on: rayon's, or in a
/// process forked after longread ran in its parent (multiprocessing's default on Linux, a
/// pre-forking server), one of its own — the inherited pool has no threads, and work given to
/// it waited forever.
pub(crate) fn off_gil<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> R {
    py.allow_threads(|| threads::on_pool(f))
}

/// Classifier options from Python's arguments (`None`: the device's default).
pub(crate) fn classifier_options(
    precision: Option<&str>,
    max_batch_tokens: Option<usize>,
    device: &str,
) -> PyResult<ClassifierOptions> {
    Ok(ClassifierOptions {
        precision: precision.map(parse_precision).transpose()?,
        max_batch_tokens,
        device: parse_device(device)?,
        occlusion: false,
    })
}

/// `"auto"`, `"cpu"`, `"cuda"` or `"cuda:N"`.
pub(crate) fn parse_device(device: &str) -> PyResult<DeviceChoice> {
    device.parse().map_err(LongreadError::new_err)
}

/// `"mean"` or `"cls"`.
pub(crate) fn parse_pooling(pooling: &str) -> PyResult<SentencePooling> {
    match pooling {
        "mean" => Ok(SentencePooling::Mean),
        "cls" => Ok(SentencePooling::Cls),
        other => Err(LongreadError::new_err(format!("pooling {other:?}: expected \"mean\" or \"cls\""))),
    }
}

pub(crate) fn parse_precision(precision: &str) -> PyResult<Precision> {
    match precision {
        "f32" => Ok(Precision::F32),
        "int8" => Ok(Precision::Int8),
        "bf16" => Ok(Precision::Bf16),
        other => Err(LongreadError::new_err(format!("precision must be \"f32\", \"int8\" or \"bf16\", not {other:?}"))),
    }
}

/// The texts of a list (or other iterable) of `str` (or UTF-8 `bytes`); a single string is
/// refused rather than read as characters, a dict rather than read as its keys (`{"text": ...}`
/// was classified as the word "text") and a set, whose order is not the caller's.
pub(crate) fn texts(items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if items.is_instance_of::<PyString>() {
        return Err(InvalidDocumentError::new_err("texts must be a list of strings, not one string: give [text]"));
    }
    if items.is_instance_of::<PyBytes>() {
        return Err(InvalidDocumentError::new_err(
            "texts must be a list of strings, not one bytes object: give [text]",
        ));
    }
    if items.downcast::<PyMapping>().is_ok() {
        return Err(InvalidDocumentError::new_err(format!(
            "texts must be a list of strings, not a {} (its keys would be read as the texts): give [d[\"text\"] for d in ...]",
            type_name(items)
        )));
    }
    if items.is_instance_of::<PySet>() || items.is_instance_of::<PyFrozenSet>() {
        return Err(InvalidDocumentError::new_err(format!(
            "texts must be a list of strings, not a {} (its order is arbitrary, so results would not line up): give a list",
            type_name(items)
        )));
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

pub(crate) fn type_name(item: &Bound<'_, PyAny>) -> String {
    item.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

/// `value` when it is None or callable; else a TypeError naming the keyword `name`.
pub(crate) fn callback(name: &str, value: Option<PyObject>, py: Python<'_>) -> PyResult<Option<PyObject>> {
    match value {
        Some(f) if !f.bind(py).is_callable() => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be callable (it is called with a dict), not {}",
            type_name(f.bind(py))
        ))),
        value => Ok(value),
    }
}

/// `json.loads(text)`.
pub(crate) fn from_json(py: Python<'_>, text: &str) -> PyResult<PyObject> {
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// Texts that are not empty (embedding an empty text is refused as predict refuses it).
pub(crate) fn texts_checked(items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let texts = texts(items)?;
    if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
        return Err(InvalidDocumentError::new_err(format!("document {i} is empty")));
    }
    Ok(texts)
}
