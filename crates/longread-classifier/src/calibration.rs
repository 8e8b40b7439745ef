//! Calibrating an ensemble's members on held-out labelled documents before their probabilities
//! are averaged: a temperature per member (its log-probabilities divided by T, renormalised:
//! the T that minimises the log loss), and, when asked, the members' weights (the mixture
//! weights of greatest likelihood, by EM). Averaging uncalibrated probabilities lets the most
//! confident member decide (a bag of words' near-uniform probabilities count for almost
//! nothing beside a fine-tuned encoder's); calibration puts them on one scale first.
//!
//! Every choice is checked out of fold: the documents are split into k folds, fitted on k − 1
//! and scored on the one left; the way of combining with the lowest out-of-fold log loss is
//! kept — the members' own probabilities (temperature 1) when calibrating does not beat them,
//! fitted weights only when they beat equal weights.

use serde::{Deserialize, Serialize};

/// Members' probabilities on the same labelled documents: `probs[member][doc][label]` (in the
/// ensemble's label order) and each document's gold label.
#[derive(Debug, Clone)]
pub struct MemberScores {
    /// `probs[member][doc][label]`.
    pub probs: Vec<Vec<Vec<f64>>>,
    /// The gold label of each document.
    pub gold: Vec<usize>,
}

/// What was fitted and how it scored out of fold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Each member's temperature: fitted on every document, or 1 when calibrating did not beat
    /// the members' own probabilities out of fold.
    pub temperatures: Vec<f64>,
    /// Whether the temperatures are the fitted ones (files written before this field: yes).
    #[serde(default = "fitted_before")]
    pub temperatures_fitted: bool,
    /// The members' weights (sum 1): fitted, or equal when fitting did not beat equal weights
    /// out of fold (or was not asked for).
    pub weights: Vec<f64>,
    /// Whether the weights are the fitted ones.
    pub weights_fitted: bool,
    /// Documents and folds used.
    pub documents: usize,
    /// Folds of the out-of-fold scores.
    pub folds: usize,
    /// Out-of-fold scores of each way of combining, in order: equal weights uncalibrated,
    /// equal weights calibrated, fitted weights calibrated (when asked); for multi-label
    /// members, then every label combined its own best way.
    pub out_of_fold: Vec<CombinationScore>,
    /// Multi-label members: each label's own temperatures and weights, and which way of
    /// combining it kept ([`crate::label_calibration`]); `temperatures` are then 1 and
    /// `weights` each member's mean weight over the labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_label: Vec<crate::label_calibration::LabelCombination>,
}

fn fitted_before() -> bool {
    true
}

/// The out-of-fold score of one way of combining.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CombinationScore {
    /// `equal weights, uncalibrated` and so on.
    pub combination: String,
    /// Mean negative log-likelihood of the gold labels.
    pub log_loss: f64,
    /// Accuracy (multi-label: subset accuracy, labels carried at 0.5).
    pub accuracy: f64,
    /// Macro-F1.
    pub macro_f1: f64,
    /// Micro-F1 (multi-label members only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_f1: Option<f64>,
}

/// Smallest probability a log is taken of.
const FLOOR: f64 = 1e-12;

/// `p` with its log divided by `t` and renormalised (`softmax(ln p / t)`).
pub fn temper(p: &[f64], t: f64) -> Vec<f64> {
    let logs: Vec<f64> = p.iter().map(|&x| x.max(FLOOR).ln() / t).collect();
    let max = logs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logs.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// Mean log loss of member `probs` (`[doc][label]`) at temperature `t` on `docs`.
fn member_loss(probs: &[Vec<f64>], gold: &[usize], docs: &[usize], t: f64) -> f64 {
    docs.iter().map(|&d| -temper(&probs[d], t)[gold[d]].max(FLOOR).ln()).sum::<f64>() / docs.len().max(1) as f64
}

/// The temperature in [0.05, 20] ([`crate::decision::temperature::TEMPERATURE_RANGE`]) of
/// least log loss on `docs` (golden-section search on ln T; the loss is smooth and, in
/// practice, unimodal in it).
pub fn fit_temperature(probs: &[Vec<f64>], gold: &[usize], docs: &[usize]) -> f64 {
    let (low, high) = crate::decision::temperature::TEMPERATURE_RANGE;
    let (mut lo, mut hi) = (low.ln(), high.ln());
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let loss = |x: f64| member_loss(probs, gold, docs, x.exp());
    let (mut a, mut b) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
    let (mut fa, mut fb) = (loss(a), loss(b));
    for _ in 0..60 {
        if fa < fb {
            hi = b;
            b = a;
            fb = fa;
            a = hi - phi * (hi - lo);
            fa = loss(a);
        } else {
            lo = a;
            a = b;
            fa = fb;
            b = lo + phi * (hi - lo);
            fb = loss(b);
        }
    }
    ((lo + hi) / 2.0).exp()
}

/// Mixture weights of greatest likelihood of the gold labels on `docs` (EM: the
/// log-likelihood is concave in the weights), starting from equal weights.
pub fn fit_weights(tempered: &[Vec<Vec<f64>>], gold: &[usize], docs: &[usize]) -> Vec<f64> {
    em_weights(tempered.len(), docs, |j, d| tempered[j][d][gold[d]])
}

/// The weights of `m` members' mixture of greatest likelihood on `docs`, where `likelihood(j,
/// d)` is member j's probability of document d's gold answer: EM from equal weights (the
/// log-likelihood is concave in the weights).
pub(crate) fn em_weights(m: usize, docs: &[usize], likelihood: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    let mut w = vec![1.0 / m as f64; m];
    for _ in 0..500 {
        let mut next = vec![0f64; m];
        for &d in docs {
            let parts: Vec<f64> = (0..m).map(|j| w[j] * likelihood(j, d).max(FLOOR)).collect();
            let total: f64 = parts.iter().sum();
            for (n, p) in next.iter_mut().zip(parts) {
                *n += p / total;
            }
        }
        let total: f64 = next.iter().sum();
        let next: Vec<f64> = next.into_iter().map(|x| x / total).collect();
        let moved = next.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        w = next;
        if moved < 1e-9 {
            break;
        }
    }
    w
}

/// The weighted mean of the members' `[doc][label]` probabilities for document `d`.
fn mixture(tempered: &[Vec<Vec<f64>>], weights: &[f64], d: usize) -> Vec<f64> {
    let labels = tempered[0][d].len();
    (0..labels).map(|k| tempered.iter().zip(weights).map(|(p, w)| w * p[d][k]).sum()).collect()
}

/// Scores each way of combining out of fold over `folds` folds (documents `i` with
/// `i % folds == f`) and fits the one with the lowest log loss on every document: equal weights
/// uncalibrated, calibrated (temperatures), or (with `fit`) calibrated with fitted weights.
pub fn calibrate(scores: &MemberScores, labels: usize, fit: bool, folds: usize) -> Calibration {
    let (m, n) = (scores.probs.len(), scores.gold.len());
    let folds = folds.clamp(2, n.max(2));
    let all: Vec<usize> = (0..n).collect();
    let mut combos: Vec<(&str, Vec<Vec<f64>>)> = vec![
        ("equal weights, uncalibrated", Vec::with_capacity(n)),
        ("equal weights, calibrated", Vec::with_capacity(n)),
    ];
    if fit {
        combos.push(("fitted weights, calibrated", Vec::with_capacity(n)));
    }
    let mut out_of_fold: Vec<Vec<(usize, Vec<f64>)>> = vec![Vec::new(); combos.len()];
    let equal = vec![1.0 / m as f64; m];
    for f in 0..folds {
        let (train, held): (Vec<usize>, Vec<usize>) = all.iter().partition(|&&d| d % folds != f);
        if held.is_empty() || train.is_empty() {
            continue;
        }
        let temps: Vec<f64> = scores.probs.iter().map(|p| fit_temperature(p, &scores.gold, &train)).collect();
        let tempered: Vec<Vec<Vec<f64>>> =
            scores.probs.iter().zip(&temps).map(|(p, &t)| p.iter().map(|row| temper(row, t)).collect()).collect();
        let fitted = fit.then(|| fit_weights(&tempered, &scores.gold, &train));
        for &d in &held {
            out_of_fold[0].push((d, mixture(&scores.probs, &equal, d)));
            out_of_fold[1].push((d, mixture(&tempered, &equal, d)));
            if let Some(w) = &fitted {
                out_of_fold[2].push((d, mixture(&tempered, w, d)));
            }
        }
    }
    for ((_, probs), oof) in combos.iter_mut().zip(out_of_fold) {
        let mut sorted = oof;
        sorted.sort_by_key(|(d, _)| *d);
        *probs = sorted.into_iter().map(|(_, p)| p).collect();
    }
    let scored: Vec<CombinationScore> =
        combos.iter().map(|(name, probs)| score(name, probs, &scores.gold, labels)).collect();
    // The way of combining with the lowest out-of-fold log loss (on a tie, the simpler one).
    let best = (0..scored.len()).fold(0, |best, k| if scored[k].log_loss < scored[best].log_loss { k } else { best });
    let temperatures_fitted = best != 0;
    let weights_fitted = best == 2;
    let temperatures: Vec<f64> = match temperatures_fitted {
        true => scores.probs.iter().map(|p| fit_temperature(p, &scores.gold, &all)).collect(),
        false => vec![1.0; m],
    };
    let weights = if weights_fitted {
        let tempered: Vec<Vec<Vec<f64>>> = scores
            .probs
            .iter()
            .zip(&temperatures)
            .map(|(p, &t)| p.iter().map(|row| temper(row, t)).collect())
            .collect();
        fit_weights(&tempered, &scores.gold, &all)
    } else {
        equal
    };
    Calibration {
        temperatures,
        temperatures_fitted,
        weights,
        weights_fitted,
        documents: n,
        folds,
        out_of_fold: scored,
        per_label: Vec::new(),
    }
}

/// Log loss, accuracy and macro-F1 of `probs` (`[doc][label]`) against `gold`.
fn score(name: &str, probs: &[Vec<f64>], gold: &[usize], labels: usize) -> CombinationScore {
    let n = gold.len().max(1) as f64;
    let log_loss = probs.iter().zip(gold).map(|(p, &g)| -p[g].max(FLOOR).ln()).sum::<f64>() / n;
    let predicted: Vec<usize> = probs
        .iter()
        .map(|p| p.iter().enumerate().fold(0, |best, (k, &x)| if x > p[best] { k } else { best }))
        .collect();
    let accuracy = predicted.iter().zip(gold).filter(|(p, g)| p == g).count() as f64 / n;
    let f1s: Vec<f64> = (0..labels)
        .map(|k| {
            let tp = predicted.iter().zip(gold).filter(|(p, g)| **p == k && **g == k).count() as f64;
            let fp = predicted.iter().zip(gold).filter(|(p, g)| **p == k && **g != k).count() as f64;
            let fn_ = predicted.iter().zip(gold).filter(|(p, g)| **p != k && **g == k).count() as f64;
            if tp == 0.0 {
                0.0
            } else {
                2.0 * tp / (2.0 * tp + fp + fn_)
            }
        })
        .collect();
    let macro_f1 = f1s.iter().sum::<f64>() / labels.max(1) as f64;
    CombinationScore { combination: name.into(), log_loss, accuracy, macro_f1, micro_f1: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that is right but overconfident, and one that is right more often but timid.
    fn members() -> MemberScores {
        let mut probs = vec![Vec::new(), Vec::new()];
        let mut gold = Vec::new();
        for d in 0..200 {
            let g = d % 2;
            gold.push(g);
            // Member 0: 70% right, always 0.99 sure.
            let right0 = d % 10 < 7;
            let p0 = if right0 { 0.99 } else { 0.01 };
            probs[0].push(if g == 0 { vec![p0, 1.0 - p0] } else { vec![1.0 - p0, p0] });
            // Member 1: 90% right, 0.55 sure.
            let right1 = d % 10 != 3;
            let p1 = if right1 { 0.55 } else { 0.45 };
            probs[1].push(if g == 0 { vec![p1, 1.0 - p1] } else { vec![1.0 - p1, p1] });
        }
        MemberScores { probs, gold }
    }

    #[test]
    fn temperature_cools_the_overconfident_and_warms_the_timid() {
        let s = members();
        let all: Vec<usize> = (0..200).collect();
        let t0 = fit_temperature(&s.probs[0], &s.gold, &all);
        let t1 = fit_temperature(&s.probs[1], &s.gold, &all);
        assert!(t0 > 1.5, "the overconfident member is softened: {t0}");
        assert!(t1 < 0.5, "the timid member is sharpened: {t1}");
        // At its temperature member 0's confidence matches its 70% accuracy.
        let p = temper(&s.probs[0][0], t0)[0];
        assert!((p - 0.7).abs() < 0.01, "{p}");
        // The loss at the fitted temperature beats its neighbours'.
        let l = |t| member_loss(&s.probs[1], &s.gold, &all, t);
        assert!(l(t1) < l(t1 * 1.1) && l(t1) < l(t1 / 1.1));
    }

    #[test]
    fn calibrated_averaging_beats_raw_averaging_and_fitted_weights_favour_the_better_member() {
        let c = calibrate(&members(), 2, true, 5);
        let [raw, calibrated, fitted] = [&c.out_of_fold[0], &c.out_of_fold[1], &c.out_of_fold[2]];
        // Raw averaging follows the overconfident member: its 70% accuracy.
        assert!((raw.accuracy - 0.7).abs() < 0.02, "{raw:?}");
        assert!(calibrated.accuracy > 0.85 && calibrated.log_loss < raw.log_loss, "{calibrated:?}");
        // Fitted weights are kept only when they beat equal weights out of fold.
        assert_eq!(c.weights_fitted, fitted.log_loss < calibrated.log_loss, "{fitted:?} vs {calibrated:?}");
        if !c.weights_fitted {
            assert_eq!(c.weights, vec![0.5, 0.5]);
        }
        assert!((c.weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!((c.documents, c.folds), (200, 5));
        // On every document the likeliest mixture leans on the more accurate member.
        let s = members();
        let all: Vec<usize> = (0..200).collect();
        let tempered: Vec<Vec<Vec<f64>>> =
            s.probs.iter().zip(&c.temperatures).map(|(p, &t)| p.iter().map(|row| temper(row, t)).collect()).collect();
        let w = fit_weights(&tempered, &s.gold, &all);
        assert!(w[1] > w[0], "{w:?}");
        let likelihood = |w: &[f64]| -> f64 { all.iter().map(|&d| mixture(&tempered, w, d)[s.gold[d]].ln()).sum() };
        assert!(likelihood(&w) >= likelihood(&[0.5, 0.5]) - 1e-9, "EM does not lose likelihood");
    }

    #[test]
    fn tempering_keeps_a_distribution_and_t_one_is_the_identity() {
        let p = vec![0.2, 0.5, 0.3];
        assert!(temper(&p, 1.0).iter().zip(&p).all(|(a, b)| (a - b).abs() < 1e-12));
        let hot = temper(&p, 100.0);
        assert!((hot.iter().sum::<f64>() - 1.0).abs() < 1e-12 && hot.iter().all(|x| (x - 1.0 / 3.0).abs() < 0.01));
        assert!(temper(&[1.0, 0.0], 2.0)[1] > 0.0, "a zero is floored, not -inf");
    }

    /// Members whose probabilities are already calibrated (a document said to be 80% likely
    /// is right 80% of the time): fitted temperatures only add noise out of fold, so the
    /// members' own probabilities are kept (temperature 1, equal weights).
    #[test]
    fn calibration_that_does_not_help_out_of_fold_is_not_applied() {
        let mut probs = vec![Vec::new(), Vec::new()];
        let mut gold = Vec::new();
        for d in 0..400 {
            let g = d % 2;
            gold.push(g);
            for (m, row) in probs.iter_mut().enumerate() {
                // Right in 8 of 10 documents at 0.8 (member 0) or in 6 of 10 at 0.6 (member 1).
                let (p, right) = if m == 0 { (0.8, (d / 2) % 10 < 8) } else { (0.6, (d / 2 + 3) % 10 < 6) };
                let toward_gold = if right { p } else { 1.0 - p };
                row.push(if g == 0 {
                    vec![toward_gold, 1.0 - toward_gold]
                } else {
                    vec![1.0 - toward_gold, toward_gold]
                });
            }
        }
        let c = calibrate(&MemberScores { probs, gold }, 2, false, 5);
        assert!(!c.temperatures_fitted, "{:?}", c.out_of_fold);
        assert_eq!(c.temperatures, vec![1.0, 1.0]);
        assert!(c.out_of_fold[0].log_loss <= c.out_of_fold[1].log_loss);
    }
}
