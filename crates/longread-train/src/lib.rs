//! Training longread models. So far: the AdamW optimizer (in place, multi-threaded).
#![deny(missing_docs)]

pub mod error;
pub mod optim;

pub use error::{Result, TrainError};
pub use optim::{AdamW, AdamWConfig, ParamGroup};
