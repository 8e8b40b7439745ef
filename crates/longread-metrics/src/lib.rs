//! Classification metrics, as scikit-learn defines them (`classification_report`,
//! `confusion_matrix`): a class with no predictions has precision 0, with no true examples
//! recall 0, and F1 is 0 when precision + recall is 0.
#![deny(missing_docs)]

use serde::Serialize;

pub mod bootstrap;
pub mod folds;
pub mod multilabel;
pub mod scores;
pub mod terminal;

use terminal::printable;

/// Counts of (true label, predicted label) pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfusionMatrix {
    /// `counts[true][predicted]`.
    pub counts: Vec<Vec<usize>>,
}

impl ConfusionMatrix {
    /// Builds the matrix for `n_classes` classes; pairs with an index out of range are an error.
    pub fn new(n_classes: usize, truth: &[usize], predicted: &[usize]) -> Result<Self, String> {
        if truth.len() != predicted.len() {
            return Err(format!("{} true labels but {} predictions", truth.len(), predicted.len()));
        }
        let mut counts = vec![vec![0; n_classes]; n_classes];
        for (&t, &p) in truth.iter().zip(predicted) {
            if t >= n_classes || p >= n_classes {
                return Err(format!("label index {} is out of range for {n_classes} classes", t.max(p)));
            }
            counts[t][p] += 1;
        }
        Ok(Self { counts })
    }

    /// Number of examples.
    pub fn total(&self) -> usize {
        self.counts.iter().flatten().sum()
    }
}

/// Precision, recall, F1 and support of one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassMetrics {
    /// The class name.
    pub label: String,
    /// TP / (TP + FP).
    pub precision: f64,
    /// TP / (TP + FN).
    pub recall: f64,
    /// Harmonic mean of precision and recall.
    pub f1: f64,
    /// Number of true examples.
    pub support: usize,
    /// One-vs-rest ROC-AUC of this label's probability, when the report has the
    /// probabilities ([`Report::with_scores`]) and the label has documents and non-documents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
}

/// Everything `eval` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Fraction of correct predictions.
    pub accuracy: f64,
    /// Unweighted mean of the per-class F1 over the labels present in the gold labels or the
    /// predictions (scikit-learn's `average="macro"`).
    pub macro_f1: f64,
    /// Mean of the per-class F1 weighted by support.
    pub weighted_f1: f64,
    /// Unweighted mean precision.
    pub macro_precision: f64,
    /// Unweighted mean recall.
    pub macro_recall: f64,
    /// Per class, in label order.
    pub per_class: Vec<ClassMetrics>,
    /// `confusion_matrix[true][predicted]`, in label order.
    pub confusion_matrix: Vec<Vec<usize>>,
    /// Label names, the order of both axes.
    pub labels: Vec<String>,
    /// Number of examples.
    pub examples: usize,
    /// The one label predicted for every example while the gold labels hold more than one: a
    /// model that has collapsed to a constant (its macro-F1 is the floor), worth a note
    /// wherever its report is shown. Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constant_prediction: Option<String>,
    /// ROC-AUC of the probabilities ([`scores::ScoreMetrics::roc_auc`]: binary, or one-vs-rest
    /// macro), when the report has them ([`Report::with_scores`]) and it is defined (every
    /// label has documents). Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc: Option<f64>,
    /// Log loss of the probabilities ([`scores::ScoreMetrics::log_loss`]), when the report has
    /// them. Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_loss: Option<f64>,
    /// Expected calibration error of the probabilities
    /// ([`scores::expected_calibration_error`]), when the report has them. Absent from the
    /// JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ece: Option<f64>,
    /// A multi-label report's micro-averaged F1 (see [`Report::from_multilabel`]). Absent from
    /// the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_f1: Option<f64>,
}

/// Computes every metric. `labels` names the classes; `truth` and `predicted` are indices.
pub fn evaluate(labels: &[String], truth: &[usize], predicted: &[usize]) -> Result<Report, String> {
    evaluate_counts(labels, ConfusionMatrix::new(labels.len(), truth, predicted)?)
}

/// [`evaluate`] from the confusion matrix alone (one row and column per label), for callers
/// that update the counts as predictions change instead of recounting every document.
pub fn evaluate_counts(labels: &[String], cm: ConfusionMatrix) -> Result<Report, String> {
    if cm.counts.len() != labels.len() || cm.counts.iter().any(|row| row.len() != labels.len()) {
        return Err(format!("a confusion matrix for {} labels must be {0} × {0}", labels.len()));
    }
    let total = cm.total();
    if total == 0 {
        return Err("no examples to evaluate".into());
    }
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    // How often each label was predicted (the confusion matrix's column sums).
    let predictions: Vec<usize> = (0..labels.len()).map(|c| cm.counts.iter().map(|row| row[c]).sum()).collect();
    let per_class: Vec<ClassMetrics> = labels
        .iter()
        .enumerate()
        .map(|(c, label)| {
            let tp = cm.counts[c][c];
            let support: usize = cm.counts[c].iter().sum();
            let (precision, recall) = (ratio(tp, predictions[c]), ratio(tp, support));
            let f1 = if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) };
            ClassMetrics { label: label.clone(), precision, recall, f1, support, roc_auc: None }
        })
        .collect();
    // Macro averages over the labels present in the gold labels or the predictions, as
    // scikit-learn's `average="macro"` (without `labels=`) does.
    let present: Vec<&ClassMetrics> =
        per_class.iter().enumerate().filter(|&(c, m)| m.support > 0 || predictions[c] > 0).map(|(_, m)| m).collect();
    let macro_mean = |f: fn(&ClassMetrics) -> f64| present.iter().map(|m| f(m)).sum::<f64>() / present.len() as f64;
    let correct: usize = (0..labels.len()).map(|c| cm.counts[c][c]).sum();
    let predicted_labels: Vec<usize> = (0..labels.len()).filter(|&c| predictions[c] > 0).collect();
    let gold_labels = per_class.iter().filter(|c| c.support > 0).count();
    let constant_prediction = match predicted_labels[..] {
        [only] if gold_labels > 1 => Some(labels[only].clone()),
        _ => None,
    };
    Ok(Report {
        accuracy: ratio(correct, total),
        macro_f1: macro_mean(|m| m.f1),
        weighted_f1: per_class.iter().map(|c| c.f1 * c.support as f64).sum::<f64>() / total as f64,
        macro_precision: macro_mean(|m| m.precision),
        macro_recall: macro_mean(|m| m.recall),
        per_class,
        confusion_matrix: cm.counts,
        labels: labels.to_vec(),
        examples: total,
        constant_prediction,
        roc_auc: None,
        log_loss: None,
        ece: None,
        micro_f1: None,
    })
}

impl Report {
    /// A multi-label evaluation in a report's fields, for what logs and selects epochs by the
    /// same names: `accuracy` is the subset accuracy, `macro_f1`/`weighted_f1`/`macro_*` and
    /// `per_class` are over labels (each label's one-vs-rest scores), `micro_f1` is set,
    /// `roc_auc` is the macro ROC-AUC, `log_loss` the mean binary cross-entropy given
    /// (`None`: absent), and the confusion matrix is empty (a document is in several classes).
    pub fn from_multilabel(report: &multilabel::MultiLabelReport, log_loss: Option<f64>) -> Self {
        let per_class = report
            .per_label
            .iter()
            .map(|l| ClassMetrics {
                label: l.label.clone(),
                precision: l.precision,
                recall: l.recall,
                f1: l.f1,
                support: l.support,
                roc_auc: l.roc_auc,
            })
            .collect();
        Report {
            accuracy: report.subset_accuracy,
            macro_f1: report.macro_avg.f1,
            weighted_f1: report.weighted.f1,
            macro_precision: report.macro_avg.precision,
            macro_recall: report.macro_avg.recall,
            per_class,
            confusion_matrix: Vec::new(),
            labels: report.labels.clone(),
            examples: report.documents,
            constant_prediction: None,
            roc_auc: report.roc_auc_macro,
            log_loss,
            ece: None,
            micro_f1: Some(report.micro.f1),
        }
    }

    /// The report with the metrics of the predicted probabilities added (ROC-AUC overall and
    /// per label, log loss): `truth` as given to [`evaluate`], `probabilities` one row per
    /// example in label order.
    pub fn with_scores<R: AsRef<[f32]>>(mut self, truth: &[usize], probabilities: &[R]) -> Result<Self, String> {
        let scores = scores::score_metrics(self.labels.len(), truth, probabilities)?;
        self.roc_auc = scores.roc_auc;
        self.log_loss = Some(scores.log_loss);
        self.ece = Some(scores.ece);
        for (class, auc) in self.per_class.iter_mut().zip(scores.per_class_auc) {
            class.roc_auc = auc;
        }
        Ok(self)
    }

    /// A readable table: per-class metrics, averages and the confusion matrix with names.
    /// Label names are shown [`printable`].
    pub fn to_table(&self) -> String {
        let labels: Vec<String> = self.labels.iter().map(|l| printable(l)).collect();
        let width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(5).max(12);
        let mut out = format!("{:<width$} {:>9} {:>9} {:>9} {:>9}\n", "", "precision", "recall", "f1", "support");
        // One row per label, in the labels' order.
        for (c, label) in self.per_class.iter().zip(&labels) {
            out += &format!("{label:<width$} {:>9.4} {:>9.4} {:>9.4} {:>9}\n", c.precision, c.recall, c.f1, c.support);
        }
        out += &format!("\n{:<width$} {:>9} {:>9} {:>9.4} {:>9}\n", "accuracy", "", "", self.accuracy, self.examples);
        out += &format!(
            "{:<width$} {:>9.4} {:>9.4} {:>9.4} {:>9}\n",
            "macro avg", self.macro_precision, self.macro_recall, self.macro_f1, self.examples
        );
        out +=
            &format!("{:<width$} {:>9} {:>9} {:>9.4} {:>9}\n", "weighted avg", "", "", self.weighted_f1, self.examples);
        if let Some(log_loss) = self.log_loss {
            out.push('\n');
            match self.roc_auc {
                Some(auc) if labels.len() == 2 => {
                    out += &format!("{:<width$} {auc:>9.4}   (of `{}`'s probability)\n", "ROC-AUC", labels[1]);
                }
                Some(auc) => out += &format!("{:<width$} {auc:>9.4}   (one-vs-rest, macro)\n", "ROC-AUC"),
                None => out += &format!("{:<width$} {:>9}   (a label has no documents)\n", "ROC-AUC", "-"),
            }
            out += &format!("{:<width$} {log_loss:>9.4}\n", "log loss");
            if let Some(ece) = self.ece {
                out += &format!(
                    "{:<width$} {ece:>9.4}   (expected calibration error, {} bins)\n",
                    "ECE",
                    scores::CALIBRATION_BINS
                );
            }
        }
        out += &format!("\nconfusion matrix (rows: true, columns: predicted)\n{:<width$}", "");
        for l in &labels {
            out += &format!(" {l:>width$}");
        }
        out.push('\n');
        for (l, row) in labels.iter().zip(&self.confusion_matrix) {
            out += &format!("{l:<width$}");
            for n in row {
                out += &format!(" {n:>width$}");
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn a_constant_prediction_is_named_only_when_the_gold_labels_vary() {
        let constant = evaluate(&labels(), &[0, 1, 2, 1], &[1, 1, 1, 1]).unwrap();
        assert_eq!(constant.constant_prediction.as_deref(), Some("b"));
        assert_eq!(serde_json::to_value(&constant).unwrap()["constant_prediction"], "b");
        let varied = evaluate(&labels(), &[0, 1, 2, 1], &[1, 1, 0, 1]).unwrap();
        assert_eq!(varied.constant_prediction, None);
        assert!(serde_json::to_value(&varied).unwrap().get("constant_prediction").is_none());
        // One gold label and the model predicting it: right, not collapsed.
        assert_eq!(evaluate(&labels(), &[2, 2, 2], &[2, 2, 2]).unwrap().constant_prediction, None);
    }

    /// From the counts alone: the same report as from the labels; a matrix of another size is
    /// refused.
    #[test]
    fn a_report_from_counts_is_the_report_from_labels() {
        let (truth, predicted) = ([0, 0, 1, 2, 2, 1], [0, 1, 1, 2, 0, 1]);
        let cm = ConfusionMatrix::new(3, &truth, &predicted).unwrap();
        assert_eq!(evaluate_counts(&labels(), cm).unwrap(), evaluate(&labels(), &truth, &predicted).unwrap());
        let small = ConfusionMatrix { counts: vec![vec![1, 0], vec![0, 1]] };
        assert!(evaluate_counts(&labels(), small).unwrap_err().contains("must be 3 × 3"));
    }

    /// Expected values checked with scikit-learn 1.9.1: `confusion_matrix(t, p)` and
    /// `classification_report(t, p, output_dict=True, zero_division=0)` for
    /// t = [0,0,0,1,1,2,2,2,2,0], p = [0,1,0,1,2,2,2,0,2,0].
    #[test]
    fn matches_scikit_learn() {
        let truth = [0, 0, 0, 1, 1, 2, 2, 2, 2, 0];
        let pred = [0, 1, 0, 1, 2, 2, 2, 0, 2, 0];
        let r = evaluate(&labels(), &truth, &pred).unwrap();
        assert_eq!(r.confusion_matrix, vec![vec![3, 1, 0], vec![0, 1, 1], vec![1, 0, 3]]);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(r.accuracy, 0.7));
        // a: P 3/4, R 3/4; b: P 1/2, R 1/2; c: P 3/4, R 3/4
        assert!(close(r.per_class[0].precision, 0.75) && close(r.per_class[0].recall, 0.75));
        assert!(close(r.per_class[1].f1, 0.5));
        assert!(close(r.macro_f1, (0.75 + 0.5 + 0.75) / 3.0));
        assert!(close(r.weighted_f1, (0.75 * 4.0 + 0.5 * 2.0 + 0.75 * 4.0) / 10.0));
        assert_eq!(r.per_class.iter().map(|c| c.support).collect::<Vec<_>>(), vec![4, 2, 4]);
    }

    #[test]
    fn classes_never_predicted_or_absent_score_zero_not_nan() {
        let r = evaluate(&labels(), &[0, 0, 1], &[0, 0, 0]).unwrap();
        assert_eq!(r.per_class[1].precision, 0.0);
        assert_eq!(r.per_class[1].recall, 0.0);
        assert_eq!(r.per_class[2].f1, 0.0);
        assert_eq!(r.per_class[2].support, 0);
        assert!(r.macro_f1.is_finite() && r.weighted_f1.is_finite());
    }

    /// scikit-learn 1.9.1: `f1_score([0, 0, 1], [0, 0, 0], average="macro", zero_division=0)`
    /// = 0.4 — label 2 ("c") is in neither list and does not count (not (0.8 + 0 + 0) / 3).
    #[test]
    fn macro_averages_skip_labels_in_neither_gold_nor_predictions() {
        let r = evaluate(&labels(), &[0, 0, 1], &[0, 0, 0]).unwrap();
        assert!((r.macro_f1 - 0.4).abs() < 1e-12, "{}", r.macro_f1);
        assert!((r.macro_precision - (2.0 / 3.0) / 2.0).abs() < 1e-12);
        assert!((r.macro_recall - 0.5).abs() < 1e-12);
        // A label only predicted counts (its F1 is 0).
        let r = evaluate(&labels(), &[0, 0], &[0, 2]).unwrap();
        assert!((r.macro_f1 - (2.0 / 3.0) / 2.0).abs() < 1e-12, "{}", r.macro_f1);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(evaluate(&labels(), &[0], &[0, 1]).is_err());
        assert!(evaluate(&labels(), &[3], &[0]).unwrap_err().contains("out of range"));
        assert!(evaluate(&labels(), &[], &[]).is_err());
    }

    #[test]
    fn table_escapes_control_characters_in_label_names() {
        let names = vec!["a\u{1b}[2J".to_string(), "b".into()];
        let t = evaluate(&names, &[0, 1], &[0, 1]).unwrap().to_table();
        assert!(!t.contains('\u{1b}') && t.matches("a\\u{1b}[2J").count() == 3, "{t}");
    }

    #[test]
    fn table_names_labels_on_both_axes() {
        let t = evaluate(&labels(), &[0, 1, 2], &[0, 2, 2]).unwrap().to_table();
        assert!(t.contains("confusion matrix (rows: true, columns: predicted)"));
        assert!(t.contains("macro avg") && t.contains("weighted avg"));
    }
}
