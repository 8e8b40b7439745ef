//! Word-level text for the HAN baseline: documents split into sentences of words, a
//! vocabulary built from training data, and documents as fixed `doc_size × sent_size` id grids.

mod grid;
mod split;
mod vocabulary;

pub use grid::{percentile, DocumentGrid, GridShape};
pub use split::{split_document, Sentence, Word};
pub use vocabulary::{Vocabulary, PAD, UNK};
