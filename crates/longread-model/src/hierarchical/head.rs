//! The classification head on the document vector: LayerNorm, then
//! `dense (H → C_h) → tanh → dropout → out_proj (→ labels)`
//! (as transformers' `RobertaClassificationHead`, with the LayerNorm in front).
//!
//! With `ordinal` labels (ordered, e.g. general < teen < mature) `out_proj` gives one score s
//! and the labels come from a cumulative link model (proportional odds, McCullagh 1980):
//! `P(y ≤ k) = σ(θ_k − s)` with increasing thresholds `θ_0 = t_0`, `θ_k = θ_{k−1} +
//! softplus(t_k)` (`classifier.thresholds` [labels − 1] holds t). The head returns the log
//! class probabilities as logits, so softmax, argmax and cross-entropy downstream are the
//! model's probabilities, decision and negative log-likelihood.

use candle_core::{Result, Tensor, D};
use candle_nn::{Init, Module, VarBuilder};

use crate::hierarchical::ClassifierConfig;
use crate::layers::{linear, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// Smallest class probability whose log is taken (f32 differences of nearby sigmoids can
/// round to 0).
const MIN_PROBABILITY: f64 = 1e-12;

/// `norm.*` and `classifier.{dense,out_proj}.*` (+ `classifier.thresholds` when ordinal).
#[derive(Debug, Clone)]
pub struct ClassificationHead {
    norm: LayerNorm,
    dense: Linear,
    dropout: Dropout,
    out_proj: Linear,
    /// An ordinal head's threshold parameters: (initial t⁰, stored offsets) `[labels − 1]`
    /// each; t = t⁰ + offsets is recomputed at every forward pass (the offsets train).
    thresholds: Option<(Tensor, Tensor)>,
}

impl ClassificationHead {
    /// Loads the head from the root builder (`norm`, `classifier`).
    pub fn load(vb: VarBuilder, config: &ClassifierConfig, labels: usize) -> Result<Self> {
        let (hidden, std, s) = (config.encoder.hidden_size, config.encoder.initializer_range, &config.longread);
        let inner = config.classifier_hidden_size();
        let outputs = if s.ordinal { 1 } else { labels };
        let thresholds = if s.ordinal {
            // Initially θ = −(L−2)/2, …, (L−2)/2: steps of softplus(t) = 1.
            let first = -((labels as f64) - 2.0) / 2.0;
            let init: Vec<f32> =
                (0..labels - 1).map(|k| if k == 0 { first } else { 1f64.exp_m1().ln() } as f32).collect();
            // Stored as offsets from these initial values (a new head stores zeros).
            let offsets = vb.pp("classifier").get_with_hints(labels - 1, "thresholds", Init::Const(0.0))?;
            Some((Tensor::from_vec(init, labels - 1, offsets.device())?, offsets))
        } else {
            None
        };
        Ok(Self {
            norm: LayerNorm::load(vb.pp("norm"), hidden, s.layer_norm_eps)?,
            dense: linear(vb.pp("classifier").pp("dense"), hidden, inner, std)?,
            dropout: Dropout::new(s.classifier_dropout),
            out_proj: linear(vb.pp("classifier").pp("out_proj"), inner, outputs, std)?,
            thresholds,
        })
    }

    /// # Shapes
    /// `doc: [hidden]` → logits `[labels]`
    pub fn forward(&self, doc: &Tensor, mode: Mode) -> Result<Tensor> {
        self.ordinal_logits(&self.outputs(&doc.unsqueeze(0)?, mode)?)?.squeeze(0)
    }

    /// Label-wise logits: label l's logit from label l's document vector (the diagonal of the
    /// head's outputs on every label's vector).
    ///
    /// # Shapes
    /// `docs: [labels, hidden]` → logits `[labels]`
    pub fn label_wise(&self, docs: &Tensor, mode: Mode) -> Result<Tensor> {
        let outputs = self.outputs(docs, mode)?; // [labels, labels]
        let eye = Tensor::eye(outputs.dim(0)?, outputs.dtype(), outputs.device())?;
        outputs.mul(&eye)?.sum(1)
    }

    /// `out_proj`'s outputs on each row (each chunk, for multiple-instance pooling): the
    /// logits, or an ordinal head's scores.
    ///
    /// # Shapes
    /// `rows: [n, hidden]` → `[n, labels]`, or `[n, 1]` when ordinal
    pub fn outputs(&self, rows: &Tensor, mode: Mode) -> Result<Tensor> {
        let x = self.norm.forward(rows, mode)?;
        let x = self.dense.forward(&x)?.tanh()?;
        let x = self.dropout.forward(&x, mode)?;
        self.out_proj.forward(&x)
    }

    /// The logits from [`Self::outputs`]: an ordinal head's log class probabilities of the
    /// cumulative link model, any other head's outputs unchanged.
    ///
    /// # Shapes
    /// `scores: [n, 1]` (ordinal) → `[n, labels]`; `[n, labels]` → the same
    pub fn ordinal_logits(&self, scores: &Tensor) -> Result<Tensor> {
        let Some((init, offsets)) = &self.thresholds else { return Ok(scores.clone()) };
        let raw = init.add(offsets)?;
        let k = raw.dim(0)?;
        // θ_0 = t_0, θ_j = θ_{j−1} + softplus(t_j).
        let steps = softplus(&raw.narrow(0, 1, k - 1)?)?;
        let theta = Tensor::cat(&[raw.narrow(0, 0, 1)?, steps], 0)?.cumsum(0)?; // [k]
        let cdf = candle_nn::ops::sigmoid(&theta.unsqueeze(0)?.broadcast_sub(scores)?)?; // [n, k]
        let n = scores.dim(0)?;
        let zeros = Tensor::zeros((n, 1), cdf.dtype(), cdf.device())?;
        let ones = Tensor::ones((n, 1), cdf.dtype(), cdf.device())?;
        let upper = Tensor::cat(&[&cdf, &ones], D::Minus1)?; // P(y ≤ j), j = 0..L−1
        let lower = Tensor::cat(&[&zeros, &cdf], D::Minus1)?; // P(y ≤ j − 1)
        (upper - lower)?.maximum(MIN_PROBABILITY)?.log()
    }
}

/// `ln(1 + eˣ)`, stable for large |x|.
fn softplus(x: &Tensor) -> Result<Tensor> {
    let positive = x.relu()?;
    let rest = x.abs()?.neg()?.exp()?.affine(1.0, 1.0)?.log()?;
    positive + rest
}
