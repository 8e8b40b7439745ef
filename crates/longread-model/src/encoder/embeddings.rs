//! Word + position (+ token-type) embeddings, LayerNorm, dropout (+ ELECTRA's projection).
//! Reference: transformers `models/bert/modeling_bert.py: BertEmbeddings`,
//! `models/roberta/modeling_roberta.py: RobertaEmbeddings`, `models/distilbert/modeling_distilbert.py:
//! Embeddings` (no token types; sinusoidal positions computed when the checkpoint has none), `models/electra/modeling_electra.py:
//! ElectraEmbeddings` + `ElectraModel.embeddings_project`, `models/mpnet/modeling_mpnet.py:
//! MPNetEmbeddings` (no token types), `models/modernbert/modeling_modernbert.py: ModernBertEmbeddings`
//! (no positions, no token types, a norm without bias), `models/deberta_v2/modeling_deberta_v2.py:
//! DebertaV2Embeddings` (optional positions and token types, `embed_proj` before the norm, padding
//! zeroed).

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Embedding, Init, Module, VarBuilder};

use crate::config::EncoderConfig;
use crate::encoder::{modern, DebertaSettings, Family, ModernSettings};
use crate::layers::{cuda, linear, linear_with_bias, Dropout, LayerNorm, Linear};
use crate::mode::Mode;

/// The embedding block of an encoder.
#[derive(Debug, Clone)]
pub struct Embeddings {
    word: Embedding,
    /// Absent in ModernBERT (rotary positions, in the layers).
    position: Option<Embedding>,
    /// Absent in families without token types (DistilBERT, MPNet).
    token_type: Option<Embedding>,
    norm: LayerNorm,
    dropout: Dropout,
    /// ELECTRA's `embeddings_project` (embedding size → hidden size, after the norm), or
    /// DeBERTa-v2's `embed_proj` (without bias, before the norm), when the sizes differ.
    project: Option<Linear>,
    project_before_norm: bool,
    /// DeBERTa-v2 zeroes padding positions after the norm.
    zero_padding: bool,
    /// transformers' `padding_idx`: the rows of this id get no gradient (word table, and the
    /// position table where positions are offset from it).
    padding_idx: u32,
    offset_positions: bool,
    /// Inference in bf16: the GPU's one-kernel embeddings also write a bf16 copy of their
    /// output for the first product (`layers::cuda::twin`).
    bf16_copy: bool,
}

impl Embeddings {
    /// Loads `embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}`
    /// and ELECTRA's `embeddings_project` from the encoder's root builder `vb`.
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let family = cfg.family();
        let width = cfg.embedding_size();
        let init = Init::Randn { mean: 0.0, stdev: cfg.initializer_range };
        let emb = vb.pp("embeddings");
        let table = |name: &str, rows: usize| -> Result<Embedding> {
            let w = emb.pp(name).get_with_hints((rows, width), "weight", init)?;
            Ok(Embedding::new(w, width))
        };
        let sinusoidal = family == Family::DistilBert && cfg.sinusoidal_pos_embds == Some(true);
        let deberta = (family == Family::DebertaV2).then(|| DebertaSettings::of(cfg));
        let position = if family == Family::ModernBert || deberta.as_ref().is_some_and(|d| !d.position_biased_input) {
            None
        } else if sinusoidal && !emb.pp("position_embeddings").contains_tensor("weight") {
            // The fixed table transformers initialises (a checkpoint stores it, and is read as is).
            let table = sinusoidal_positions(cfg.max_position_embeddings, width, vb.device())?;
            Some(Embedding::new(table.to_dtype(vb.dtype())?, width))
        } else {
            Some(table("position_embeddings", cfg.max_position_embeddings)?)
        };
        // DeBERTa-v2 projects first, then normalises at the hidden size.
        let norm_width = if deberta.is_some() { cfg.hidden_size } else { width };
        let (norm, dropout) = if family == Family::ModernBert {
            let settings = ModernSettings::of(cfg);
            (
                modern::norm(emb.pp("LayerNorm"), width, cfg.layer_norm_eps, settings.norm_bias)?,
                settings.embedding_dropout,
            )
        } else {
            (LayerNorm::load(emb.pp("LayerNorm"), norm_width, cfg.layer_norm_eps)?, cfg.hidden_dropout_prob)
        };
        let token_type =
            if cfg.has_token_types() { Some(table("token_type_embeddings", cfg.type_vocab_size)?) } else { None };
        let project = match (width != cfg.hidden_size, deberta.is_some()) {
            (false, _) => None,
            (true, false) => Some(linear(vb.pp("embeddings_project"), width, cfg.hidden_size, cfg.initializer_range)?),
            (true, true) => {
                Some(linear_with_bias(emb.pp("embed_proj"), width, cfg.hidden_size, cfg.initializer_range, false)?)
            }
        };
        Ok(Self {
            word: table("word_embeddings", cfg.vocab_size)?,
            position,
            token_type,
            norm,
            dropout: Dropout::new(dropout),
            project,
            project_before_norm: deberta.is_some(),
            zero_padding: deberta.is_some(),
            padding_idx: cfg.pad_token_id,
            offset_positions: family.offsets_positions(),
            bf16_copy: false,
        })
    }

    /// Whether the products after the embeddings read bf16 (inference with bf16 weights).
    pub(crate) fn set_bf16_products(&mut self, on: bool) {
        self.bf16_copy = on;
    }

    /// Inference on a GPU, for embeddings that are a sum of a word, a position and an optional
    /// token-type row then LayerNorm (no projection, no zeroed padding): one kernel
    /// ([`cuda::EmbeddingTables`]). `None` elsewhere.
    ///
    /// # Shapes
    /// `input_ids, position_ids, token_type_ids: [batch, seq]` → `[batch, seq, hidden]` (f32)
    fn forward_fused_gpu(
        &self,
        input_ids: &Tensor,
        position_ids: &Tensor,
        token_type_ids: &Tensor,
    ) -> Result<Option<Tensor>> {
        let Some(position) = &self.position else { return Ok(None) };
        if self.project.is_some() || self.zero_padding {
            return Ok(None);
        }
        let tables = cuda::EmbeddingTables {
            word: self.word.embeddings(),
            position: position.embeddings(),
            types: self.token_type.as_ref().map(Embedding::embeddings),
            affine: self.norm.affine(),
            eps: self.norm.eps(),
        };
        tables.forward(input_ids, position_ids, token_type_ids, self.bf16_copy)
    }

    /// The word-embedding matrix (tied to the MLM decoder).
    pub fn word_embeddings(&self) -> &Tensor {
        self.word.embeddings()
    }

    /// Whether the block adds token-type embeddings.
    pub fn has_token_types(&self) -> bool {
        self.token_type.is_some()
    }

    /// Embeds token ids (`attention_mask`: 1 = token, 0 = padding); `host`, the same ids,
    /// positions and token types on the CPU where the batch was made there for a GPU (training's
    /// lookups group them for their backward pass without reading back from the GPU).
    ///
    /// # Shapes
    /// `input_ids, position_ids, token_type_ids, attention_mask: [batch, seq]` (u32) → `[batch, seq, hidden]`
    pub fn forward(
        &self,
        input_ids: &Tensor,
        position_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: &Tensor,
        host: Option<HostIds>,
        mode: Mode,
    ) -> Result<Tensor> {
        // On the GPU route's training, lookups whose backward pass sums each id's rows in
        // parallel (candle's walks every position on one thread per column) and leaves the
        // padding row out itself, as `nn.Embedding(padding_idx)` (RoBERTa's padding positions
        // are `padding_idx` too).
        if !mode.is_train() && input_ids.device().is_cuda() {
            if let Some(x) = self.forward_fused_gpu(input_ids, position_ids, token_type_ids)? {
                return Ok(x);
            }
        }
        let gpu_train = mode.is_train() && crate::route::gpu(input_ids.device());
        // Elsewhere, as `nn.Embedding(padding_idx=…)`: in training, padding rows pass no gradient.
        let padding = if mode.is_train() && !gpu_train {
            let (b, s) = input_ids.dims2()?;
            let width = self.word.embeddings().dim(1)?;
            Some(input_ids.eq(self.padding_idx)?.unsqueeze(2)?.broadcast_as((b, s, width))?)
        } else {
            None
        };
        let lookup =
            |table: &Embedding, ids: &Tensor, host: Option<&Tensor>, frozen_at_padding: bool| -> Result<Tensor> {
                if gpu_train {
                    let padding_idx = frozen_at_padding.then_some(self.padding_idx);
                    return crate::layers::cuda::embedding_lookup(table.embeddings(), ids, host, padding_idx);
                }
                let x = table.forward(ids)?;
                match &padding {
                    Some(padding) if frozen_at_padding && x.track_op() => padding.where_cond(&x.detach(), &x),
                    _ => Ok(x),
                }
            };
        let mut x = lookup(&self.word, input_ids, host.map(|h| h.ids), true)?;
        if let Some(position) = &self.position {
            x = (x + lookup(position, position_ids, host.map(|h| h.positions), self.offset_positions)?)?;
        }
        if let Some(token_type) = &self.token_type {
            x = (x + lookup(token_type, token_type_ids, host.map(|h| h.types), false)?)?;
        }
        let x = match (&self.project, self.project_before_norm) {
            (Some(project), true) => project.forward_in(&x, mode)?,
            _ => x,
        };
        let mut x = self.norm.forward(&x, mode)?;
        if self.zero_padding {
            x = x.broadcast_mul(&attention_mask.to_dtype(x.dtype())?.unsqueeze(2)?)?;
        }
        let x = self.dropout.forward(&x, mode)?;
        match (&self.project, self.project_before_norm) {
            (Some(project), false) => project.forward_in(&x, mode),
            _ => Ok(x),
        }
    }
}

/// A batch's ids, positions and token types on the CPU, as the host made them for an encoder
/// on a GPU (see [`Embeddings::forward`]).
///
/// # Shapes
/// each `[batch, seq]` (u32)
#[derive(Debug, Clone, Copy)]
pub struct HostIds<'a> {
    /// The token ids.
    pub ids: &'a Tensor,
    /// The position ids.
    pub positions: &'a Tensor,
    /// The token type ids.
    pub types: &'a Tensor,
}

/// DistilBERT's fixed position table: `sin(pos / 10000^(2⌊j/2⌋/dim))` in even columns, `cos` in
/// odd ones (transformers `create_sinusoidal_embeddings`, computed in f64 as numpy does).
///
/// # Shapes
/// → `[positions, dim]` (f32)
fn sinusoidal_positions(positions: usize, dim: usize, device: &Device) -> Result<Tensor> {
    let mut values = Vec::with_capacity(positions * dim);
    for pos in 0..positions {
        for j in 0..dim {
            let angle = pos as f64 / 10000f64.powf(2.0 * (j / 2) as f64 / dim as f64);
            values.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    Tensor::from_vec(values, (positions, dim), device)?.to_dtype(DType::F32)
}
