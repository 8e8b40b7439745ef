//! The classic Hierarchical Attention Network (Yang et al. 2016), longread's from-scratch
//! baseline: word embeddings → word BiGRU → word attention → sentence vectors → sentence BiGRU
//! → sentence attention → document vector → linear → labels.

pub mod attention;
pub mod batch;
pub mod config;
pub mod gru;
mod gru_scan;
pub mod model;
pub mod predictor;
pub mod word_vectors;

pub use batch::grid_batch;
pub use config::{HanConfig, HAN_ARCHITECTURE};
pub use model::{is_han_dir, HanClassifier, HanOutput};
pub use predictor::{score_texts, HanScores, SentenceAttention, WordAttention};
pub use word_vectors::{encoder_word_vectors, EncoderWordVectors};
