//! Metrics of the predicted probabilities rather than the predicted labels, as scikit-learn
//! defines them: ROC-AUC (`roc_auc_score`: binary, and one-vs-rest macro for more labels) and
//! log loss (`log_loss`), and the expected calibration error (Guo et al. 2017, "On Calibration
//! of Modern Neural Networks"). They see what accuracy and F1 cannot: how well the scores rank
//! the documents, how far a confident mistake is from the truth, and whether "90% sure" is
//! right nine times in ten.

use serde::Serialize;

/// What the probabilities score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreMetrics {
    /// ROC-AUC: for two labels, of the second label's probability (scikit-learn's
    /// `roc_auc_score(y, p[:, 1])`); for more, the mean of each label's one-vs-rest AUC
    /// (`multi_class="ovr", average="macro"`). `None` when a label has no document or every
    /// document (the AUC of that label is undefined, and scikit-learn raises).
    pub roc_auc: Option<f64>,
    /// Mean negative log of the true label's probability, clipped to [ε, 1 − ε] with ε the f32
    /// epsilon (scikit-learn's `log_loss` on float32 scores; the rows are not renormalized).
    pub log_loss: f64,
    /// Expected calibration error ([`expected_calibration_error`]).
    pub ece: f64,
    /// Each label's one-vs-rest ROC-AUC, in label order (`None` where undefined).
    pub per_class_auc: Vec<Option<f64>>,
}

/// Computes [`ScoreMetrics`]. `truth` holds label indices; `probabilities` one row per example
/// of one probability per label.
pub fn score_metrics<R: AsRef<[f32]>>(
    n_labels: usize,
    truth: &[usize],
    probabilities: &[R],
) -> Result<ScoreMetrics, String> {
    if truth.len() != probabilities.len() {
        return Err(format!("{} true labels but {} rows of probabilities", truth.len(), probabilities.len()));
    }
    if truth.is_empty() {
        return Err("no examples to evaluate".into());
    }
    let probabilities: Vec<&[f32]> = probabilities.iter().map(AsRef::as_ref).collect();
    if let Some((i, row)) = probabilities.iter().enumerate().find(|(_, row)| row.len() != n_labels) {
        return Err(format!("row {i} has {} probabilities for {n_labels} labels", row.len()));
    }
    if let Some(&t) = truth.iter().find(|&&t| t >= n_labels) {
        return Err(format!("label index {t} is out of range for {n_labels} labels"));
    }
    if probabilities.iter().copied().flatten().any(|p| !p.is_finite()) {
        return Err("a probability is not a finite number".into());
    }
    let per_class_auc: Vec<Option<f64>> = (0..n_labels)
        .map(|c| {
            let positive: Vec<bool> = truth.iter().map(|&t| t == c).collect();
            let scores: Vec<f64> = probabilities.iter().map(|row| f64::from(row[c])).collect();
            roc_auc(&positive, &scores)
        })
        .collect();
    let roc_auc = match n_labels {
        0 | 1 => None,
        2 => per_class_auc[1],
        _ => per_class_auc.iter().copied().sum::<Option<f64>>().map(|sum| sum / n_labels as f64),
    };
    let log_loss = log_loss(truth, &probabilities);
    let ece = expected_calibration_error(truth, &probabilities);
    Ok(ScoreMetrics { roc_auc, log_loss, ece, per_class_auc })
}

/// Mean negative log of the true label's probability, clipped to [ε, 1 − ε] with ε the f32
/// epsilon ([`ScoreMetrics::log_loss`]); `truth` and `probabilities` as [`score_metrics`]
/// checks them.
pub fn log_loss(truth: &[usize], probabilities: &[&[f32]]) -> f64 {
    let eps = f64::from(f32::EPSILON);
    truth.iter().zip(probabilities).map(|(&t, row)| -f64::from(row[t]).clamp(eps, 1.0 - eps).ln()).sum::<f64>()
        / truth.len().max(1) as f64
}

/// Equal-width confidence bins of [`expected_calibration_error`].
pub const CALIBRATION_BINS: usize = 15;

/// One bin of a reliability diagram ([`reliability`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReliabilityBin {
    /// The bin holds confidences in (lower, upper] (the first also 0).
    pub lower: f64,
    /// See `lower`.
    pub upper: f64,
    /// Examples whose confidence falls in it.
    pub examples: usize,
    /// Their mean confidence (their highest probability).
    pub confidence: f64,
    /// How often their most probable label is right.
    pub accuracy: f64,
}

/// The reliability diagram of the most probable label: examples binned by their highest
/// probability (the confidence) into [`CALIBRATION_BINS`] equal-width bins (k/15, (k+1)/15]
/// (Guo et al.'s binning), each with its mean confidence and accuracy; only bins with
/// examples. The most probable label is the first on ties. `truth` and `probabilities` as
/// [`score_metrics`] checks them.
pub fn reliability(truth: &[usize], probabilities: &[&[f32]]) -> Vec<ReliabilityBin> {
    // Per bin: examples, correct ones, sum of confidences.
    let mut bins = [(0usize, 0usize, 0f64); CALIBRATION_BINS];
    for (&t, row) in truth.iter().zip(probabilities) {
        let (best, confidence) =
            row.iter().enumerate().fold((0, f32::NEG_INFINITY), |(b, c), (i, &p)| if p > c { (i, p) } else { (b, c) });
        let confidence = f64::from(confidence);
        // The bin whose interval (k/15, (k+1)/15] holds the confidence (0 goes to the first).
        let bin = ((confidence * CALIBRATION_BINS as f64).ceil() as usize).clamp(1, CALIBRATION_BINS) - 1;
        let entry = &mut bins[bin];
        *entry = (entry.0 + 1, entry.1 + usize::from(best == t), entry.2 + confidence);
    }
    let width = 1.0 / CALIBRATION_BINS as f64;
    bins.iter()
        .enumerate()
        .filter(|(_, (count, _, _))| *count > 0)
        .map(|(k, &(examples, correct, confidence))| ReliabilityBin {
            lower: k as f64 * width,
            upper: (k + 1) as f64 * width,
            examples,
            confidence: confidence / examples as f64,
            accuracy: correct as f64 / examples as f64,
        })
        .collect()
}

/// The expected calibration error of the most probable label (Guo et al. 2017): the mean over
/// the [`reliability`] bins, weighted by their share of the examples, of |accuracy − mean
/// confidence|. 0 when every confidence is the rate at which it is right.
pub fn expected_calibration_error(truth: &[usize], probabilities: &[&[f32]]) -> f64 {
    let n = truth.len().max(1) as f64;
    reliability(truth, probabilities)
        .iter()
        .map(|bin| bin.examples as f64 / n * (bin.accuracy - bin.confidence).abs())
        .sum()
}

/// The area under the ROC curve of `scores` for the examples marked `positive`: the chance that
/// a random positive scores above a random negative, ties counting half (the Mann–Whitney U
/// statistic, equal to the trapezoidal area scikit-learn computes). `None` without a positive
/// or without a negative.
pub fn roc_auc(positive: &[bool], scores: &[f64]) -> Option<f64> {
    let positives = positive.iter().filter(|&&p| p).count();
    let negatives = positive.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Sum of the positives' ranks (1-based), tied scores sharing their mean rank.
    let mut rank_sum = 0.0;
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && scores[order[end]] == scores[order[start]] {
            end += 1;
        }
        let mean_rank = (start + 1 + end) as f64 / 2.0;
        rank_sum += mean_rank * order[start..end].iter().filter(|&&i| positive[i]).count() as f64;
        start = end;
    }
    let (p, n) = (positives as f64, negatives as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// Expected values from scikit-learn 1.9.1 (`scripts/metric_references.py` prints them):
    /// `roc_auc_score(y, p[:, 1])` and `log_loss(y, p.astype(np.float32), labels=[0, 1])`.
    #[test]
    fn binary_scores_match_scikit_learn() {
        let truth = [0, 1, 1, 0, 1, 0, 0, 1];
        let p1 = [0.3f32, 0.6, 0.5, 0.5, 0.9, 0.1, 0.7, 0.7];
        let rows: Vec<Vec<f32>> = p1.iter().map(|&p| vec![1.0 - p, p]).collect();
        let m = score_metrics(2, &truth, &rows).unwrap();
        assert!(close(m.roc_auc.unwrap(), 0.8125), "{m:?}");
        assert!((m.log_loss - 0.5031454563140869).abs() < 1e-6, "{m:?}");
        // Guo et al.'s binning in numpy (the script's `expected_calibration_error`).
        assert!((m.ece - 0.0874999985098839).abs() < 1e-9, "{m:?}");
        // Each label's one-vs-rest AUC: the first label's scores rank the other way round.
        assert!(close(m.per_class_auc[0].unwrap(), 0.8125) && close(m.per_class_auc[1].unwrap(), 0.8125));
    }

    /// scikit-learn 1.9.1: `roc_auc_score(y, p, multi_class="ovr", average="macro")`,
    /// `roc_auc_score(y == c, p[:, c])` per label and `log_loss(y, p.astype(np.float32))`.
    #[test]
    fn multiclass_scores_match_scikit_learn() {
        let truth = [0, 1, 2, 2, 1, 0, 2, 1, 0];
        let rows: Vec<Vec<f32>> = [
            [0.6, 0.3, 0.1],
            [0.2, 0.5, 0.3],
            [0.1, 0.2, 0.7],
            [0.3, 0.4, 0.3],
            [0.3, 0.3, 0.4],
            [0.5, 0.4, 0.1],
            [0.2, 0.2, 0.6],
            [0.4, 0.4, 0.2],
            [0.2, 0.7, 0.1],
        ]
        .iter()
        .map(|r| r.to_vec())
        .collect();
        let m = score_metrics(3, &truth, &rows).unwrap();
        let per_class: Vec<f64> = m.per_class_auc.iter().map(|a| a.unwrap()).collect();
        for (got, want) in per_class.iter().zip([0.7777777777777778, 0.6388888888888888, 0.9166666666666666]) {
            assert!(close(*got, want), "{per_class:?}");
        }
        assert!(close(m.roc_auc.unwrap(), 0.7777777777777777), "{m:?}");
        assert!((m.log_loss - 0.855366051197052).abs() < 1e-6, "{m:?}");
        assert!((m.ece - 0.3777777718173133).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn reliability_bins_hold_their_examples_confidence_and_accuracy() {
        let rows: Vec<&[f32]> = vec![&[0.75, 0.25], &[0.25, 0.75], &[0.7, 0.3], &[0.99, 0.01], &[0.5, 0.5]];
        let bins = reliability(&[0, 0, 0, 1, 1], &rows);
        // 0.5 → (7/15, 8/15]; 0.7 and 0.75 → (10/15, 11/15] and (11/15, 12/15]; 0.99 → the last.
        let spans: Vec<(usize, usize)> =
            bins.iter().map(|b| ((b.lower * 15.0).round() as usize, (b.upper * 15.0).round() as usize)).collect();
        assert_eq!(spans, vec![(7, 8), (10, 11), (11, 12), (14, 15)], "{bins:?}");
        assert_eq!(bins.iter().map(|b| b.examples).collect::<Vec<_>>(), vec![1, 1, 2, 1]);
        // The 0.75 bin: one right (label 0 at 0.75), one wrong (label 1 at 0.75, truth 0).
        assert!((bins[2].confidence - 0.75).abs() < 1e-7 && (bins[2].accuracy - 0.5).abs() < 1e-12, "{bins:?}");
        // The tie at 0.5 picks the first label: wrong (truth 1).
        assert_eq!(bins[0].accuracy, 0.0);
    }

    #[test]
    fn calibration_error_is_zero_when_confidence_is_the_hit_rate_and_large_when_overconfident() {
        // Four documents at 0.75, three of them right: calibrated.
        let rows: Vec<&[f32]> = vec![&[0.75, 0.25]; 4];
        assert!(expected_calibration_error(&[0, 0, 0, 1], &rows).abs() < 1e-9);
        // Always 0.99 sure, right half the time.
        let rows: Vec<&[f32]> = vec![&[0.99, 0.01]; 4];
        assert!((expected_calibration_error(&[0, 1, 0, 1], &rows) - 0.49).abs() < 1e-6);
        // A confidence of exactly 1 is in the last bin, and 0 (all labels zero: the first label
        // counts as chosen, here rightly) in the first.
        let rows: Vec<&[f32]> = vec![&[1.0, 0.0], &[0.0, 0.0]];
        assert!((expected_calibration_error(&[0, 0], &rows) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn an_undefined_auc_is_none_and_certainty_is_clipped() {
        // The third label has no document: its AUC, and the macro mean, are undefined.
        let rows = vec![vec![0.9f32, 0.1, 0.0], vec![0.2, 0.8, 0.0]];
        let m = score_metrics(3, &[0, 1], &rows).unwrap();
        assert_eq!((m.roc_auc, m.per_class_auc[2]), (None, None));
        assert!(close(m.per_class_auc[0].unwrap(), 1.0));
        // A zero probability for the true label costs -ln(ε), not infinity.
        let m = score_metrics(2, &[0], &[vec![0.0, 1.0]]).unwrap();
        assert!(close(m.log_loss, -f64::from(f32::EPSILON).ln()), "{m:?}");
        assert_eq!(m.roc_auc, None, "one example: no negative");
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(score_metrics(2, &[0, 1], &[vec![0.5, 0.5]]).unwrap_err().contains("2 true labels but 1 rows"));
        assert!(score_metrics(2, &[0], &[vec![1.0]]).unwrap_err().contains("row 0 has 1 probabilities for 2 labels"));
        assert!(score_metrics(2, &[2], &[vec![0.5, 0.5]]).unwrap_err().contains("label index 2"));
        assert!(score_metrics(2, &[0], &[vec![f32::NAN, 0.5]]).unwrap_err().contains("not a finite number"));
        assert!(score_metrics::<Vec<f32>>(2, &[], &[]).is_err());
    }
}
