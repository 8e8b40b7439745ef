//! Multi-label metrics, as scikit-learn defines them for label-indicator matrices
//! (`precision_recall_fscore_support` with `average` micro / macro / weighted / samples,
//! `accuracy_score` (subset accuracy), `hamming_loss`, `label_ranking_average_precision_score`,
//! `roc_auc_score` micro and macro): a document may carry any number of the labels, none
//! included. Where scikit-learn divides by zero it gives 0 (its `zero_division="warn"`), so a
//! document with no true and no predicted label scores 0 in the `samples` averages, as there.
//! Golden values: `tests/fixtures/metrics/multilabel.json`, made by
//! `scripts/metric_references.py`.

use serde::Serialize;

use crate::scores::roc_auc;

/// Precision, recall and F1 of one averaging.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Averaged {
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// F1.
    pub f1: f64,
}

/// One label's scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelMetrics {
    /// The label's name.
    pub label: String,
    /// TP / (TP + FP).
    pub precision: f64,
    /// TP / (TP + FN).
    pub recall: f64,
    /// 2TP / (2TP + FP + FN).
    pub f1: f64,
    /// Documents that carry the label.
    pub support: usize,
    /// Documents predicted to carry it.
    pub predicted: usize,
    /// ROC-AUC of the label's probability, when the report has scores and the label has
    /// documents with and without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
}

/// Everything `eval` reports for a multi-label model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiLabelReport {
    /// Label names, in the order of every per-label list.
    pub labels: Vec<String>,
    /// Documents scored.
    pub documents: usize,
    /// Pooled over every (document, label) pair.
    pub micro: Averaged,
    /// The unweighted mean over labels.
    pub macro_avg: Averaged,
    /// The mean over labels weighted by their support.
    pub weighted: Averaged,
    /// The mean over documents of each document's scores.
    pub samples: Averaged,
    /// Documents whose predicted set is exactly their true set.
    pub subset_accuracy: f64,
    /// The fraction of (document, label) pairs predicted wrongly.
    pub hamming_loss: f64,
    /// Per label, in label order.
    pub per_label: Vec<LabelMetrics>,
    /// Label-ranking average precision of the scores, when the report has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_ranking_average_precision: Option<f64>,
    /// ROC-AUC of every (document, label) score pooled, when the report has scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_micro: Option<f64>,
    /// The mean of the per-label ROC-AUCs over the labels that have both classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_macro: Option<f64>,
    /// Log loss of every (document, label) probability as a yes/no forecast (the mean binary
    /// cross-entropy, a multi-label model's training loss; scikit-learn's `log_loss` of each
    /// label's column averaged over labels), when the report has scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_loss: Option<f64>,
    /// Expected calibration error of every (document, label) probability as a yes/no
    /// forecast ([`binary_ece`]), when the report has scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ece: Option<f64>,
    /// Labels left out of the macro ROC-AUC: no document has them, or every document does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roc_auc_skipped: Vec<String>,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// F1 from the counts, 2TP / (2TP + FP + FN), 0 when all three are 0 (scikit-learn ≥ 1.3).
fn f1(tp: usize, fp: usize, fn_: usize) -> f64 {
    ratio(2 * tp, 2 * tp + fp + fn_)
}

/// Checks that every row has one entry per label.
fn check_rows<T>(what: &str, rows: &[Vec<T>], n_labels: usize) -> Result<(), String> {
    match rows.iter().position(|row| row.len() != n_labels) {
        Some(i) => Err(format!("{what} row {i} has {} entries for {n_labels} labels", rows[i].len())),
        None => Ok(()),
    }
}

/// Every metric of predicted label sets against true ones: `truth[d][l]` and `predicted[d][l]`
/// say whether document `d` carries label `l`.
pub fn evaluate_multilabel(
    labels: &[String],
    truth: &[Vec<bool>],
    predicted: &[Vec<bool>],
) -> Result<MultiLabelReport, String> {
    let n_labels = labels.len();
    if truth.len() != predicted.len() {
        return Err(format!("{} documents' true labels but {} predictions", truth.len(), predicted.len()));
    }
    if truth.is_empty() {
        return Err("no documents to evaluate".into());
    }
    if n_labels == 0 {
        return Err("no labels to evaluate".into());
    }
    check_rows("truth", truth, n_labels)?;
    check_rows("prediction", predicted, n_labels)?;
    // (tp, fp, fn) per label.
    let mut counts = vec![(0usize, 0usize, 0usize); n_labels];
    let mut samples = (0.0, 0.0, 0.0);
    let (mut exact, mut wrong_pairs) = (0usize, 0usize);
    for (t, p) in truth.iter().zip(predicted) {
        let (mut tp, mut fp, mut fn_) = (0, 0, 0);
        for l in 0..n_labels {
            match (t[l], p[l]) {
                (true, true) => tp += 1,
                (false, true) => fp += 1,
                (true, false) => fn_ += 1,
                (false, false) => {}
            }
            let c = &mut counts[l];
            match (t[l], p[l]) {
                (true, true) => c.0 += 1,
                (false, true) => c.1 += 1,
                (true, false) => c.2 += 1,
                (false, false) => {}
            }
        }
        samples.0 += ratio(tp, tp + fp);
        samples.1 += ratio(tp, tp + fn_);
        samples.2 += f1(tp, fp, fn_);
        exact += usize::from(fp + fn_ == 0);
        wrong_pairs += fp + fn_;
    }
    let per_label: Vec<LabelMetrics> = labels
        .iter()
        .zip(&counts)
        .map(|(label, &(tp, fp, fn_))| LabelMetrics {
            label: label.clone(),
            precision: ratio(tp, tp + fp),
            recall: ratio(tp, tp + fn_),
            f1: f1(tp, fp, fn_),
            support: tp + fn_,
            predicted: tp + fp,
            roc_auc: None,
        })
        .collect();
    let (tp, fp, fn_) = counts.iter().fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2));
    let mean = |f: fn(&LabelMetrics) -> f64| per_label.iter().map(f).sum::<f64>() / n_labels as f64;
    let support: usize = per_label.iter().map(|m| m.support).sum();
    let weighted = |f: fn(&LabelMetrics) -> f64| {
        if support == 0 {
            0.0
        } else {
            per_label.iter().map(|m| f(m) * m.support as f64).sum::<f64>() / support as f64
        }
    };
    let n = truth.len() as f64;
    Ok(MultiLabelReport {
        labels: labels.to_vec(),
        documents: truth.len(),
        micro: Averaged { precision: ratio(tp, tp + fp), recall: ratio(tp, tp + fn_), f1: f1(tp, fp, fn_) },
        macro_avg: Averaged { precision: mean(|m| m.precision), recall: mean(|m| m.recall), f1: mean(|m| m.f1) },
        weighted: Averaged {
            precision: weighted(|m| m.precision),
            recall: weighted(|m| m.recall),
            f1: weighted(|m| m.f1),
        },
        samples: Averaged { precision: samples.0 / n, recall: samples.1 / n, f1: samples.2 / n },
        subset_accuracy: exact as f64 / n,
        hamming_loss: wrong_pairs as f64 / (n * n_labels as f64),
        per_label,
        label_ranking_average_precision: None,
        roc_auc_micro: None,
        roc_auc_macro: None,
        log_loss: None,
        ece: None,
        roc_auc_skipped: Vec::new(),
    })
}

impl MultiLabelReport {
    /// The report with the metrics of the scores added (each label's probability, one row per
    /// document in label order): ROC-AUC per label, micro and macro, and label-ranking average
    /// precision. `truth` as given to [`evaluate_multilabel`].
    pub fn with_scores<R: AsRef<[f32]>>(mut self, truth: &[Vec<bool>], scores: &[R]) -> Result<Self, String> {
        let n_labels = self.labels.len();
        if scores.len() != truth.len() {
            return Err(format!("{} documents' true labels but {} rows of scores", truth.len(), scores.len()));
        }
        if let Some(i) = scores.iter().position(|row| row.as_ref().len() != n_labels) {
            return Err(format!("scores row {i} has {} entries for {n_labels} labels", scores[i].as_ref().len()));
        }
        let mut aucs = Vec::new();
        for (l, metrics) in self.per_label.iter_mut().enumerate() {
            let positive: Vec<bool> = truth.iter().map(|t| t[l]).collect();
            let column: Vec<f64> = scores.iter().map(|row| f64::from(row.as_ref()[l])).collect();
            metrics.roc_auc = roc_auc(&positive, &column);
            match metrics.roc_auc {
                Some(auc) => aucs.push(auc),
                None => self.roc_auc_skipped.push(metrics.label.clone()),
            }
        }
        self.roc_auc_macro = (!aucs.is_empty()).then(|| aucs.iter().sum::<f64>() / aucs.len() as f64);
        let positive: Vec<bool> = truth.iter().flatten().copied().collect();
        let pooled: Vec<f64> = scores.iter().flat_map(|row| row.as_ref().iter().map(|&s| f64::from(s))).collect();
        self.roc_auc_micro = roc_auc(&positive, &pooled);
        self.label_ranking_average_precision = Some(label_ranking_average_precision(truth, scores));
        self.log_loss = Some(binary_log_loss(truth, scores));
        self.ece = Some(binary_ece(truth, scores));
        Ok(self)
    }

    /// A readable table: the averages, the set metrics and one row per label.
    pub fn to_table(&self) -> String {
        let width =
            self.labels.iter().map(|l| crate::terminal::printable(l).chars().count()).max().unwrap_or(5).max(12);
        let mut out = format!("{:width$}  precision  recall      f1\n", "average");
        for (name, a) in
            [("micro", self.micro), ("macro", self.macro_avg), ("weighted", self.weighted), ("samples", self.samples)]
        {
            out.push_str(&format!("{name:width$}  {:9.4}  {:6.4}  {:6.4}\n", a.precision, a.recall, a.f1));
        }
        out.push_str(&format!("\nsubset accuracy {:.4}   Hamming loss {:.4}", self.subset_accuracy, self.hamming_loss));
        if let Some(lrap) = self.label_ranking_average_precision {
            out.push_str(&format!("   label-ranking AP {lrap:.4}"));
        }
        out.push('\n');
        if let (Some(micro), Some(macro_)) = (self.roc_auc_micro, self.roc_auc_macro) {
            out.push_str(&format!("ROC-AUC micro {micro:.4}   macro {macro_:.4}"));
            if !self.roc_auc_skipped.is_empty() {
                let names: Vec<String> = self.roc_auc_skipped.iter().map(|l| crate::terminal::printable(l)).collect();
                out.push_str(&format!(" (without {}: one class only)", names.join(", ")));
            }
            out.push('\n');
        }
        if let (Some(log_loss), Some(ece)) = (self.log_loss, self.ece) {
            out.push_str(&format!(
                "log loss {log_loss:.4}   ECE {ece:.4} (each label's probability as a yes/no forecast)\n"
            ));
        }
        out.push_str(&format!("\n{:width$}  precision  recall      f1  support  predicted  ROC-AUC\n", "label"));
        for m in &self.per_label {
            let auc = m.roc_auc.map_or("-".to_string(), |a| format!("{a:.4}"));
            out.push_str(&format!(
                "{:width$}  {:9.4}  {:6.4}  {:6.4}  {:7}  {:9}  {auc:>7}\n",
                crate::terminal::printable(&m.label),
                m.precision,
                m.recall,
                m.f1,
                m.support,
                m.predicted
            ));
        }
        out
    }
}

/// The mean binary cross-entropy of every (document, label) probability against whether the
/// document carries the label, each probability clipped to [ε, 1 − ε] with ε the f32 epsilon
/// (as [`crate::scores::log_loss`] and scikit-learn clip). `truth` one bool per label,
/// `scores` one row per document in the same order.
pub fn binary_log_loss<R: AsRef<[f32]>>(truth: &[Vec<bool>], scores: &[R]) -> f64 {
    let eps = f64::from(f32::EPSILON);
    let pairs = truth.iter().map(Vec::len).sum::<usize>().max(1);
    let total: f64 = truth
        .iter()
        .zip(scores)
        .flat_map(|(set, row)| set.iter().zip(row.as_ref()))
        .map(|(&y, &p)| {
            let p = f64::from(p).clamp(eps, 1.0 - eps);
            -(if y { p } else { 1.0 - p }).ln()
        })
        .sum();
    total / pairs as f64
}

/// The expected calibration error of every (document, label) probability p taken as a yes/no
/// forecast: [`crate::scores::expected_calibration_error`] of the two-way rows [1 − p, p]
/// (the confidence is max(p, 1 − p)). `truth` and `scores` as [`binary_log_loss`].
pub fn binary_ece<R: AsRef<[f32]>>(truth: &[Vec<bool>], scores: &[R]) -> f64 {
    let mut gold = Vec::new();
    let mut rows = Vec::new();
    for (set, row) in truth.iter().zip(scores) {
        for (&y, &p) in set.iter().zip(row.as_ref()) {
            gold.push(usize::from(y));
            rows.push([1.0 - p, p]);
        }
    }
    let rows: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
    crate::scores::expected_calibration_error(&gold, &rows)
}

/// scikit-learn's `label_ranking_average_precision_score`: for each document, the mean over its
/// true labels of the fraction of labels scored at least as high that are true; a document
/// with no true label, or with every label true, scores 1.
pub fn label_ranking_average_precision<R: AsRef<[f32]>>(truth: &[Vec<bool>], scores: &[R]) -> f64 {
    if truth.is_empty() {
        return 0.0;
    }
    let total: f64 = truth
        .iter()
        .zip(scores)
        .map(|(t, s)| {
            let s = s.as_ref();
            let relevant: Vec<usize> = (0..t.len()).filter(|&l| t[l]).collect();
            if relevant.is_empty() || relevant.len() == t.len() {
                return 1.0;
            }
            relevant
                .iter()
                .map(|&l| {
                    let rank = s.iter().filter(|&&x| x >= s[l]).count();
                    let relevant_rank = relevant.iter().filter(|&&r| s[r] >= s[l]).count();
                    relevant_rank as f64 / rank as f64
                })
                .sum::<f64>()
                / relevant.len() as f64
        })
        .sum();
    total / truth.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("l{i}")).collect()
    }

    #[test]
    fn a_perfect_prediction_scores_one_and_an_empty_set_is_a_prediction() {
        let truth = vec![vec![true, false], vec![false, false], vec![true, true]];
        let r = evaluate_multilabel(&names(2), &truth, &truth).unwrap();
        assert_eq!((r.micro.f1, r.macro_avg.f1, r.subset_accuracy, r.hamming_loss), (1.0, 1.0, 1.0, 0.0));
        // scikit-learn's samples average gives the empty document 0 (0/0 set to 0).
        assert!((r.samples.f1 - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn bad_shapes_are_errors_naming_the_row() {
        let err = evaluate_multilabel(&names(2), &[vec![true, false]], &[vec![true]]).unwrap_err();
        assert!(err.contains("prediction row 0 has 1 entries for 2 labels"), "{err}");
        assert!(evaluate_multilabel(&names(2), &[], &[]).is_err());
    }

    #[test]
    fn labels_with_one_class_are_left_out_of_the_macro_auc_and_named() {
        let truth = vec![vec![true, false], vec![false, false], vec![true, false]];
        let predicted = truth.clone();
        let scores = vec![vec![0.9f32, 0.1], vec![0.2, 0.3], vec![0.7, 0.2]];
        let r = evaluate_multilabel(&names(2), &truth, &predicted).unwrap().with_scores(&truth, &scores).unwrap();
        assert_eq!(r.roc_auc_skipped, vec!["l1".to_string()]);
        assert_eq!(r.roc_auc_macro, Some(1.0));
        assert!(r.to_table().contains("without l1"));
    }
}
