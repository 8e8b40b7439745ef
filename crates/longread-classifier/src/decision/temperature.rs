//! A model's probabilities calibrated by a temperature (`calibration.json`): the primary
//! task's log-probabilities divided by T and renormalised (`softmax(ln p / T)`, which for an
//! encoder's softmax head is `softmax(logits / T)`; Guo et al. 2017's temperature scaling),
//! with T fitted on labelled held-out documents to minimise the log loss
//! (`longread calibrate`). T > 1 softens an overconfident model, T < 1 sharpens a timid one;
//! the most probable label never changes, only how sure the model says it is.

use std::path::{Path, PathBuf};

use longread_metrics::scores::{reliability, ReliabilityBin};
use longread_model::error::{ModelError, Result};
use serde::{Deserialize, Serialize};

use super::{Decision, Rule};
use crate::calibration::temper;
use crate::Prediction;

/// The file in a model directory that holds its [`Temperature`].
pub const CALIBRATION_FILE: &str = "calibration.json";

/// A model's calibration (`calibration.json`): one temperature for a softmax over the labels
/// (`{"temperature": T}`), or, for a multi-label model, one per label's sigmoid
/// (`{"temperatures": {label: T}}`, [`super::label_temperature`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CalibrationFile", into = "CalibrationFile")]
pub struct Temperature {
    /// Positive and finite; 1 changes nothing. 1 for a per-label calibration.
    pub temperature: f64,
    /// A multi-label model's temperature per label, in the model's label order (each positive
    /// and finite); empty for a softmax calibration.
    pub per_label: Vec<(String, f64)>,
    /// How it was fitted, for people ("log loss on dev.jsonl (120 documents)").
    pub chosen_by: String,
}

/// `calibration.json` as written: `{"temperature"}` or `{"temperatures": {label: T}}`, with
/// `"chosen_by"`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CalibrationFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temperatures: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    chosen_by: String,
}

impl TryFrom<CalibrationFile> for Temperature {
    type Error = String;

    fn try_from(file: CalibrationFile) -> std::result::Result<Self, String> {
        let positive = |t: Option<f64>, what: &str| match t {
            Some(t) if t.is_finite() && t > 0.0 => Ok(t),
            _ => Err(format!("{what} is not a positive number")),
        };
        match (file.temperature, file.temperatures) {
            (Some(t), None) => Ok(Self::single(positive(Some(t), &format!("temperature {t}"))?, file.chosen_by)),
            (None, Some(map)) => {
                let per_label = map
                    .into_iter()
                    .map(|(label, t)| {
                        Ok((label.clone(), positive(t.as_f64(), &format!("the temperature of \"{label}\", {t},"))?))
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?;
                Ok(Self { temperature: 1.0, per_label, chosen_by: file.chosen_by })
            }
            _ => {
                Err("give \"temperature\" (one softmax) or \"temperatures\" (multi-label: one per label), one of them"
                    .into())
            }
        }
    }
}

impl From<Temperature> for CalibrationFile {
    fn from(t: Temperature) -> Self {
        match t.per_label.is_empty() {
            true => Self { temperature: Some(t.temperature), temperatures: None, chosen_by: t.chosen_by },
            false => Self {
                temperature: None,
                temperatures: Some(t.per_label.into_iter().map(|(l, t)| (l, t.into())).collect()),
                chosen_by: t.chosen_by,
            },
        }
    }
}

impl Temperature {
    /// One temperature for a softmax over the labels.
    pub fn single(temperature: f64, chosen_by: String) -> Self {
        Self { temperature, per_label: Vec::new(), chosen_by }
    }

    /// The calibration kept in `dir`, if any; a temperature that is not positive and finite
    /// is an error naming the file.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(CALIBRATION_FILE);
        let Some(text) = longread_model::model_dir::read_if_present(&path)? else { return Ok(None) };
        let invalid = |why: String| ModelError::InvalidInput(format!("{}: {why}", path.display()));
        let calibration: Self = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        Ok(Some(calibration))
    }

    /// Why this calibration does not fit a model with `labels` that is (or is not)
    /// `multi_label`, if it does not: a multi-label model takes a temperature per label, one
    /// for each label in its order; the others one temperature.
    pub fn check(&self, labels: &[String], multi_label: bool) -> std::result::Result<(), String> {
        match (self.per_label.is_empty(), multi_label) {
            (true, true) => {
                Err("a multi-label model's calibration is a temperature per label (\"temperatures\")".into())
            }
            (false, false) => {
                Err("a temperature per label is for multi-label models; this model predicts one label".into())
            }
            (true, false) => Ok(()),
            (false, true) => {
                let named: Vec<&str> = self.per_label.iter().map(|(l, _)| l.as_str()).collect();
                match named == labels.iter().map(String::as_str).collect::<Vec<_>>() {
                    true => Ok(()),
                    false => Err(format!(
                        "the temperatures are for the labels {named:?} but the model's labels are {labels:?} (one \
                         temperature per label, in that order)"
                    )),
                }
            }
        }
    }

    /// The calibration in words: "temperature 1.3" or "a temperature per label (3 1.2, 6 0.9)".
    pub fn describe(&self) -> String {
        match self.per_label.is_empty() {
            true => format!("temperature {}", short(self.temperature)),
            false => {
                let each: Vec<String> = self.per_label.iter().map(|(l, t)| format!("{l} {}", short(*t))).collect();
                format!("a temperature per label ({})", each.join(", "))
            }
        }
    }

    /// Writes it as `dir/calibration.json`, atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        longread_model::model_dir::write_files_atomically(&[self.file(dir)?])
    }

    /// Its file: `dir/calibration.json` and the JSON it holds.
    pub(crate) fn file(&self, dir: &Path) -> Result<(PathBuf, Vec<u8>)> {
        let json = serde_json::to_string_pretty(self).map_err(|e| ModelError::InvalidInput(e.to_string()))? + "\n";
        Ok((dir.join(CALIBRATION_FILE), json.into_bytes()))
    }

    /// Removes `dir/calibration.json`; whether there was one.
    pub fn clear(dir: &Path) -> Result<bool> {
        longread_model::model_dir::remove_if_present(&dir.join(CALIBRATION_FILE))
    }

    /// `probabilities` (one row of the primary task) at this temperature: softmax(ln p / T),
    /// or, per label, σ(logit(p) / T_label).
    pub fn apply(&self, probabilities: &[f32]) -> Vec<f32> {
        if !self.per_label.is_empty() {
            let each = probabilities.iter().zip(&self.per_label);
            return each.map(|(&p, (_, t))| super::label_temperature::temper_one(f64::from(p), *t) as f32).collect();
        }
        let row: Vec<f64> = probabilities.iter().map(|&p| f64::from(p)).collect();
        temper(&row, self.temperature).into_iter().map(|p| p as f32).collect()
    }

    /// `prediction` with its primary task's probabilities (and logits, and its chunks'
    /// probabilities without each of them, for occlusion) at this temperature.
    pub(crate) fn calibrate(&self, mut prediction: Prediction) -> Prediction {
        let scores = &mut prediction.scores;
        if !scores.probabilities.is_empty() && scores.probabilities.len() == scores.labels.len() {
            scores.probabilities = self.apply(&scores.probabilities);
            match self.per_label.is_empty() {
                true => prediction.logits.iter_mut().for_each(|z| *z /= self.temperature as f32),
                false => prediction.logits.iter_mut().zip(&self.per_label).for_each(|(z, (_, t))| *z /= *t as f32),
            }
            prediction.map_without(|row| self.apply(row));
        }
        prediction
    }
}

/// What [`restate`] adds to a rule's `chosen_by` (once).
pub(crate) const RESTATED: &str = " (restated for the calibration)";

/// `decision` restated for probabilities tempered by `t` so that it gives every document the
/// label it gave before: a threshold τ on p becomes σ(logit(τ) / t) on the tempered p (logit
/// p' = logit p / t for two labels), biases b become b / t (ln p' = ln p / t − a constant).
pub fn restate(decision: &Decision, t: f64) -> Decision {
    let rule = match &decision.rule {
        Rule::Threshold { positive, threshold } => {
            let logit = (f64::from(*threshold) / (1.0 - f64::from(*threshold))).ln();
            // Kept inside (0, 1) in f32 (a rule at 0 or 1 is refused at load): a threshold
            // moved that far is one no f32 probability crosses either way.
            let moved = (1.0 / (1.0 + (-logit / t).exp())) as f32;
            let threshold = moved.clamp(f32::MIN_POSITIVE, 1.0 - f32::EPSILON / 2.0);
            Rule::Threshold { positive: positive.clone(), threshold }
        }
        Rule::Biases(biases) => {
            // Finite in f32 (a bias set by hand near f32's limit could overflow).
            let moved = |b: f32| ((f64::from(b) / t) as f32).clamp(-f32::MAX, f32::MAX);
            Rule::Biases(biases.iter().map(|(label, b)| (label.clone(), moved(*b))).collect())
        }
        // A temperature is fitted to one softmax over the labels; multi-label models have none.
        Rule::PerLabel { thresholds, limits } => Rule::PerLabel { thresholds: thresholds.clone(), limits: *limits },
    };
    let chosen_by = match decision.chosen_by.ends_with(RESTATED) {
        true => decision.chosen_by.clone(),
        false => format!("{}{RESTATED}", decision.chosen_by),
    };
    Decision { rule, chosen_by }
}

/// `t` to at most four decimals, for people.
pub fn short(t: f64) -> String {
    format!("{:.4}", t).trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What [`fit`] found: the calibration to keep and the probabilities' scores without and
/// with it.
#[derive(Debug, Clone, Serialize)]
pub struct Fitted {
    /// The model's temperature from now on.
    #[serde(flatten)]
    pub calibration: Temperature,
    /// The temperature the model had (1 without a calibration); the fit starts from its own
    /// probabilities, so that calibrating again refits rather than compounds.
    pub previous: f64,
    /// Whether the fit stopped at an end of its range ([`TEMPERATURE_RANGE`]): the documents'
    /// log loss keeps falling beyond it (at the low end, every one labelled right with a
    /// margin), and the temperature says more about the documents than about the model.
    pub at_bound: bool,
    /// Documents it was fitted on.
    pub documents: usize,
    /// Log loss before (the probabilities as the model gave them) and after.
    pub log_loss: BeforeAfter,
    /// Expected calibration error before and after.
    pub ece: BeforeAfter,
    /// The reliability diagram (confidence bins with their mean confidence and accuracy)
    /// before and after.
    pub reliability: Reliability,
    /// The documents' probabilities at the fitted temperature (what the calibrated model
    /// gives them), for a rule tuned after calibrating; not in the JSON.
    #[serde(skip)]
    pub calibrated: Vec<Vec<f32>>,
}

/// Reliability diagrams without and with the calibration.
#[derive(Debug, Clone, Serialize)]
pub struct Reliability {
    /// The probabilities as the model gave them.
    pub before: Vec<ReliabilityBin>,
    /// At the fitted temperature.
    pub after: Vec<ReliabilityBin>,
}

/// A score without and with the calibration.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BeforeAfter {
    /// The probabilities as the model gave them.
    pub before: f64,
    /// At the fitted temperature.
    pub after: f64,
}

/// The temperatures [`fit`] searches.
pub const TEMPERATURE_RANGE: (f64, f64) = (0.05, 20.0);

/// Fits the temperature of least log loss (in [`TEMPERATURE_RANGE`]) to `probabilities` (one
/// row per document, in the model's label order) of documents with gold labels `truth`.
/// `current`: the model's calibration, if it has one (the probabilities are then tempered by
/// it; the fit undoes that first, so the result replaces it).
pub fn fit<R: AsRef<[f32]>>(
    labels: usize,
    truth: &[usize],
    probabilities: &[R],
    current: Option<&Temperature>,
    chosen_by: String,
) -> Result<Fitted> {
    let previous = current.map_or(1.0, |c| c.temperature);
    // The model's own probabilities: tempering by a, then by 1/a, gives them back. Without a
    // calibration they are the rows themselves, so that the fitted temperature applies to
    // them exactly as the calibrated model will (`Temperature::apply`).
    let own: Vec<Vec<f64>> = probabilities
        .iter()
        .map(|row| {
            let row: Vec<f64> = row.as_ref().iter().map(|&p| f64::from(p)).collect();
            if current.is_some() {
                temper(&row, 1.0 / previous)
            } else {
                row
            }
        })
        .collect();
    fit_tempered(labels, truth, probabilities, own, previous, chosen_by)
}

/// [`fit`] to probabilities that are a model's own, whatever calibration it has (`current`:
/// its decision rule is restated from that temperature), such as the out-of-fold
/// probabilities of the `--cv` run that chose its settings; the "before" figures are theirs.
pub fn fit_own<R: AsRef<[f32]>>(
    labels: usize,
    truth: &[usize],
    own: &[R],
    current: Option<&Temperature>,
    chosen_by: String,
) -> Result<Fitted> {
    let rows = own.iter().map(|row| row.as_ref().iter().map(|&p| f64::from(p)).collect()).collect();
    fit_tempered(labels, truth, own, rows, current.map_or(1.0, |c| c.temperature), chosen_by)
}

/// [`fit`]'s search: `given` the probabilities scored as "before", `own` the model's own,
/// `previous` the temperature the model had.
fn fit_tempered<R: AsRef<[f32]>>(
    labels: usize,
    truth: &[usize],
    given: &[R],
    own: Vec<Vec<f64>>,
    previous: f64,
    chosen_by: String,
) -> Result<Fitted> {
    let invalid = |e: String| ModelError::InvalidInput(e);
    let before = longread_metrics::scores::score_metrics(labels, truth, given).map_err(invalid)?;
    let all: Vec<usize> = (0..own.len()).collect();
    let temperature = crate::calibration::fit_temperature(&own, truth, &all);
    let tempered: Vec<Vec<f32>> =
        own.iter().map(|row| temper(row, temperature).into_iter().map(|p| p as f32).collect()).collect();
    let after = longread_metrics::scores::score_metrics(labels, truth, &tempered).map_err(invalid)?;
    let (low, high) = TEMPERATURE_RANGE;
    Ok(Fitted {
        calibration: Temperature::single(temperature, chosen_by),
        previous,
        at_bound: temperature < low * 1.01 || temperature > high / 1.01,
        documents: truth.len(),
        log_loss: BeforeAfter { before: before.log_loss, after: after.log_loss },
        ece: BeforeAfter { before: before.ece, after: after.ece },
        reliability: Reliability { before: bins(truth, given), after: bins(truth, &tempered) },
        calibrated: tempered,
    })
}

/// The reliability diagram of `probabilities`.
fn bins<R: AsRef<[f32]>>(truth: &[usize], probabilities: &[R]) -> Vec<ReliabilityBin> {
    let rows: Vec<&[f32]> = probabilities.iter().map(AsRef::as_ref).collect();
    reliability(truth, &rows)
}

/// Keeps `fitted` in the model directory `dir` (calibration.json), with the model's decision
/// rule, if it has one, restated ([`restate`], from the previous temperature to the new) so
/// that every document keeps its label. Returns the restated rule.
pub fn keep(dir: &Path, fitted: &Fitted, labels: &[String]) -> Result<Option<Decision>> {
    let factor = fitted.calibration.temperature / fitted.previous;
    let restated = Decision::load(dir, labels)?.map(|d| restate(&d, factor));
    // The rule and the temperature are written together: a rule restated without its
    // temperature would move labels.
    let mut files = vec![fitted.calibration.file(dir)?];
    if let Some(decision) = &restated {
        files.push(decision.file(dir)?);
    }
    longread_model::model_dir::write_files_atomically(&files)?;
    Ok(restated)
}

/// Removes the calibration from the model directory `dir`, with the model's decision rule,
/// if it has one, restated for the model's own probabilities (so that every document keeps
/// its label, as [`keep`] did). Returns whether there was a calibration, and the restated
/// rule.
pub fn remove(dir: &Path, labels: &[String]) -> Result<(bool, Option<Decision>)> {
    let Some(current) = Temperature::load(dir)? else { return Ok((false, None)) };
    let restated = Decision::load(dir, labels)?.map(|d| {
        let back = match current.per_label.is_empty() {
            true => restate(&d, 1.0 / current.temperature),
            false => {
                let back: Vec<f64> = current.per_label.iter().map(|(_, t)| 1.0 / t).collect();
                super::label_temperature::restate(&d, &back)
            }
        };
        Decision { chosen_by: back.chosen_by.trim_end_matches(RESTATED).to_owned(), ..back }
    });
    if let Some(decision) = &restated {
        decision.save(dir)?;
    }
    Ok((Temperature::clear(dir)?, restated))
}

/// Fewer documents than this make a temperature worth a warning: on hyperpartisan, one fitted
/// on a 65-article dev split (which had also chosen the epoch) made a MiniLM head's test log
/// loss worse (BENCHMARKS.md, "Calibration").
pub const FEW_DOCUMENTS: usize = 100;

/// Warnings for people about `fitted`: it stopped at an end of its range, or rests on fewer
/// than [`FEW_DOCUMENTS`] documents.
pub fn warnings(fitted: &Fitted) -> Vec<String> {
    let t = short(fitted.calibration.temperature);
    let n = fitted.documents;
    let mut warnings = Vec::new();
    if fitted.at_bound {
        warnings.push(match fitted.calibration.temperature < 1.0 {
            true => format!(
                "warning: the temperature stopped at the end of its range ({t}): on these {n} documents the model is \
                 right with a margin everywhere, so sharper is always better; calibrate on more (or harder) \
                 held-out documents"
            ),
            false => format!(
                "warning: the temperature stopped at the end of its range ({t}): the probabilities carry almost no \
                 information on these {n} documents"
            ),
        });
    }
    if n < FEW_DOCUMENTS {
        warnings.push(format!(
            "warning: a temperature fitted on {n} documents (under {FEW_DOCUMENTS}) is noisy: check it on a test \
             set (`eval` shows log loss and ECE), or calibrate on more held-out documents"
        ));
    }
    warnings
}
