//! Dense layers initialised as transformers does (`normal(0, initializer_range)`, zero bias).

use candle_core::Result;
use candle_nn::{Init, Linear, VarBuilder};

/// Loads `weight [out, in]` and `bias [out]`; new weights are drawn from `N(0, std²)`.
pub fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", Init::Randn { mean: 0.0, stdev: std })?;
    let bias = vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?;
    Ok(Linear::new(weight, Some(bias)))
}
