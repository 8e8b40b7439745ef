//! The text side of longread: tokenizers, JSON-lines readers and (later) chunking.
//! No tensor framework here, so these crates stay light.
#![deny(missing_docs)]

pub mod chunking;
pub mod compressed;
pub mod dataset;
pub mod delimited;
pub mod documents;
pub mod error;
pub mod jsonl;
pub mod labelled;
pub mod mlm;
pub mod multilabel;
pub mod overlap;
pub mod shard;
pub mod source;
pub mod synthetic;
pub mod tokenizer;
pub mod tokenizer_training;
pub mod words;

pub use chunking::{Chunk, ChunkSelection, ChunkedDocument, Chunker, ChunkingConfig};
pub use dataset::LabelledDataset;
pub use documents::{read_documents, Document};
pub use error::{Result, TextError};
pub use jsonl::{read_records, Record};
pub use labelled::{
    labels_from_column, labels_from_data, read_labelled, read_labelled_columns, resolve_column, resolve_labels,
    stratified_split, Example, LabelValue,
};
pub use shard::Shard;
pub use source::DocumentSource;
pub use tokenizer::{pad_batch, Encoded, TextTokenizer};
pub use tokenizer_training::{read_corpus, train_tokenizer, TokenizerKind, TokenizerTraining};
