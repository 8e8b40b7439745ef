//! longread's tensor building blocks on candle and the kernels behind them, by backend
//! (`layers/fused`: CPU kernels with backward passes; `layers/int8`: CPU inference;
//! `layers/cuda`: NVIDIA GPUs), with the training/inference [`mode`] they run in. Below the
//! encoders and model kinds (`longread-model`), which reach these through `longread_model::layers`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod activation;
pub mod layers;
pub mod mode;
pub mod profile;
pub mod route;
pub mod seeded;
