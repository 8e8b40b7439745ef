//! Evaluation: a [`Classifier`] over labelled documents, scored per task with
//! `longread_metrics` (accuracy, per-class precision/recall/F1, macro/weighted F1, confusion).

use longread_metrics::bootstrap::{Bootstrap, Interval, Metric};
use longread_metrics::scores::score_metrics;
use longread_metrics::Report;
use longread_text::labelled::label_list;
use longread_text::{read_labelled_columns, resolve_column, Document, Example};

use crate::Classifier;
use longread_model::error::{ModelError, Result};
use longread_model::hierarchical::TaskSpec;

/// One task's evaluation.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// The task (name, data column, labels).
    pub task: TaskSpec,
    /// Its metrics.
    pub report: Report,
}

/// Reads labelled JSON lines (each task's label in its column; a multi-task line may lack
/// some) and evaluates `classifier` on them: one report per task, the primary task first.
/// `on_document` is called after each document is scored.
pub fn evaluate_reader(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    on_document: impl FnMut(),
) -> Result<Vec<TaskReport>> {
    let columns: Vec<String> = classifier.tasks().iter().map(|t| t.column.clone()).collect();
    let examples = read_labelled_columns(reader, source_name, &columns)?;
    evaluate_examples(classifier, &examples, source_name, on_document)
}

/// Evaluates `classifier` on `examples` (labels in the tasks' column order). A document that
/// cannot be classified fails the evaluation, naming it.
pub fn evaluate_examples(
    classifier: &Classifier,
    examples: &[Example],
    source_name: &str,
    mut on_document: impl FnMut(),
) -> Result<Vec<TaskReport>> {
    let tasks = classifier.tasks();
    let truth: Vec<Vec<Option<usize>>> = tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| resolve_column(examples, t, &spec.labels, source_name))
        .collect::<std::result::Result<_, _>>()?;
    // predicted[task][document]: the label and probabilities, when the model gave the task's.
    let mut predicted: Vec<Vec<Option<Scored>>> = vec![Vec::with_capacity(examples.len()); tasks.len()];
    classify_labelled(classifier, examples, source_name, |prediction| {
        for (t, spec) in tasks.iter().enumerate() {
            let label = prediction.task_label_index(t, &spec.name);
            let probabilities = prediction.task_probabilities(t, &spec.name);
            predicted[t].push(label.zip(probabilities).map(|(l, p)| (l, p.to_vec())));
        }
        on_document();
    })?;
    tasks
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let (gold, scores): (Vec<usize>, Vec<&Option<Scored>>) =
                truth[t].iter().zip(&predicted[t]).filter_map(|(gold, p)| gold.map(|g| (g, p))).unzip();
            if gold.is_empty() {
                return Err(ModelError::InvalidInput(format!(
                    "{source_name}: no document has a label for task {} (column \"{}\")",
                    spec.name, spec.column
                )));
            }
            let report = scored_report(&spec.labels, &gold, &scores)?;
            Ok(TaskReport { task: spec.clone(), report })
        })
        .collect()
}

/// A document's predicted label index and probabilities for one task.
type Scored = (usize, Vec<f32>);

/// The metrics of `gold` labels against predicted `scores` (a missing row counts as the first
/// label, without probability metrics): the labels' metrics, and the probabilities' (ROC-AUC,
/// log loss) when every document has them.
fn scored_report(labels: &[String], gold: &[usize], scores: &[&Option<Scored>]) -> Result<Report> {
    let predicted: Vec<usize> = scores.iter().map(|p| p.as_ref().map_or(0, |(l, _)| *l)).collect();
    let report = longread_metrics::evaluate(labels, gold, &predicted).map_err(ModelError::InvalidInput)?;
    let rows: Option<Vec<&[f32]>> = scores.iter().map(|p| p.as_ref().map(|(_, p)| p.as_slice())).collect();
    match rows {
        Some(rows) => report.with_scores(gold, &rows).map_err(ModelError::InvalidInput),
        None => Ok(report),
    }
}

/// Classifies labelled examples, handing each prediction to `on_prediction` in order; a
/// document that cannot be classified fails the evaluation, naming it. Each example becomes a
/// document to classify as its turn comes (a copy of every text held at once doubled the
/// memory an evaluation takes).
fn classify_labelled(
    classifier: &Classifier,
    examples: &[Example],
    source_name: &str,
    mut on_prediction: impl FnMut(&crate::Prediction),
) -> Result<()> {
    let documents = || examples.iter().map(|e| Document::new(e.id.clone(), e.text.clone()));
    classifier.classify_stream(documents, |document, result| {
        let prediction = result
            .map_err(|e| ModelError::InvalidInput(format!("{source_name}: document {}: {}", document.id, e.message)))?;
        on_prediction(&prediction);
        Ok::<(), ModelError>(())
    })
}

/// One model of a [`compare`]: its metrics on the primary task with bootstrap intervals, and
/// its paired bootstrap p-values against the first model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelScores {
    /// The model directory as given.
    pub model: String,
    /// Every metric on all documents.
    pub report: Report,
    /// Interval of the accuracy.
    pub accuracy_ci: Interval,
    /// Interval of the macro-F1.
    pub macro_f1_ci: Interval,
    /// Interval of each label's recall, in label order.
    pub recall_ci: Vec<Interval>,
    /// Paired p-value of the accuracy difference with the first model (none for the first).
    pub accuracy_p_value: Option<f64>,
    /// Paired p-value of the macro-F1 difference with the first model.
    pub macro_f1_p_value: Option<f64>,
    /// Interval of the ROC-AUC (absent where the AUC is undefined: a label without documents).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_ci: Option<Interval>,
    /// Paired p-value of the ROC-AUC difference with the first model (none for the first, or
    /// where the AUC is undefined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roc_auc_p_value: Option<f64>,
    /// Interval of the log loss of the probabilities (lower is better: how far from the truth
    /// the model's confidence is; `calibrate` lowers it).
    pub log_loss_ci: Interval,
    /// Paired p-value of the log-loss difference with the first model (none for the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_loss_p_value: Option<f64>,
}

/// Several models on the same labelled documents.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// The primary task's labels (the same for every model).
    pub labels: Vec<String>,
    /// Documents scored.
    pub documents: usize,
    /// Resamples of the bootstrap.
    pub resamples: usize,
    /// Coverage of the intervals.
    pub level: f64,
    /// One entry per model, in the order given.
    pub models: Vec<ModelScores>,
}

/// Scores every model on the labelled JSON lines of `reader` (primary task: the `"label"`
/// column or the first model's primary column) and compares them: bootstrap intervals of
/// accuracy, macro-F1, ROC-AUC, log loss and per-label recall, and paired bootstrap p-values
/// against the first model. The models must share the primary task's labels, and `bootstrap` must pass
/// [`Bootstrap::check`]. `on_document` is called after each document of each model.
pub fn compare(
    models: &[(String, &Classifier)],
    reader: impl std::io::BufRead,
    source_name: &str,
    bootstrap: Bootstrap,
    mut on_document: impl FnMut(),
) -> Result<Comparison> {
    bootstrap.check().map_err(ModelError::InvalidInput)?;
    let Some((first_name, first)) = models.first() else {
        return Err(ModelError::InvalidInput("compare needs at least one model".into()));
    };
    let task = &first.tasks()[0];
    // Each model's label indices in the first model's order: models whose labels are the same
    // names in another order (a bag of words sorts them; `init --labels` keeps the order given)
    // are compared label by label.
    let mut orders: Vec<Vec<usize>> = Vec::with_capacity(models.len());
    for (name, model) in models {
        let order = label_order(model.labels(), &task.labels).ok_or_else(|| {
            ModelError::InvalidInput(format!(
                "{name} has the labels {} but {first_name} has {}: models compare only on the same labels",
                label_list(model.labels()),
                label_list(&task.labels)
            ))
        })?;
        orders.push(order);
    }
    let examples = read_labelled_columns(reader, source_name, std::slice::from_ref(&task.column))?;
    let gold = resolve_column(&examples, 0, &task.labels, source_name)?;
    // (labels, probabilities)[model][document], in the first model's label order
    let mut predictions: Vec<Vec<usize>> = Vec::with_capacity(models.len());
    let mut probabilities: Vec<Vec<Vec<f32>>> = Vec::with_capacity(models.len());
    for ((_, model), order) in models.iter().zip(&orders) {
        // The model's label index → the first model's.
        let mut ours = vec![0; order.len()];
        for (i, &k) in order.iter().enumerate() {
            ours[k] = i;
        }
        let (mut labels, mut scores) = (Vec::with_capacity(examples.len()), Vec::with_capacity(examples.len()));
        classify_labelled(model, &examples, source_name, |prediction| {
            labels.push(ours[prediction.label_index()]);
            let p = prediction.probabilities();
            scores.push(order.iter().map(|&k| p[k]).collect());
            on_document();
        })?;
        predictions.push(labels);
        probabilities.push(scores);
    }
    // Documents without the primary label do not count.
    let kept: Vec<usize> = (0..gold.len()).filter(|&i| gold[i].is_some()).collect();
    if kept.is_empty() {
        return Err(ModelError::InvalidInput(format!("{source_name}: no document has a label in \"{}\"", task.column)));
    }
    let truth: Vec<usize> = kept.iter().filter_map(|&i| gold[i]).collect();
    let probabilities: Vec<Vec<Vec<f32>>> =
        probabilities.iter().map(|p| kept.iter().map(|&i| p[i].clone()).collect()).collect();
    let predictions: Vec<Vec<usize>> = predictions.iter().map(|p| kept.iter().map(|&i| p[i]).collect()).collect();
    let labels = &task.labels;
    let (accuracy, macro_f1): (Metric, Metric) = (|r| r.accuracy, |r| r.macro_f1);
    // Model m's ROC-AUC on the documents `idx` of a resample.
    let auc = |m: usize, idx: &[usize]| {
        let t: Vec<usize> = idx.iter().map(|&i| truth[i]).collect();
        let p: Vec<&[f32]> = idx.iter().map(|&i| probabilities[m][i].as_slice()).collect();
        score_metrics(labels.len(), &t, &p).ok().and_then(|s| s.roc_auc)
    };
    // Model m's log loss on the documents `idx` of a resample.
    let log_loss = |m: usize, idx: &[usize]| {
        let t: Vec<usize> = idx.iter().map(|&i| truth[i]).collect();
        let p: Vec<&[f32]> = idx.iter().map(|&i| probabilities[m][i].as_slice()).collect();
        Some(longread_metrics::scores::log_loss(&t, &p))
    };
    let scores = models
        .iter()
        .zip(&predictions)
        .enumerate()
        .map(|(m, ((name, _), predicted))| {
            let report = longread_metrics::evaluate(labels, &truth, predicted)
                .and_then(|r| r.with_scores(&truth, &probabilities[m]))
                .map_err(ModelError::InvalidInput)?;
            let recall_ci = (0..labels.len())
                .map(|c| {
                    // A label's recall on its own documents.
                    let own: Vec<usize> = (0..truth.len()).filter(|&i| truth[i] == c).collect();
                    let t: Vec<usize> = own.iter().map(|&i| truth[i]).collect();
                    let p: Vec<usize> = own.iter().map(|&i| predicted[i]).collect();
                    if own.is_empty() {
                        Interval { low: f64::NAN, high: f64::NAN }
                    } else {
                        bootstrap.interval(labels, &t, &p, |r| r.accuracy)
                    }
                })
                .collect();
            let p_value = |metric: Metric| {
                (m > 0).then(|| bootstrap.paired_p_value(labels, &truth, &predictions[0], predicted, metric))
            };
            Ok(ModelScores {
                model: name.clone(),
                accuracy_ci: bootstrap.interval(labels, &truth, predicted, accuracy),
                macro_f1_ci: bootstrap.interval(labels, &truth, predicted, macro_f1),
                roc_auc_ci: report.roc_auc.map(|_| bootstrap.interval_of(truth.len(), |idx| auc(m, idx))),
                roc_auc_p_value: (m > 0 && report.roc_auc.is_some())
                    .then(|| bootstrap.paired_p_value_of(truth.len(), |idx| auc(0, idx), |idx| auc(m, idx))),
                log_loss_ci: bootstrap.interval_of(truth.len(), |idx| log_loss(m, idx)),
                log_loss_p_value: (m > 0)
                    .then(|| bootstrap.paired_p_value_of(truth.len(), |idx| log_loss(0, idx), |idx| log_loss(m, idx))),
                recall_ci,
                accuracy_p_value: p_value(accuracy),
                macro_f1_p_value: p_value(macro_f1),
                report,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Comparison {
        labels: labels.clone(),
        documents: truth.len(),
        resamples: bootstrap.resamples,
        level: bootstrap.level,
        models: scores,
    })
}

/// For each of `ours`, its index in `theirs`; `None` unless both name the same labels.
fn label_order(theirs: &[String], ours: &[String]) -> Option<Vec<usize>> {
    if theirs.len() != ours.len() {
        return None;
    }
    ours.iter().map(|label| theirs.iter().position(|t| t == label)).collect()
}

/// How [`tune_threshold`] scores a threshold (`threshold --metric`, `train --tune-threshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdMetric {
    /// Macro-averaged F1: every label counts alike, whatever its frequency.
    MacroF1,
    /// Accuracy.
    Accuracy,
    /// F1 weighted by each label's documents.
    WeightedF1,
}

impl ThresholdMetric {
    /// The metric of a report.
    pub fn of(self, report: &Report) -> f64 {
        match self {
            Self::MacroF1 => report.macro_f1,
            Self::Accuracy => report.accuracy,
            Self::WeightedF1 => report.weighted_f1,
        }
    }

    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Self::MacroF1 => "macro-F1",
            Self::Accuracy => "accuracy",
            Self::WeightedF1 => "weighted F1",
        }
    }
}

/// A tuned decision rule with how it scored — what `threshold --json`, Python's
/// `tune_threshold` and `train --tune-threshold` report: the rule's fields (`positive` and
/// `threshold`, or `biases`; `chosen_by`), `metric`, and the metrics with the most probable
/// label (`at_default`) and with the rule (`at_threshold`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TunedRule {
    /// The rule to keep (not saved here).
    #[serde(flatten)]
    pub decision: crate::decision::Decision,
    /// What it maximizes.
    pub metric: ThresholdMetric,
    /// The metrics with the most probable label.
    pub at_default: Report,
    /// The metrics with the rule (optimistic on the documents that chose it).
    pub at_threshold: Report,
}

impl TunedRule {
    /// What [`crate::decision::tune`] found for `metric`, `chosen_by` saying on what.
    pub fn new(tuned: crate::decision::Tuned, metric: ThresholdMetric, chosen_by: String) -> Self {
        let decision = crate::decision::Decision { rule: tuned.rule, chosen_by };
        Self { decision, metric, at_default: tuned.at_default, at_threshold: tuned.at_threshold }
    }
}

/// Classifies the labelled JSON lines of `reader` (primary task) with `classifier` and finds
/// the decision rule that maximizes `metric` there ([`crate::decision::tune`]: a threshold on
/// the second label's probability for two labels, label biases for more); the documents
/// should be held out from training. `on_document` is called after each document is scored.
pub fn tune_threshold(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    metric: ThresholdMetric,
    on_document: impl FnMut(),
) -> Result<TunedRule> {
    single_label_only(classifier, "a threshold or label biases")?;
    let task = &classifier.tasks()[0];
    let examples = read_labelled_columns(reader, source_name, std::slice::from_ref(&task.column))?;
    tune_threshold_on(classifier, &examples, source_name, metric, on_document)
}

/// [`tune_threshold`] on documents already read, their primary-task label in the first
/// column (as `train` holds its dev set).
pub fn tune_threshold_on(
    classifier: &Classifier,
    examples: &[Example],
    source_name: &str,
    metric: ThresholdMetric,
    on_document: impl FnMut(),
) -> Result<TunedRule> {
    single_label_only(classifier, "a threshold or label biases")?;
    let task = &classifier.tasks()[0];
    let (truth, probabilities) = primary_probabilities(classifier, examples, source_name, on_document)?;
    let tuned = crate::decision::tune(&task.labels, &truth, &probabilities, |r| metric.of(r))?;
    Ok(TunedRule::new(tuned, metric, format!("{} on {source_name} ({} documents)", metric.name(), truth.len())))
}

/// Classifies the labelled JSON lines of `reader` (primary task) with `classifier` and fits
/// the temperature that calibrates its probabilities there
/// ([`crate::decision::temperature::fit`]); the documents should be held out from training.
/// Nothing is saved ([`crate::decision::temperature::keep`] does). `on_document` is called
/// after each document is scored.
pub fn calibrate_temperature(
    classifier: &Classifier,
    reader: impl std::io::BufRead,
    source_name: &str,
    on_document: impl FnMut(),
) -> Result<crate::decision::temperature::Fitted> {
    single_label_only(classifier, "a temperature")?;
    let task = &classifier.tasks()[0];
    let examples = read_labelled_columns(reader, source_name, std::slice::from_ref(&task.column))?;
    let (truth, probabilities) = primary_probabilities(classifier, &examples, source_name, on_document)?;
    let current = crate::decision::Temperature::load(classifier.dir())?;
    let chosen_by = format!("log loss on {source_name} ({} documents)", truth.len());
    crate::decision::temperature::fit(task.labels.len(), &truth, &probabilities, current.as_ref(), chosen_by)
}

/// Fits the temperature that calibrates `classifier` on the out-of-fold predictions of the
/// `--cv` run that chose its settings ([`crate::out_of_fold`]): for a final model trained on
/// every document, which has none held out. The predictions are the fold models' own
/// probabilities, so the fit replaces any calibration the model has. Nothing is saved.
pub fn calibrate_out_of_fold(
    classifier: &Classifier,
    oof: &crate::out_of_fold::OutOfFold,
) -> Result<crate::decision::temperature::Fitted> {
    single_label_only(classifier, "a temperature")?;
    let current = crate::decision::Temperature::load(classifier.dir())?;
    let chosen_by = format!("log loss on the out-of-fold predictions {} ({} documents)", oof.source, oof.truth.len());
    let labels = classifier.tasks()[0].labels.len();
    crate::decision::temperature::fit_own(labels, &oof.truth, &oof.probabilities, current.as_ref(), chosen_by)
}

/// Finds the decision rule that maximizes `metric` on the out-of-fold predictions of the
/// `--cv` run that chose `classifier`'s settings (see [`calibrate_out_of_fold`]), at the
/// calibration the model has. Nothing is saved.
pub fn tune_threshold_out_of_fold(
    classifier: &Classifier,
    oof: &crate::out_of_fold::OutOfFold,
    metric: ThresholdMetric,
) -> Result<TunedRule> {
    single_label_only(classifier, "a threshold or label biases")?;
    let current = crate::decision::Temperature::load(classifier.dir())?;
    let probabilities: Vec<Vec<f32>> = match &current {
        Some(t) => oof.probabilities.iter().map(|row| t.apply(row)).collect(),
        None => oof.probabilities.clone(),
    };
    let labels = &classifier.tasks()[0].labels;
    let tuned = crate::decision::tune(labels, &oof.truth, &probabilities, |r| metric.of(r))?;
    let on = format!("the out-of-fold predictions {} ({} documents)", oof.source, oof.truth.len());
    Ok(TunedRule::new(tuned, metric, format!("{} on {on}", metric.name())))
}

/// The gold primary-task labels of `examples` (their first column) that have one, and the
/// probabilities `classifier` gives those documents (`on_document` is called after each
/// document is scored).
pub fn primary_probabilities(
    classifier: &Classifier,
    examples: &[Example],
    source_name: &str,
    mut on_document: impl FnMut(),
) -> Result<(Vec<usize>, Vec<Vec<f32>>)> {
    let task = &classifier.tasks()[0];
    let gold = resolve_column(examples, 0, &task.labels, source_name)?;
    let mut probabilities = Vec::with_capacity(examples.len());
    classify_labelled(classifier, examples, source_name, |prediction| {
        probabilities.push(prediction.probabilities().to_vec());
        on_document();
    })?;
    let (truth, probabilities): (Vec<usize>, Vec<Vec<f32>>) =
        gold.iter().zip(probabilities).filter_map(|(g, p)| g.map(|g| (g, p))).unzip();
    if truth.is_empty() {
        return Err(ModelError::InvalidInput(format!("{source_name}: no document has a label in \"{}\"", task.column)));
    }
    Ok((truth, probabilities))
}

/// Refuses a multi-label model where a rule or calibration of one softmax over the labels is
/// asked for.
fn single_label_only(classifier: &Classifier, what: &str) -> Result<()> {
    match classifier.multi_label() {
        true => Err(ModelError::InvalidInput(format!(
            "{} is multi-label: {what} is for models that predict one label; a multi-label model takes a threshold \
             per label (`longread threshold --data`) and a temperature per label (`longread calibrate --data`)",
            classifier.dir().display()
        ))),
        false => Ok(()),
    }
}
