//! Out-of-fold scores: each training document scored by a model fitted without it (stratified
//! K folds, one C). What a model that learns on top of the bag of words' scores must train on:
//! the scores of a model fitted on all documents are near-perfect on those same documents, and
//! a model trained on them learns to trust the bag of words far more than it deserves.

use crate::counts::{count_terms, Interner, TermCounts};
use crate::error::{BowError, Result};
use crate::logistic::LogisticRegression;
use crate::model::{BowOptions, FoldFit};
use longread_metrics::folds::stratified_folds;

/// Class logits of every document of `texts` (`[doc][label]`), each from a model fitted on the
/// other folds with `c` (the features refitted per fold, as [`crate::train`] does). `on_fit`
/// hears each fold done and the total.
pub fn out_of_fold_logits(
    texts: &[&str],
    labels: &[usize],
    classes: usize,
    c: f64,
    options: &BowOptions,
    mut on_fit: impl FnMut(usize, usize),
) -> Result<Vec<Vec<f64>>> {
    let mut per_class = vec![0usize; classes];
    labels.iter().for_each(|&l| per_class[l.min(classes - 1)] += 1);
    let rarest = per_class.iter().filter(|&&n| n > 0).min().copied().unwrap_or(0);
    if texts.len() != labels.len() || options.folds < 2 || rarest < options.folds {
        return Err(BowError::InvalidInput(format!(
            "{}-fold out-of-fold scores need at least 2 folds and as many documents of every label (the rarest \
             has {rarest})",
            options.folds
        )));
    }
    let mut interner = Interner::default();
    let counts: Vec<TermCounts> = texts.iter().map(|t| count_terms(t, &options.tfidf, &mut interner)).collect();
    let weights: Vec<f64> = labels.iter().map(|&l| options.class_weights.as_ref().map_or(1.0, |w| w[l])).collect();
    let folds = stratified_folds(labels, options.folds, options.seed);
    let mut logits = vec![Vec::new(); texts.len()];
    for (done, held_out) in folds.iter().enumerate() {
        let fold = FoldFit::without(held_out, &counts, labels, &weights, &options.tfidf);
        let model = LogisticRegression::fit(fold.data(classes), c, None, options.solver)?;
        for &i in held_out {
            logits[i] = model.logits(&fold.columns.row(&counts[i], options.tfidf.sublinear_tf));
        }
        on_fit(done + 1, folds.len());
    }
    Ok(logits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::train;
    use crate::TfidfSettings;

    fn corpus() -> (Vec<String>, Vec<usize>) {
        let mut texts = Vec::new();
        let mut labels = Vec::new();
        for i in 0..20 {
            let (word, label) = if i % 2 == 0 { ("apples orchard", 0) } else { ("engines garage", 1) };
            texts.push(format!("{word} {word} document number{i} shared words here"));
            labels.push(label);
        }
        (texts, labels)
    }

    #[test]
    fn each_document_is_scored_by_a_model_that_did_not_see_it() {
        let (texts, labels) = corpus();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let options = BowOptions { tfidf: TfidfSettings::default(), folds: 4, seed: 3, ..BowOptions::default() };
        let oof = out_of_fold_logits(&texts, &labels, 2, 1.0, &options, |_, _| {}).unwrap();
        assert_eq!(oof.len(), texts.len());
        // The fold models still separate the two topics…
        for (z, &l) in oof.iter().zip(&labels) {
            assert_eq!(usize::from(z[1] > z[0]), l, "{z:?}");
        }
        // …and a held-out document is scored by the fold's model, not by the model fitted on
        // everything: a fit on all 20 documents is more confident on them.
        let names = vec!["a".to_string(), "b".to_string()];
        let all =
            train(&texts, &labels, &names, &BowOptions { cs: vec![1.0], ..options.clone() }, |_, _| {}).unwrap().model;
        let margin = |z: &[f64], l: usize| if l == 1 { z[1] - z[0] } else { z[0] - z[1] };
        let full: f64 = texts
            .iter()
            .zip(&labels)
            .map(|(t, &l)| margin(&all.scores(t).unwrap().logits.iter().map(|&v| v as f64).collect::<Vec<_>>(), l))
            .sum();
        let held: f64 = oof.iter().zip(&labels).map(|(z, &l)| margin(z, l)).sum();
        assert!(held < full, "out-of-fold margins {held} should be below the in-sample ones {full}");
        // Same seed, same scores.
        assert_eq!(oof, out_of_fold_logits(&texts, &labels, 2, 1.0, &options, |_, _| {}).unwrap());
    }

    #[test]
    fn too_few_documents_of_a_label_for_the_folds_is_refused() {
        let texts = ["red apples", "green apples", "fast engines"];
        let options = BowOptions { folds: 2, ..BowOptions::default() };
        let err = out_of_fold_logits(&texts, &[0, 0, 1], 2, 1.0, &options, |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("rarest has 1"), "{err}");
    }
}
