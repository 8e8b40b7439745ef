//! A bag-of-words model directory: `bow.json` (labels, TF-IDF settings, C, whether multi-label), `vocabulary.txt`
//! (one n-gram per line, in column order) and `model.safetensors` (`idf [features]`,
//! `weights [outputs, features]`, `intercepts [outputs]`, f64). Every file is written to a
//! temporary name and renamed, so a crash never leaves a half-written model.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::error::{BowError, Result};
use crate::logistic::LogisticRegression;
use crate::model::{bow_config_path, BowModel};
use crate::tfidf::TfidfSettings;

const FORMAT: &str = "longread-bow";
const VERSION: u32 = 1;
const VOCABULARY: &str = "vocabulary.txt";
const WEIGHTS: &str = "model.safetensors";
const CONFIG: &str = "bow.json";

/// `bow.json`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct BowConfig {
    format: String,
    version: u32,
    labels: Vec<String>,
    tfidf: TfidfSettings,
    c: f64,
    /// One-vs-rest over labels a document may carry any number of (absent: one label each).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    multi_label: bool,
}

pub(crate) fn write_bow_files(model: &BowModel, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| BowError::Io { path: dir.to_owned(), source })?;
    // In order, the config last: a directory is a model once bow.json is there.
    for (name, bytes) in bow_files(model)? {
        write_atomically(&dir.join(name), &bytes)?;
    }
    Ok(())
}

/// The model directory's files (name, contents), `bow.json` last.
pub(crate) fn bow_files(model: &BowModel) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut terms: Vec<(&String, &u32)> = model.vocabulary.iter().collect();
    terms.sort_unstable_by_key(|(_, &col)| col);
    let mut vocabulary = String::new();
    for (term, _) in terms {
        vocabulary.push_str(term);
        vocabulary.push('\n');
    }
    let r = &model.regression;
    let bytes = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (idf, weights, intercepts) = (bytes(&model.idf), bytes(&r.weights), bytes(&r.intercepts));
    let outputs = r.intercepts.len();
    let tensors = vec![
        ("idf", view(&idf, vec![model.idf.len()])?),
        ("weights", view(&weights, vec![outputs, r.features])?),
        ("intercepts", view(&intercepts, vec![outputs])?),
    ];
    let data = safetensors::serialize(tensors, None)
        .map_err(|e| BowError::Format { path: WEIGHTS.into(), message: e.to_string() })?;
    let config = BowConfig {
        format: FORMAT.into(),
        version: VERSION,
        labels: model.labels.clone(),
        tfidf: model.tfidf,
        c: model.c,
        multi_label: model.multi_label,
    };
    let json = serde_json::to_vec_pretty(&config).map_err(|e| BowError::Solver(e.to_string()))?;
    Ok(vec![(VOCABULARY, vocabulary.into_bytes()), (WEIGHTS, data), (CONFIG, json)])
}

pub(crate) fn read_bow_files(dir: &Path) -> Result<BowModel> {
    let config_path = bow_config_path(dir);
    let read = |path: &Path| std::fs::read(path).map_err(|source| BowError::Io { path: path.to_owned(), source });
    let format = |path: &Path, message: String| BowError::Format { path: path.to_owned(), message };
    let config: BowConfig = serde_json::from_slice(&read(&config_path)?)
        .map_err(|e| format(&config_path, format!("not a longread bag-of-words config: {e}")))?;
    if config.format != FORMAT || config.version != VERSION {
        return Err(format(
            &config_path,
            format!(
                "format {} version {} (this build reads {FORMAT} version {VERSION})",
                config.format, config.version
            ),
        ));
    }
    if config.labels.len() < 2 && !(config.multi_label && config.labels.len() == 1) {
        return Err(format(&config_path, "needs at least two labels (a multi-label model: at least one)".into()));
    }
    let vocab_path = dir.join(VOCABULARY);
    let text = String::from_utf8(read(&vocab_path)?).map_err(|_| format(&vocab_path, "not UTF-8".into()))?;
    let vocabulary: HashMap<String, u32> = text.lines().enumerate().map(|(i, t)| (t.to_owned(), i as u32)).collect();
    let weights_path = dir.join(WEIGHTS);
    let bytes = read(&weights_path)?;
    let tensors = SafeTensors::deserialize(&bytes).map_err(|e| format(&weights_path, e.to_string()))?;
    let tensor = |name: &str| -> Result<(Vec<usize>, Vec<f64>)> {
        let t = tensors.tensor(name).map_err(|e| format(&weights_path, format!("{name}: {e}")))?;
        if t.dtype() != Dtype::F64 {
            return Err(format(&weights_path, format!("{name}: expected F64, found {:?}", t.dtype())));
        }
        let values = t.data().chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
        Ok((t.shape().to_vec(), values))
    };
    let (idf_shape, idf) = tensor("idf")?;
    let (w_shape, weights) = tensor("weights")?;
    let (b_shape, intercepts) = tensor("intercepts")?;
    let features = vocabulary.len();
    let outputs = if config.labels.len() == 2 && !config.multi_label { 1 } else { config.labels.len() };
    if idf_shape != [features]
        || w_shape != [outputs, features]
        || b_shape != [outputs]
        || text.lines().count() != features
    {
        return Err(format(
            &weights_path,
            format!(
                "shapes idf {idf_shape:?}, weights {w_shape:?}, intercepts {b_shape:?} do not fit {features} \
                 distinct vocabulary terms and {} labels",
                config.labels.len()
            ),
        ));
    }
    let regression = LogisticRegression { classes: config.labels.len(), features, weights, intercepts };
    Ok(BowModel {
        names: Default::default(),
        labels: config.labels,
        tfidf: config.tfidf,
        c: config.c,
        vocabulary,
        idf,
        regression,
        multi_label: config.multi_label,
    })
}

/// An f64 tensor over `data`.
fn view(data: &[u8], shape: Vec<usize>) -> Result<TensorView<'_>> {
    TensorView::new(Dtype::F64, shape, data).map_err(|e| BowError::Solver(format!("weights: {e}")))
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |source| BowError::Io { path: path.to_owned(), source };
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
