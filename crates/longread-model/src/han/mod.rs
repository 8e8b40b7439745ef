//! The classic Hierarchical Attention Network (Yang et al. 2016), longread's from-scratch
//! baseline: word embeddings → word BiGRU → word attention → sentence vectors → sentence BiGRU
//! → sentence attention → document vector → linear → labels.

pub mod attention;
pub mod config;
pub mod gru;
pub mod model;

pub use config::HanConfig;
pub use model::{HanClassifier, HanOutput};
