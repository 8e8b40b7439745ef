//! A bidirectional GRU over padded sequences, all sequences of a batch stepping together (one
//! time loop per batch). Equations and parameters as `torch.nn.GRU` (gates r, z, n):
//! `r = σ(W_ir x + b_ir + W_hr h + b_hr)`, `z = σ(W_iz x + b_iz + W_hz h + b_hz)`,
//! `n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`, `h' = (1 − z) ⊙ n + z ⊙ h`.
//! At padded positions the state is carried over unchanged and the output is zero, so each
//! direction sees exactly the real elements (as with `pack_padded_sequence`), wherever the
//! padding is.

use candle_core::{Result, Tensor, D};
use candle_nn::{Init, VarBuilder};

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
        let fwd = self.run(&self.forward, x, mask, false)?;
        let bwd = self.run(&self.backward, x, mask, true)?;
        Tensor::cat(&[fwd, bwd], D::Minus1)
    }

    /// # Shapes
    /// `x: [N, T, in]`, `mask: [N, T]` → `[N, T, H]`
    fn run(&self, w: &Direction, x: &Tensor, mask: &Tensor, reverse: bool) -> Result<Tensor> {
        let (n, t, input) = x.dims3()?;
        let h_size = self.hidden;
        // Input projections of every step at once: [N, T, 3H].
        let gi = x.reshape((n * t, input))?.matmul(&w.weight_ih.t()?)?.broadcast_add(&w.bias_ih)?.reshape((
            n,
            t,
            3 * h_size,
        ))?;
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
