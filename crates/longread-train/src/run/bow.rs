//! `train --arch bow`: the bag-of-words baseline (TF-IDF word n-grams, optionally character
//! n-grams, + logistic regression),
//! C chosen by stratified cross-validation on the training data, then refitted on all of it.
//! Trained in seconds, saved as a model directory that predict, eval and serve load.

use longread_bow::logistic::{sigmoid, softmax};
use longread_bow::{
    out_of_fold_logits, out_of_fold_multilabel_logits, train, train_multilabel, BowError, BowOptions, CvScore,
    LabelWeights, TfidfSettings,
};
use longread_classifier::multilabel_eval::ScoredSets;
use longread_text::multilabel::resolve_multilabel;
use longread_text::LabelledDataset;

use crate::error::{Result, TrainError};
use crate::run::data::{read_examples, read_multilabel_examples};
use crate::run::output::RunOutput;
use crate::run::spec::{BowSpec, TrainSpec};
use crate::run::start::training_labels;
use crate::run::threshold::{after_run, after_run_per_label, AfterRun, Scored};
use crate::run::RunHooks;
use crate::trainer::Progress;

/// Default folds of the cross-validation that picks C.
const DEFAULT_FOLDS: usize = 5;

/// What a bag-of-words run found: the score of every C tried and the one chosen.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BowSummary {
    /// Mean ± std macro-F1 over the folds, per C (empty with one C).
    pub cv: Vec<CvScore>,
    /// The C of the saved model.
    pub chosen_c: f64,
    /// Folds of the cross-validation.
    pub folds: usize,
    /// Training documents.
    pub documents: usize,
    /// n-gram features of the saved model (words and characters).
    pub features: usize,
    /// The chosen C is the smallest or largest of several tried: the best may lie beyond.
    pub chosen_at_edge: bool,
}

/// The texts of `data` and their primary-task label ids; a document without a label is an error
/// naming its line, `why` completing the message.
pub(crate) fn labelled_texts<'d>(data: &'d LabelledDataset, why: &str) -> Result<(Vec<&'d str>, Vec<usize>)> {
    data.examples
        .iter()
        .zip(&data.labels[0])
        .map(|(example, label)| {
            let label =
                label.ok_or_else(|| TrainError::Run(format!("{}:{}: no label{why}", data.source, example.line)))?;
            Ok((example.text.as_str(), label))
        })
        .collect::<Result<Vec<_>>>()
        .map(|pairs| pairs.into_iter().unzip())
}

/// The bag of words `bow` describes (the run's seed and class weights from `spec`), for documents labelled `ids`, C chosen by `folds`-fold
/// cross-validation (the class weights of `--class-weights`).
pub(crate) fn bow_options(
    spec: &TrainSpec,
    bow: &BowSpec,
    ids: &[usize],
    labels: &[String],
    folds: usize,
) -> Result<BowOptions> {
    let class_weights = spec.loss_class_weights(ids, labels)?.map(|w| w.iter().map(|&v| f64::from(v)).collect());
    Ok(BowOptions { class_weights, ..unweighted_bow_options(spec, bow, folds) })
}

/// The bag of words `bow` describes (the run's seed), C chosen over `folds` folds, without
/// per-class weights (as a multi-label fit takes it: it weighs each label's own documents).
pub(crate) fn unweighted_bow_options(spec: &TrainSpec, bow: &BowSpec, folds: usize) -> BowOptions {
    BowOptions {
        tfidf: TfidfSettings {
            ngram_max: bow.ngram_max,
            min_df: bow.min_df,
            sublinear_tf: true,
            char_ngrams: bow.char_ngrams,
        },
        cs: bow.c_values.clone(),
        folds,
        seed: spec.seed,
        class_weights: None,
        ..BowOptions::default()
    }
}

/// The smallest and largest of `cs`.
fn c_range(cs: &[f64]) -> (f64, f64) {
    cs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &c| (lo.min(c), hi.max(c)))
}

/// Whether cross-validation over several `cs` chose one at an end of their range.
fn at_edge(cs: &[f64], chosen: f64) -> bool {
    let (lowest, highest) = c_range(cs);
    cs.len() > 1 && (chosen == lowest || chosen == highest)
}

/// A bag-of-words training error in the words of `train`'s flags, where one is what to change.
pub(crate) fn with_flags(e: BowError) -> String {
    match e {
        BowError::TooFewForFolds { .. } => {
            format!("{e} (`--cv K` sets the folds, `--c-values C` gives one C)")
        }
        BowError::NoFeatures { .. } => format!("{e} (`--min-df`)"),
        other => other.to_string(),
    }
}

/// Trains the bag-of-words model `bow` describes into `spec.out` (training_args.json,
/// cv.json and the model files); with `--calibrate` and `--tune-threshold`, also its
/// calibration and decision rule, on the out-of-fold probabilities of the training documents
/// at the chosen C.
pub(crate) fn run(
    spec: &TrainSpec,
    bow: &BowSpec,
    settings: &serde_json::Value,
    hooks: &mut dyn RunHooks,
) -> Result<(BowSummary, AfterRun)> {
    if spec.is_multi_label() {
        return run_multilabel(spec, bow, settings, hooks);
    }
    let output = RunOutput::create(&spec.out, settings)?;
    let labels = training_labels(spec)?;
    let (examples, source) = read_examples(&spec.train, &["label".to_string()])?;
    let data = LabelledDataset::resolve(examples, &[labels.as_slice()], &source)?;
    let (texts, ids) = labelled_texts(&data, " (every training document needs one)")?;
    if let Some(joined) = labels.iter().find(|l| l.contains(';')) {
        hooks.note(&format!(
            "note: labels such as \"{joined}\" hold `;`: if a document carries several labels, train with \
             --multi-label (a labels column joined by `;`), or each combination is a class of its own"
        ));
    }
    let folds = spec.cv.unwrap_or(DEFAULT_FOLDS);
    let options = bow_options(spec, bow, &ids, &labels, folds)?;
    hooks.note(&format!(
        "bag of words on {} documents ({}): C from {:?} by {folds}-fold cross-validation",
        texts.len(),
        labels.join(", "),
        options.cs
    ));
    let trained = train(&texts, &ids, &labels, &options, |done, total| {
        hooks.progress(Progress::Fits { done, total });
    })
    .map_err(|e| TrainError::Run(with_flags(e)))?;
    for s in &trained.cv {
        hooks.note(&format!("C {:>8}: macro-F1 {:.4} ± {:.4}", s.c, s.macro_f1_mean, s.macro_f1_std));
    }
    trained.model.save(&spec.out).map_err(|e| TrainError::Run(e.to_string()))?;
    let chosen_c = trained.model.c();
    let (lowest, highest) = c_range(&options.cs);
    let chosen_at_edge = at_edge(&options.cs, chosen_c);
    let summary = BowSummary {
        cv: trained.cv,
        chosen_c,
        folds,
        documents: texts.len(),
        features: trained.model.features(),
        chosen_at_edge,
    };
    output.write_json("cv.json", &summary)?;
    hooks.note(&format!(
        "chose C {} ({} features); model in {}",
        summary.chosen_c,
        summary.features,
        spec.out.display()
    ));
    if chosen_at_edge {
        let beyond = if chosen_c == highest { format!("{}", highest * 10.0) } else { format!("{}", lowest / 10.0) };
        let rarest = (0..labels.len()).map(|c| ids.iter().filter(|&&l| l == c).count()).min().unwrap_or(0);
        let weights = if options.class_weights.is_none() && rarest * labels.len() * 2 < ids.len() {
            format!(
                "; the rarest label has {rarest} of {} documents: --class-weights balanced keeps the model from \
                 predicting the majority label alone",
                ids.len()
            )
        } else {
            String::new()
        };
        hooks.note(&format!(
            "warning: C {chosen_c} is at the edge of --c-values {:?}: the best C may lie beyond it (try adding \
             {beyond}){weights}",
            options.cs
        ));
    }
    let after = match (spec.calibrate, spec.tune_threshold) {
        (false, None) => AfterRun::default(),
        _ => {
            note_out_of_fold(spec, chosen_c, hooks);
            let options = BowOptions { cs: vec![chosen_c], ..options };
            let logits = out_of_fold_logits(&texts, &ids, labels.len(), chosen_c, &options, |done, total| {
                hooks.progress(Progress::Fits { done, total });
            })
            .map_err(|e| TrainError::Run(with_flags(e)))?;
            // As the saved model scores a document (`BowModel::scores`).
            let probabilities: Vec<Vec<f32>> =
                logits.iter().map(|z| softmax(z).into_iter().map(|p| p as f32).collect()).collect();
            let scored = Scored { labels: &labels, truth: &ids, probabilities, current: None };
            let chosen_on =
                format!("the training documents' out-of-fold probabilities ({folds} folds, {} documents)", ids.len());
            let caveat = ("out-of-fold", "the fold models are fitted on less data than the final one");
            after_run(spec, scored, &chosen_on, caveat, hooks)?
        }
    };
    Ok((summary, after))
}

/// Tells `hooks` that the training documents are scored out of fold at `c`, and for what.
fn note_out_of_fold(spec: &TrainSpec, c: f64, hooks: &mut dyn RunHooks) {
    let flags = match (spec.calibrate, spec.tune_threshold) {
        (true, Some(_)) => "--calibrate and --tune-threshold",
        (true, None) => "--calibrate",
        _ => "--tune-threshold",
    };
    hooks.note(&format!("scoring the training documents out of fold at C {c} for {flags}"));
}

/// `train --arch bow --multi-label`: one-vs-rest logistic regression, C by micro-F1 over
/// iteratively stratified folds (the `macro_f1_*` fields of cv.json then hold micro-F1); with
/// `--calibrate` and `--tune-threshold`, each label's temperature and threshold fitted on the
/// out-of-fold probabilities of the training documents at the chosen C.
fn run_multilabel(
    spec: &TrainSpec,
    bow: &BowSpec,
    settings: &serde_json::Value,
    hooks: &mut dyn RunHooks,
) -> Result<(BowSummary, AfterRun)> {
    let layout = spec.label_layout.layout();
    let (examples, source) = read_multilabel_examples(&spec.train, &layout)?;
    let labels = crate::run::data::multilabel_training_labels(spec, &layout, &examples, &source)?;
    let (ids, _) = resolve_multilabel(&examples, &labels, &source, false)?;
    let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
    let output = RunOutput::create(&spec.out, settings)?;
    let folds = spec.cv.unwrap_or(DEFAULT_FOLDS);
    let weights = match spec.class_weights.as_str() {
        "balanced" => LabelWeights::Balanced,
        _ => LabelWeights::Equal,
    };
    let options = unweighted_bow_options(spec, bow, folds);
    let carried: usize = ids.iter().map(Vec::len).sum();
    hooks.note(&format!(
        "multi-label bag of words on {} documents ({} labels, {:.2} a document, {} with none): one-vs-rest, C from \
         {:?} by {folds}-fold cross-validation on micro-F1",
        texts.len(),
        labels.len(),
        carried as f64 / texts.len().max(1) as f64,
        ids.iter().filter(|l| l.is_empty()).count(),
        options.cs
    ));
    let trained = train_multilabel(&texts, &ids, &labels, &options, weights, |done, total| {
        hooks.progress(Progress::Fits { done, total });
    })
    .map_err(|e| TrainError::Run(with_flags(e)))?;
    for s in &trained.cv {
        hooks.note(&format!("C {:>8}: micro-F1 {:.4} ± {:.4}", s.c, s.macro_f1_mean, s.macro_f1_std));
    }
    trained.model.save(&spec.out).map_err(|e| TrainError::Run(e.to_string()))?;
    let chosen_c = trained.model.c();
    let summary = BowSummary {
        cv: trained.cv,
        chosen_c,
        folds,
        documents: texts.len(),
        features: trained.model.features(),
        chosen_at_edge: at_edge(&options.cs, chosen_c),
    };
    output.write_json("cv.json", &summary)?;
    hooks.note(&format!("chose C {chosen_c} ({} features); model in {}", summary.features, spec.out.display()));
    if summary.chosen_at_edge {
        hooks.note(&format!(
            "warning: C {chosen_c} is at the edge of --c-values {:?}: the best C may lie beyond it",
            options.cs
        ));
    }
    if !spec.calibrate && spec.tune_threshold.is_none() {
        return Ok((summary, AfterRun::default()));
    }
    note_out_of_fold(spec, chosen_c, hooks);
    let logits = out_of_fold_multilabel_logits(&texts, &ids, &labels, chosen_c, &options, weights, |done, total| {
        hooks.progress(Progress::Fits { done, total });
    })
    .map_err(|e| TrainError::Run(with_flags(e)))?;
    // As the saved model scores a document (`BowModel::scores`): each label's sigmoid.
    let probabilities: Vec<Vec<f32>> =
        logits.iter().map(|row| row.iter().map(|&z| sigmoid(z) as f32).collect()).collect();
    let truth: Vec<Vec<bool>> = ids.iter().map(|set| (0..labels.len()).map(|l| set.contains(&l)).collect()).collect();
    let source = format!("the training documents' out-of-fold probabilities ({folds} folds, {} documents)", ids.len());
    let scored = ScoredSets { labels, truth, probabilities, source };
    let caveat = "the fold models are fitted on less data than the final one";
    let after = after_run_per_label(spec, scored, ("out-of-fold", caveat), hooks)?;
    Ok((summary, after))
}
