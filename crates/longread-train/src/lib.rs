//! Training longread models: AdamW (in place, multi-threaded), schedules, clipping, parameter
//! groups with freezing and layer-wise learning-rate decay, chunk-level recomputation, and the
//! training loop.
#![deny(missing_docs)]

pub mod bench;
pub mod clip;
pub mod error;
pub mod gradients;
pub mod groups;
pub mod han_trainer;
pub mod interrupt;
pub mod loss;
pub mod optim;
pub mod prefix;
pub mod pretrain;
pub mod recompute;
pub mod run;
pub mod schedule;
pub mod trainer;
pub mod unfreeze;

pub use error::{Result, TrainError};
pub use optim::{AdamW, AdamWConfig, ParamGroup};
