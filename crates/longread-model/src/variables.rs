//! The variables of a trainable model made of an encoder and a head, kept in two maps: the
//! encoder's under its own names (`embeddings.…`), the head's under its file names.

use std::collections::HashMap;

use candle_core::{Tensor, Var};
use candle_nn::VarMap;

use crate::encoder::Family;
use crate::error::{ModelError, Result};

/// Every variable by canonical name: encoder ones as `encoder:embeddings.…`, head ones by
/// their file names, sorted by name; empty for a model loaded for inference only.
pub fn named_vars(vars: Option<&(VarMap, VarMap)>) -> Vec<(String, Var)> {
    let Some((encoder, head)) = vars else { return Vec::new() };
    let mut out: Vec<(String, Var)> = Vec::new();
    for (prefix, map) in [("encoder:", encoder), ("", head)] {
        for (name, var) in map.data().lock().unwrap_or_else(|p| p.into_inner()).iter() {
            out.push((format!("{prefix}{name}"), var.clone()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// All tensors under their file names: the encoder's with `encoder_prefix.` (`bert`,
/// `roberta`, …) and the family's own names (see [`Family::file_name`]), the head's as they
/// are. An error for a model loaded for inference only.
pub fn named_tensors(
    vars: Option<&(VarMap, VarMap)>,
    encoder_prefix: &str,
    family: Family,
) -> Result<HashMap<String, Tensor>> {
    let (encoder, head) = vars.ok_or_else(|| {
        ModelError::InvalidInput("this model was loaded for inference only; load it as trainable to save it".into())
    })?;
    let mut out = HashMap::new();
    for (name, var) in encoder.data().lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.insert(format!("{encoder_prefix}.{}", family.file_name(name)), var.as_tensor().detach());
    }
    for (name, var) in head.data().lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.insert(name.clone(), var.as_tensor().detach());
    }
    Ok(out)
}
