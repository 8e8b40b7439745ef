//! The classification head on the document vector: LayerNorm, then
//! `dense (H → C_h) → tanh → dropout → out_proj (→ labels)`
//! (as transformers' `RobertaClassificationHead`, with the LayerNorm in front).

use candle_core::{Result, Tensor};
use candle_nn::{Module, VarBuilder};

use crate::layers::{linear, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// `norm.*` and `classifier.{dense,out_proj}.*`.
#[derive(Debug, Clone)]
pub struct ClassificationHead {
    norm: LayerNorm,
    dense: Linear,
    dropout: Dropout,
    out_proj: Linear,
}

impl ClassificationHead {
    /// Loads the head from the root builder (`norm`, `classifier`).
    pub fn load(
        vb: VarBuilder,
        hidden: usize,
        inner: usize,
        labels: usize,
        eps: f64,
        dropout: f64,
        std: f64,
    ) -> Result<Self> {
        Ok(Self {
            norm: LayerNorm::load(vb.pp("norm"), hidden, eps)?,
            dense: linear(vb.pp("classifier").pp("dense"), hidden, inner, std)?,
            dropout: Dropout::new(dropout),
            out_proj: linear(vb.pp("classifier").pp("out_proj"), inner, labels, std)?,
        })
    }

    /// # Shapes
    /// `doc: [hidden]` → logits `[labels]`
    pub fn forward(&self, doc: &Tensor, mode: Mode) -> Result<Tensor> {
        self.forward_rows(&doc.unsqueeze(0)?, mode)?.squeeze(0)
    }

    /// The head on each row (each chunk, for multiple-instance pooling).
    ///
    /// # Shapes
    /// `rows: [n, hidden]` → logits `[n, labels]`
    pub fn forward_rows(&self, rows: &Tensor, mode: Mode) -> Result<Tensor> {
        let x = self.norm.forward(rows, mode)?;
        let x = self.dense.forward(&x)?.tanh()?;
        let x = self.dropout.forward(&x, mode)?;
        self.out_proj.forward(&x)
    }
}
