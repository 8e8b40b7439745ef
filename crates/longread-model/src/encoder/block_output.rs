//! The end of an attention or feed-forward block: `LayerNorm(residual + dropout(dense(x)))`.
//! Reference: transformers `modeling_bert.py: BertSelfOutput`, `BertOutput`.

use candle_core::{DType, Result, Tensor};
use candle_nn::{Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::layers::cuda;
use crate::layers::fused::FusedResidualNorm;
use crate::layers::weight_casts::{self, Join};
use crate::layers::{linear, Dropout, LayerNorm, Linear};
use crate::mode::Mode;
use crate::route;

/// `output.dense`, hidden dropout, the residual connection and `output.LayerNorm`.
#[derive(Debug, Clone)]
pub(crate) struct BlockOutput {
    dense: Linear,
    dropout: Dropout,
    norm: LayerNorm,
}

impl BlockOutput {
    /// Loads `dense` (`in_dim` → hidden) and `LayerNorm` under `vb` (= `output`).
    pub(crate) fn load(vb: VarBuilder, cfg: &EncoderConfig, in_dim: usize) -> Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            dense: linear(vb.pp("dense"), in_dim, h, cfg.initializer_range)?,
            dropout: Dropout::new(cfg.hidden_dropout_prob),
            norm: LayerNorm::load(vb.pp("LayerNorm"), h, cfg.layer_norm_eps)?,
        })
    }

    /// Keeps the dense weight in `dtype` (inference; see [`Linear::cast_weight`]).
    pub(crate) fn cast_weight(&mut self, dtype: DType) -> Result<()> {
        self.dense.cast_weight(dtype)
    }

    /// Switches the dense layer to int8 products (inference) or back to f32.
    pub(crate) fn quantize_int8(&mut self, on: bool) -> Result<()> {
        self.dense.quantize_int8(on)
    }

    /// f32 on the CPU: the dense product, then bias, dropout, residual and LayerNorm as one
    /// fused op (`layers::fused::residual_norm`; with a backward pass in [`Mode::Train`], none in
    /// [`Mode::Eval`], where the output carries no graph); elsewhere the composition of
    /// [`BlockOutput::forward_composed`].
    ///
    /// # Shapes
    /// `xs: [batch, seq, in]`, `residual: [batch, seq, hidden]` → `[batch, seq, hidden]`
    pub(crate) fn forward(&self, xs: &Tensor, residual: &Tensor, mode: Mode) -> Result<Tensor> {
        if xs.device().is_cuda() && !mode.is_train() {
            if let Some((product, bias)) = self.dense.forward_unbiased(xs, false)? {
                let (gamma, beta) = self.norm.affine();
                return cuda::residual_layer_norm(product, residual, &bias, gamma, beta, self.norm.eps());
            }
        }
        if route::gpu(xs.device()) && mode.is_train() {
            if let Some(out) = self.forward_fused_train(xs, residual, mode)? {
                return Ok(out);
            }
        }
        if !(route::cpu(xs.device()) && xs.dtype() == DType::F32 && residual.dtype() == DType::F32) {
            return self.forward_composed(xs, residual, mode);
        }
        let (gamma, beta) = self.norm.affine();
        let graph = mode.is_train()
            && (self.dense.needs_graph(xs, mode) || [residual, gamma, beta].iter().any(|t| t.track_op()));
        let (product, params) = match self.dense.forward_unbiased(xs, graph)? {
            Some((product, bias)) => (product, Tensor::stack(&[&bias, gamma, beta], 0)?),
            // int8 products add their bias inside the kernel.
            None => (self.dense.forward(xs)?, Tensor::stack(&[gamma, beta], 0)?),
        };
        let op = FusedResidualNorm { eps: self.norm.eps() as f32, dropout: self.dropout.seeded(mode) };
        let (product, residual) = (product.contiguous()?, residual.contiguous()?);
        if graph {
            return product.apply_op3(&residual, &params, op);
        }
        // Nothing to differentiate (always so in inference, whose output carries no graph): the
        // product, made above and held nowhere else, becomes the output, with no new buffer.
        product.inplace_op3(&residual, &params, &op)?;
        Ok(product)
    }

    /// Training on the GPU route: the dense product, then bias, dropout, residual and LayerNorm
    /// as one op that keeps only its inputs for the backward pass
    /// (`layers::cuda::ResidualNormTrain`). Runs on any device (on the CPU with the op's f32
    /// reference kernel, for tests); `None` where the dense layer has no bias or the product
    /// and the residual differ in dtype (the caller composes instead).
    ///
    /// # Shapes
    /// `xs: [batch, seq, in]`, `residual: [batch, seq, hidden]` → `[batch, seq, hidden]`
    pub(crate) fn forward_fused_train(&self, xs: &Tensor, residual: &Tensor, mode: Mode) -> Result<Option<Tensor>> {
        // Checked before the product is made (it has `xs`' dtype); `finish_train` checks again.
        if self.dense.parts().1.is_none() || xs.dtype() != residual.dtype() {
            return Ok(None);
        }
        self.finish_train(&self.dense.product_train(xs)?, residual, mode)
    }

    /// Training on the GPU route from a product of this block's dense layer made elsewhere
    /// (without its bias; `layers::cuda::GeluDenseTrain` makes the feed-forward block's): bias,
    /// dropout, residual and LayerNorm as `ResidualNormTrain`. `None` where the dense layer has
    /// no bias or the product and the residual differ in dtype (the caller composes instead).
    ///
    /// # Shapes
    /// `product, residual: [batch, seq, hidden]` → `[batch, seq, hidden]`
    pub(crate) fn finish_train(&self, product: &Tensor, residual: &Tensor, mode: Mode) -> Result<Option<Tensor>> {
        let Some(bias) = self.dense.parts().1.filter(|_| product.dtype() == residual.dtype()) else {
            return Ok(None);
        };
        let product = product.contiguous()?;
        let (gamma, beta) = self.norm.affine();
        // Stacked once per training step (`weight_casts::joined`), not for every chunk batch.
        let params = weight_casts::joined(&[bias, gamma, beta], Join::Stack, DType::F32, "bias-gamma-beta")?;
        let op = cuda::ResidualNormTrain { eps: self.norm.eps() as f32, dropout: self.dropout.seeded(mode) };
        product.apply_op3(&residual.contiguous()?, &params, op).map(Some)
    }

    /// The dense layer (`output.dense`).
    pub(crate) fn dense(&self) -> &Linear {
        &self.dense
    }

    /// The same as a composition of ops (any device and dtype; the same dropout masks).
    ///
    /// # Shapes
    /// `xs: [batch, seq, in]`, `residual: [batch, seq, hidden]` → `[batch, seq, hidden]`
    pub(crate) fn forward_composed(&self, xs: &Tensor, residual: &Tensor, mode: Mode) -> Result<Tensor> {
        let out = self.dropout.forward(&self.dense.forward(xs)?, mode)?;
        self.norm.forward(&(out + residual)?, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DropoutRng;
    use crate::seeded::Normals;
    use candle_core::{Device, Var};
    use candle_nn::VarMap;

    /// Inference builds no graph (as before the fused op: the intermediates of a layer are
    /// freed when it ends), even over trainable weights; training does.
    #[test]
    fn inference_output_carries_no_graph() {
        let normals = Normals::new(154);
        let device = Device::Cpu;
        let (_vars, block) = block();
        let xs = normals.tensor(0f32, 1.0, (2, 3, 56), &device).unwrap();
        let residual = normals.tensor(0f32, 1.0, (2, 3, 40), &device).unwrap();
        assert!(!block.forward(&xs, &residual, Mode::Eval).unwrap().track_op());
        let rng = DropoutRng::new(1);
        assert!(block.forward(&xs, &residual, Mode::Train(&rng)).unwrap().track_op());
    }

    /// The GPU route's training op (`ResidualNormTrain`), run on the CPU with its reference
    /// kernel, gives the composition's output and gradients (input, residual and the four
    /// parameters) with the same dropout mask.
    #[test]
    fn the_gpu_routes_training_op_is_the_composition() {
        let normals = Normals::new(168);
        let device = Device::Cpu;
        let (vars, block) = block();
        let xs = Var::from_tensor(&normals.tensor(0f32, 1.0, (2, 13, 56), &device).unwrap()).unwrap();
        let residual = Var::from_tensor(&normals.tensor(0f32, 1.0, (2, 13, 40), &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (2, 13, 40), &device).unwrap();
        let mut names: Vec<_> = vars.data().lock().unwrap().keys().cloned().collect();
        names.sort();
        let run = |gpu_route: bool| {
            let rng = DropoutRng::new(3);
            let mode = Mode::Train(&rng);
            let y = if gpu_route {
                block.forward_fused_train(xs.as_tensor(), residual.as_tensor(), mode).unwrap().expect("a bias")
            } else {
                block.forward_composed(xs.as_tensor(), residual.as_tensor(), mode).unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let mut all = vec![y, grads.get(xs.as_tensor()).unwrap().clone()];
            all.push(grads.get(residual.as_tensor()).unwrap().clone());
            for name in &names {
                let var = vars.data().lock().unwrap()[name].clone();
                all.push(grads.get(var.as_tensor()).unwrap().clone());
            }
            all
        };
        let (gpu_route, composed) = (run(true), run(false));
        assert_eq!(gpu_route.len(), 7, "output, input, residual and 4 parameters");
        for (i, (a, b)) in gpu_route.iter().zip(&composed).enumerate() {
            let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 5e-5, "tensor {i}: max abs diff {d}");
        }
    }

    /// A block of hidden size 40 over inputs of 56, with trainable weights.
    fn block() -> (VarMap, BlockOutput) {
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
            "hidden_dropout_prob": 0.2, "layer_norm_eps": 1e-5
        }))
        .unwrap();
        let vars = VarMap::new();
        let block = BlockOutput::load(VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu), &cfg, 56).unwrap();
        (vars, block)
    }

    /// The fused and composed paths give the same output and the same gradients for the
    /// input, the residual and every parameter, with dropout (the same seed stream).
    #[test]
    fn the_fused_path_is_the_composition() {
        let normals = Normals::new(216);
        let device = Device::Cpu;
        let (vars, block) = block();
        for (_, var) in vars.data().lock().unwrap().iter() {
            let t = normals.tensor(0f32, 0.5, var.shape(), &device).unwrap();
            var.set(&(t + 0.3).unwrap()).unwrap();
        }
        let xs = Var::from_tensor(&normals.tensor(0f32, 1.0, (2, 21, 56), &device).unwrap()).unwrap();
        let residual = Var::from_tensor(&normals.tensor(0f32, 1.0, (2, 21, 40), &device).unwrap()).unwrap();
        let w = normals.tensor(0f32, 1.0, (2, 21, 40), &device).unwrap();
        let run = |fused: bool| {
            let rng = DropoutRng::new(5);
            let mode = Mode::Train(&rng);
            let y = if fused {
                block.forward(xs.as_tensor(), residual.as_tensor(), mode).unwrap()
            } else {
                block.forward_composed(xs.as_tensor(), residual.as_tensor(), mode).unwrap()
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let mut all = vec![y, grads.get(xs.as_tensor()).unwrap().clone()];
            all.push(grads.get(residual.as_tensor()).unwrap().clone());
            let mut names: Vec<_> = vars.data().lock().unwrap().keys().cloned().collect();
            names.sort();
            for name in names {
                let var = vars.data().lock().unwrap()[&name].clone();
                all.push(grads.get(var.as_tensor()).unwrap().clone());
            }
            all
        };
        let (fused, composed) = (run(true), run(false));
        assert_eq!(fused.len(), 7, "output, input, residual and 4 parameters");
        for (i, (a, b)) in fused.iter().zip(&composed).enumerate() {
            let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 5e-5, "tensor {i}: max abs diff {d}");
        }
    }
}
