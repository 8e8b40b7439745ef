//! `train --wide-bow`: the wide side of a wide-and-deep model. A bag of words (the `--arch bow`
//! settings) is fitted on the training documents first, and its scores become fixed offsets of
//! the encoder model's logits while the deep side trains: `logits = deep + s · ln p_bow`.
//!
//! Designed against what lost on rating data (out-of-fold TF-IDF log-probabilities through a
//! learned 3×3 layer on a fully fine-tuned encoder, below both parts): the wide side
//! is fitted first and then held fixed — no layer on it for the deep side's gradients to bend;
//! the training documents get out-of-fold scores (a bag of words scored on its own training
//! documents is near-perfect, and the deep side would learn to leave everything to it); its one
//! scale `s` is the inverse temperature of least out-of-fold log loss, so the offsets are
//! calibrated log-probabilities; and the deep side learns only what they miss.
//!
//! A multi-label model's wide side is a one-vs-rest bag of words (`--arch bow --multi-label`)
//! whose per-label log-odds, times one scale fitted the same way (the inverse temperature of
//! least out-of-fold binary cross-entropy over every label), are added to the deep side's
//! per-label logits: `σ(deep + s · z_bow)` each.

use longread_bow::logistic::{argmax, log_softmax, softmax};
use longread_bow::{
    out_of_fold_logits, out_of_fold_multilabel_logits, train, train_multilabel, BowModel, LabelWeights,
};
use longread_classifier::calibration::fit_temperature;
use longread_classifier::decision::label_temperature::{bce, least_on_log_scale};
use longread_text::multilabel::MultiLabelExample;
use longread_text::LabelledDataset;

use crate::error::{Result, TrainError};
use crate::run::bow::{bow_options, labelled_texts, unweighted_bow_options, with_flags};
use crate::run::spec::{BowSpec, TrainSpec};

/// Most folds of the wide side's cross-validation (C and the out-of-fold scores).
const WIDE_FOLDS: usize = 5;

/// The fitted wide side and the offsets of the training and dev documents.
pub struct WideSide {
    /// The bag of words fitted on every training document (kept in the model's `wide/`).
    pub bow: BowModel,
    /// Its log-probabilities' multiplier.
    pub scale: f64,
    /// `s · ln p` (multi-label: `s · z`, each label's log-odds) of each training document,
    /// out of fold, `[doc][label]`.
    pub train: Vec<Vec<f32>>,
    /// The same of each dev document from `bow`, `[doc][label]`.
    pub dev: Vec<Vec<f32>>,
}

/// Fits the wide side on `train_data` (primary-task labels `labels`) and scores `dev`; `note` hears
/// what was fitted.
pub fn fit_wide(
    spec: &TrainSpec,
    bow: &BowSpec,
    train_data: &LabelledDataset,
    dev: &LabelledDataset,
    labels: &[String],
    note: &mut dyn FnMut(&str),
) -> Result<WideSide> {
    let (texts, ids) =
        labelled_texts(train_data, ": --wide-bow fits its bag of words on every training document, so each needs one")?;
    let rarest = (0..labels.len()).map(|c| ids.iter().filter(|&&l| l == c).count()).min().unwrap_or(0);
    let folds = rarest.min(WIDE_FOLDS);
    if folds < 2 {
        return Err(TrainError::Run(format!(
            "--wide-bow scores every training document by a bag of words fitted without it: that needs at least 2 \
             training documents of every label (the rarest has {rarest})"
        )));
    }
    let bow_error = |e: longread_bow::BowError| TrainError::Run(format!("--wide-bow: {}", with_flags(e)));
    let options = bow_options(spec, bow, &ids, labels, folds)?;
    let fitted = train(&texts, &ids, labels, &options, |_, _| {}).map_err(bow_error)?;
    let c = fitted.model.c();
    let oof = out_of_fold_logits(&texts, &ids, labels.len(), c, &options, |_, _| {}).map_err(bow_error)?;
    let probabilities: Vec<Vec<f64>> = oof.iter().map(|z| softmax(z)).collect();
    let all: Vec<usize> = (0..texts.len()).collect();
    let scale = 1.0 / fit_temperature(&probabilities, &ids, &all);
    let offsets = |z: &[f64]| log_softmax(z).into_iter().map(|l| (scale * l) as f32).collect::<Vec<f32>>();
    let dev_offsets = dev
        .examples
        .iter()
        .map(|e| {
            let scores = fitted.model.scores(&e.text).map_err(|err| {
                TrainError::Run(format!("{}:{}: the wide bag of words cannot read it: {err}", dev.source, e.line))
            })?;
            Ok(offsets(&scores.logits.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()))
        })
        .collect::<Result<Vec<_>>>()?;
    let correct = oof.iter().zip(&ids).filter(|(z, &l)| argmax(z) == l).count();
    let log_loss =
        probabilities.iter().zip(&ids).map(|(p, &l)| -(p[l].max(1e-12)).ln()).sum::<f64>() / ids.len() as f64;
    note(&format!(
        "wide side: bag of words on {} documents, {} features, C {c} ({folds}-fold CV); out of fold accuracy {:.4}, \
         log loss {log_loss:.4}; its log-probabilities × {scale:.3} are added to the logits",
        texts.len(),
        fitted.model.features(),
        correct as f64 / ids.len() as f64,
    ));
    Ok(WideSide { bow: fitted.model, scale, train: oof.iter().map(|z| offsets(z)).collect(), dev: dev_offsets })
}

/// [`fit_wide`] for a multi-label model: a one-vs-rest bag of words fitted on the training
/// documents `texts` (label ids `sets` into `labels`; C by micro-F1 over iteratively stratified
/// folds; each label's fit balanced when the deep side weighs positives, `--pos-weight auto`),
/// each label's out-of-fold log-odds as the training offsets and the fitted model's on `dev`,
/// all times the one scale of least out-of-fold binary cross-entropy.
pub fn fit_wide_multilabel(
    spec: &TrainSpec,
    bow: &BowSpec,
    train: &[MultiLabelExample],
    sets: &[Vec<usize>],
    dev: &[MultiLabelExample],
    labels: &[String],
    note: &mut dyn FnMut(&str),
) -> Result<WideSide> {
    let texts: Vec<&str> = train.iter().map(|e| e.text.as_str()).collect();
    let folds = texts.len().min(WIDE_FOLDS);
    if folds < 2 {
        return Err(TrainError::Run(
            "--wide-bow scores every training document by a bag of words fitted without it: that needs at least 2 \
             training documents"
                .into(),
        ));
    }
    let weights = match spec.pos_weight.as_deref() {
        Some("auto") => LabelWeights::Balanced,
        _ => LabelWeights::Equal,
    };
    let options = unweighted_bow_options(spec, bow, folds);
    let bow_error = |e: longread_bow::BowError| TrainError::Run(format!("--wide-bow: {}", with_flags(e)));
    let fitted = train_multilabel(&texts, sets, labels, &options, weights, |_, _| {}).map_err(bow_error)?;
    let c = fitted.model.c();
    let oof =
        out_of_fold_multilabel_logits(&texts, sets, labels, c, &options, weights, |_, _| {}).map_err(bow_error)?;
    let truth: Vec<Vec<bool>> = sets.iter().map(|set| (0..labels.len()).map(|l| set.contains(&l)).collect()).collect();
    let loss = |scale: f64| {
        let pairs = oof.iter().zip(&truth).flat_map(|(z, t)| z.iter().zip(t));
        let total: f64 = pairs.map(|(&z, &y)| bce(scale * z, y)).sum();
        total / (oof.len() * labels.len()).max(1) as f64
    };
    // The inverse of a temperature in the range `calibrate` fits, as the single-label scale is.
    let (low, high) = longread_classifier::decision::temperature::TEMPERATURE_RANGE;
    let scale = least_on_log_scale(loss, (1.0 / high, 1.0 / low));
    let at_bound = scale > 1.0 / low / 1.01 || scale < 1.0 / high * 1.01;
    let dev_offsets = dev
        .iter()
        .map(|e| {
            let scores = fitted.model.scores(&e.text).map_err(|err| {
                TrainError::Run(format!("line {}: the wide bag of words cannot read it: {err}", e.line))
            })?;
            Ok(scores.logits.iter().map(|&z| (scale * f64::from(z)) as f32).collect())
        })
        .collect::<Result<Vec<Vec<f32>>>>()?;
    let carried = oof.iter().zip(&truth).flat_map(|(z, t)| z.iter().zip(t));
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    for (&z, &y) in carried {
        match (z >= 0.0, y) {
            (true, true) => tp += 1,
            (true, false) => fp += 1,
            (false, true) => fn_ += 1,
            (false, false) => {}
        }
    }
    let micro = if tp == 0 { 0.0 } else { 2.0 * tp as f64 / (2 * tp + fp + fn_) as f64 };
    note(&format!(
        "wide side: multi-label bag of words on {} documents, {} features, C {c} ({folds}-fold CV); out of fold \
         micro-F1 {micro:.4}, binary log loss {:.4} → {:.4} scaled; each label's log-odds × {scale:.3} are added to its \
         logit",
        texts.len(),
        fitted.model.features(),
        loss(1.0),
        loss(scale),
    ));
    if at_bound {
        note(&format!(
            "note: the wide side's scale stopped at {scale:.3}, an end of its range: out of fold the bag of words {}",
            if scale > 1.0 { "separates the labels almost perfectly, and dominates" } else { "carries little" }
        ));
    }
    let train_offsets = oof.iter().map(|z| z.iter().map(|&v| (scale * v) as f32).collect()).collect();
    Ok(WideSide { bow: fitted.model, scale, train: train_offsets, dev: dev_offsets })
}
