//! The bag-of-words baseline every longread user gets in seconds: TF-IDF word 1–2 grams
//! (scikit-learn's `TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)`),
//! optionally with character n-grams inside words (`analyzer="char_wb"`) as a second block, and
//! L2 logistic regression (`LogisticRegression(solver="lbfgs")`) with C chosen by stratified
//! cross-validation on the training data. A light crate: no tensor framework.

#![deny(missing_docs)]

pub mod counts;
pub mod error;
pub mod evidence;
mod files;
pub mod logistic;
pub mod model;
pub mod multilabel;
pub mod out_of_fold;
pub mod sparse;
pub mod terms;
pub mod tfidf;

pub use error::{BowError, Result};
pub use evidence::TermEvidence;
pub use logistic::Solver;
pub use model::{bow_config_path, is_bow_dir, train, BowModel, BowOptions, BowScores, CvScore, Trained};
pub use multilabel::{out_of_fold_multilabel_logits, train_multilabel, LabelWeights};
pub use out_of_fold::out_of_fold_logits;
pub use tfidf::TfidfSettings;
