//! Optimizers.

mod adamw;

pub use adamw::{AdamW, AdamWConfig, ParamGroup};
