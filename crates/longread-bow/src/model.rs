//! The bag-of-words classifier: TF-IDF word n-grams (and optionally character n-grams) and
//! logistic regression, trained with C
//! chosen by stratified cross-validation, saved as a model directory (`bow.json`,
//! `vocabulary.txt`, `model.safetensors`) that longread's classifier loads like any other.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::counts::{count_terms, for_each_char_term, Interner, TermCounts};
use crate::error::{BowError, Result};
use crate::files::{bow_files, read_bow_files, write_bow_files};
use crate::logistic::{argmax, sigmoid, softmax, Data, LogisticRegression, Solver};
use crate::sparse::SparseRow;
use crate::terms::{for_each_ngram, words};
use crate::tfidf::{blocks, Columns, TfidfSettings};
use longread_metrics::folds::{mean_std, stratified_folds};

/// Longest character n-gram accepted (longer ones are nearly whole words, and costly).
pub const MAX_CHAR_NGRAM: usize = 16;

/// True for a usable character n-gram range: 1 <= shortest <= longest <= [`MAX_CHAR_NGRAM`].
pub fn char_ngrams_in_range([shortest, longest]: [usize; 2]) -> bool {
    (1..=longest).contains(&shortest) && longest <= MAX_CHAR_NGRAM
}

/// How a bag-of-words model is trained.
#[derive(Debug, Clone, PartialEq)]
pub struct BowOptions {
    /// Which n-grams become features.
    pub tfidf: TfidfSettings,
    /// Candidate inverse regularisation strengths; with one, no cross-validation is run.
    pub cs: Vec<f64>,
    /// Folds of the cross-validation that picks C.
    pub folds: usize,
    /// Seed of the folds.
    pub seed: u64,
    /// Weight of each class in the loss (`None`: 1 for every class).
    pub class_weights: Option<Vec<f64>>,
    /// Solver limits.
    pub solver: Solver,
}

impl Default for BowOptions {
    fn default() -> Self {
        Self {
            tfidf: TfidfSettings::default(),
            cs: vec![0.1, 1.0, 10.0, 100.0, 1000.0],
            folds: 5,
            seed: 0,
            class_weights: None,
            solver: Solver::default(),
        }
    }
}

/// The cross-validated macro-F1 of one C.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CvScore {
    /// Inverse regularisation strength.
    pub c: f64,
    /// Mean macro-F1 over the held-out folds.
    pub macro_f1_mean: f64,
    /// Its standard deviation over the folds.
    pub macro_f1_std: f64,
}

/// A trained model and how C was chosen.
#[derive(Debug)]
pub struct Trained {
    /// The model, refitted on all the training documents with the chosen C.
    pub model: BowModel,
    /// One score per candidate C (empty when only one was given).
    pub cv: Vec<CvScore>,
}

/// Scores of one document.
#[derive(Debug, Clone, PartialEq)]
pub struct BowScores {
    /// Class logits (softmax gives the probabilities).
    pub logits: Vec<f32>,
    /// Class probabilities.
    pub probabilities: Vec<f32>,
}

/// A trained TF-IDF + logistic-regression classifier.
#[derive(Debug, Clone)]
pub struct BowModel {
    pub(crate) labels: Vec<String>,
    pub(crate) tfidf: TfidfSettings,
    pub(crate) c: f64,
    /// n-gram → column.
    pub(crate) vocabulary: HashMap<String, u32>,
    pub(crate) idf: Vec<f64>,
    pub(crate) regression: LogisticRegression,
    /// One-vs-rest over labels a document may carry any number of (one weight row per label,
    /// sigmoid probabilities), rather than one label per document (softmax).
    pub(crate) multi_label: bool,
    /// column → n-gram, built the first time a prediction names its terms
    /// ([`crate::evidence`]).
    pub(crate) names: std::sync::OnceLock<Vec<String>>,
}

impl BowModel {
    /// Label names in id order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The inverse regularisation strength it was fitted with.
    pub fn c(&self) -> f64 {
        self.c
    }

    /// Which n-grams are its features.
    pub fn tfidf(&self) -> &TfidfSettings {
        &self.tfidf
    }

    /// Number of n-gram features.
    pub fn features(&self) -> usize {
        self.idf.len()
    }

    /// Whether each label is decided on its own (one-vs-rest, sigmoid probabilities).
    pub fn multi_label(&self) -> bool {
        self.multi_label
    }

    /// Classifies one text; a text without words is an error. A multi-label model's logits are
    /// each label's `w·x + b` and its probabilities their sigmoids (they need not sum to 1).
    pub fn scores(&self, text: &str) -> Result<BowScores> {
        Ok(self.row_scores(&self.row(text)?))
    }

    /// The scores of a TF-IDF row.
    pub(crate) fn row_scores(&self, row: &SparseRow) -> BowScores {
        let (logits, probabilities) = if self.multi_label {
            let z = self.regression.decision(row);
            let p = z.iter().map(|&v| sigmoid(v)).collect();
            (z, p)
        } else {
            let z = self.regression.logits(row);
            let p = softmax(&z);
            (z, p)
        };
        BowScores {
            logits: logits.iter().map(|&v| v as f32).collect(),
            probabilities: probabilities.iter().map(|&v| v as f32).collect(),
        }
    }

    /// The TF-IDF row of a text.
    pub(crate) fn row(&self, text: &str) -> Result<SparseRow> {
        let words = words(text);
        let chars = self.tfidf.char_ngrams.filter(|_| !text.trim().is_empty());
        if words.is_empty() && chars.is_none() {
            return Err(BowError::InvalidInput(
                "the document has no words (tokens of two or more letters or digits)".into(),
            ));
        }
        let mut word_counts: HashMap<u32, u32> = HashMap::new();
        for_each_ngram(&words, self.tfidf.ngram_max, |g| {
            if let Some(&col) = self.vocabulary.get(g) {
                *word_counts.entry(col).or_default() += 1;
            }
        });
        let mut char_counts: HashMap<u32, u32> = HashMap::new();
        if let Some(range) = chars {
            for_each_char_term(text, range, |term| {
                if let Some(&col) = self.vocabulary.get(term) {
                    *char_counts.entry(col).or_default() += 1;
                }
            });
        }
        let pairs = |m: HashMap<u32, u32>| m.into_iter().collect();
        Ok(blocks(pairs(word_counts), pairs(char_counts), &self.idf, self.tfidf.sublinear_tf))
    }

    /// Writes the model into `dir` (created if missing), each file atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        write_bow_files(self, dir)
    }

    /// The model directory's files as [`Self::save`] writes them (name, contents; `bow.json`
    /// last), for a model that keeps a bag of words inside its own directory.
    pub fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>> {
        bow_files(self)
    }

    /// Reads a model written by [`Self::save`].
    pub fn load(dir: &Path) -> Result<Self> {
        read_bow_files(dir)
    }
}

/// True when `dir` holds a bag-of-words model.
pub fn is_bow_dir(dir: &Path) -> bool {
    bow_config_path(dir).is_file()
}

/// The configuration file of a bag-of-words model directory.
pub fn bow_config_path(dir: &Path) -> PathBuf {
    dir.join("bow.json")
}

/// Trains on `texts` with class ids `labels` (into `label_names`): C is the candidate with the
/// best mean macro-F1 over stratified folds (the features refitted on each fold's training
/// part), then the model is fitted on every document. `on_fit` hears each fit done and the total.
pub fn train(
    texts: &[&str],
    labels: &[usize],
    label_names: &[String],
    options: &BowOptions,
    mut on_fit: impl FnMut(usize, usize),
) -> Result<Trained> {
    check(texts, labels, label_names, options)?;
    let mut interner = Interner::default();
    let counts: Vec<TermCounts> = texts.iter().map(|t| count_terms(t, &options.tfidf, &mut interner)).collect();
    let classes = label_names.len();
    let weights: Vec<f64> = labels.iter().map(|&l| options.class_weights.as_ref().map_or(1.0, |w| w[l])).collect();
    // The vocabulary of the final fit, found first: without a feature there is nothing to fit.
    let all: Vec<&TermCounts> = counts.iter().collect();
    let columns = Columns::fit(&all, &options.tfidf);
    if columns.idf.is_empty() {
        return Err(BowError::NoFeatures { min_df: options.tfidf.min_df, documents: texts.len() });
    }
    let total = if options.cs.len() > 1 { options.folds * options.cs.len() + 1 } else { 1 };
    let mut done = 0;
    let mut cv = Vec::new();
    if options.cs.len() > 1 {
        let folds = stratified_folds(labels, options.folds, options.seed);
        let mut per_c: Vec<Vec<f64>> = vec![Vec::new(); options.cs.len()];
        for held_out in &folds {
            let fold = FoldFit::without(held_out, &counts, labels, &weights, &options.tfidf);
            let mut previous: Option<LogisticRegression> = None;
            for (ci, &c) in options.cs.iter().enumerate() {
                let model = LogisticRegression::fit(fold.data(classes), c, previous.as_ref(), options.solver)?;
                let truth: Vec<usize> = held_out.iter().map(|&i| labels[i]).collect();
                let predicted: Vec<usize> = held_out
                    .iter()
                    .map(|&i| argmax(&model.logits(&fold.columns.row(&counts[i], options.tfidf.sublinear_tf))))
                    .collect();
                let report =
                    longread_metrics::evaluate(label_names, &truth, &predicted).map_err(BowError::InvalidInput)?;
                per_c[ci].push(report.macro_f1);
                previous = Some(model);
                done += 1;
                on_fit(done, total);
            }
        }
        cv = options.cs.iter().zip(&per_c).map(|(&c, scores)| cv_score(c, scores)).collect();
    }
    // Best mean macro-F1; on a tie the smaller C (the stronger penalty).
    let c = cv
        .iter()
        .fold(None::<CvScore>, |best, s| match best {
            Some(b) if b.macro_f1_mean >= s.macro_f1_mean => Some(b),
            _ => Some(*s),
        })
        .map_or(options.cs[0], |b| b.c);
    let rows: Vec<SparseRow> = all.iter().map(|d| columns.row(d, options.tfidf.sublinear_tf)).collect();
    let data = Data { rows: &rows, labels, sample_weights: &weights, classes, features: columns.idf.len() };
    let regression = LogisticRegression::fit(data, c, None, options.solver)?;
    on_fit(total, total);
    let vocabulary = vocabulary(&columns, &interner);
    let model = BowModel {
        names: Default::default(),
        labels: label_names.to_vec(),
        tfidf: options.tfidf,
        c,
        vocabulary,
        idf: columns.idf,
        regression,
        multi_label: false,
    };
    Ok(Trained { model, cv })
}

/// n-gram → column of fitted `columns`.
pub(crate) fn vocabulary(columns: &Columns, interner: &Interner) -> HashMap<String, u32> {
    let mut by_column: Vec<(u32, u32)> = columns.of_term.iter().map(|(&term, &col)| (col, term)).collect();
    by_column.sort_unstable();
    let terms: Vec<u32> = by_column.iter().map(|&(_, term)| term).collect();
    interner.names(&terms).into_iter().enumerate().map(|(col, name)| (name, col as u32)).collect()
}

/// What one cross-validation fold fits on: the features fitted on every document but the
/// held-out ones, and those documents' rows, labels and weights.
pub(crate) struct FoldFit {
    /// The fold's TF-IDF columns (score held-out documents with them).
    pub(crate) columns: Columns,
    pub(crate) rows: Vec<SparseRow>,
    labels: Vec<usize>,
    weights: Vec<f64>,
}

impl FoldFit {
    /// The fold that holds out `held_out` (sorted indices into `counts`).
    pub(crate) fn without(
        held_out: &[usize],
        counts: &[TermCounts],
        labels: &[usize],
        weights: &[f64],
        tfidf: &TfidfSettings,
    ) -> Self {
        let kept: Vec<usize> = (0..counts.len()).filter(|i| held_out.binary_search(i).is_err()).collect();
        let docs: Vec<&TermCounts> = kept.iter().map(|&i| &counts[i]).collect();
        let columns = Columns::fit(&docs, tfidf);
        let rows = docs.iter().map(|d| columns.row(d, tfidf.sublinear_tf)).collect();
        let labels = kept.iter().map(|&i| labels[i]).collect();
        let weights = kept.iter().map(|&i| weights[i]).collect();
        Self { columns, rows, labels, weights }
    }

    /// The fit's data for the logistic regression.
    pub(crate) fn data(&self, classes: usize) -> Data<'_> {
        Data {
            rows: &self.rows,
            labels: &self.labels,
            sample_weights: &self.weights,
            classes,
            features: self.columns.idf.len(),
        }
    }
}

/// Refuses input the training cannot use, with what to do.
fn check(texts: &[&str], labels: &[usize], label_names: &[String], options: &BowOptions) -> Result<()> {
    let bad = |m: String| Err(BowError::InvalidInput(m));
    if texts.len() != labels.len() {
        return bad(format!("{} texts but {} labels", texts.len(), labels.len()));
    }
    if label_names.len() < 2 {
        return bad("a classifier needs at least two labels".into());
    }
    if let Some(&l) = labels.iter().find(|&&l| l >= label_names.len()) {
        return bad(format!("label id {l} is out of range for {} labels", label_names.len()));
    }
    check_options(options, label_names)?;
    let mut per_class = vec![0usize; label_names.len()];
    labels.iter().for_each(|&l| per_class[l] += 1);
    if per_class.iter().filter(|&&n| n > 0).count() < 2 {
        return bad("the training data has documents of only one label".into());
    }
    if options.cs.len() > 1 {
        let smallest = per_class.iter().filter(|&&n| n > 0).min().copied().unwrap_or(0);
        if options.folds < 2 || smallest < options.folds {
            return Err(BowError::TooFewForFolds { folds: options.folds, rarest: smallest });
        }
    }
    Ok(())
}

/// Refuses options no fit can use.
pub(crate) fn check_options(options: &BowOptions, label_names: &[String]) -> Result<()> {
    let bad = |m: String| Err(BowError::InvalidInput(m));
    if options.cs.is_empty() || options.cs.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
        return bad(format!("C values {:?}: give at least one, each above 0", options.cs));
    }
    if options.tfidf.ngram_max == 0 {
        return bad("ngram_max must be at least 1".into());
    }
    if let Some(range @ [lo, hi]) = options.tfidf.char_ngrams {
        if !char_ngrams_in_range(range) {
            return bad(format!(
                "character n-grams {lo}-{hi}: give 1 <= shortest <= longest <= {MAX_CHAR_NGRAM}, e.g. 2-5"
            ));
        }
    }
    if let Some(w) = &options.class_weights {
        if w.len() != label_names.len() || w.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return bad(format!("class weights {w:?}: one per label, each above 0"));
        }
    }
    Ok(())
}

/// Mean and standard deviation of the fold scores.
fn cv_score(c: f64, scores: &[f64]) -> CvScore {
    let (macro_f1_mean, macro_f1_std) = mean_std(scores);
    CvScore { c, macro_f1_mean, macro_f1_std }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["fruit".into(), "cars".into()]
    }

    /// Two documents share no word: with the default `min_df` of 2 the model would have had no
    /// features and predicted the label frequencies whatever the text.
    #[test]
    fn a_vocabulary_with_no_feature_is_refused() {
        let options = BowOptions { cs: vec![1.0], ..BowOptions::default() };
        let err = train(&["red apples", "fast engines"], &[0, 1], &labels(), &options, |_, _| {}).unwrap_err();
        assert!(matches!(err, BowError::NoFeatures { min_df: 2, documents: 2 }), "{err}");
        let one = BowOptions { tfidf: TfidfSettings { min_df: 1, ..options.tfidf }, ..options };
        let trained = train(&["red apples", "fast engines"], &[0, 1], &labels(), &one, |_, _| {}).unwrap();
        assert!(trained.model.features() > 0);
    }

    #[test]
    fn too_few_documents_for_the_folds_that_choose_c_is_refused_with_the_counts() {
        let texts = ["red apples", "green apples", "fast red engines"];
        let options = BowOptions { cs: vec![0.1, 1.0], folds: 2, ..BowOptions::default() };
        let err = train(&texts, &[0, 0, 1], &labels(), &options, |_, _| {}).unwrap_err();
        assert!(matches!(err, BowError::TooFewForFolds { folds: 2, rarest: 1 }), "{err}");
    }
}
