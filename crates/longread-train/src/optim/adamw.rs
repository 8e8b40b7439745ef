//! AdamW (Loshchilov & Hutter 2019) with PyTorch's exact update order
//! (`torch/optim/adam.py: _single_tensor_adam`, decoupled weight decay), updating each
//! parameter in place in one multi-threaded pass. Moments of CPU parameters live on the host as
//! plain vectors; those of GPU parameters on the GPU, all updated by one kernel launch
//! (`longread_model::layers::cuda::adamw_multi`, as PyTorch's fused AdamW; or one per
//! parameter, `AdamWStep`: the same formula). Checkpoints save and restore both.

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Layout, Var};
use longread_model::layers::cuda::AdamWParts;
use longread_model::layers::AdamWStep;
use rayon::prelude::*;

use crate::error::{Result, TrainError};

/// Hyper-parameters shared by all groups.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// β1 (0.9).
    pub beta1: f64,
    /// β2 (0.999).
    pub beta2: f64,
    /// ε (1e-8).
    pub eps: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }
}

/// Parameters that share a learning rate and weight decay.
#[derive(Debug, Clone)]
pub struct ParamGroup {
    /// A name for logs ("encoder.layer.3", "head", "no_decay", …).
    pub name: String,
    /// Learning rate of the group.
    pub lr: f64,
    /// Decoupled weight decay of the group (0 for biases and LayerNorm weights).
    pub weight_decay: f64,
    /// The parameters, by name.
    pub params: Vec<(String, Var)>,
}

/// Moments and step count of one parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamState {
    /// Steps taken by this parameter (PyTorch counts per parameter).
    pub step: u64,
    /// First moment (empty while the moments live on the GPU: see [`AdamW::export_state`]).
    pub exp_avg: Vec<f32>,
    /// Second moment (empty while the moments live on the GPU).
    pub exp_avg_sq: Vec<f32>,
}

/// The optimizer.
#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    groups: Vec<ParamGroup>,
    state: HashMap<String, ParamState>,
    /// The moments of GPU parameters, `[2, n]` (first, second) on the parameter's device.
    device_moments: HashMap<String, candle_core::Tensor>,
}

impl AdamW {
    /// An optimizer over `groups`; parameters must be f32 (on the CPU or a GPU).
    pub fn new(groups: Vec<ParamGroup>, config: AdamWConfig) -> Result<Self> {
        let (b1, b2) = (config.beta1, config.beta2);
        if !(0.0..1.0).contains(&b1) || !(0.0..1.0).contains(&b2) || config.eps <= 0.0 {
            return Err(TrainError::InvalidSetting(format!(
                "AdamW needs 0 ≤ beta1, beta2 < 1 and eps > 0 (got {b1}, {b2}, {})",
                config.eps
            )));
        }
        Ok(Self { config, groups, state: HashMap::new(), device_moments: HashMap::new() })
    }

    /// The parameter groups.
    pub fn groups(&self) -> &[ParamGroup] {
        &self.groups
    }

    /// Adds the parameters of `groups` that the optimizer does not hold yet (gradual
    /// unfreezing): into the group of the same name, or as a new group with its learning rate
    /// and weight decay. New parameters start with zero moments and step 0. Returns how many
    /// parameters were added.
    pub fn add_params(&mut self, groups: Vec<ParamGroup>) -> usize {
        let held: std::collections::HashSet<String> =
            self.groups.iter().flat_map(|g| g.params.iter().map(|(n, _)| n.clone())).collect();
        let mut added = 0;
        for group in groups {
            let new: Vec<(String, Var)> = group.params.into_iter().filter(|(n, _)| !held.contains(n)).collect();
            if new.is_empty() {
                continue;
            }
            added += new.len();
            match self.groups.iter_mut().find(|g| g.name == group.name) {
                Some(g) => g.params.extend(new),
                None => self.groups.push(ParamGroup { params: new, ..group }),
            }
        }
        added
    }

    /// Sets every group's learning rate to `base · factor_g`, e.g. for a schedule.
    pub fn set_lr(&mut self, lr_of: impl Fn(&ParamGroup) -> f64) {
        for g in &mut self.groups {
            g.lr = lr_of(g);
        }
    }

    /// The state of one parameter, if it has taken a step.
    pub fn state(&self, name: &str) -> Option<&ParamState> {
        self.state.get(name)
    }

    /// The moments as tensors (`exp_avg.NAME`, `exp_avg_sq.NAME`) and the per-parameter step
    /// counts, for checkpoints.
    pub fn export_state(&self) -> Result<(HashMap<String, candle_core::Tensor>, HashMap<String, u64>)> {
        let mut tensors = HashMap::new();
        let mut steps = HashMap::new();
        for (name, st) in &self.state {
            let (m, v) = match self.device_moments.get(name) {
                Some(both) => {
                    let both = both.to_device(&longread_model::device::host())?;
                    (both.get(0)?, both.get(1)?)
                }
                None => {
                    let (n, dev) = (st.exp_avg.len(), &longread_model::device::host());
                    (
                        candle_core::Tensor::from_slice(&st.exp_avg, n, dev)?,
                        candle_core::Tensor::from_slice(&st.exp_avg_sq, n, dev)?,
                    )
                }
            };
            tensors.insert(format!("exp_avg.{name}"), m);
            tensors.insert(format!("exp_avg_sq.{name}"), v);
            steps.insert(name.clone(), st.step);
        }
        Ok((tensors, steps))
    }

    /// Restores what [`AdamW::export_state`] wrote; every entry must name a parameter of the
    /// optimizer and match its size.
    pub fn import_state(
        &mut self,
        tensors: &HashMap<String, candle_core::Tensor>,
        steps: &HashMap<String, u64>,
    ) -> Result<()> {
        let sizes: HashMap<&str, usize> =
            self.groups.iter().flat_map(|g| g.params.iter().map(|(n, v)| (n.as_str(), v.elem_count()))).collect();
        self.state.clear();
        self.device_moments.clear();
        for (name, &step) in steps {
            let bad = |what: &str| TrainError::InvalidSetting(format!("optimizer state for `{name}`: {what}"));
            let size = *sizes.get(name.as_str()).ok_or_else(|| bad("no such trainable parameter"))?;
            let get = |key: String| -> Result<Vec<f32>> {
                let t = tensors.get(&key).ok_or_else(|| bad("moments missing"))?;
                let v = t.flatten_all()?.to_vec1::<f32>()?;
                if v.len() != size {
                    return Err(bad("size differs from the parameter"));
                }
                Ok(v)
            };
            let state = ParamState {
                step,
                exp_avg: get(format!("exp_avg.{name}"))?,
                exp_avg_sq: get(format!("exp_avg_sq.{name}"))?,
            };
            self.state.insert(name.clone(), state);
        }
        Ok(())
    }

    /// One update of every parameter that has a gradient in `grads`; others are skipped and
    /// keep their step count (as PyTorch does for parameters whose `grad` is `None`).
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step_with(|var| grads.get(var.as_tensor()).cloned())
    }

    /// Like [`AdamW::step`], with gradients from any source (e.g. accumulated over batches).
    pub fn step_with(&mut self, gradient: impl Fn(&Var) -> Option<candle_core::Tensor>) -> Result<()> {
        self.step_scaled(1.0, gradient)
    }

    /// Like [`AdamW::step_with`], every gradient multiplied by `grad_scale` first (gradient
    /// clipping's factor, [`crate::clip::clip_factor`]): the same update as scaling the
    /// gradients beforehand, in the update's own pass over them.
    pub fn step_scaled(
        &mut self,
        grad_scale: f32,
        gradient: impl Fn(&Var) -> Option<candle_core::Tensor>,
    ) -> Result<()> {
        let AdamWConfig { beta1, beta2, eps } = self.config;
        // GPU parameters are updated together after the loop, in one launch where it applies.
        let mut on_gpu: Vec<(candle_core::Tensor, candle_core::Tensor, candle_core::Tensor, AdamWStep)> = Vec::new();
        for group in &self.groups {
            for (name, var) in &group.params {
                let Some(grad) = gradient(var) else { continue };
                let grad = grad.contiguous()?;
                let n = var.elem_count();
                let state = self.state.entry(name.clone()).or_insert_with(|| ParamState {
                    step: 0,
                    exp_avg: vec![0.0; n],
                    exp_avg_sq: vec![0.0; n],
                });
                state.step += 1;
                let bias1 = 1.0 - beta1.powi(state.step as i32);
                let bias2 = 1.0 - beta2.powi(state.step as i32);
                let coefficients = Coefficients {
                    grad_scale,
                    decay: (1.0 - group.lr * group.weight_decay) as f32,
                    one_minus_beta1: (1.0 - beta1) as f32,
                    beta2: beta2 as f32,
                    one_minus_beta2: (1.0 - beta2) as f32,
                    bias2_sqrt: bias2.sqrt() as f32,
                    eps: eps as f32,
                    step_size: (group.lr / bias1) as f32,
                };
                if var.device().is_cuda() {
                    let moments = match self.device_moments.entry(name.clone()) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            // Zeros, or the moments a checkpoint restored on the host.
                            let mut host = std::mem::take(&mut state.exp_avg);
                            host.append(&mut std::mem::take(&mut state.exp_avg_sq));
                            host.resize(2 * n, 0.0);
                            e.insert(candle_core::Tensor::from_vec(host, (2, n), var.device())?)
                        }
                    };
                    on_gpu.push((var.as_tensor().clone(), grad, moments.clone(), coefficients.on_gpu()));
                    continue;
                }
                let update = Update { moments: Mutex::new((&mut state.exp_avg, &mut state.exp_avg_sq)), coefficients };
                var.as_tensor().inplace_op2(&grad, &update)?;
            }
        }
        let parts: Vec<AdamWParts> = on_gpu
            .iter()
            .map(|(param, grad, moments, step)| AdamWParts { param, grad, moments, step: *step })
            .collect();
        if !longread_model::layers::cuda::adamw_multi(&parts)? {
            for part in &parts {
                part.param.inplace_op3(part.grad, part.moments, &part.step)?;
            }
        }
        Ok(())
    }
}

/// The in-place update of one parameter.
struct Update<'a> {
    moments: Mutex<(&'a mut Vec<f32>, &'a mut Vec<f32>)>,
    coefficients: Coefficients,
}

/// The constants of one parameter's update at one step.
#[derive(Debug, Clone, Copy)]
struct Coefficients {
    grad_scale: f32,
    decay: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    bias2_sqrt: f32,
    eps: f32,
    step_size: f32,
}

impl Coefficients {
    /// The same constants for the GPU's kernel.
    fn on_gpu(self) -> longread_model::layers::AdamWStep {
        longread_model::layers::AdamWStep {
            grad_scale: self.grad_scale,
            decay: self.decay,
            one_minus_beta1: self.one_minus_beta1,
            beta2: self.beta2,
            one_minus_beta2: self.one_minus_beta2,
            bias2_sqrt: self.bias2_sqrt,
            eps: self.eps,
            step_size: self.step_size,
        }
    }
}

/// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
const CHUNK: usize = 1 << 14;

impl candle_core::InplaceOp2 for Update<'_> {
    fn name(&self) -> &'static str {
        "adamw-update"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(param), CpuStorage::F32(grad)) = (s1, s2) else {
            candle_core::bail!("AdamW updates f32 parameters with f32 gradients")
        };
        let (Some((p0, p1)), Some((g0, g1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("AdamW needs contiguous parameters and gradients")
        };
        let (param, grad) = (&mut param[p0..p1], &grad[g0..g1]);
        let mut moments = self.moments.lock().unwrap_or_else(|p| p.into_inner());
        let (m, v) = &mut *moments;
        if grad.len() != param.len() || m.len() != param.len() {
            candle_core::bail!("AdamW: parameter, gradient and moments differ in size")
        }
        param
            .par_chunks_mut(CHUNK)
            .zip(grad.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((p, g), m), v)| update_chunk(p, g, m, v, self.coefficients));
        Ok(())
    }
}

longread_model::multiversion! {
    /// The AdamW update of one chunk of a parameter, built for SSE2, AVX2 and AVX-512 and run
    /// in the widest the CPU has (sqrt and division are correctly rounded in every build, and
    /// nothing is contracted into FMA: the same results everywhere).
    fn update_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: Coefficients) {
        let n = p.len().min(g.len()).min(m.len()).min(v.len());
        let (p, g, m, v) = (&mut p[..n], &g[..n], &mut m[..n], &mut v[..n]);
        for i in 0..n {
            // torch: p.mul_(1 - lr·wd); m.lerp_(g, 1 - β1); v.mul_(β2).addcmul_(g, g, 1 - β2);
            // p.addcdiv_(m, sqrt(v)/sqrt(bc2) + eps, value = -lr/bc1)
            // (clip_grad_norm_ scales g in place first: g · 1 is g)
            let g = g[i] * k.grad_scale;
            p[i] *= k.decay;
            m[i] += k.one_minus_beta1 * (g - m[i]);
            v[i] = v[i] * k.beta2 + k.one_minus_beta2 * g * g;
            p[i] -= k.step_size * m[i] / (v[i].sqrt() / k.bias2_sqrt + k.eps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn var(v: f32) -> Var {
        Var::from_tensor(&Tensor::new(&[v, v], &Device::Cpu).unwrap()).unwrap()
    }

    #[test]
    fn added_parameters_join_with_their_group_rate_and_fresh_state() {
        let (x, y, z) = (var(1.0), var(1.0), var(1.0));
        let group = |name: &str, lr: f64, params: Vec<(&str, &Var)>| ParamGroup {
            name: name.into(),
            lr,
            weight_decay: 0.0,
            params: params.into_iter().map(|(n, v)| (n.to_string(), v.clone())).collect(),
        };
        let mut opt = AdamW::new(vec![group("head", 0.1, vec![("x", &x)])], AdamWConfig::default()).unwrap();
        let ones = Tensor::new(&[1f32, 1.0], &Device::Cpu).unwrap();
        opt.step_with(|_| Some(ones.clone())).unwrap();
        // x is held already; y joins "head", z comes with a group of its own.
        let added = opt
            .add_params(vec![group("head", 0.1, vec![("x", &x), ("y", &y)]), group("layer.1", 0.01, vec![("z", &z)])]);
        assert_eq!(added, 2);
        assert_eq!(opt.groups().len(), 2);
        assert_eq!(opt.groups()[0].params.len(), 2);
        assert_eq!(opt.groups()[1].lr, 0.01);
        opt.step_with(|_| Some(ones.clone())).unwrap();
        assert_eq!(opt.state("x").unwrap().step, 2);
        assert_eq!(opt.state("y").unwrap().step, 1);
        // A first Adam step moves by lr (the sign of the gradient): y by 0.1, z by 0.01.
        let first = |v: &Var| v.as_tensor().to_vec1::<f32>().unwrap()[0];
        assert!((first(&y) - 0.9).abs() < 1e-6 && (first(&z) - 0.99).abs() < 1e-6);
        assert_eq!(opt.add_params(vec![group("head", 0.1, vec![("y", &y)])]), 0);
    }
}
