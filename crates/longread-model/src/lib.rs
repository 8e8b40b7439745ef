//! longread's models on candle: encoders of seven families (BERT, RoBERTa, DistilBERT, ELECTRA,
//! MPNet, ModernBERT, DeBERTa-v2) that train (every op differentiable, real dropout), loaded from
//! Hugging Face checkpoints, and the pooling on top of it.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod batching;
pub mod checkpoint;
pub mod config;
pub mod device;
pub mod doctor;
pub mod embedder;
pub mod encoder;
pub mod error;
pub mod han;
pub mod hierarchical;
pub mod masked_lm;
pub mod model_dir;
pub mod params;
pub mod precision;
pub mod presets;
pub mod sentence_pooling;
pub mod threads;
pub mod variables;

// The building blocks, kernels and modes live in their own crate, below this one; re-exported
// so `longread_model::layers` (and `crate::layers` here) name them.
pub use longread_kernels::{activation, layers, mode, multiversion, profile, route, seeded};

pub use checkpoint::{resolve_model_dir, Checkpoint, LoadOptions};
pub use config::EncoderConfig;
pub use device::DeviceChoice;
pub use embedder::{Embedder, EmbedderOptions};
pub use encoder::Encoder;
pub use error::{ModelError, Result};
pub use mode::{DropoutRng, Mode};
pub use precision::Precision;
