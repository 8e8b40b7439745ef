//! `init`, `train`, `train_tokenizer`, `new_encoder` and `pretrain`: the CLI's training
//! commands, keyword arguments as their flags, interruptible with Ctrl-C.

use std::path::PathBuf;

use longread_train::run::flags::Settings;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use serde_json::Value;

use crate::convert::{callback, from_json, off_gil, parse_device, set_threads};
use crate::progress::Lines;
use crate::{LongreadError, ModelLoadError};

/// Keyword arguments as the library's settings ([`Settings`]): booleans, numbers and strings
/// as they are, `None` as null (the default), lists and tuples as lists (a repeated flag),
/// paths (`os.PathLike`) as strings.
pub(crate) fn settings(flags: Option<&Bound<'_, PyDict>>) -> PyResult<Settings> {
    let mut settings = Settings::new();
    for (key, value) in flags.into_iter().flat_map(|d| d.iter()) {
        let key: String = key.extract()?;
        let value = setting_value(&key, &value)?;
        settings.insert(key, value);
    }
    Ok(settings)
}

/// One keyword argument's value (see [`settings`]).
fn setting_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value.try_iter()?.map(|item| setting_value(key, &item?)).collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::Array(items));
    }
    if let Ok(i) = value.extract::<i64>() {
        return Ok(i.into());
    }
    if let Ok(f) = value.extract::<f64>() {
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| LongreadError::new_err(format!("{key}: {f} is not a finite number")));
    }
    // Strings, paths and anything else with a str(): as the command line would take it.
    let text = match value.extract::<PathBuf>() {
        Ok(path) => path.display().to_string(),
        Err(_) => value.str()?.to_string(),
    };
    Ok(Value::String(text))
}

/// A path as a setting's value.
fn path_value(path: &std::path::Path) -> Value {
    Value::String(path.display().to_string())
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
pub(crate) fn init(
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
    let mut settings = settings(flags)?;
    settings.insert("encoder".into(), path_value(&encoder));
    settings.insert("out".into(), path_value(&out));
    settings.insert("labels".into(), labels.into());
    let spec = longread_train::run::flags::init_spec_from_settings(&settings).map_err(LongreadError::new_err)?;
    let made = off_gil(py, || longread_train::run::init::init_run(&spec));
    let model = made.map_err(|e| match e {
        longread_train::TrainError::Model(e) => ModelLoadError::new_err(e.to_string()),
        other => LongreadError::new_err(other.to_string()),
    })?;
    // The command line's note, as a Python warning (a UserWarning).
    if let Some(advice) = longread_train::run::init::advice(&spec) {
        PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyUserWarning>(), &std::ffi::CString::new(advice)?, 1)?;
    }
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
/// with `resume="auto"` continues the run. `on_epoch`, a callable, is called after every epoch
/// with that epoch's dict (as in "epochs"); an exception it raises stops the run the same way
/// (checkpoint saved, the exception raised). Returns {"out", "epochs" (one dict per epoch run),
/// "best_epoch", "kept_epoch" (the model in OUT: the best, or the last with keep="last"),
/// "stopped_for_resume", "bow" (a bag-of-words run's C search), "cv" (a --cv
/// run's folds, and "out_of_fold": every document scored by the fold model that held it
/// out), "threshold" (what `tune_threshold="macro-f1"` kept: threshold, positive,
/// metric, at_default, at_threshold), "calibration" (what `calibrate=True` kept: temperature,
/// log_loss and ece before and after, ...)}. `device` as for `Classifier`: where the encoder trains (the HAN and the bag
/// of words train on the CPU).
#[pyfunction]
#[pyo3(signature = (train, out, threads=None, quiet=false, device="auto", on_epoch=None, **flags))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn train(
    py: Python<'_>,
    train: PathBuf,
    out: PathBuf,
    threads: Option<usize>,
    quiet: bool,
    device: &str,
    on_epoch: Option<PyObject>,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    set_threads(threads)?;
    let mut settings = settings(flags)?;
    settings.insert("train".into(), path_value(&train));
    settings.insert("out".into(), path_value(&out));
    let mut spec = longread_train::run::flags::spec_from_settings(&settings).map_err(LongreadError::new_err)?;
    spec.device = parse_device(device)?;
    let on_epoch = callback("on_epoch", on_epoch, py)?;
    run_interruptibly(py, quiet, on_epoch, move |hooks| {
        let summary = longread_train::run::train_run(&mut spec, serde_json::Map::new(), hooks)?;
        Ok(serde_json::json!({
            "out": spec.out,
            "epochs": summary.logs,
            "best_epoch": summary.best().map(|l| l.epoch),
            "kept_epoch": summary.kept().map(|l| l.epoch),
            "stopped_for_resume": summary.stopped_for_resume,
            "bow": summary.bow,
            "cv": summary.cv,
            "threshold": summary.threshold,
            "calibration": summary.calibration,
        }))
    })
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
pub(crate) fn train_tokenizer(
    py: Python<'_>,
    corpus: &Bound<'_, PyAny>,
    out: PathBuf,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    let mut settings = settings(flags)?;
    settings.insert("corpus".into(), setting_value("corpus", corpus)?);
    settings.insert("out".into(), path_value(&out));
    let spec = longread_train::run::flags::tokenizer_spec_from_settings(&settings).map_err(LongreadError::new_err)?;
    let made = off_gil(py, || longread_train::run::kit::train_tokenizer_run(&spec));
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
pub(crate) fn new_encoder(
    py: Python<'_>,
    preset: String,
    tokenizer: PathBuf,
    out: PathBuf,
    seed: u64,
) -> PyResult<PyObject> {
    let spec = longread_train::run::kit::EncoderSpec { preset, tokenizer, out, seed };
    let made = off_gil(py, || longread_train::run::kit::new_encoder_run(&spec));
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
/// KeyboardInterrupt; `on_evaluation`, a callable, is called with each evaluation's dict, and
/// an exception it raises stops the run the same way. Returns {"out", "evaluations" (one dict
/// each), "stopped_for_resume"}. `device` as for `train`.
#[pyfunction]
#[pyo3(signature = (corpus, tokenizer, out, threads=None, quiet=false, device="auto", on_evaluation=None, **flags))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn pretrain(
    py: Python<'_>,
    corpus: &Bound<'_, PyAny>,
    tokenizer: Option<PathBuf>,
    out: PathBuf,
    threads: Option<usize>,
    quiet: bool,
    device: &str,
    on_evaluation: Option<PyObject>,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyObject> {
    set_threads(threads)?;
    let mut settings = settings(flags)?;
    settings.insert("corpus".into(), setting_value("corpus", corpus)?);
    if let Some(tokenizer) = tokenizer {
        settings.insert("tokenizer".into(), path_value(&tokenizer));
    }
    settings.insert("out".into(), path_value(&out));
    let mut spec =
        longread_train::run::flags::pretrain_spec_from_settings(&settings).map_err(LongreadError::new_err)?;
    spec.device = parse_device(device)?;
    let on_evaluation = callback("on_evaluation", on_evaluation, py)?;
    run_interruptibly(py, quiet, on_evaluation, |hooks| {
        let summary = longread_train::run::pretrain_run(&spec, serde_json::Map::new(), hooks)?;
        Ok(serde_json::json!({
            "out": spec.out,
            "evaluations": summary.logs,
            "stopped_for_resume": summary.stopped_for_resume,
        }))
    })
}

/// Runs a training `run` without the GIL, with [`Lines`] as its hooks (a Ctrl-C, or an
/// exception from `callback`, asks it to stop cleanly); returns its JSON summary, or its
/// error: after a Ctrl-C, the KeyboardInterrupt (with the message that says how to resume on
/// stderr), or the callback's exception.
pub(crate) fn run_interruptibly(
    py: Python<'_>,
    quiet: bool,
    callback: Option<PyObject>,
    run: impl FnOnce(&mut Lines) -> Result<serde_json::Value, longread_train::TrainError> + Send,
) -> PyResult<PyObject> {
    longread_train::interrupt::clear_stop();
    let (run, interrupted) = off_gil(py, || {
        let mut hooks = Lines { quiet, callback, interrupted: None, last_line: None, first_step: None };
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
