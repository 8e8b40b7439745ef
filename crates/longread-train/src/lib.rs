//! Training longread models. So far: the AdamW optimizer (in place, multi-threaded) and
//! loss/gradients of document batches with chunk-level recomputation.
#![deny(missing_docs)]

pub mod error;
pub mod optim;
pub mod recompute;

pub use error::{Result, TrainError};
pub use optim::{AdamW, AdamWConfig, ParamGroup};
