//! A multi-label model's probabilities calibrated label by label: each label's sigmoid gets
//! its own temperature, p' = σ(logit(p) / T) (for a sigmoid head, σ(z / T): Guo et al. 2017's
//! temperature scaling applied to each label's binary forecast), with T fitted on labelled
//! held-out documents to minimise that label's binary cross-entropy (`longread calibrate` on a
//! multi-label model). Labels are independent, so each fit is one-dimensional; whether a
//! label is carried never changes, because the model's per-label thresholds are restated
//! with it ([`restate`]).

use std::path::Path;

use longread_metrics::multilabel::{binary_ece, binary_log_loss};
use longread_model::error::{ModelError, Result};
use serde::Serialize;

use super::temperature::{BeforeAfter, Temperature, RESTATED, TEMPERATURE_RANGE};
use super::{Decision, Rule};

/// The smallest probability (and distance from 1) a logit is taken of.
const FLOOR: f64 = 1e-12;

/// ln(p / (1 − p)), with p kept FLOOR away from 0 and 1.
pub(crate) fn logit(p: f64) -> f64 {
    let p = p.clamp(FLOOR, 1.0 - FLOOR);
    (p / (1.0 - p)).ln()
}

/// σ(z) without overflow for large |z|.
fn sigmoid(z: f64) -> f64 {
    match z >= 0.0 {
        true => 1.0 / (1.0 + (-z).exp()),
        false => z.exp() / (1.0 + z.exp()),
    }
}

/// A label's probability `p` at temperature `t`: σ(logit(p) / t).
pub(crate) fn temper_one(p: f64, t: f64) -> f64 {
    sigmoid(logit(p) / t)
}

/// Binary cross-entropy of logit `z` against `y`, as PyTorch's `BCEWithLogitsLoss`:
/// max(z, 0) − z·y + ln(1 + e^(−|z|)).
pub fn bce(z: f64, y: bool) -> f64 {
    z.max(0.0) - if y { z } else { 0.0 } + (-z.abs()).exp().ln_1p()
}

/// What [`fit`] found for one label.
#[derive(Debug, Clone, Serialize)]
pub struct LabelFit {
    /// The label.
    pub label: String,
    /// Its temperature from now on.
    pub temperature: f64,
    /// The temperature it had (1 without a calibration).
    pub previous: f64,
    /// Documents that carry it.
    pub positives: usize,
    /// Whether every document (or none) carries it: nothing to fit, its temperature is 1.
    pub one_class: bool,
    /// Whether the fit stopped at an end of [`TEMPERATURE_RANGE`].
    pub at_bound: bool,
    /// Its mean binary cross-entropy before (as the model gave the probabilities) and after.
    pub log_loss: BeforeAfter,
}

/// What [`fit`] found: the calibration to keep and the scores without and with it.
#[derive(Debug, Clone, Serialize)]
pub struct FittedPerLabel {
    /// The model's calibration from now on (`"temperatures"` and `"chosen_by"`).
    #[serde(flatten)]
    pub calibration: Temperature,
    /// Documents it was fitted on.
    pub documents: usize,
    /// Each label's fit, in the model's label order.
    pub labels: Vec<LabelFit>,
    /// Mean binary cross-entropy over every document and label, before and after.
    pub log_loss: BeforeAfter,
    /// Expected calibration error of every (document, label) probability taken as a yes/no
    /// forecast, before and after.
    pub ece: BeforeAfter,
    /// The documents' probabilities at the fitted temperatures (what the calibrated model
    /// gives them), for thresholds tuned after calibrating; not in the JSON.
    #[serde(skip)]
    pub calibrated: Vec<Vec<f32>>,
}

/// Fits each label's temperature of least binary cross-entropy (in [`TEMPERATURE_RANGE`]) to
/// `probabilities` (one row per document, in the order of `labels`) of documents whose label
/// sets are `truth` (one bool per label). `current`: the model's calibration, if it has one
/// (the probabilities are tempered by it; the fit undoes that first, so that the result
/// replaces it). A label every document carries, or none, keeps temperature 1.
pub fn fit<R: AsRef<[f32]>>(
    labels: &[String],
    truth: &[Vec<bool>],
    probabilities: &[R],
    current: Option<&Temperature>,
    chosen_by: String,
) -> Result<FittedPerLabel> {
    if truth.is_empty() || truth.len() != probabilities.len() {
        return Err(ModelError::InvalidInput(format!(
            "{} label sets for {} rows of probabilities: nothing to calibrate on",
            truth.len(),
            probabilities.len()
        )));
    }
    let previous: Vec<f64> = match current {
        Some(c) if c.per_label.len() == labels.len() => c.per_label.iter().map(|(_, t)| *t).collect(),
        _ => vec![1.0; labels.len()],
    };
    let n = truth.len();
    let mut fits = Vec::with_capacity(labels.len());
    for (l, label) in labels.iter().enumerate() {
        // The model's own logits: the given probabilities' logits times the temperature they
        // were tempered by.
        let own: Vec<f64> = probabilities.iter().map(|row| logit(f64::from(row.as_ref()[l])) * previous[l]).collect();
        let y: Vec<bool> = truth.iter().map(|set| set[l]).collect();
        let loss = |t: f64| own.iter().zip(&y).map(|(z, &y)| bce(z / t, y)).sum::<f64>() / n as f64;
        let positives = y.iter().filter(|&&y| y).count();
        let one_class = positives == 0 || positives == n;
        let temperature = one_label_temperature(own.iter().copied().zip(y.iter().copied()));
        let (low, high) = TEMPERATURE_RANGE;
        fits.push(LabelFit {
            label: label.clone(),
            temperature,
            previous: previous[l],
            positives,
            one_class,
            at_bound: !one_class && (temperature < low * 1.01 || temperature > high / 1.01),
            log_loss: BeforeAfter { before: loss(previous[l]), after: loss(temperature) },
        });
    }
    let calibration = Temperature {
        temperature: 1.0,
        per_label: fits.iter().map(|f| (f.label.clone(), f.temperature)).collect(),
        chosen_by,
    };
    let calibrated: Vec<Vec<f32>> = probabilities
        .iter()
        .map(|row| {
            let own = row.as_ref().iter().zip(&previous).map(|(&p, prev)| logit(f64::from(p)) * prev);
            own.zip(&fits).map(|(z, f)| sigmoid(z / f.temperature) as f32).collect()
        })
        .collect();
    let mean = |pick: fn(&LabelFit) -> f64| fits.iter().map(pick).sum::<f64>() / fits.len().max(1) as f64;
    let log_loss = BeforeAfter { before: mean(|f| f.log_loss.before), after: mean(|f| f.log_loss.after) };
    let ece = BeforeAfter { before: binary_ece(truth, probabilities), after: binary_ece(truth, &calibrated) };
    Ok(FittedPerLabel { calibration, documents: n, labels: fits, log_loss, ece, calibrated })
}

/// One label's temperature in [`TEMPERATURE_RANGE`] of least binary cross-entropy over its
/// (logit, carried) pairs (the cross-entropy is convex in 1/T, so it has one minimum there); 1
/// when every pair is carried, or none.
pub(crate) fn one_label_temperature(pairs: impl Iterator<Item = (f64, bool)>) -> f64 {
    let pairs: Vec<(f64, bool)> = pairs.collect();
    let positives = pairs.iter().filter(|(_, y)| *y).count();
    if positives == 0 || positives == pairs.len() {
        return 1.0;
    }
    least_on_log_scale(|t| pairs.iter().map(|&(z, y)| bce(z / t, y)).sum::<f64>(), TEMPERATURE_RANGE)
}

/// The x in [low, high] at which `f` is least, by golden-section search on ln x (`f` with one
/// minimum there).
pub fn least_on_log_scale(f: impl Fn(f64) -> f64, (low, high): (f64, f64)) -> f64 {
    let (mut lo, mut hi) = (low.ln(), high.ln());
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let at = |x: f64| f(x.exp());
    let (mut a, mut b) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
    let (mut fa, mut fb) = (at(a), at(b));
    for _ in 0..80 {
        if fa < fb {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - phi * (hi - lo);
            fa = at(a);
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + phi * (hi - lo);
            fb = at(b);
        }
    }
    ((lo + hi) / 2.0).exp()
}

/// The mean binary cross-entropy over every (document, label) probability (the loss a
/// multi-label model trains on) and their expected calibration error as yes/no forecasts:
/// how well a multi-label model's probabilities are calibrated
/// ([`longread_metrics::multilabel::binary_log_loss`], [`longread_metrics::multilabel::binary_ece`]).
pub fn probability_scores<R: AsRef<[f32]>>(truth: &[Vec<bool>], probabilities: &[R]) -> (f64, f64) {
    (binary_log_loss(truth, probabilities), binary_ece(truth, probabilities))
}

/// A multi-label `decision` restated for probabilities whose labels were tempered by
/// `factors` (one per label) so that every label is carried as before: a threshold τ becomes
/// σ(logit(τ) / factor). Limits on how many labels a document carries rank the tempered
/// probabilities, which may order labels differently.
pub fn restate(decision: &Decision, factors: &[f64]) -> Decision {
    let rule = match &decision.rule {
        Rule::PerLabel { thresholds, limits } => Rule::PerLabel {
            thresholds: thresholds
                .iter()
                .zip(factors)
                .map(|((label, t), factor)| {
                    // Kept inside (0, 1) in f32, as a single threshold is (`temperature::restate`).
                    let moved = temper_one(f64::from(*t), *factor) as f32;
                    (label.clone(), moved.clamp(f32::MIN_POSITIVE, 1.0 - f32::EPSILON / 2.0))
                })
                .collect(),
            limits: *limits,
        },
        other => other.clone(),
    };
    let chosen_by = match decision.chosen_by.ends_with(RESTATED) {
        true => decision.chosen_by.clone(),
        false => format!("{}{RESTATED}", decision.chosen_by),
    };
    Decision { rule, chosen_by }
}

/// Keeps `fitted` in the model directory `dir` (calibration.json), with the model's
/// per-label thresholds, if it has them, restated (from each label's previous temperature to
/// its new one) so that every label is carried as before. Returns the restated rule.
pub fn keep(dir: &Path, fitted: &FittedPerLabel, labels: &[String]) -> Result<Option<Decision>> {
    let factors: Vec<f64> = fitted.labels.iter().map(|f| f.temperature / f.previous).collect();
    let restated = Decision::load(dir, labels)?.map(|d| restate(&d, &factors));
    let mut files = vec![fitted.calibration.file(dir)?];
    if let Some(decision) = &restated {
        files.push(decision.file(dir)?);
    }
    longread_model::model_dir::write_files_atomically(&files)?;
    Ok(restated)
}

/// Warnings for people about `fitted`: labels whose fit stopped at an end of the range, or
/// that every document (or none) carries.
pub fn warnings(fitted: &FittedPerLabel) -> Vec<String> {
    let named = |pick: fn(&LabelFit) -> bool| -> Vec<&str> {
        fitted.labels.iter().filter(|f| pick(f)).map(|f| f.label.as_str()).collect()
    };
    let mut warnings = Vec::new();
    let one_class = named(|f| f.one_class);
    if !one_class.is_empty() {
        warnings.push(format!(
            "warning: every document or none carries {}: nothing to fit, temperature 1 (calibrate on documents \
             with and without each label)",
            one_class.join(", ")
        ));
    }
    let at_bound = named(|f| f.at_bound);
    if !at_bound.is_empty() {
        warnings.push(format!(
            "warning: the temperature of {} stopped at an end of its range: on these {} documents its probabilities \
             separate the label perfectly or carry almost no information",
            at_bound.join(", "),
            fitted.documents
        ));
    }
    if fitted.documents < super::temperature::FEW_DOCUMENTS {
        warnings.push(format!(
            "warning: temperatures fitted on {} documents (under {}) are noisy: check them on a test set",
            fitted.documents,
            super::temperature::FEW_DOCUMENTS
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Label 0 overconfident (logits three times too large), label 1 timid (a third of what
    /// they should be), label 2 carried by every document.
    fn documents() -> (Vec<String>, Vec<Vec<bool>>, Vec<Vec<f32>>) {
        let labels = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let mut truth = Vec::new();
        let mut probabilities = Vec::new();
        for d in 0..400 {
            // A true logit in [-3, 3]; the label is carried in the share σ(z) of documents at z.
            let z = -3.0 + 6.0 * ((d * 37) % 400) as f64 / 399.0;
            let carried = ((d * 101) % 100) as f64 / 100.0 < sigmoid(z);
            truth.push(vec![carried, carried, true]);
            probabilities.push(vec![sigmoid(3.0 * z) as f32, sigmoid(z / 3.0) as f32, 0.9]);
        }
        (labels, truth, probabilities)
    }

    #[test]
    fn each_label_gets_the_temperature_of_its_own_miscalibration() {
        let (labels, truth, probabilities) = documents();
        let fitted = fit(&labels, &truth, &probabilities, None, String::new()).unwrap();
        let t: Vec<f64> = fitted.labels.iter().map(|f| f.temperature).collect();
        assert!((2.0..4.5).contains(&t[0]), "the overconfident label is softened: {t:?}");
        assert!((0.2..0.5).contains(&t[1]), "the timid label is sharpened: {t:?}");
        assert_eq!((t[2], fitted.labels[2].one_class), (1.0, true));
        assert!(fitted.log_loss.after < fitted.log_loss.before && fitted.ece.after < fitted.ece.before);
        // The fitted temperature beats its neighbours.
        for (l, f) in fitted.labels.iter().enumerate().take(2) {
            let loss = |t: f64| {
                let each = probabilities.iter().zip(&truth).map(|(p, y)| bce(logit(f64::from(p[l])) / t, y[l]));
                each.sum::<f64>()
            };
            assert!(
                loss(f.temperature) < loss(f.temperature * 1.01) && loss(f.temperature) < loss(f.temperature / 1.01)
            );
        }
        // Calibrating the calibrated probabilities again finds the same temperatures: the fit
        // starts from the model's own probabilities.
        let again = fit(&labels, &truth, &fitted.calibrated, Some(&fitted.calibration), String::new()).unwrap();
        for (a, b) in again.labels.iter().zip(&fitted.labels) {
            assert!((a.temperature - b.temperature).abs() < 1e-4 * b.temperature, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn restated_thresholds_carry_every_label_as_before() {
        let labels = vec!["a".to_string(), "b".to_string()];
        let decision = Decision {
            rule: Rule::PerLabel {
                thresholds: vec![("a".into(), 0.3), ("b".into(), 0.8)],
                limits: super::super::Limits::default(),
            },
            chosen_by: "tuned".into(),
        };
        let calibration = Temperature {
            temperature: 1.0,
            per_label: vec![("a".into(), 2.5), ("b".into(), 0.4)],
            chosen_by: String::new(),
        };
        let restated = restate(&decision, &[2.5, 0.4]);
        assert!(restated.chosen_by.ends_with(RESTATED));
        for k in 1..100 {
            let row = [k as f32 / 100.0, 1.0 - k as f32 / 100.0];
            let before = decision.carried(&labels, &row).unwrap();
            let after = restated.carried(&labels, &calibration.apply(&row)).unwrap();
            assert_eq!(before, after, "{row:?}");
        }
    }

    #[test]
    fn calibration_files_are_checked_against_the_model() {
        let labels = vec!["a".to_string(), "b".to_string()];
        let per_label: Temperature = serde_json::from_str(r#"{"temperatures": {"a": 2, "b": 0.5}}"#).unwrap();
        assert_eq!(per_label.check(&labels, true), Ok(()));
        assert!(per_label.check(&labels, false).unwrap_err().contains("for multi-label models"));
        let swapped = vec!["b".to_string(), "a".to_string()];
        assert!(per_label.check(&swapped, true).unwrap_err().contains("in that order"));
        let single: Temperature = serde_json::from_str(r#"{"temperature": 2}"#).unwrap();
        assert!(single.check(&labels, true).unwrap_err().contains("a temperature per label"));
        for (bad, why) in [
            (r#"{"temperatures": {"a": 0}}"#, "the temperature of \"a\", 0, is not a positive number"),
            (r#"{"temperature": 1, "temperatures": {"a": 1}}"#, "one of them"),
            (r#"{"temperatures": {"a": "hot"}}"#, "not a positive number"),
        ] {
            let err = serde_json::from_str::<Temperature>(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let text = serde_json::to_string(&per_label).unwrap();
        assert!(text.contains("\"temperatures\"") && !text.contains("\"temperature\":"), "{text}");
    }
}
