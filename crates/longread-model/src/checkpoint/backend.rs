//! A `VarBuilder` backend over a [`TensorStore`]: checks shapes against the config, accepts
//! legacy names, registers trainable variables, and initialises missing tensors from a seed
//! (only where the caller allows new tensors, e.g. a fresh classification head).

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::{Init, VarMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checkpoint::store::TensorStore;
use crate::encoder::Family;
use crate::error::ModelError;

/// How tensors requested by a model are served.
pub(crate) struct StoreBackend {
    pub(crate) store: Option<Arc<TensorStore>>,
    /// When set, every tensor becomes a `Var` registered here under its full name.
    pub(crate) vars: Option<VarMap>,
    /// When set, tensors absent from the store are initialised from this generator.
    pub(crate) init_rng: Option<Mutex<StdRng>>,
    pub(crate) model_type: String,
    /// The encoder family whose file names the canonical names map to (none for the HAN).
    pub(crate) family: Option<Family>,
    /// Prepended to every name when looking it up in the store (e.g. `"bert."`); variables are
    /// registered under the name without it.
    pub(crate) lookup_prefix: String,
}

impl StoreBackend {
    /// Names to try for the canonical `name`: the family's own name for it, the canonical name,
    /// then the pre-2019 LayerNorm names `gamma`/`beta`.
    fn candidates(&self, name: &str) -> Vec<String> {
        let mut names = Vec::new();
        if let Some(family) = self.family {
            names.push(format!("{}{}", self.lookup_prefix, family.file_name(name)));
        }
        let name = format!("{}{name}", self.lookup_prefix);
        if !names.contains(&name) {
            names.push(name.clone());
        }
        if let Some(stem) = name.strip_suffix("LayerNorm.weight") {
            names.push(format!("{stem}LayerNorm.gamma"));
        } else if let Some(stem) = name.strip_suffix("LayerNorm.bias") {
            names.push(format!("{stem}LayerNorm.beta"));
        }
        names
    }

    fn stored(&self, name: &str) -> Option<String> {
        let store = self.store.as_ref()?;
        self.candidates(name).into_iter().find(|n| store.contains(n))
    }

    fn register(&self, name: &str, tensor: Tensor) -> candle_core::Result<Tensor> {
        match &self.vars {
            None => Ok(tensor),
            Some(vars) => {
                let mut data = vars.data().lock().unwrap_or_else(|p| p.into_inner());
                if let Some(existing) = data.get(name) {
                    return Ok(existing.as_tensor().clone());
                }
                let var = Var::from_tensor(&tensor)?;
                let t = var.as_tensor().clone();
                data.insert(name.to_owned(), var);
                Ok(t)
            }
        }
    }

    fn initialise(&self, shape: &Shape, init: Init, dtype: DType, dev: &Device) -> candle_core::Result<Option<Tensor>> {
        let Some(rng) = &self.init_rng else {
            return Ok(None);
        };
        let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
        let n = shape.elem_count();
        let values: Vec<f32> = match init {
            Init::Const(c) => vec![c as f32; n],
            Init::Randn { mean, stdev } => (0..n).map(|_| (mean + stdev * standard_normal(&mut rng)) as f32).collect(),
            Init::Uniform { lo, up } => (0..n).map(|_| rng.random_range(lo..up) as f32).collect(),
            Init::Kaiming { .. } => {
                return Err(candle_core::Error::Msg("kaiming init is not used by longread models".into()))
            }
        };
        Ok(Some(Tensor::from_vec(values, shape.clone(), dev)?.to_dtype(dtype)?))
    }
}

/// A draw from N(0, 1) by the Box–Muller transform.
fn standard_normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl candle_nn::var_builder::SimpleBackend for StoreBackend {
    fn get(&self, shape: Shape, name: &str, init: Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        if let Some(stored) = self.stored(name) {
            let store = self.store.as_ref().expect("stored() implies a store");
            let found = store.shape(&stored).unwrap_or_default();
            if found != shape.dims() {
                return Err(candle_core::Error::wrap(ModelError::ShapeMismatch {
                    name: stored,
                    expected: shape.dims().to_vec(),
                    found: found.to_vec(),
                }));
            }
            let t = store.load(&stored, dev).map_err(candle_core::Error::wrap)?.to_dtype(dtype)?;
            return self.register(name, t);
        }
        match self.initialise(&shape, init, dtype, dev)? {
            Some(t) => self.register(name, t),
            None => Err(candle_core::Error::wrap(ModelError::MissingTensor {
                name: name.to_owned(),
                tried: self.candidates(name).join(", "),
                model_type: self.model_type.clone(),
            })),
        }
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let stored = self.stored(name).ok_or_else(|| {
            candle_core::Error::wrap(ModelError::MissingTensor {
                name: name.to_owned(),
                tried: self.candidates(name).join(", "),
                model_type: self.model_type.clone(),
            })
        })?;
        let store = self.store.as_ref().expect("stored() implies a store");
        let t = store.load(&stored, dev).map_err(candle_core::Error::wrap)?.to_dtype(dtype)?;
        self.register(name, t)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.stored(name).is_some()
    }
}

/// Seeded generator for new tensors.
pub(crate) fn init_rng(seed: u64) -> Mutex<StdRng> {
    Mutex::new(StdRng::seed_from_u64(seed))
}
