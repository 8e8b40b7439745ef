//! The hierarchical long-document classifier: chunks → encoder → chunk vectors → pooling
//! over chunks → LayerNorm → head (model directory format v1, docs/model-format.md).

pub mod chunk_pooler;
pub mod config;
pub mod head;
pub mod model;
pub mod predictor;
pub mod sequence_head;
pub mod vector_cache;

pub use config::{
    is_classifier_dir, Architecture, ChunkPooling, ClassifierConfig, LongreadSection, PoolingStrategy, TaskSpec,
    WideSection, ARCHITECTURE, DEFAULT_TASK, WIDE_DIR,
};
pub use model::{Classified, HierarchicalClassifier};
pub use predictor::DocumentScores;
pub use vector_cache::{chunk_groups, probe_batch, DocumentStore, VectorCache, CACHE_GROUP_CHUNKS};
