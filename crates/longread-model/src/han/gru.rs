//! A bidirectional GRU over padded sequences, all sequences of a batch stepping together (one
//! time loop per batch). Equations and parameters as `torch.nn.GRU` (gates r, z, n):
//! `r = σ(W_ir x + b_ir + W_hr h + b_hr)`, `z = σ(W_iz x + b_iz + W_hz h + b_hz)`,
//! `n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`, `h' = (1 − z) ⊙ n + z ⊙ h`.
//! At padded positions the state is carried over unchanged and the output is zero, so each
//! direction sees exactly the real elements (as with `pack_padded_sequence`), wherever the
//! padding is.

use candle_core::{DType, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};

use crate::han::gru_scan::GruScan;
use crate::layers::fused::{DenseProduct, FusedBiasAdd};

/// One direction's weights: `weight_ih [3H, in]`, `weight_hh [3H, H]`, biases `[3H]`.
#[derive(Debug, Clone)]
struct Direction {
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor,
    bias_hh: Tensor,
}

/// `torch.nn.GRU(input, hidden, batch_first=True, bidirectional=True)`.
#[derive(Debug, Clone)]
pub struct BiGru {
    forward: Direction,
    backward: Direction,
    hidden: usize,
}

impl BiGru {
    /// Loads (or creates, uniform(−1/√H, 1/√H) as PyTorch) `weight_ih_l0`, `weight_hh_l0`,
    /// `bias_ih_l0`, `bias_hh_l0` and their `_reverse` twins under `vb`.
    pub fn load(vb: VarBuilder, input: usize, hidden: usize) -> Result<Self> {
        let bound = 1.0 / (hidden as f64).sqrt();
        let init = Init::Uniform { lo: -bound, up: bound };
        let direction = |suffix: &str| -> Result<Direction> {
            Ok(Direction {
                weight_ih: vb.get_with_hints((3 * hidden, input), &format!("weight_ih_l0{suffix}"), init)?,
                weight_hh: vb.get_with_hints((3 * hidden, hidden), &format!("weight_hh_l0{suffix}"), init)?,
                bias_ih: vb.get_with_hints(3 * hidden, &format!("bias_ih_l0{suffix}"), init)?,
                bias_hh: vb.get_with_hints(3 * hidden, &format!("bias_hh_l0{suffix}"), init)?,
            })
        };
        Ok(Self { forward: direction("")?, backward: direction("_reverse")?, hidden })
    }

    /// # Shapes
    /// `x: [N, T, in]`, `mask: [N, T]` (f32, 1 = real) → `[N, T, 2H]` (forward ‖ backward)
    pub fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let fused = x.device().is_cpu() && x.dtype() == DType::F32;
        let fwd = self.run(&self.forward, x, mask, false, fused)?;
        let bwd = self.run(&self.backward, x, mask, true, fused)?;
        Tensor::cat(&[fwd, bwd], D::Minus1)
    }

    /// One direction: the input projections of every step in one matmul, then the time loop,
    /// `fused` as one op ([`GruScan`]) or composed from candle ops (other devices and dtypes).
    ///
    /// # Shapes
    /// `x: [N, T, in]`, `mask: [N, T]` → `[N, T, H]`
    fn run(&self, w: &Direction, x: &Tensor, mask: &Tensor, reverse: bool, fused: bool) -> Result<Tensor> {
        let (n, t, input) = x.dims3()?;
        let h_size = self.hidden;
        let rows = x.reshape((n * t, input))?;
        let product = if fused && (x.track_op() || w.weight_ih.track_op()) {
            // In training: the weights' gradient in their own layout, no zeroed buffers.
            rows.contiguous()?.apply_op2(&w.weight_ih.contiguous()?, DenseProduct)?
        } else {
            rows.matmul(&w.weight_ih.t()?)?
        };
        if fused {
            // The fused bias add sums the bias gradient over rows in one vectorised pass
            // (candle's broadcast_add backward reduces with a strided loop: 8% of a HAN step).
            let gi = product.apply_op2(&w.bias_ih.contiguous()?, FusedBiasAdd)?.reshape((n, t, 3 * h_size))?;
            let scan = GruScan { mask: mask.flatten_all()?.to_vec1::<f32>()?, reverse };
            return gi.apply_op3(&w.weight_hh.contiguous()?, &w.bias_hh.contiguous()?, scan);
        }
        let gi = product.broadcast_add(&w.bias_ih)?.reshape((n, t, 3 * h_size))?;
        let w_hh = w.weight_hh.t()?;
        let mut h = Tensor::zeros((n, h_size), x.dtype(), x.device())?;
        let mut outputs: Vec<Tensor> = vec![h.clone(); t];
        let steps: Vec<usize> = if reverse { (0..t).rev().collect() } else { (0..t).collect() };
        for step in steps {
            let gi_t = gi.narrow(1, step, 1)?.squeeze(1)?;
            let gh = h.matmul(&w_hh)?.broadcast_add(&w.bias_hh)?;
            let gate = |g: &Tensor, k: usize| g.narrow(1, k * h_size, h_size);
            let r = sigmoid(&(gate(&gi_t, 0)? + gate(&gh, 0)?)?)?;
            let z = sigmoid(&(gate(&gi_t, 1)? + gate(&gh, 1)?)?)?;
            let candidate = (gate(&gi_t, 2)? + r.mul(&gate(&gh, 2)?)?)?.tanh()?;
            // (1 − z) ⊙ n + z ⊙ h = n + z ⊙ (h − n)
            let next = (&candidate + z.mul(&(&h - &candidate)?)?)?;
            let m = mask.narrow(1, step, 1)?; // [N, 1]
            h = (next.broadcast_mul(&m)? + h.broadcast_mul(&(1.0 - &m)?)?)?;
            outputs[step] = h.broadcast_mul(&m)?;
        }
        Tensor::stack(&outputs, 1)
    }
}

/// σ(x) = (1 + tanh(x / 2)) / 2: the logistic function from ops that have backward passes.
fn sigmoid(x: &Tensor) -> Result<Tensor> {
    ((x * 0.5)?.tanh()? + 1.0)? * 0.5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};
    use candle_nn::VarMap;

    /// The fused time loop against the composition of candle ops: outputs, and the gradients of
    /// a weighted sum of the outputs with respect to the inputs and every weight, with padding
    /// at both ends and in the middle and all-padding rows; 68 rows, so that the fused op's
    /// rows are split over more than one task.
    #[test]
    fn fused_scan_matches_the_composed_loop_and_its_gradients() {
        let normals = Normals::new(118);
        let device = Device::Cpu;
        let vars = VarMap::new();
        let vb = crate::checkpoint::fresh_var_builder("han", 3, Some(vars.clone()), DType::F32, &device);
        let gru = BiGru::load(vb, 6, 5).unwrap();
        let (n, t) = (68, 7);
        let x = Var::from_tensor(&normals.tensor(0f32, 1.0, (n, t, 6), &device).unwrap()).unwrap();
        let mask: Vec<f32> =
            [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0]]
                .iter()
                .cycle()
                .take(n)
                .flatten()
                .map(|&m| m as f32)
                .collect();
        let mask = Tensor::from_vec(mask, (n, t), &device).unwrap();
        let weights = normals.tensor(0f32, 1.0, (n, t, 10), &device).unwrap();
        let run = |fused: bool| {
            let fwd = gru.run(&gru.forward, x.as_tensor(), &mask, false, fused).unwrap();
            let bwd = gru.run(&gru.backward, x.as_tensor(), &mask, true, fused).unwrap();
            let out = Tensor::cat(&[fwd, bwd], D::Minus1).unwrap();
            let grads = (&out * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            let mut all = vec![("output".to_string(), out)];
            all.push(("x".into(), grads.get(x.as_tensor()).unwrap().clone()));
            for (name, var) in vars.data().lock().unwrap().iter() {
                all.push((name.clone(), grads.get(var.as_tensor()).unwrap().clone()));
            }
            all
        };
        for ((name, fused), (_, composed)) in run(true).iter().zip(run(false)) {
            let diff = (fused - &composed).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            assert!(diff < 1e-5, "{name}: max abs diff {diff}");
        }
    }
}
