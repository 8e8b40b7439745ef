//! Building a calibrated ensemble: the members' probabilities on labelled documents they did
//! not train on — held-out documents (`--calibrate DEV`), or each member's out-of-fold
//! predictions on its own training data (`--stack TRAIN`, refitted fold by fold by the
//! training crate) — then a temperature per member (and, when asked, the weights) fitted on
//! them ([`calibrate`]) and written with the ensemble.

use std::path::{Path, PathBuf};

use longread_text::multilabel::{read_multilabel, resolve_multilabel, LabelLayout};
use longread_text::{read_labelled_columns, resolve_column, Document};

use crate::calibration::{calibrate, Calibration, MemberScores};
use crate::ensemble::{label_map, load_members, normalised_weights, write_ensemble, EnsembleSpec};
use crate::label_calibration::{calibrate_per_label, LabelSetScores};
use crate::Classifier;
use longread_model::error::{ModelError, Result};
use longread_model::hierarchical::DEFAULT_TASK;
use longread_model::model_dir::io;

/// Like [`crate::ensemble::build_ensemble`], with each member's temperature fitted on the
/// labelled JSON lines `data` (held-out documents: the `"label"` column) and, with
/// `fit_weights`, the weights too (kept only when they beat equal weights out of fold; the
/// given weights are then not used). `folds` folds score every choice out of fold
/// ([`calibrate`]). Encoder members read and keep chunk vectors in `vector_cache` when given.
/// `on_member(i)` is called after member i has classified the documents.
pub fn build_calibrated_ensemble(
    members: &[(PathBuf, f64)],
    out: &Path,
    data: &Path,
    fit_weights: bool,
    folds: usize,
    vector_cache: Option<&Path>,
    mut on_member: impl FnMut(usize),
) -> Result<EnsembleSpec> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() });
    }
    let given = normalised_weights(members)?;
    let (labels, mut loaded) = load_members(members)?;
    if let Some(dir) = vector_cache {
        loaded.iter_mut().try_for_each(|(classifier, _)| classifier.set_vector_cache(dir))?;
    }
    let multi_label = loaded.first().is_some_and(|(c, _)| c.multi_label());
    let source = data.display().to_string();
    let (documents, gold) = gold_documents(data, &labels, multi_label, true)?;
    check_enough(documents.len(), folds, &source)?;
    let mut probs = Vec::with_capacity(loaded.len());
    for (m, (classifier, _)) in loaded.iter().enumerate() {
        probs.push(member_probabilities(classifier, &labels, &documents, &source)?);
        on_member(m);
    }
    match gold {
        Gold::Labels(gold) => {
            write_calibrated(members, out, labels, given, &MemberScores { probs, gold }, fit_weights, folds)
        }
        Gold::Sets(sets) => {
            let scores = LabelSetScores { probs, truth: Gold::truth(&sets, labels.len()) };
            let calibration = calibrate_per_label(&scores, &labels, fit_weights, folds, CALIBRATION_SEED);
            write_per_label(members, out, labels, calibration)
        }
    }
}

/// Seed of the iterative folds that score a multi-label `--calibrate`'s choices.
const CALIBRATION_SEED: u64 = 42;

/// Labelled documents' gold: one label each, or (multi-label) a set of label ids each.
#[derive(Debug, Clone)]
pub enum Gold {
    /// Each document's label id.
    Labels(Vec<usize>),
    /// Each document's label ids, ascending (possibly none).
    Sets(Vec<Vec<usize>>),
}

impl Gold {
    /// Label-id sets as `[doc][label]` yes/no rows over `labels` labels.
    pub fn truth(sets: &[Vec<usize>], labels: usize) -> Vec<Vec<bool>> {
        sets.iter().map(|set| (0..labels).map(|l| set.contains(&l)).collect()).collect()
    }
}

/// The labelled documents of `data` and their gold over `labels`: the `"label"` column, or with
/// `multi_label` the `"labels"` lists (labels outside `labels`: an error naming the line, or with
/// `unknown_allowed` — held-out data — left out).
pub fn gold_documents(
    data: &Path,
    labels: &[String],
    multi_label: bool,
    unknown_allowed: bool,
) -> Result<(Vec<Document>, Gold)> {
    if !multi_label {
        let (documents, gold) = labelled_documents(data, labels)?;
        return Ok((documents, Gold::Labels(gold)));
    }
    let source = data.display().to_string();
    let file = std::fs::File::open(data).map_err(io(data))?;
    let examples = read_multilabel(std::io::BufReader::new(file), &source, &LabelLayout::default())?;
    let (sets, _) = resolve_multilabel(&examples, labels, &source, unknown_allowed)?;
    let documents = examples.into_iter().map(|e| Document::new(e.id, e.text)).collect();
    Ok((documents, Gold::Sets(sets)))
}

/// Like [`build_ensemble_from_scores`] for multi-label members: each label's temperatures (and
/// with `fit_weights` weights) fitted on `scores` ([`calibrate_per_label`], its choices scored
/// over `folds` iteratively stratified folds drawn with `seed`).
pub fn build_ensemble_from_label_sets(
    members: &[(PathBuf, f64)],
    out: &Path,
    labels: Vec<String>,
    scores: &LabelSetScores,
    fit_weights: bool,
    folds: usize,
    seed: u64,
) -> Result<EnsembleSpec> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() });
    }
    normalised_weights(members)?;
    let shaped = scores.probs.len() == members.len()
        && scores.truth.iter().all(|t| t.len() == labels.len())
        && scores.probs.iter().all(|p| p.len() == scores.truth.len() && p.iter().all(|row| row.len() == labels.len()));
    if !shaped {
        return Err(ModelError::InvalidInput(
            "one row of probabilities over the labels per member and document is needed".into(),
        ));
    }
    check_enough(scores.truth.len(), folds, "the scored documents")?;
    let calibration = calibrate_per_label(scores, &labels, fit_weights, folds, seed);
    write_per_label(members, out, labels, calibration)
}

/// Writes a multi-label ensemble calibrated label by label: each member's weight is its mean
/// over the labels (shown to people), its per-label weights and temperatures decide.
fn write_per_label(
    members: &[(PathBuf, f64)],
    out: &Path,
    labels: Vec<String>,
    calibration: Calibration,
) -> Result<EnsembleSpec> {
    let weights = calibration.weights.clone();
    let temperatures = vec![1.0; members.len()];
    write_ensemble(members, &weights, &temperatures, labels, Some(calibration), out)
}

/// Writes the ensemble of `members` with temperatures (and, with `fit_weights`, weights) fitted
/// on `scores`: the members' probabilities, in the order of `labels` (the ensemble's labels, as
/// [`ensemble_labels`] gives them), on documents none of them trained on; see
/// [`build_calibrated_ensemble`].
pub fn build_ensemble_from_scores(
    members: &[(PathBuf, f64)],
    out: &Path,
    labels: Vec<String>,
    scores: &MemberScores,
    fit_weights: bool,
    folds: usize,
) -> Result<EnsembleSpec> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() });
    }
    let given = normalised_weights(members)?;
    let shaped = scores.probs.len() == members.len()
        && scores.probs.iter().all(|p| p.len() == scores.gold.len() && p.iter().all(|row| row.len() == labels.len()));
    if !shaped {
        return Err(ModelError::InvalidInput(
            "one row of probabilities over the labels per member and document is needed".into(),
        ));
    }
    check_enough(scores.gold.len(), folds, "the scored documents")?;
    write_calibrated(members, out, labels, given, scores, fit_weights, folds)
}

/// Fits the calibration on `scores` and writes the ensemble: the fitted weights when they won
/// out of fold, else the `given` ones.
fn write_calibrated(
    members: &[(PathBuf, f64)],
    out: &Path,
    labels: Vec<String>,
    given: Vec<f64>,
    scores: &MemberScores,
    fit_weights: bool,
    folds: usize,
) -> Result<EnsembleSpec> {
    let calibration = calibrate(scores, labels.len(), fit_weights, folds);
    let weights = if calibration.weights_fitted { calibration.weights.clone() } else { given };
    let temperatures = calibration.temperatures.clone();
    write_ensemble(members, &weights, &temperatures, labels, Some(calibration), out)
}

/// The labels a stacked ensemble of `members` has (the first member's order) and whether its
/// members are multi-label, after checking that every member loads, has one task and the same
/// labels, and that all are multi-label or none.
pub fn ensemble_labels(members: &[PathBuf]) -> Result<(Vec<String>, bool)> {
    let weighted: Vec<(PathBuf, f64)> = members.iter().map(|m| (m.clone(), 1.0)).collect();
    let (labels, loaded) = load_members(&weighted)?;
    Ok((labels, loaded.first().is_some_and(|(c, _)| c.multi_label())))
}

/// The labelled documents of the JSON lines `data` (the `"label"` column, names or ids into
/// `labels`) and each one's label index; unlabelled lines are left out.
pub fn labelled_documents(data: &Path, labels: &[String]) -> Result<(Vec<Document>, Vec<usize>)> {
    let source = data.display().to_string();
    let file = std::fs::File::open(data).map_err(io(data))?;
    let examples = read_labelled_columns(std::io::BufReader::new(file), &source, &[DEFAULT_TASK.to_string()])?;
    let gold = resolve_column(&examples, 0, labels, &source)?;
    Ok(examples
        .into_iter()
        .zip(gold)
        .filter_map(|(example, gold)| Some((Document::new(example.id, example.text), gold?)))
        .unzip())
}

/// `member`'s probabilities of `documents`, one row per document in the order of `labels`
/// (which must be the member's labels in some order). A document it cannot classify is an
/// error naming it (`source`: where the documents come from).
pub fn member_probabilities(
    member: &Classifier,
    labels: &[String],
    documents: &[Document],
    source: &str,
) -> Result<Vec<Vec<f64>>> {
    let to_labels = label_map(labels, member)?;
    let mut rows = Vec::with_capacity(documents.len());
    member.classify_documents(documents, |document, result| {
        let prediction = result.map_err(|e| {
            ModelError::InvalidInput(format!(
                "{source}: document {}: {}: {}",
                document.id,
                member.dir().display(),
                e.message
            ))
        })?;
        let mut row = vec![0f64; labels.len()];
        for (&p, &k) in prediction.probabilities().iter().zip(&to_labels) {
            row[k] = p as f64;
        }
        rows.push(row);
        Ok::<(), ModelError>(())
    })?;
    Ok(rows)
}

/// Refuses fewer than two documents per fold (at least 4).
fn check_enough(documents: usize, folds: usize, source: &str) -> Result<()> {
    if documents < 2 * folds.max(2) {
        return Err(ModelError::InvalidInput(format!(
            "{source}: {documents} labelled documents are too few to calibrate with {folds} folds (at least {})",
            2 * folds.max(2)
        )));
    }
    Ok(())
}
