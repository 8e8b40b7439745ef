//! The bag of words for documents that carry any number of labels: one binary logistic
//! regression per label on the shared TF-IDF features (scikit-learn's
//! `OneVsRestClassifier(LogisticRegression(C=c))`), C chosen by micro-F1 over folds made by
//! iterative stratification, each label decided at probability 0.5.

use rayon::prelude::*;

use crate::counts::{count_terms, Interner, TermCounts};
use crate::error::{BowError, Result};
use crate::logistic::{Data, LogisticRegression};
use crate::model::{check_options, vocabulary, BowModel, BowOptions, CvScore, FoldFit, Trained};
use crate::sparse::SparseRow;
use crate::tfidf::Columns;
use longread_metrics::folds::{iterative_stratified_folds, mean_std};

/// The intercept of a label that the training documents all carry, or none carry: its
/// probability is then 1 or 0 (to 13 digits) whatever the text, as scikit-learn's one-vs-rest
/// predicts such a label by a constant.
const CONSTANT_LOGIT: f64 = 30.0;

/// How a multi-label bag of words weighs each label's documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelWeights {
    /// Every document counts once in every label's fit.
    #[default]
    Equal,
    /// In each label's own fit, its carriers and the other documents weigh `n / (2 · count)`
    /// (scikit-learn's `class_weight="balanced"` per one-vs-rest estimator): rare labels are
    /// predicted more often.
    Balanced,
}

/// Trains a multi-label model on `texts`, document `d` carrying the label ids `labels[d]` (into
/// `label_names`; none is allowed): C is the candidate with the best mean micro-F1 over
/// `options.folds` folds made by iterative stratification (the features refitted on each
/// fold's training part; ties: the smaller C), then every label is fitted on every document.
/// `options.class_weights` must be `None` (`weights` says how labels are weighed). `on_fit`
/// hears each fold-and-C done and the total.
pub fn train_multilabel(
    texts: &[&str],
    labels: &[Vec<usize>],
    label_names: &[String],
    options: &BowOptions,
    weights: LabelWeights,
    mut on_fit: impl FnMut(usize, usize),
) -> Result<Trained> {
    check(texts, labels, label_names, options)?;
    let mut interner = Interner::default();
    let counts: Vec<TermCounts> = texts.iter().map(|t| count_terms(t, &options.tfidf, &mut interner)).collect();
    let all: Vec<&TermCounts> = counts.iter().collect();
    let columns = Columns::fit(&all, &options.tfidf);
    if columns.idf.is_empty() {
        return Err(BowError::NoFeatures { min_df: options.tfidf.min_df, documents: texts.len() });
    }
    let n_labels = label_names.len();
    let total = if options.cs.len() > 1 { options.folds * options.cs.len() + 1 } else { 1 };
    let mut cv = Vec::new();
    if options.cs.len() > 1 {
        let folds = iterative_stratified_folds(labels, options.folds, options.seed);
        let mut per_c: Vec<Vec<f64>> = vec![Vec::new(); options.cs.len()];
        let ones = vec![1.0; texts.len()];
        let no_class = vec![0usize; texts.len()];
        let mut done = 0;
        for held_out in &folds {
            let fold = FoldFit::without(held_out, &counts, &no_class, &ones, &options.tfidf);
            let kept: Vec<usize> = (0..texts.len()).filter(|i| held_out.binary_search(i).is_err()).collect();
            let kept_labels: Vec<&Vec<usize>> = kept.iter().map(|&i| &labels[i]).collect();
            let held_rows: Vec<SparseRow> =
                held_out.iter().map(|&i| fold.columns.row(&counts[i], options.tfidf.sublinear_tf)).collect();
            // Per label, one fit per C (ascending, each warm-starting the next): every C's
            // decisions on the held-out documents.
            let decisions: Vec<Vec<Vec<bool>>> = (0..n_labels)
                .into_par_iter()
                .map(|label| {
                    let target: Vec<bool> = kept_labels.iter().map(|l| l.contains(&label)).collect();
                    let mut previous: Option<LogisticRegression> = None;
                    options
                        .cs
                        .iter()
                        .map(|&c| {
                            let model = fit_label(
                                &fold.rows,
                                fold.columns.idf.len(),
                                &target,
                                weights,
                                c,
                                previous.as_ref(),
                                options,
                            )?;
                            let carried = held_rows.iter().map(|row| model.decision(row)[0] >= 0.0).collect();
                            previous = Some(model);
                            Ok(carried)
                        })
                        .collect::<Result<Vec<Vec<bool>>>>()
                })
                .collect::<Result<_>>()?;
            for (ci, scores) in per_c.iter_mut().enumerate() {
                let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
                for (label, by_c) in decisions.iter().enumerate() {
                    for (&d, &predicted) in held_out.iter().zip(&by_c[ci]) {
                        match (labels[d].contains(&label), predicted) {
                            (true, true) => tp += 1,
                            (false, true) => fp += 1,
                            (true, false) => fn_ += 1,
                            (false, false) => {}
                        }
                    }
                }
                scores.push(micro_f1(tp, fp, fn_));
                done += 1;
                on_fit(done, total);
            }
        }
        cv = options
            .cs
            .iter()
            .zip(&per_c)
            .map(|(&c, scores)| {
                let (mean, std) = mean_std(scores);
                CvScore { c, macro_f1_mean: mean, macro_f1_std: std }
            })
            .collect();
    }
    let c = cv
        .iter()
        .fold(None::<CvScore>, |best, s| match best {
            Some(b) if b.macro_f1_mean >= s.macro_f1_mean => Some(b),
            _ => Some(*s),
        })
        .map_or(options.cs[0], |b| b.c);
    let rows: Vec<SparseRow> = all.iter().map(|d| columns.row(d, options.tfidf.sublinear_tf)).collect();
    let fitted: Vec<LogisticRegression> = (0..n_labels)
        .into_par_iter()
        .map(|label| {
            let target: Vec<bool> = labels.iter().map(|l| l.contains(&label)).collect();
            fit_label(&rows, columns.idf.len(), &target, weights, c, None, options)
        })
        .collect::<Result<_>>()?;
    on_fit(total, total);
    let features = columns.idf.len();
    let regression = LogisticRegression {
        classes: n_labels,
        features,
        weights: fitted.iter().flat_map(|m| m.weights.iter().copied()).collect(),
        intercepts: fitted.iter().map(|m| m.intercepts[0]).collect(),
    };
    let model = BowModel {
        names: Default::default(),
        labels: label_names.to_vec(),
        tfidf: options.tfidf,
        c,
        vocabulary: vocabulary(&columns, &interner),
        idf: columns.idf,
        regression,
        multi_label: true,
    };
    Ok(Trained { model, cv })
}

/// Each label's logit for every document of `texts` (`[doc][label]`), each document scored by
/// models fitted without it: `options.folds` folds made by iterative stratification (seeded),
/// the features refitted on each fold's training part and every label fitted there at `c` with
/// `weights`, as [`train_multilabel`] fits the final model. What a multi-label model's
/// temperatures and thresholds are fitted on when it holds out no documents. `on_fit` hears
/// each fold done and the total.
pub fn out_of_fold_multilabel_logits(
    texts: &[&str],
    labels: &[Vec<usize>],
    label_names: &[String],
    c: f64,
    options: &BowOptions,
    weights: LabelWeights,
    mut on_fit: impl FnMut(usize, usize),
) -> Result<Vec<Vec<f64>>> {
    check(texts, labels, label_names, &BowOptions { cs: vec![c], ..options.clone() })?;
    if options.folds < 2 || texts.len() < options.folds {
        return Err(BowError::TooFewForFolds { folds: options.folds, rarest: texts.len() });
    }
    let mut interner = Interner::default();
    let counts: Vec<TermCounts> = texts.iter().map(|t| count_terms(t, &options.tfidf, &mut interner)).collect();
    let folds = iterative_stratified_folds(labels, options.folds, options.seed);
    let (ones, no_class) = (vec![1.0; texts.len()], vec![0usize; texts.len()]);
    let mut logits = vec![Vec::new(); texts.len()];
    for (done, held_out) in folds.iter().enumerate() {
        let fold = FoldFit::without(held_out, &counts, &no_class, &ones, &options.tfidf);
        let kept: Vec<usize> = (0..texts.len()).filter(|i| held_out.binary_search(i).is_err()).collect();
        let held_rows: Vec<SparseRow> =
            held_out.iter().map(|&i| fold.columns.row(&counts[i], options.tfidf.sublinear_tf)).collect();
        // Per label, its logit for each held-out document.
        let by_label: Vec<Vec<f64>> = (0..label_names.len())
            .into_par_iter()
            .map(|label| {
                let target: Vec<bool> = kept.iter().map(|&i| labels[i].contains(&label)).collect();
                let model = fit_label(&fold.rows, fold.columns.idf.len(), &target, weights, c, None, options)?;
                Ok(held_rows.iter().map(|row| model.decision(row)[0]).collect())
            })
            .collect::<Result<_>>()?;
        for (h, &i) in held_out.iter().enumerate() {
            logits[i] = by_label.iter().map(|column| column[h]).collect();
        }
        on_fit(done + 1, folds.len());
    }
    Ok(logits)
}

/// One label's binary fit (one weight row): a label that every or no document carries is a
/// constant (zero weights, intercept ±[`CONSTANT_LOGIT`]).
fn fit_label(
    rows: &[SparseRow],
    features: usize,
    target: &[bool],
    weights: LabelWeights,
    c: f64,
    start: Option<&LogisticRegression>,
    options: &BowOptions,
) -> Result<LogisticRegression> {
    let positives = target.iter().filter(|&&t| t).count();
    if positives == 0 || positives == target.len() {
        let sign = if positives == 0 { -1.0 } else { 1.0 };
        return Ok(LogisticRegression {
            classes: 2,
            features,
            weights: vec![0.0; features],
            intercepts: vec![sign * CONSTANT_LOGIT],
        });
    }
    let ids: Vec<usize> = target.iter().map(|&t| usize::from(t)).collect();
    let n = target.len() as f64;
    let sample_weights: Vec<f64> = match weights {
        LabelWeights::Equal => vec![1.0; target.len()],
        LabelWeights::Balanced => {
            let (pos, neg) = (n / (2.0 * positives as f64), n / (2.0 * (target.len() - positives) as f64));
            target.iter().map(|&t| if t { pos } else { neg }).collect()
        }
    };
    let data = Data { rows, labels: &ids, sample_weights: &sample_weights, classes: 2, features };
    // A constant start (from a C where the fold held no carrier) is no better than zeros.
    let start = start.filter(|s| s.weights.iter().any(|&w| w != 0.0));
    LogisticRegression::fit(data, c, start, options.solver)
}

/// Micro-F1 from summed counts (0 when nothing is carried or predicted, as scikit-learn's
/// `zero_division=0`).
fn micro_f1(tp: usize, fp: usize, fn_: usize) -> f64 {
    let denominator = 2 * tp + fp + fn_;
    if denominator == 0 {
        0.0
    } else {
        2.0 * tp as f64 / denominator as f64
    }
}

/// Refuses input a multi-label fit cannot use, with what to do.
fn check(texts: &[&str], labels: &[Vec<usize>], label_names: &[String], options: &BowOptions) -> Result<()> {
    let bad = |m: String| Err(BowError::InvalidInput(m));
    if texts.len() != labels.len() {
        return bad(format!("{} texts but {} label lists", texts.len(), labels.len()));
    }
    if texts.is_empty() {
        return bad("no training documents".into());
    }
    if label_names.is_empty() {
        return bad("a multi-label classifier needs at least one label".into());
    }
    if let Some(&l) = labels.iter().flatten().find(|&&l| l >= label_names.len()) {
        return bad(format!("label id {l} is out of range for {} labels", label_names.len()));
    }
    if options.class_weights.is_some() {
        return bad("per-class weights apply to single-label models; a multi-label model weighs each label's fit \
                    (balanced or equal)"
            .into());
    }
    check_options(options, label_names)?;
    if labels.iter().flatten().next().is_none() {
        return bad("no training document carries any label: there is nothing to learn".into());
    }
    if options.cs.len() > 1 && (options.folds < 2 || texts.len() < options.folds) {
        return Err(BowError::TooFewForFolds { folds: options.folds, rarest: texts.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TfidfSettings;

    /// Documents about fruit, cars, both or neither.
    fn corpus() -> (Vec<String>, Vec<Vec<usize>>) {
        let fruit = ["ripe apples", "sweet pears", "fresh plums", "juicy apples"];
        let cars = ["fast engines", "loud engines", "new tyres", "worn tyres"];
        let other = ["quiet rooms", "long walks", "open doors", "calm rivers"];
        let mut texts = Vec::new();
        let mut labels = Vec::new();
        for i in 0..40 {
            let (f, c, o) = (fruit[(i / 4) % 4], cars[(i / 4 + 1) % 4], other[(i / 4 + 2) % 4]);
            let (text, ids) = match i % 4 {
                0 => (format!("{f} and {o}"), vec![0]),
                1 => (format!("{c} and {o}"), vec![1]),
                2 => (format!("{f} with {c} and {o}"), vec![0, 1]),
                _ => (format!("{o} all day and {o}"), vec![]),
            };
            texts.push(text);
            labels.push(ids);
        }
        (texts, labels)
    }

    fn names() -> Vec<String> {
        vec!["fruit".into(), "cars".into()]
    }

    fn options(cs: Vec<f64>) -> BowOptions {
        BowOptions {
            tfidf: TfidfSettings { min_df: 1, ..TfidfSettings::default() },
            cs,
            folds: 4,
            ..Default::default()
        }
    }

    /// Each label is decided on its own: both, either or neither is predicted, and the
    /// probabilities are the sigmoids of the logits.
    #[test]
    fn each_label_is_predicted_on_its_own() {
        let (texts, labels) = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let trained =
            train_multilabel(&refs, &labels, &names(), &options(vec![10.0]), LabelWeights::Equal, |_, _| {}).unwrap();
        let model = trained.model;
        assert!(model.multi_label());
        let carried =
            |text: &str| -> Vec<bool> { model.scores(text).unwrap().probabilities.iter().map(|&p| p >= 0.5).collect() };
        assert_eq!(carried("ripe apples and fast engines"), [true, true]);
        assert_eq!(carried("sweet pears and quiet rooms"), [true, false]);
        assert_eq!(carried("loud engines and long walks"), [false, true]);
        assert_eq!(carried("calm rivers all day and open doors"), [false, false]);
        let s = model.scores("fresh plums").unwrap();
        for (z, p) in s.logits.iter().zip(&s.probabilities) {
            assert!((crate::logistic::sigmoid(f64::from(*z)) as f32 - p).abs() < 1e-6);
        }
    }

    /// C is chosen by micro-F1 over the folds; a label no document carries is a constant "no".
    #[test]
    fn c_is_chosen_by_cross_validation_and_an_absent_label_is_never_predicted() {
        let (texts, labels) = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let names = vec!["fruit".into(), "cars".into(), "boats".into()];
        let mut fits = 0;
        let trained =
            train_multilabel(&refs, &labels, &names, &options(vec![0.01, 100.0]), LabelWeights::Balanced, |d, t| {
                fits = t;
                assert!(d <= t);
            })
            .unwrap();
        assert_eq!(fits, 4 * 2 + 1);
        assert_eq!(trained.cv.len(), 2);
        let best = trained.cv.iter().map(|s| s.macro_f1_mean).fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(trained.cv.iter().find(|s| s.macro_f1_mean == best).unwrap().c, trained.model.c());
        assert!(best > 0.9, "{:?}", trained.cv);
        let p = trained.model.scores("ripe apples").unwrap().probabilities;
        assert!(p[2] < 1e-9, "{p:?}");
    }

    #[test]
    fn out_of_fold_logits_come_from_models_that_did_not_see_the_document() {
        let (texts, labels) = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let options = BowOptions { folds: 3, ..options(vec![10.0]) };
        let oof =
            out_of_fold_multilabel_logits(&refs, &labels, &names(), 10.0, &options, LabelWeights::Equal, |_, _| {})
                .unwrap();
        assert_eq!(oof.len(), texts.len());
        assert!(oof.iter().all(|row| row.len() == names().len()));
        // Seeded: the same folds and logits again.
        let again =
            out_of_fold_multilabel_logits(&refs, &labels, &names(), 10.0, &options, LabelWeights::Equal, |_, _| {})
                .unwrap();
        assert_eq!(oof, again);
        // Held out, a document scores lower on its own labels than the model fitted on it
        // scores it, yet still ranks its labels above the others on this separable corpus.
        let trained = train_multilabel(&refs, &labels, &names(), &options, LabelWeights::Equal, |_, _| {}).unwrap();
        let mut lower = 0;
        for (d, row) in oof.iter().enumerate() {
            let fitted = trained.model.scores(&texts[d]).unwrap().logits;
            for &l in &labels[d] {
                lower += usize::from(row[l] < f64::from(fitted[l]));
            }
        }
        assert!(lower * 2 > labels.iter().map(Vec::len).sum::<usize>(), "{lower}");
        let right = oof
            .iter()
            .zip(&labels)
            .filter(|(row, set)| (0..row.len()).all(|l| (row[l] >= 0.0) == set.contains(&l)))
            .count();
        assert!(right * 2 > texts.len(), "{right} of {} documents' sets right out of fold", texts.len());
        let err = out_of_fold_multilabel_logits(
            &refs[..2],
            &labels[..2],
            &names(),
            10.0,
            &options,
            LabelWeights::Equal,
            |_, _| {},
        )
        .unwrap_err();
        assert!(matches!(err, BowError::TooFewForFolds { .. }), "{err}");
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        let (texts, labels) = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let none: Vec<Vec<usize>> = vec![Vec::new(); texts.len()];
        let err = train_multilabel(&refs, &none, &names(), &options(vec![1.0]), LabelWeights::Equal, |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("no training document carries any label"), "{err}");
        let weighted = BowOptions { class_weights: Some(vec![1.0, 2.0]), ..options(vec![1.0]) };
        let err = train_multilabel(&refs, &labels, &names(), &weighted, LabelWeights::Equal, |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("single-label"), "{err}");
        let out_of_range = vec![vec![2]; texts.len()];
        let err = train_multilabel(&refs, &out_of_range, &names(), &options(vec![1.0]), LabelWeights::Equal, |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("out of range"), "{err}");
    }
}
