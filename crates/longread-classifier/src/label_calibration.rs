//! Calibrating (and, with out-of-fold scores, stacking) an ensemble of multi-label members
//! label by label. Each label is a yes/no forecast of its own, so each label gets its own
//! combination: every member's probability of it tempered, σ(logit(p) / T) with T of least
//! binary cross-entropy, and, when asked, the members' weights for that label (the Bernoulli
//! mixture of greatest likelihood, by EM). A bag of words may be the better forecaster of a
//! rare article and an encoder head of a frequent one; one weight per member cannot say so.
//!
//! Every choice is checked out of fold, label by label: the documents are split into k folds
//! by iterative stratification, fitted on k − 1 and scored on the one left; each label keeps
//! the way of combining with the lowest out-of-fold cross-entropy (the members' own
//! probabilities, equally weighted, when calibrating does not beat them; fitted weights only
//! when they beat equal ones). A label no document carries (or every document does) keeps the
//! members' own probabilities: there is nothing to fit.

use longread_metrics::folds::iterative_stratified_folds;
use longread_metrics::multilabel::{binary_log_loss, evaluate_multilabel};
use serde::{Deserialize, Serialize};

use crate::calibration::{em_weights, Calibration, CombinationScore};
use crate::decision::label_temperature::{bce, logit, one_label_temperature, temper_one};

/// Multi-label members' probabilities on the same labelled documents: `probs[member][doc][label]`
/// (in the ensemble's label order) and each document's label set.
#[derive(Debug, Clone)]
pub struct LabelSetScores {
    /// `probs[member][doc][label]`: each label's probability as the member gives it.
    pub probs: Vec<Vec<Vec<f64>>>,
    /// `truth[doc][label]`: whether the document carries the label.
    pub truth: Vec<Vec<bool>>,
}

/// How one label's probability is combined from the members'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelCombination {
    /// The label.
    pub label: String,
    /// Documents that carry it.
    pub positives: usize,
    /// The way of combining kept (one of [`COMBINATIONS`]).
    pub kept: String,
    /// Each member's temperature for this label (1: its own probability).
    pub temperatures: Vec<f64>,
    /// Each member's weight for this label (sum 1).
    pub weights: Vec<f64>,
    /// Mean out-of-fold binary cross-entropy of this label under each way of combining, in the
    /// order of [`COMBINATIONS`] (the fitted weights only when asked for).
    pub out_of_fold_log_loss: Vec<f64>,
}

/// The ways of combining a label, from the simplest.
pub const COMBINATIONS: [&str; 3] =
    ["equal weights, uncalibrated", "equal weights, calibrated", "fitted weights, calibrated"];
/// The out-of-fold row of every label combined its own best way.
pub const EACH_LABEL_BEST: &str = "each label its best";

/// One label's probabilities of every document under each member: `[member][doc]`.
type Column = Vec<Vec<f64>>;

/// The temperature of least binary cross-entropy of `probs` (one member's probabilities of one
/// label, `[doc]`) on `docs`; 1 when those documents are all of one class.
fn fit_temperature(probs: &[f64], truth: &[bool], docs: &[usize]) -> f64 {
    one_label_temperature(docs.iter().map(|&d| (logit(probs[d]), truth[d])))
}

/// Mixture weights of greatest likelihood of the documents' yes/no answers on `docs` (EM on
/// the Bernoulli mixture), from equal weights.
fn fit_weights(tempered: &Column, truth: &[bool], docs: &[usize]) -> Vec<f64> {
    em_weights(tempered.len(), docs, |j, d| if truth[d] { tempered[j][d] } else { 1.0 - tempered[j][d] })
}

/// The members' probabilities of a label in `column`, each at its temperature.
fn tempered(column: &Column, temperatures: &[f64]) -> Column {
    column.iter().zip(temperatures).map(|(p, &t)| p.iter().map(|&x| temper_one(x, t)).collect()).collect()
}

/// Document `d`'s mixture of the members' (tempered) probabilities with `weights`.
fn mixture(tempered: &Column, weights: &[f64], d: usize) -> f64 {
    tempered.iter().zip(weights).map(|(p, w)| w * p[d]).sum()
}

/// What way `combination` (an index into [`COMBINATIONS`]) fits to `column` on `docs`: each
/// member's temperature and weight.
fn fit(column: &Column, truth: &[bool], docs: &[usize], combination: usize) -> (Vec<f64>, Vec<f64>) {
    let m = column.len();
    let equal = vec![1.0 / m as f64; m];
    if combination == 0 {
        return (vec![1.0; m], equal);
    }
    let temperatures: Vec<f64> = column.iter().map(|p| fit_temperature(p, truth, docs)).collect();
    let weights = if combination == 2 { fit_weights(&tempered(column, &temperatures), truth, docs) } else { equal };
    (temperatures, weights)
}

/// Fits each label's combination of the members' probabilities in `scores` (labels named by
/// `labels`), each way of combining scored out of fold over `folds` iteratively stratified
/// folds (`seed`); `fit_weights` adds the fitted weights to the ways tried. The result's
/// `per_label` holds each label's temperatures and weights; its rows score each way of
/// combining on every label, then [`EACH_LABEL_BEST`] (accuracy: subset accuracy, at 0.5).
pub fn calibrate_per_label(
    scores: &LabelSetScores,
    labels: &[String],
    fit_weights: bool,
    folds: usize,
    seed: u64,
) -> Calibration {
    let (m, n) = (scores.probs.len(), scores.truth.len());
    let ways = if fit_weights { 3 } else { 2 };
    let ids: Vec<Vec<usize>> =
        scores.truth.iter().map(|t| t.iter().enumerate().filter(|(_, &y)| y).map(|(l, _)| l).collect()).collect();
    let held_out = iterative_stratified_folds(&ids, folds.clamp(2, n.max(2)), seed);
    let all: Vec<usize> = (0..n).collect();
    // out_of_fold[way][doc][label].
    let mut out_of_fold = vec![vec![vec![0f64; labels.len()]; n]; ways + 1];
    let mut per_label = Vec::with_capacity(labels.len());
    for (l, label) in labels.iter().enumerate() {
        let column: Column = scores.probs.iter().map(|p| p.iter().map(|row| row[l]).collect()).collect();
        let truth: Vec<bool> = scores.truth.iter().map(|t| t[l]).collect();
        for held in held_out.iter().filter(|h| !h.is_empty() && h.len() < n) {
            let mut is_held = vec![false; n];
            held.iter().for_each(|&d| is_held[d] = true);
            let train: Vec<usize> = all.iter().copied().filter(|&d| !is_held[d]).collect();
            for (way, rows) in out_of_fold.iter_mut().take(ways).enumerate() {
                let (temperatures, weights) = fit(&column, &truth, &train, way);
                let tempered = tempered(&column, &temperatures);
                held.iter().for_each(|&d| rows[d][l] = mixture(&tempered, &weights, d));
            }
        }
        let loss = |way: usize| -> f64 {
            let z = |d: usize| logit(out_of_fold[way][d][l]);
            all.iter().map(|&d| bce(z(d), truth[d])).sum::<f64>() / n.max(1) as f64
        };
        let losses: Vec<f64> = (0..ways).map(loss).collect();
        let positives = truth.iter().filter(|&&y| y).count();
        let one_class = positives == 0 || positives == n;
        // The lowest out-of-fold loss; on a tie the simpler way; one class: nothing to fit.
        let best = match one_class {
            true => 0,
            false => (0..ways).fold(0, |best, k| if losses[k] < losses[best] { k } else { best }),
        };
        let kept: Vec<f64> = out_of_fold[best].iter().map(|row| row[l]).collect();
        out_of_fold[ways].iter_mut().zip(kept).for_each(|(row, p)| row[l] = p);
        let (temperatures, weights) = fit(&column, &truth, &all, best);
        per_label.push(LabelCombination {
            label: label.clone(),
            positives,
            kept: COMBINATIONS[best].into(),
            temperatures,
            weights,
            out_of_fold_log_loss: losses,
        });
    }
    let names = COMBINATIONS.iter().take(ways).copied().chain([EACH_LABEL_BEST]);
    let rows = names.zip(&out_of_fold).map(|(name, probs)| score(name, labels, &scores.truth, probs)).collect();
    // Each member's weight over all labels (for people: the per-label weights decide).
    let weights = (0..m).map(|j| per_label.iter().map(|c| c.weights[j]).sum::<f64>() / labels.len() as f64).collect();
    Calibration {
        temperatures: vec![1.0; m],
        temperatures_fitted: per_label.iter().any(|c| c.kept != COMBINATIONS[0]),
        weights,
        weights_fitted: per_label.iter().any(|c| c.kept == COMBINATIONS[2]),
        documents: n,
        folds: held_out.len(),
        out_of_fold: rows,
        per_label,
    }
}

/// Mean binary cross-entropy, subset accuracy, macro- and micro-F1 (labels carried at 0.5) of
/// the `[doc][label]` probabilities `probs`.
fn score(name: &str, labels: &[String], truth: &[Vec<bool>], probs: &[Vec<f64>]) -> CombinationScore {
    let rows: Vec<Vec<f32>> = probs.iter().map(|row| row.iter().map(|&p| p as f32).collect()).collect();
    let carried: Vec<Vec<bool>> = probs.iter().map(|row| row.iter().map(|&p| p >= 0.5).collect()).collect();
    let report = evaluate_multilabel(labels, truth, &carried).expect("one row per document, one entry per label");
    CombinationScore {
        combination: name.into(),
        log_loss: binary_log_loss(truth, &rows),
        accuracy: report.subset_accuracy,
        macro_f1: report.macro_avg.f1,
        micro_f1: Some(report.micro.f1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two members and three labels: member 0 knows label "a" (right, overconfident) and
    /// guesses "b"; member 1 knows "b" (right, timid) and guesses "a"; "c" is carried by no
    /// document.
    fn members() -> (LabelSetScores, Vec<String>) {
        let mut probs = vec![Vec::new(), Vec::new()];
        let mut truth = Vec::new();
        for d in 0..300 {
            let (a, b) = (d % 2 == 0, d % 3 == 0);
            truth.push(vec![a, b, false]);
            // Member 0: "a" right 85% of the time at 0.99; "b" a coin.
            let a_right = d % 20 < 17;
            let pa = if a == a_right { 0.99 } else { 0.01 };
            let coin = if (d * 7) % 11 < 5 { 0.6 } else { 0.4 };
            probs[0].push(vec![pa, coin, 0.02]);
            // Member 1: "b" always right at 0.6; "a" a coin.
            let pb = if b { 0.6 } else { 0.4 };
            let coin = if (d * 5) % 13 < 6 { 0.55 } else { 0.45 };
            probs[1].push(vec![coin, pb, 0.3]);
        }
        (LabelSetScores { probs, truth }, vec!["a".into(), "b".into(), "c".into()])
    }

    #[test]
    fn each_label_leans_on_the_member_that_knows_it() {
        let (scores, labels) = members();
        let c = calibrate_per_label(&scores, &labels, true, 5, 7);
        assert_eq!(c.per_label.len(), 3);
        let [a, b, none] = [&c.per_label[0], &c.per_label[1], &c.per_label[2]];
        assert!(a.weights[0] > 0.8, "label a follows member 0: {a:?}");
        assert!(b.weights[1] > 0.8, "label b follows member 1: {b:?}");
        // Member 0 is cooled on "a", member 1 sharpened on "b".
        assert!(a.temperatures[0] > 1.5 && b.temperatures[1] < 0.5, "{a:?} {b:?}");
        // "c" has no positives: the members' own probabilities, equally weighted.
        assert_eq!(
            (none.kept.as_str(), none.temperatures.clone(), none.weights.clone()),
            (COMBINATIONS[0], vec![1.0; 2], vec![0.5; 2])
        );
        for combination in &c.per_label {
            assert!((combination.weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            assert_eq!(combination.out_of_fold_log_loss.len(), 3);
        }
        // Rows: the three ways and each label's best, no worse than the equal-weight ways (the
        // fitted weights alone may be: on "c" they lean on the member surest of the only class
        // seen, which is not kept).
        let names: Vec<&str> = c.out_of_fold.iter().map(|r| r.combination.as_str()).collect();
        assert_eq!(names, [COMBINATIONS[0], COMBINATIONS[1], COMBINATIONS[2], EACH_LABEL_BEST]);
        let best = c.out_of_fold[3].log_loss;
        assert!(c.out_of_fold[..2].iter().all(|r| best <= r.log_loss + 1e-12), "{:?}", c.out_of_fold);
        assert!(best < c.out_of_fold[0].log_loss - 0.05, "stacking beats the plain mean: {:?}", c.out_of_fold);
        assert!(c.temperatures_fitted && c.weights_fitted);
        assert_eq!((c.documents, c.folds), (300, 5));
    }

    #[test]
    fn the_kept_way_has_the_lowest_out_of_fold_loss_and_its_fit_on_every_document() {
        let (scores, labels) = members();
        let c = calibrate_per_label(&scores, &labels, false, 4, 1);
        let all: Vec<usize> = (0..300).collect();
        for (l, combination) in c.per_label.iter().enumerate().take(2) {
            let way = COMBINATIONS.iter().position(|w| *w == combination.kept).unwrap();
            assert!(way < 2, "no fitted weights unless asked");
            let least = combination.out_of_fold_log_loss.iter().cloned().fold(f64::INFINITY, f64::min);
            assert_eq!(combination.out_of_fold_log_loss[way], least);
            let column: Column = scores.probs.iter().map(|p| p.iter().map(|row| row[l]).collect()).collect();
            let truth: Vec<bool> = scores.truth.iter().map(|t| t[l]).collect();
            assert_eq!(
                (combination.temperatures.clone(), combination.weights.clone()),
                fit(&column, &truth, &all, way)
            );
        }
        assert_eq!(c.out_of_fold.len(), 3);
    }

    #[test]
    fn a_fitted_temperature_has_the_least_cross_entropy_and_em_gains_likelihood() {
        let (scores, _) = members();
        let all: Vec<usize> = (0..300).collect();
        let column: Column = scores.probs.iter().map(|p| p.iter().map(|row| row[0]).collect()).collect();
        let truth: Vec<bool> = scores.truth.iter().map(|t| t[0]).collect();
        let t = fit_temperature(&column[0], &truth, &all);
        let loss = |t: f64| all.iter().map(|&d| bce(logit(column[0][d]) / t, truth[d])).sum::<f64>();
        assert!(loss(t) <= loss(t * 1.05) && loss(t) <= loss(t / 1.05), "{t}");
        let w = fit_weights(&column, &truth, &all);
        let likelihood = |w: &[f64]| -> f64 {
            all.iter()
                .map(|&d| (if truth[d] { mixture(&column, w, d) } else { 1.0 - mixture(&column, w, d) }).ln())
                .sum()
        };
        assert!(likelihood(&w) >= likelihood(&[0.5, 0.5]) - 1e-9, "{w:?}");
    }
}
