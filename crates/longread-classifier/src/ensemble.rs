//! Ensembles: several model directories of any kind (hierarchical, single-chunk sequence, HAN,
//! bag of words) whose label probabilities are averaged with weights. A fine-tuned encoder
//! and a TF-IDF model make different mistakes; their average is often better than either (see
//! BENCHMARKS.md, hyperpartisan).
//!
//! An ensemble is a directory of its own — `ensemble.json` plus a copy of every member under
//! `members/` — so that it is loaded, served and moved like any other model directory.

use std::path::{Component, Path, PathBuf};

use longread_bow::logistic::{log_softmax, sigmoid};
use serde::{Deserialize, Serialize};

use crate::calibration::{temper, Calibration};
use crate::decision::label_temperature::temper_one;
use crate::kinds::{mismatch, single_task, DocumentModel, Prepared, PreparedDocument, UnitOutput};
use crate::model_kind::ModelKind;
use crate::prediction::MemberPrediction;
use crate::{argmax, Classifier, ClassifierOptions, DocError, DocResult, LabelScores, Precision};
use longread_model::batching::UnitKey;
use longread_model::error::{ModelError, Result};
use longread_model::hierarchical::TaskSpec;
use longread_model::model_dir::{io, temporary_dir_beside};
use longread_text::labelled::label_list;

/// The file that makes a directory an ensemble.
pub const ENSEMBLE_FILE: &str = "ensemble.json";
/// `format` of [`EnsembleSpec`].
const FORMAT: &str = "longread-ensemble";
/// Where the members' copies live inside the ensemble's directory.
const MEMBERS_DIR: &str = "members";

/// `ensemble.json`: the labels and the members with their weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnsembleSpec {
    /// Always `longread-ensemble`.
    pub format: String,
    /// Format version (1).
    pub version: u32,
    /// Labels, in the order of the first member.
    pub labels: Vec<String>,
    /// The members, in order.
    pub members: Vec<MemberSpec>,
    /// How the temperatures (and weights) were fitted, when they were
    /// (`longread ensemble --calibrate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// One member of an ensemble.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSpec {
    /// Its directory, relative to the ensemble's (`members/…`).
    pub dir: String,
    /// Its weight in the average; the weights sum to 1.
    pub weight: f64,
    /// Its probabilities are tempered before averaging: `softmax(ln p / temperature)` (1: as
    /// they are; fitted by `longread ensemble --calibrate`).
    #[serde(default = "unit_temperature")]
    pub temperature: f64,
    /// Multi-label ensembles calibrated or stacked label by label: its weight for each label,
    /// in label order (each label's weights over the members sum to 1); empty: `weight` for
    /// every label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub label_weights: Vec<f64>,
    /// Likewise its temperature for each label: each label's probability p becomes
    /// σ(logit(p) / T) before the mixture; empty: `temperature` for every label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub label_temperatures: Vec<f64>,
    /// The directory it was copied from (for people; never read).
    pub source: String,
}

fn unit_temperature() -> f64 {
    1.0
}

/// Whether `dir` holds an ensemble (an `ensemble.json`).
pub fn is_ensemble_dir(dir: &Path) -> bool {
    dir.join(ENSEMBLE_FILE).is_file()
}

/// Reads and checks `dir/ensemble.json`.
pub fn read_spec(dir: &Path) -> Result<EnsembleSpec> {
    let path = dir.join(ENSEMBLE_FILE);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let spec: EnsembleSpec =
        serde_json::from_str(&text).map_err(|source| ModelError::Json { path: path.clone(), source })?;
    let invalid = |message: String| ModelError::InvalidConfig { path: path.clone(), message };
    if spec.format != FORMAT || spec.version != 1 {
        return Err(invalid(format!(
            "format {} version {} is not {FORMAT} version 1 (written by a newer longread?)",
            spec.format, spec.version
        )));
    }
    if spec.members.is_empty() || spec.labels.is_empty() {
        return Err(invalid("an ensemble needs at least one member and one label".into()));
    }
    for member in &spec.members {
        if !(member.weight.is_finite() && member.weight > 0.0) {
            return Err(invalid(format!(
                "member {} has weight {}: weights must be positive",
                member.dir, member.weight
            )));
        }
        if !(member.temperature.is_finite() && member.temperature > 0.0) {
            return Err(invalid(format!(
                "member {} has temperature {}: temperatures must be positive",
                member.dir, member.temperature
            )));
        }
        for (what, values) in
            [("label_weights", &member.label_weights), ("label_temperatures", &member.label_temperatures)]
        {
            if !values.is_empty() && values.len() != spec.labels.len() {
                return Err(invalid(format!(
                    "member {} has {} {what} for {} labels",
                    member.dir,
                    values.len(),
                    spec.labels.len()
                )));
            }
        }
        let bad_weight = member.label_weights.iter().find(|w| !(w.is_finite() && **w >= 0.0));
        let bad_temperature = member.label_temperatures.iter().find(|t| !(t.is_finite() && **t > 0.0));
        if let Some(value) = bad_weight.or(bad_temperature) {
            return Err(invalid(format!(
                "member {} has a per-label weight or temperature of {value}: weights must be at least 0 and \
                 temperatures positive",
                member.dir
            )));
        }
        if !Path::new(&member.dir).components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(invalid(format!(
                "member directory {} must be a relative path inside the ensemble",
                member.dir
            )));
        }
    }
    let per_label = spec.members.iter().filter(|m| !m.label_weights.is_empty()).count();
    if per_label != 0 && per_label != spec.members.len() {
        return Err(invalid("either every member has label_weights or none has".into()));
    }
    if per_label != 0 {
        let unweighted = (0..spec.labels.len()).find(|&l| spec.members.iter().all(|m| m.label_weights[l] == 0.0));
        if let Some(l) = unweighted {
            return Err(invalid(format!("label \"{}\" has weight 0 in every member", spec.labels[l])));
        }
    }
    Ok(spec)
}

/// Copies the model directories `members` (with their weights, normalised to sum to 1) into
/// the new ensemble directory `out`, which must not exist: assembled under a temporary name
/// beside it and renamed into place, so a failure or a kill leaves nothing behind. Every
/// member is loaded first: all must have the same labels (in any order) and one task each.
pub fn build_ensemble(members: &[(PathBuf, f64)], out: &Path) -> Result<EnsembleSpec> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() });
    }
    let weights = normalised_weights(members)?;
    let (labels, _) = load_members(members)?;
    let temperatures = vec![1.0; members.len()];
    write_ensemble(members, &weights, &temperatures, labels, None, out)
}

pub use crate::calibrated::{build_calibrated_ensemble, build_ensemble_from_scores};

/// A member loaded to build an ensemble, with the index among the ensemble's labels of each
/// of its labels.
pub(super) type LoadedMember = (Classifier, Vec<usize>);

/// Loads every member: all must have the same labels (in any order) and one task each.
/// Returns the ensemble's labels (the first member's order) and each member with the index
/// of each of its labels among them.
pub(super) fn load_members(members: &[(PathBuf, f64)]) -> Result<(Vec<String>, Vec<LoadedMember>)> {
    let mut labels: Option<Vec<String>> = None;
    let mut loaded = Vec::with_capacity(members.len());
    for (dir, _) in members {
        let classifier = load_member(dir, ClassifierOptions::default())?;
        if let Some((first, _)) = loaded.first() {
            same_kind_of_labels(&members[0].0, first, dir, &classifier)?;
        }
        let expected = labels.get_or_insert_with(|| classifier.labels().to_vec());
        let map = label_map(expected, &classifier)?;
        loaded.push((classifier, map));
    }
    Ok((labels.expect("at least two members"), loaded))
}

/// Refuses a member that is multi-label beside one that is not (or the other way round): an
/// ensemble averages one kind of probabilities.
fn same_kind_of_labels(first_dir: &Path, first: &Classifier, dir: &Path, classifier: &Classifier) -> Result<()> {
    if first.multi_label() == classifier.multi_label() {
        return Ok(());
    }
    let kind = |c: &Classifier| if c.multi_label() { "multi-label" } else { "single-label" };
    Err(ModelError::InvalidInput(format!(
        "{} is {} but {} is {}: an ensemble's members are all multi-label or all single-label",
        dir.display(),
        kind(classifier),
        first_dir.display(),
        kind(first)
    )))
}

/// Writes the ensemble directory `out` (under a temporary name, then renamed): a copy of every
/// member and ensemble.json.
pub(super) fn write_ensemble(
    members: &[(PathBuf, f64)],
    weights: &[f64],
    temperatures: &[f64],
    labels: Vec<String>,
    calibration: Option<Calibration>,
    out: &Path,
) -> Result<EnsembleSpec> {
    let (tmp, _) = temporary_dir_beside(out)?;
    let mut specs = Vec::with_capacity(members.len());
    let per_label = calibration.as_ref().map_or(&[][..], |c| &c.per_label[..]);
    for (i, (((source, _), &weight), &temperature)) in members.iter().zip(weights).zip(temperatures).enumerate() {
        let dir = format!("{MEMBERS_DIR}/{}-{}", i + 1, safe_name(source));
        copy_model_files(source, &tmp.path().join(&dir))?;
        specs.push(MemberSpec {
            dir,
            weight,
            temperature,
            label_weights: per_label.iter().map(|c| c.weights[i]).collect(),
            label_temperatures: per_label.iter().map(|c| c.temperatures[i]).collect(),
            source: source.display().to_string(),
        });
    }
    let spec = EnsembleSpec { format: FORMAT.into(), version: 1, labels, members: specs, calibration };
    let json = serde_json::to_string_pretty(&spec).map_err(|e| ModelError::InvalidInput(e.to_string()))?;
    let spec_path = tmp.path().join(ENSEMBLE_FILE);
    std::fs::write(&spec_path, json).map_err(io(&spec_path))?;
    std::fs::File::open(&spec_path).and_then(|f| f.sync_all()).map_err(io(&spec_path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).map_err(io(tmp.path()))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, out).map_err(io(out))?;
    Ok(spec)
}

/// The weights of `members` divided by their sum (each must be positive and finite).
pub(super) fn normalised_weights(members: &[(PathBuf, f64)]) -> Result<Vec<f64>> {
    if members.len() < 2 {
        return Err(ModelError::InvalidInput(format!(
            "an ensemble needs at least two member models (got {})",
            members.len()
        )));
    }
    if let Some((dir, w)) = members.iter().find(|(_, w)| !(w.is_finite() && *w > 0.0)) {
        return Err(ModelError::InvalidInput(format!("{} has weight {w}: weights must be positive", dir.display())));
    }
    Ok(divided_by_sum(&members.iter().map(|(_, w)| *w).collect::<Vec<_>>()))
}

/// Positive finite weights divided by their sum; scaled by the largest first when the sum
/// overflows (`1e308` twice summed to infinity and came out as weights of 0).
fn divided_by_sum(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    if total.is_finite() {
        return weights.iter().map(|w| w / total).collect();
    }
    let largest = weights.iter().copied().fold(0.0, f64::max);
    let total: f64 = weights.iter().map(|w| w / largest).sum();
    weights.iter().map(|w| w / largest / total).collect()
}

/// A directory name made of `source`'s last component (letters, digits, `.`, `_`, `-`; not
/// hidden).
fn safe_name(source: &Path) -> String {
    let name = source.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let cleaned: String = name
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect::<String>()
        .trim_start_matches('.')
        .to_owned();
    if cleaned.is_empty() {
        "model".into()
    } else {
        cleaned
    }
}

/// Copies the files of the model directory `source` (and a wide-and-deep model's `wide/`)
/// into the new directory `target`, each synced.
fn copy_model_files(source: &Path, target: &Path) -> Result<()> {
    std::fs::create_dir_all(target).map_err(io(target))?;
    for entry in std::fs::read_dir(source).map_err(io(source))? {
        let entry = entry.map_err(io(source))?;
        let from = entry.path();
        // A wide-and-deep model keeps its bag of words in `wide/`, part of the model; other
        // subdirectories (a run's checkpoints, folds) are not.
        if from.is_dir() && entry.file_name() == "wide" {
            copy_model_files(&from, &target.join("wide"))?;
            continue;
        }
        if !from.is_file() {
            continue;
        }
        let to = target.join(entry.file_name());
        std::fs::copy(&from, &to).map_err(io(&from))?;
        std::fs::File::open(&to).and_then(|f| f.sync_all()).map_err(io(&to))?;
    }
    Ok(())
}

/// Loads the member model in `dir` (when building an ensemble, or loading one): not itself an
/// ensemble; encoder members at the ensemble's precision, the others in f32 (the only
/// precision a HAN or a bag of words has).
fn load_member(dir: &Path, options: ClassifierOptions) -> Result<Classifier> {
    let kind = ModelKind::of(dir);
    if kind == ModelKind::Ensemble {
        return Err(ModelError::InvalidInput(format!(
            "{} is an ensemble itself: an ensemble member cannot be one (give its members instead)",
            dir.display()
        )));
    }
    let precision = if kind.has_encoder() { options.precision } else { Some(Precision::F32) };
    Classifier::load(dir, ClassifierOptions { precision, ..options })
}

/// For each of `member`'s labels, its index in `labels`; an error unless the member has one
/// task with exactly those labels.
pub(super) fn label_map(labels: &[String], member: &Classifier) -> Result<Vec<usize>> {
    let dir = member.dir().display();
    if member.tasks().len() != 1 {
        return Err(ModelError::InvalidInput(format!(
            "{dir} is a multi-task model: an ensemble member must have one task"
        )));
    }
    let own = member.labels();
    let mut sorted_own = own.to_vec();
    let mut sorted = labels.to_vec();
    sorted_own.sort();
    sorted.sort();
    if sorted_own != sorted {
        return Err(ModelError::InvalidInput(format!(
            "{dir} has labels {}, the ensemble {}: every member needs the same labels",
            label_list(own),
            label_list(labels)
        )));
    }
    Ok(own.iter().map(|l| labels.iter().position(|x| x == l).expect("same label sets")).collect())
}

/// How an ensemble combines its members' scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Combination {
    /// The weighted mean of their probabilities (a mixture; every `ensemble.json`).
    Mean,
    /// The weighted sum of their log-probabilities, renormalised (a product of experts): a
    /// wide-and-deep model, whose deep side's logits get its bag of words' log-probabilities
    /// times the fitted scale added.
    LogLinear,
}

/// A loaded ensemble.
pub(super) struct Ensemble {
    /// Its one task, whose labels are the ensemble's.
    tasks: Vec<TaskSpec>,
    members: Vec<Member>,
    combination: Combination,
    /// Its members are multi-label: the mean of their per-label probabilities decides each
    /// label on its own.
    multi_label: bool,
}

/// A loaded member.
struct Member {
    /// Its directory inside the ensemble's.
    name: String,
    weight: f64,
    /// Its probabilities are tempered by it before averaging (1: as they are).
    temperature: f64,
    /// Multi-label, label by label: its weight of each of the ensemble's labels (each label's
    /// sum over the members 1); empty: `weight` for all.
    label_weights: Vec<f64>,
    /// Likewise its temperature of each label; empty: `temperature` for all.
    label_temperatures: Vec<f64>,
    classifier: Classifier,
    /// Index in the ensemble's labels of each of its labels.
    to_ensemble: Vec<usize>,
}

impl Member {
    /// A document error of this member, named by it.
    fn error(&self, e: &DocError) -> DocError {
        DocError::new(format!("{}: {}", self.name, e.message))
    }
}

impl Ensemble {
    /// Loads the ensemble in `dir` and each member with `options` (precision applying to
    /// encoder members).
    pub(super) fn load(dir: &Path, options: ClassifierOptions) -> Result<Self> {
        let spec = read_spec(dir)?;
        let members = spec
            .members
            .iter()
            .map(|m| {
                let classifier = load_member(&dir.join(&m.dir), options)?;
                let to_ensemble = label_map(&spec.labels, &classifier)?;
                Ok(Member {
                    name: m.dir.clone(),
                    weight: m.weight,
                    temperature: m.temperature,
                    label_weights: m.label_weights.clone(),
                    label_temperatures: m.label_temperatures.clone(),
                    classifier,
                    to_ensemble,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        for (m, member) in members.iter().enumerate().skip(1) {
            let first = &members[0];
            same_kind_of_labels(Path::new(&first.name), &first.classifier, Path::new(&member.name), &member.classifier)
                .map_err(|e| ModelError::InvalidInput(format!("{}: {e} (member {})", dir.display(), m + 1)))?;
        }
        let multi_label = members.first().is_some_and(|m| m.classifier.multi_label());
        let weights = divided_by_sum(&members.iter().map(|m| m.weight).collect::<Vec<_>>());
        let mut members: Vec<Member> =
            members.into_iter().zip(weights).map(|(m, weight)| Member { weight, ..m }).collect();
        if members.iter().all(|m| !m.label_weights.is_empty()) {
            for l in 0..spec.labels.len() {
                let total: f64 = members.iter().map(|m| m.label_weights[l]).sum();
                members.iter_mut().for_each(|m| m.label_weights[l] /= total);
            }
        }
        Ok(Self { tasks: single_task(spec.labels), members, combination: Combination::Mean, multi_label })
    }

    /// A wide-and-deep model as two members combined log-linearly: `deep` (the encoder model,
    /// weight 1) and `wide` (its bag of words, weight `scale`), so the prediction is
    /// `softmax(deep logits + scale · ln p_wide)`, what the model was trained on (multi-label:
    /// each label's `σ(deep logit + scale · wide logit)`).
    pub(super) fn wide_and_deep(deep: Classifier, wide: Classifier, scale: f64) -> Result<Self> {
        let labels = deep.labels().to_vec();
        let member = |name: &str, weight: f64, classifier: Classifier| -> Result<Member> {
            let to_ensemble = label_map(&labels, &classifier)?;
            Ok(Member {
                name: name.into(),
                weight,
                temperature: 1.0,
                label_weights: Vec::new(),
                label_temperatures: Vec::new(),
                classifier,
                to_ensemble,
            })
        };
        let multi_label = deep.multi_label();
        let members = vec![member("deep", 1.0, deep)?, member("wide", scale, wide)?];
        Ok(Self { tasks: single_task(labels), members, combination: Combination::LogLinear, multi_label })
    }

    /// The ensemble's labels.
    pub(super) fn labels(&self) -> &[String] {
        &self.tasks[0].labels
    }

    /// The members' classifiers, in order.
    pub(super) fn classifiers(&self) -> impl Iterator<Item = &Classifier> {
        self.members.iter().map(|m| &m.classifier)
    }

    /// One document's ensemble prediction from its members' results, in member order: the
    /// weighted mean of their probabilities (each tempered by its member's temperature; the
    /// members' own scores shown are the tempered ones), logits = ln(probability), and the evidence
    /// (chunks or sentences) of the first member that shows some — a bag of words' terms when
    /// no member reads parts.
    fn combine<'r>(&self, results: impl Iterator<Item = &'r DocResult>) -> DocResult {
        // Mean: Σ w·p; log-linear: Σ w·ln p (renormalised below).
        let mut combined = vec![0f64; self.labels().len()];
        let mut members = Vec::with_capacity(self.members.len());
        let mut evidence: Option<&crate::Prediction> = None;
        let mut tokens = None;
        for (member, result) in self.members.iter().zip(results) {
            let prediction = result.as_ref().map_err(|e| member.error(e))?;
            let mut own = vec![0f32; self.labels().len()];
            match self.combination {
                Combination::Mean if self.multi_label => {
                    // Each label on its own: its probability at the member's temperature for it,
                    // times the member's weight for it.
                    for (&p, &k) in prediction.probabilities().iter().zip(&member.to_ensemble) {
                        let t = member.label_temperatures.get(k).copied().unwrap_or(member.temperature);
                        let w = member.label_weights.get(k).copied().unwrap_or(member.weight);
                        let p = if t == 1.0 { f64::from(p) } else { temper_one(f64::from(p), t) };
                        own[k] = p as f32;
                        combined[k] += w * p;
                    }
                }
                Combination::Mean => {
                    let raw: Vec<f64> = prediction.probabilities().iter().map(|&p| p as f64).collect();
                    let tempered = if member.temperature == 1.0 { raw } else { temper(&raw, member.temperature) };
                    for (&p, &k) in tempered.iter().zip(&member.to_ensemble) {
                        own[k] = p as f32;
                        combined[k] += member.weight * p;
                    }
                }
                Combination::LogLinear if self.multi_label => {
                    // Each label's log-odds: Σ w·z, its probability σ of the sum (below).
                    for (&z, &k) in prediction.logits.iter().zip(&member.to_ensemble) {
                        let z = f64::from(z) / member.temperature;
                        own[k] = sigmoid(z) as f32;
                        combined[k] += member.weight * z;
                    }
                }
                Combination::LogLinear => {
                    // From the logits, not ln of f32 probabilities (which floor at 1e-38).
                    let scaled: Vec<f64> =
                        prediction.logits.iter().map(|&z| f64::from(z) / member.temperature).collect();
                    for (l, &k) in log_softmax(&scaled).into_iter().zip(&member.to_ensemble) {
                        own[k] = l.exp() as f32;
                        combined[k] += member.weight * l;
                    }
                }
            }
            // The first member's chunks or sentences; a bag of words' terms only when no member
            // reads parts.
            let reads_parts = prediction.parts.any() && prediction.parts.terms().is_none();
            let shows_less = evidence.is_none_or(|e| e.parts.terms().is_some() && reads_parts);
            if prediction.parts.any() && shows_less {
                evidence = Some(prediction);
            }
            tokens = tokens.or(prediction.tokens);
            members.push(MemberPrediction {
                model: member.name.clone(),
                weight: member.weight,
                label: self.labels()[argmax(&own)].clone(),
                scores: LabelScores { labels: self.labels().to_vec(), probabilities: own },
            });
        }
        let (probabilities, logits): (Vec<f32>, Vec<f32>) = match self.combination {
            // Each label's own probability: its logit is ln(p / (1 − p)).
            Combination::Mean if self.multi_label => {
                combined.iter().map(|&p| (p as f32, (p / (1.0 - p)).ln().clamp(-1e30, 1e30) as f32)).unzip()
            }
            Combination::Mean => combined.iter().map(|&p| (p as f32, (p as f32).max(f32::MIN_POSITIVE).ln())).unzip(),
            Combination::LogLinear if self.multi_label => {
                combined.iter().map(|&z| (sigmoid(z) as f32, z as f32)).unzip()
            }
            Combination::LogLinear => {
                let lp = log_softmax(&combined);
                lp.iter().zip(&combined).map(|(&l, &z)| (l.exp() as f32, z as f32)).unzip()
            }
        };
        let labels = self.multi_label.then(|| crate::prediction::carried(self.labels(), &probabilities));
        let mut prediction = crate::Prediction {
            label: self.labels()[argmax(&probabilities)].clone(),
            logits,
            scores: LabelScores { labels: self.labels().to_vec(), probabilities },
            parts: evidence.map_or(crate::Parts::Whole {}, |p| p.parts.clone()),
            labels,
            tasks: None,
            members: Some(members),
            tokens,
        };
        // A bag of words' terms are of the ensemble's labels, not its member's.
        prediction.settle_terms();
        Ok(prediction)
    }
}

impl Ensemble {
    /// The member and the member's unit that unit `unit` of an ensemble's document is.
    fn member_unit<'d>(&self, doc: &'d PreparedDocument, unit: usize) -> Option<(usize, &'d PreparedDocument, usize)> {
        let Prepared::Members(docs) = &doc.kind else { return None };
        let mut first = 0;
        for (m, doc) in docs.iter().enumerate() {
            if unit < first + doc.units() {
                return Some((m, doc, unit - first));
            }
            first += doc.units();
        }
        None
    }

    /// Each member's prepared part of an ensemble's document, with the member.
    fn parts<'d>(&self, doc: &'d PreparedDocument) -> Result<impl Iterator<Item = (&Member, &'d PreparedDocument)>> {
        match &doc.kind {
            Prepared::Members(docs) if docs.len() == self.members.len() => Ok(self.members.iter().zip(docs)),
            _ => Err(mismatch()),
        }
    }
}

/// An ensemble's units are its members' (a batch holds one member's: lanes by member), its
/// prediction their combination.
impl DocumentModel for Ensemble {
    fn tasks(&self) -> &[TaskSpec] {
        &self.tasks
    }

    fn multi_label(&self) -> bool {
        self.multi_label
    }

    /// `text` as each member prepares it, in member order (in the server's queue an encoder
    /// member's chunks then share batches with other documents'); a member that cannot read
    /// it names itself in the error.
    fn prepare(&self, text: &str) -> std::result::Result<PreparedDocument, DocError> {
        let parts = self.members.iter().map(|m| m.classifier.prepare(text).map_err(|e| m.error(&e)));
        Ok(PreparedDocument::new(Prepared::Members(parts.collect::<std::result::Result<_, _>>()?)))
    }

    fn unit_key(&self, doc: &PreparedDocument, unit: usize) -> UnitKey {
        match self.member_unit(doc, unit) {
            Some((m, part, u)) => {
                let key = self.members[m].classifier.unit_key(part, u);
                UnitKey { lane: m + self.members.len() * key.lane, cost: key.cost }
            }
            None => UnitKey { lane: 0, cost: 0 },
        }
    }

    /// Each member encodes its own units of the batch, together.
    fn encode_units(&self, units: &[(&PreparedDocument, usize)]) -> Result<Vec<UnitOutput>> {
        let located =
            units.iter().map(|(d, u)| self.member_unit(d, *u).ok_or_else(mismatch)).collect::<Result<Vec<_>>>()?;
        let mut outputs: Vec<Option<UnitOutput>> = (0..units.len()).map(|_| None).collect();
        for (m, member) in self.members.iter().enumerate() {
            let mine: Vec<usize> = (0..units.len()).filter(|&i| located[i].0 == m).collect();
            if mine.is_empty() {
                continue;
            }
            let member_units: Vec<(&PreparedDocument, usize)> =
                mine.iter().map(|&i| (located[i].1, located[i].2)).collect();
            for (i, output) in mine.into_iter().zip(member.classifier.encode_units(&member_units)?) {
                outputs[i] = Some(output);
            }
        }
        // A unit of another ensemble's document (more members) has no output here.
        outputs.into_iter().map(|o| o.ok_or_else(mismatch)).collect()
    }

    fn finish(&self, doc: &PreparedDocument, outputs: Vec<UnitOutput>) -> Result<DocResult> {
        if outputs.len() != doc.units() {
            return Err(mismatch());
        }
        let mut outputs = outputs.into_iter();
        let mut results = Vec::with_capacity(self.members.len());
        for (member, part) in self.parts(doc)? {
            let own: Vec<UnitOutput> = outputs.by_ref().take(part.units()).collect();
            results.push(member.classifier.finish_unchecked(part, own)?);
        }
        Ok(self.combine(results.iter()))
    }

    /// The first member's that has some.
    fn evidence_unit(&self) -> &'static str {
        self.classifiers().map(Classifier::evidence_unit).find(|u| *u != "none").unwrap_or("none")
    }

    fn recall(&self, doc: &PreparedDocument) -> Vec<Option<UnitOutput>> {
        match self.parts(doc) {
            Ok(parts) => parts.flat_map(|(member, part)| member.classifier.recall(part)).collect(),
            Err(_) => (0..doc.units()).map(|_| None).collect(),
        }
    }

    fn remember(&self, doc: &PreparedDocument, outputs: &[UnitOutput], fresh: &[bool]) -> Result<()> {
        let mut first = 0;
        for (member, part) in self.parts(doc)? {
            let range = first..first + part.units();
            member.classifier.remember(part, &outputs[range.clone()], &fresh[range.clone()])?;
            first = range.end;
        }
        Ok(())
    }

    /// Reads chunk vectors from `dir` in every encoder member.
    fn set_vector_cache(&mut self, dir: &Path) -> Result<()> {
        self.members.iter_mut().try_for_each(|m| m.classifier.set_vector_cache(dir))
    }

    /// When a member streams it: each member classifies it in its own way.
    fn streams(&self, text: &str) -> bool {
        self.classifiers().any(|c| c.model.streams(text))
    }

    fn classify_streamed(&self, text: &str) -> Result<DocResult> {
        let results =
            self.classifiers().map(|c| c.classify(&[text]).map(|mut r| r.remove(0))).collect::<Result<Vec<_>>>()?;
        Ok(self.combine(results.iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights are shares of their sum, however large or small (1e308 twice summed to infinity
    /// and made every share 0); zero, negative and non-finite weights are refused.
    #[test]
    fn weights_become_shares_of_their_sum() {
        let members = |w: &[f64]| -> Vec<(PathBuf, f64)> {
            w.iter().enumerate().map(|(i, &w)| (PathBuf::from(format!("m{i}")), w)).collect()
        };
        assert_eq!(normalised_weights(&members(&[1.0, 3.0])).unwrap(), vec![0.25, 0.75]);
        assert_eq!(normalised_weights(&members(&[1e308, 1e308])).unwrap(), vec![0.5, 0.5]);
        assert_eq!(normalised_weights(&members(&[5e-324, 5e-324])).unwrap(), vec![0.5, 0.5]);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = normalised_weights(&members(&[1.0, bad])).unwrap_err().to_string();
            assert!(err.contains("m1 has weight") && err.contains("weights must be positive"), "{err}");
        }
    }
}
