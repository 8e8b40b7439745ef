//! The `longread` Python package's native module (`longread._longread`): thin bindings over
//! the library API every front uses (`longread_classifier::Classifier`, `Embedder`, evaluation,
//! ensembles, and `longread_train`'s new classifiers and training run).
//! Predictions cross into Python as the JSON `longread predict` writes, so the two agree to
//! the digit; the GIL is released while the model runs; bad input raises a
//! `longread.LongreadError` subclass with the CLI's message, never a crash.

mod classifier;
mod convert;
mod embedder;
mod evaluation;
mod progress;
mod training;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

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

use classifier::Classifier;
use embedder::Embedder;
use evaluation::{calibrate, compare, ensemble, evaluate, tune_threshold};
use training::{init, new_encoder, pretrain, train, train_tokenizer};

#[pymodule]
fn _longread(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Classifier>()?;
    m.add_class::<Embedder>()?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(ensemble, m)?)?;
    m.add_function(wrap_pyfunction!(tune_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
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
