//! Out-of-fold scores of an ensemble's members on their own training data, for stacking
//! (`longread ensemble --stack TRAIN.jsonl`): every member is retrained K times with the
//! settings its run recorded (training_args.json), each time on K − 1 stratified folds of
//! TRAIN, and scores the fold it did not see. The ensemble's temperatures and weights are then
//! fitted on those scores ([`build_stacked_ensemble`]), so no held-out set is spent on them:
//! the weights are fitted by cross-validation on the training set, as a stacked ensemble's are.

use std::io::Write;
use std::path::{Path, PathBuf};

use longread_classifier::calibrated::{
    build_ensemble_from_label_sets, build_ensemble_from_scores, ensemble_labels, gold_documents, member_probabilities,
    Gold,
};
use longread_classifier::calibration::MemberScores;
use longread_classifier::ensemble::EnsembleSpec;
use longread_classifier::label_calibration::LabelSetScores;
use longread_classifier::{Classifier, ClassifierOptions};
use longread_metrics::folds::{iterative_stratified_folds, stratified_folds};
use longread_model::ModelError;
use longread_text::Document;
use serde_json::Value;

use crate::error::{Result, TrainError};
use crate::run::flags::spec_from_flags;
use crate::run::{train_run, RunHooks};
use crate::trainer::{EpochLog, Progress};

/// Recorded settings that are not a member's recipe: where it read and wrote, how it was
/// resumed, logged, stopped and cached, and the data's fingerprints.
const NOT_RECIPE: [&str; 13] = [
    "train",
    "dev",
    "out",
    "resume",
    "vector_cache",
    "stop_after_epoch",
    "save_every_steps",
    "log_format",
    "data_fingerprints",
    "cv",
    "device",
    "cache_memory",
    "no_cache",
];

/// How the out-of-fold scores are made.
#[derive(Debug, Clone, Copy)]
pub struct StackSettings<'a> {
    /// Folds of the training data (each member is retrained this many times).
    pub folds: usize,
    /// Seed of the stratified folds.
    pub seed: u64,
    /// Encoder members' chunk vectors are read and kept here (a frozen encoder then runs once
    /// per document, not once per fold).
    pub vector_cache: Option<&'a Path>,
}

/// `longread ensemble --stack TRAIN` (and Python's `ensemble(stack=TRAIN)`): the ensemble of
/// `members` in the new directory `out`, its temperatures (and with `fit_weights` its weights)
/// fitted on every member's out-of-fold scores of the labelled documents of `train`. The
/// refits work in a scratch directory beside `out`, removed however the call ends; their
/// training runs are silent, and `on_fold(member, fold)` is called after each has scored its
/// fold.
pub fn build_stacked_ensemble(
    members: &[(PathBuf, f64)],
    out: &Path,
    train: &Path,
    fit_weights: bool,
    settings: StackSettings,
    on_fold: impl FnMut(usize, usize),
) -> Result<EnsembleSpec> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() }.into());
    }
    let dirs: Vec<PathBuf> = members.iter().map(|(dir, _)| dir.clone()).collect();
    let (labels, multi_label) = ensemble_labels(&dirs)?;
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let scratch = tempfile::Builder::new()
        .prefix(".longread-stack-")
        .tempdir_in(parent)
        .map_err(|e| TrainError::Io { path: parent.to_owned(), source: e })?;
    let (probs, gold) = out_of_fold_scores(&dirs, &labels, multi_label, train, settings, scratch.path(), on_fold)?;
    Ok(match gold {
        Gold::Labels(gold) => build_ensemble_from_scores(
            members,
            out,
            labels,
            &MemberScores { probs, gold },
            fit_weights,
            settings.folds,
        )?,
        Gold::Sets(sets) => {
            let scores = LabelSetScores { probs, truth: Gold::truth(&sets, labels.len()) };
            build_ensemble_from_label_sets(members, out, labels, &scores, fit_weights, settings.folds, settings.seed)?
        }
    })
}

/// The held-out documents of each of `folds` folds of `gold`: stratified by label, or
/// iteratively by label set.
fn gold_folds(gold: &Gold, folds: usize, seed: u64) -> Vec<Vec<usize>> {
    match gold {
        Gold::Labels(gold) => stratified_folds(gold, folds, seed),
        Gold::Sets(sets) => iterative_stratified_folds(sets, folds, seed),
    }
}

/// Document `i`'s gold as its JSON line gives it (`"label"` or `"labels"`).
fn gold_field(gold: &Gold, i: usize, labels: &[String]) -> (&'static str, Value) {
    match gold {
        Gold::Labels(gold) => ("label", Value::from(labels[gold[i]].clone())),
        Gold::Sets(sets) => ("labels", sets[i].iter().map(|&l| Value::from(labels[l].clone())).collect()),
    }
}

/// Every member's out-of-fold probabilities (in the order of `labels`, the ensemble's) of the
/// labelled documents of `data`, the refits working in `scratch`.
fn out_of_fold_scores(
    members: &[PathBuf],
    labels: &[String],
    multi_label: bool,
    data: &Path,
    settings: StackSettings,
    scratch: &Path,
    mut on_fold: impl FnMut(usize, usize),
) -> Result<(Vec<Vec<Vec<f64>>>, Gold)> {
    // Every recipe first: a member that cannot be retrained is refused before any refit.
    let recipes: Vec<Recipe> = members.iter().map(|m| member_recipe(m)).collect::<Result<_>>()?;
    let (documents, gold) = gold_documents(data, labels, multi_label, false)?;
    let folds = gold_folds(&gold, settings.folds, settings.seed);
    let mut probs = Vec::with_capacity(members.len());
    for (m, recipe) in recipes.iter().enumerate() {
        let mut rows: Vec<Option<Vec<f64>>> = vec![None; documents.len()];
        for (f, held_out) in folds.iter().enumerate() {
            let dir = scratch.join(format!("member-{}-fold-{}", m + 1, f + 1));
            let model = refit(recipe, &dir, &documents, &gold, labels, held_out, settings.vector_cache)?;
            let mut classifier = Classifier::load(&model, ClassifierOptions::default())?;
            if let (Some(cache), true) = (settings.vector_cache, recipe.reads_chunks) {
                classifier.set_vector_cache(cache)?;
            }
            let unseen: Vec<Document> = held_out.iter().map(|&i| documents[i].clone()).collect();
            let scored = member_probabilities(&classifier, labels, &unseen, &data.display().to_string())?;
            for (&i, row) in held_out.iter().zip(scored) {
                rows[i] = Some(row);
            }
            drop(classifier);
            std::fs::remove_dir_all(&dir).map_err(|e| TrainError::Io { path: dir.clone(), source: e })?;
            on_fold(m, f);
        }
        probs.push(rows.into_iter().map(|r| r.expect("every document is in one fold")).collect());
    }
    Ok((probs, gold))
}

/// The refits' training runs, unheard (the caller hears of each fold instead).
struct Silent;

impl RunHooks for Silent {
    fn progress(&mut self, _: Progress) {}
    fn epoch(&mut self, _: &EpochLog) {}
    fn note(&mut self, _: &str) {}
}

/// What it takes to train a member again on other data.
#[derive(Debug, Clone)]
struct Recipe {
    /// Its directory (for messages).
    dir: PathBuf,
    /// `longread train` flags of its run, without data, output and caching.
    flags: Vec<String>,
    /// Whether it reads chunks with an encoder (the chunk-vector cache applies).
    reads_chunks: bool,
}

/// The recipe recorded in `member`'s training_args.json.
fn member_recipe(member: &Path) -> Result<Recipe> {
    let path = member.join("training_args.json");
    let text = std::fs::read_to_string(&path).map_err(|_| {
        TrainError::Run(format!(
            "{} has no training_args.json: --stack retrains each member on folds of the training data with the \
             settings its `longread train` run recorded; for a model made otherwise, calibrate on held-out \
             documents instead (--calibrate DEV.jsonl)",
            member.display()
        ))
    })?;
    let recorded: Value = serde_json::from_str(&text)
        .map_err(|e| TrainError::Run(format!("{}: not valid JSON ({e})", path.display())))?;
    let flags = recipe_flags(&recorded)?;
    let arch = recorded.get("arch").and_then(Value::as_str);
    Ok(Recipe { dir: member.to_owned(), flags, reads_chunks: !matches!(arch, Some("bow" | "han")) })
}

/// `longread train` flags that rebuild the run recorded in `recorded` on other data: every
/// recipe setting that differs from the flags' defaults. Checked by parsing them back: the
/// settings they resolve to must be the recorded ones.
fn recipe_flags(recorded: &Value) -> Result<Vec<String>> {
    let placeholder = ["--train".to_string(), "-".to_string(), "--out".to_string(), "-".to_string()];
    let defaults = serde_json::to_value(spec_from_flags(&placeholder).map_err(TrainError::Run)?)
        .map_err(|e| TrainError::Run(e.to_string()))?;
    let mut flags = Vec::new();
    let recorded_obj =
        recorded.as_object().ok_or_else(|| TrainError::Run("training_args.json is not an object".into()))?;
    for (key, value) in recorded_obj {
        if NOT_RECIPE.contains(&key.as_str()) || defaults.get(key).is_none() {
            continue;
        }
        match (value, &defaults[key]) {
            (Value::Object(nested), Value::Object(nested_defaults)) => {
                for (k, v) in nested {
                    if nested_defaults.get(k) != Some(v) {
                        push_flag(&mut flags, k, v);
                    }
                }
            }
            (v, default) if v != default => push_flag(&mut flags, key, v),
            _ => {}
        }
    }
    // Parsed back and resolved, the flags must give the recorded recipe.
    let mut spec = spec_from_flags(&[placeholder.to_vec(), flags.clone()].concat()).map_err(TrainError::Run)?;
    spec.resolve_defaults()?;
    spec.resolve_hub_model()?;
    let resolved = serde_json::to_value(&spec).map_err(|e| TrainError::Run(e.to_string()))?;
    for (key, value) in recorded_obj {
        if !NOT_RECIPE.contains(&key.as_str()) && resolved.get(key).is_some_and(|r| r != value) {
            return Err(TrainError::Run(format!(
                "cannot rebuild the recorded setting {key} = {value} from flags (got {}): retrain this member with \
                 this version of longread",
                resolved[key]
            )));
        }
    }
    Ok(flags)
}

/// Appends `--key value` (a list repeats the flag; true is the bare flag; false and null add
/// nothing; character n-grams are written `MIN-MAX`).
fn push_flag(flags: &mut Vec<String>, key: &str, value: &Value) {
    let flag = format!("--{}", key.replace('_', "-"));
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match value {
        Value::Null | Value::Bool(false) => {}
        Value::Bool(true) => flags.push(flag),
        Value::Array(items) if key == "char_ngrams" => {
            flags.extend([flag, items.iter().map(text).collect::<Vec<_>>().join("-")]);
        }
        Value::Array(items) => items.iter().for_each(|item| flags.extend([flag.clone(), text(item)])),
        other => flags.extend([flag, text(other)]),
    }
}

/// Trains `recipe` on every document of `documents` outside `held_out` (written as JSON lines
/// with label names into `dir`); returns the trained model's directory.
fn refit(
    recipe: &Recipe,
    dir: &Path,
    documents: &[Document],
    gold: &Gold,
    labels: &[String],
    held_out: &[usize],
    vector_cache: Option<&Path>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::Io { path: dir.to_owned(), source: e })?;
    let train = dir.join("train.jsonl");
    let io = |e: std::io::Error| TrainError::Io { path: train.clone(), source: e };
    let mut writer = std::io::BufWriter::new(std::fs::File::create(&train).map_err(io)?);
    let mut skip = vec![false; documents.len()];
    held_out.iter().for_each(|&i| skip[i] = true);
    for (i, doc) in documents.iter().enumerate().filter(|(i, _)| !skip[*i]) {
        let (field, value) = gold_field(gold, i, labels);
        let line = serde_json::json!({"id": doc.id, "text": doc.text, field: value});
        writeln!(writer, "{line}").map_err(io)?;
    }
    writer.flush().map_err(io)?;
    drop(writer);
    let model = dir.join("model");
    let mut flags = recipe.flags.clone();
    flags.extend(["--train".into(), train.display().to_string(), "--out".into(), model.display().to_string()]);
    if let (Some(cache), true) = (vector_cache, recipe.reads_chunks) {
        flags.extend(["--vector-cache".into(), cache.display().to_string()]);
    }
    let mut spec = spec_from_flags(&flags).map_err(|e| TrainError::Run(format!("{}: {e}", recipe.dir.display())))?;
    train_run(&mut spec, serde_json::Map::new(), &mut Silent)?;
    Ok(model)
}
