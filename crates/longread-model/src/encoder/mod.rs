//! The encoder of every family longread reads (BERT, RoBERTa, DistilBERT, ELECTRA, MPNet: see
//! [`Family`]), written for training: every op has a backward pass and dropout is real in
//! [`Mode::Train`]. Matches transformers' `BertModel`, `RobertaModel`, `DistilBertModel`,
//! `ElectraModel` and `MPNetModel` (without poolers) to float precision.

mod attention;
mod block_output;
mod deberta;
mod embeddings;
mod family;
mod layer;
mod modern;

use std::ops::Range;

use candle_core::{DType, Result as CResult, Tensor};
use candle_nn::VarBuilder;

pub use deberta::DebertaSettings;
pub use embeddings::Embeddings;
pub use family::{relative_position_bucket, Family, SequenceHeadStyle, MODEL_TYPES};
pub use layer::EncoderLayer;
pub use modern::{norm as modern_norm, ModernLayer, ModernSettings};

use crate::config::{EncoderConfig, PositionScheme};
use crate::error::{ModelError, Result};
use crate::layers::cuda::KeyLengths;
use crate::mode::Mode;

/// Which keys each query attends to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys<'a> {
    /// Padded sequences `[batch, seq, ...]`: an additive bias `[batch, 1, 1, seq]`, 0 for real
    /// tokens and a large negative number for padding, and MPNet's relative-position bias
    /// `[1, heads, seq, seq]`.
    Masked {
        /// `[batch, 1, 1, seq]`.
        mask: &'a Tensor,
        /// `[1, heads, seq, seq]`, in families that have one.
        position: Option<&'a Tensor>,
        /// DeBERTa-v2's relative table, gather indexes and pairwise mask (which then replaces
        /// `mask`).
        relative: Option<&'a deberta::RelativeContext>,
        /// Each sequence's real keys, where the GPU's inference or training runs
        /// FlashAttention-2 ([`Encoder::key_lengths`]).
        lengths: Option<&'a KeyLengths>,
    },
    /// Sequences packed end to end, `[tokens, ...]`: the row range of each (inference only).
    Packed(&'a [Range<usize>]),
}

/// A batch's inputs on the encoder's device ([`Encoder::batch_on_device`]), and its mask on the
/// CPU where the caller gave it there.
struct Batch {
    ids: Tensor,
    mask: Tensor,
    types: Tensor,
    positions: Tensor,
    host_mask: Option<Tensor>,
    /// The ids, positions and token types on the CPU, where the batch was made there for an
    /// encoder on another device.
    host_ids: Option<[Tensor; 3]>,
}

impl Batch {
    /// [`Self::host_ids`] for [`Embeddings::forward`].
    fn host(&self) -> Option<embeddings::HostIds<'_>> {
        self.host_ids.as_ref().map(|[ids, positions, types]| embeddings::HostIds { ids, positions, types })
    }
}

/// `mask` where it is on the CPU for an encoder on another device: the key lengths are read
/// from it there, not back from the device.
fn host_mask<'a>(mask: &'a Tensor, device: &candle_core::Device) -> Option<&'a Tensor> {
    (mask.device().is_cpu() && !device.is_cpu()).then_some(mask)
}

/// The tensors behind one pass's [`Keys::Masked`] ([`Encoder::pass_keys`]).
struct PassKeys {
    mask: Tensor,
    position: Option<Tensor>,
    relative: Option<deberta::RelativeContext>,
    lengths: Option<KeyLengths>,
}

impl PassKeys {
    fn keys(&self) -> Keys<'_> {
        Keys::Masked {
            mask: &self.mask,
            position: self.position.as_ref(),
            relative: self.relative.as_ref(),
            lengths: self.lengths.as_ref(),
        }
    }
}

/// MPNet's `encoder.relative_attention_bias`: one learnt score per (relative-position bucket,
/// head), added to every layer's attention scores.
#[derive(Debug, Clone)]
struct RelativeAttentionBias {
    /// `[buckets, heads]`.
    table: Tensor,
    buckets: usize,
}

/// transformers' MPNet `compute_position_bias` bounds the log buckets at this distance.
const RELATIVE_MAX_DISTANCE: usize = 128;

impl RelativeAttentionBias {
    /// # Shapes
    /// → `[1, heads, seq, seq]` in `dtype`
    fn forward(&self, seq: usize, dtype: DType) -> CResult<Tensor> {
        let buckets: Vec<u32> = (0..seq as i64)
            .flat_map(|q| {
                (0..seq as i64)
                    .map(move |k| relative_position_bucket(k - q, self.buckets, RELATIVE_MAX_DISTANCE) as u32)
            })
            .collect();
        let buckets = Tensor::from_vec(buckets, seq * seq, self.table.device())?;
        let heads = self.table.dim(1)?;
        self.table
            .index_select(&buckets, 0)?
            .reshape((seq, seq, heads))?
            .permute((2, 0, 1))?
            .unsqueeze(0)?
            .to_dtype(dtype)
    }
}

/// ModernBERT's layers and final norm (see [`modern`]).
#[derive(Debug, Clone)]
struct ModernStack {
    layers: Vec<ModernLayer>,
    final_norm: crate::layers::LayerNorm,
    settings: ModernSettings,
}

/// DeBERTa-v2's encoder-level parts: `encoder.rel_embeddings` and its `encoder.LayerNorm`.
#[derive(Debug, Clone)]
struct DebertaStack {
    settings: DebertaSettings,
    /// `[2·span, hidden]` (with `relative_attention`).
    table: Option<Tensor>,
    norm: Option<crate::layers::LayerNorm>,
}

/// Embeddings followed by `num_hidden_layers` transformer layers.
#[derive(Debug, Clone)]
pub struct Encoder {
    /// DeBERTa-v2's relative table.
    deberta: Option<DebertaStack>,
    embeddings: Embeddings,
    /// BERT-style post-norm layers (every family but ModernBERT).
    layers: Vec<EncoderLayer>,
    /// ModernBERT's pre-norm layers (then `layers` is empty).
    modern: Option<ModernStack>,
    relative_bias: Option<RelativeAttentionBias>,
    config: EncoderConfig,
    /// dtype of the activations between layers (f32, or bf16 for mixed precision).
    compute_dtype: DType,
}

impl Encoder {
    /// Loads `embeddings.*` and `encoder.layer.{i}.*` under `vb` (the checkpoint's encoder
    /// prefix; canonical names, which the builder maps to the family's own).
    pub fn load(vb: VarBuilder, config: &EncoderConfig) -> CResult<Self> {
        let family = config.family();
        let embeddings = Embeddings::load(vb.clone(), config)?;
        let stack = vb.pp("encoder").pp("layer");
        let (layers, modern) = if family == Family::ModernBert {
            let settings = ModernSettings::of(config);
            if let Some(problem) = settings.problem(config.num_hidden_layers) {
                candle_core::bail!("{problem}");
            }
            let layers = (0..config.num_hidden_layers)
                .map(|i| ModernLayer::load(stack.pp(i), config, &settings, i))
                .collect::<CResult<Vec<_>>>()?;
            let top = stack.pp(config.num_hidden_layers.saturating_sub(1)).pp("final_norm");
            let final_norm = modern::norm(top, config.hidden_size, config.layer_norm_eps, settings.norm_bias)?;
            (Vec::new(), Some(ModernStack { layers, final_norm, settings }))
        } else {
            let layers = (0..config.num_hidden_layers)
                .map(|i| EncoderLayer::load(stack.pp(i), config))
                .collect::<CResult<Vec<_>>>()?;
            (layers, None)
        };
        let relative_bias = if family.has_relative_attention_bias() {
            let buckets = config.relative_attention_num_buckets();
            let init = candle_nn::Init::Randn { mean: 0.0, stdev: config.initializer_range };
            let table = vb.pp("encoder").pp("relative_attention_bias").get_with_hints(
                (buckets, config.num_attention_heads),
                "weight",
                init,
            )?;
            Some(RelativeAttentionBias { table, buckets })
        } else {
            None
        };
        let deberta = if family == Family::DebertaV2 {
            let settings = DebertaSettings::of(config);
            if let Some(problem) = settings.problem() {
                candle_core::bail!("{problem}");
            }
            let init = candle_nn::Init::Randn { mean: 0.0, stdev: config.initializer_range };
            let table = settings
                .relative_attention
                .then(|| {
                    vb.pp("encoder").pp("rel_embeddings").get_with_hints(
                        (2 * settings.span(), config.hidden_size),
                        "weight",
                        init,
                    )
                })
                .transpose()?;
            let norm = (settings.relative_attention && settings.norm_rel_ebd)
                .then(|| {
                    crate::layers::LayerNorm::load(
                        vb.pp("encoder").pp("LayerNorm"),
                        config.hidden_size,
                        config.layer_norm_eps,
                    )
                })
                .transpose()?;
            Some(DebertaStack { settings, table, norm })
        } else {
            None
        };
        Ok(Self {
            embeddings,
            layers,
            modern,
            relative_bias,
            deberta,
            config: config.clone(),
            compute_dtype: DType::F32,
        })
    }

    /// The attention biases of a padded batch: the mask's, and the relative-position bias of
    /// families that have one.
    ///
    /// # Shapes
    /// `attention_mask: [batch, seq]` → (`[batch, 1, 1, seq]`, `[1, heads, seq, seq]`)
    fn attention_biases(&self, attention_mask: &Tensor) -> CResult<(Tensor, Option<Tensor>)> {
        let mask = mask_bias(attention_mask, self.compute_dtype)?;
        let seq = attention_mask.dim(1)?;
        let position = self.relative_bias.as_ref().map(|bias| bias.forward(seq, self.compute_dtype)).transpose()?;
        Ok((mask, position))
    }

    /// What every layer's attention reads in one pass over padded sequences in `mode`; `host`:
    /// the same mask on the CPU where the caller has it (the key lengths are then read from it,
    /// not back from the GPU).
    ///
    /// # Shapes
    /// `attention_mask, host: [batch, seq]`
    fn pass_keys(&self, attention_mask: &Tensor, host: Option<&Tensor>, mode: Mode) -> CResult<PassKeys> {
        let (mask, position) = self.attention_biases(attention_mask)?;
        Ok(PassKeys {
            mask,
            position,
            relative: self.relative_context(attention_mask, mode)?,
            lengths: self.key_lengths(attention_mask, host, mode)?,
        })
    }

    /// Each sequence's real keys, for FlashAttention-2 on a GPU that runs it (by default; not
    /// with `LONGREAD_CUDA_ATTENTION` or `LONGREAD_CUDA_TRAIN_ATTENTION` naming another kernel):
    /// bf16, heads of 32 or 64, no relative-position bias, a right-padded mask; `None` elsewhere
    /// (the attention then masks keys by their bias).
    ///
    /// # Shapes
    /// `attention_mask, host: [batch, seq]` (`host`: the same mask on the CPU, if at hand)
    fn key_lengths(&self, attention_mask: &Tensor, host: Option<&Tensor>, mode: Mode) -> CResult<Option<KeyLengths>> {
        use crate::layers::cuda::{flash2_enabled, flash2_runs_on, train_attention_fa2};
        let device = attention_mask.device();
        let chosen = if mode.is_train() {
            crate::route::gpu(device) && train_attention_fa2()
        } else {
            device.is_cuda() && flash2_enabled()
        };
        let wanted = chosen
            && self.compute_dtype == DType::BF16
            && matches!(self.config.head_size(), 32 | 64)
            && self.relative_bias.is_none()
            && self.deberta.is_none()
            && flash2_runs_on(device, mode.is_train());
        if !wanted {
            return Ok(None);
        }
        KeyLengths::right_padded_on(host.unwrap_or(attention_mask), device)
    }

    /// Whether [`Encoder::forward_packed`] can run this encoder (not with a relative-position
    /// bias, which packed attention does not add, nor ModernBERT's layers).
    pub fn supports_packed(&self) -> bool {
        self.relative_bias.is_none() && self.modern.is_none() && self.deberta.is_none()
    }

    /// DeBERTa-v2's per-pass context: the relative table (normalised, with dropout in
    /// training), indexes and pairwise mask.
    fn relative_context(&self, attention_mask: &Tensor, mode: Mode) -> CResult<Option<deberta::RelativeContext>> {
        let Some(stack) = &self.deberta else { return Ok(None) };
        let table = match (&stack.table, &stack.norm) {
            (Some(table), Some(norm)) => Some(norm.forward(table, mode)?),
            (table, _) => table.clone(),
        };
        let device = attention_mask.device();
        Ok(Some(deberta::RelativeContext::new(&stack.settings, table, attention_mask, device)?))
    }

    /// Runs the layers in `dtype` (e.g. bf16) over f32 weights, which are cast as they are used
    /// (their gradients arrive in f32); LayerNorm and softmax compute in f32. Default f32.
    pub fn set_compute_dtype(&mut self, dtype: DType) {
        self.compute_dtype = dtype;
    }

    /// Runs every dense layer of the transformer layers with int8 weights and dynamically
    /// quantised int8 activations (`--precision int8`: inference only, f32 elsewhere; the f32
    /// weights are kept and `false` returns to them). Attention, LayerNorm and embeddings stay f32.
    pub fn quantize_int8(&mut self, on: bool) -> CResult<()> {
        if let Some(modern) = &mut self.modern {
            modern.layers.iter_mut().try_for_each(|layer| layer.quantize_int8(on))?;
        }
        self.layers.iter_mut().try_for_each(|layer| layer.quantize_int8(on))
    }

    /// For inference: runs in `dtype` with the dense weights stored in it, cast once here
    /// rather than at every product (the weights stop being the trained variables; LayerNorm
    /// and biases stay f32).
    pub fn set_inference_dtype(&mut self, dtype: DType) -> CResult<()> {
        self.compute_dtype = dtype;
        self.embeddings.set_bf16_products(dtype == DType::BF16);
        self.layers.iter_mut().try_for_each(|layer| layer.cast_weights(dtype))
    }

    /// The device the weights live on.
    pub fn device(&self) -> &candle_core::Device {
        self.embeddings.word_embeddings().device()
    }

    /// dtype of the activations between layers.
    pub fn compute_dtype(&self) -> DType {
        self.compute_dtype
    }

    /// The configuration the encoder was built from.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The embedding block.
    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// The transformer layers, bottom first.
    pub fn layers(&self) -> &[EncoderLayer] {
        &self.layers
    }

    /// Last hidden states, all token types 0, on the encoder's device. The inputs may be there
    /// or on the CPU: on a GPU, inputs given on the CPU are checked there and copied once, so
    /// that nothing is read back from the GPU (a read-back waits for the work queued before it,
    /// and the next batch could not be prepared meanwhile).
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [batch, seq]` (u32; mask 1 = token, 0 = padding)
    /// → `[batch, seq, hidden]`
    pub fn forward(&self, input_ids: &Tensor, attention_mask: &Tensor, mode: Mode) -> Result<Tensor> {
        let token_type_ids = input_ids.zeros_like()?;
        self.forward_with_types(input_ids, attention_mask, &token_type_ids, mode)
    }

    /// Last hidden states with explicit token types.
    ///
    /// # Shapes
    /// `input_ids, attention_mask, token_type_ids: [batch, seq]` (u32) → `[batch, seq, hidden]`
    pub fn forward_with_types(
        &self,
        input_ids: &Tensor,
        attention_mask: &Tensor,
        token_type_ids: &Tensor,
        mode: Mode,
    ) -> Result<Tensor> {
        let device = self.device();
        let batch = crate::profile::timed("ids checked, positions", device, || {
            self.batch_on_device(input_ids, attention_mask, token_type_ids)
        })?;
        let xs = crate::profile::timed("embeddings", device, || -> Result<Tensor> {
            Ok(self.embeddings.forward(&batch.ids, &batch.positions, &batch.types, &batch.mask, batch.host(), mode)?)
        })?;
        self.forward_layers(&xs, &batch.mask, batch.host_mask.as_ref(), 0, mode)
    }

    /// A batch's inputs checked ([`Encoder::validate_and_position`]) and on the encoder's
    /// device. Inputs on the CPU for an encoder on a GPU — as `predict` makes them — are checked
    /// where they are and copied over once: reading them back from the GPU would wait for all
    /// the work queued before (the previous batch's encoder pass), so the next batch could not
    /// be prepared while the GPU runs.
    ///
    /// # Shapes
    /// `input_ids, attention_mask, token_type_ids: [batch, seq]` (u32)
    fn batch_on_device(&self, input_ids: &Tensor, attention_mask: &Tensor, token_type_ids: &Tensor) -> Result<Batch> {
        let positions = self.validate_and_position(input_ids, attention_mask, token_type_ids)?;
        let device = self.device();
        // `to_device` onto the device a tensor is already on is a clone, not a copy.
        let on_host = input_ids.device().is_cpu() && token_type_ids.device().is_cpu() && !device.is_cpu();
        let host_ids = on_host.then(|| [input_ids.clone(), positions.clone(), token_type_ids.clone()]);
        Ok(Batch {
            host_ids,
            ids: input_ids.to_device(device)?,
            mask: attention_mask.to_device(device)?,
            types: token_type_ids.to_device(device)?,
            positions: positions.to_device(device)?,
            host_mask: host_mask(attention_mask, device).cloned(),
        })
    }

    /// Last hidden states of sequences packed end to end without padding (inference, f32 on
    /// the CPU; all token types 0): the dense layers see real tokens only, and each sequence
    /// attends to itself alone. Equal to [`Encoder::forward`]'s real-token rows of the same
    /// sequences padded. Returns the states and each sequence's row range.
    ///
    /// # Shapes
    /// `seqs: n × [len_i]` → `([Σ len_i, hidden], n ranges)`
    pub fn forward_packed(&self, seqs: &[&[u32]]) -> Result<(Tensor, Vec<Range<usize>>)> {
        let device = self.embeddings.word_embeddings().device().clone();
        if !device.is_cpu() || self.compute_dtype != DType::F32 || !self.supports_packed() {
            return Err(ModelError::InvalidInput(
                "packed sequences need the CPU, f32 activations and no relative-position bias".into(),
            ));
        }
        if seqs.is_empty() || seqs.iter().any(|s| s.is_empty()) {
            return Err(ModelError::InvalidInput("empty batch or empty sequence".into()));
        }
        let mut segments = Vec::with_capacity(seqs.len());
        let mut positions = Vec::new();
        for seq in seqs {
            self.check_sequence(seq.len(), seq.iter())?;
            let start = segments.last().map_or(0, |r: &Range<usize>| r.end);
            segments.push(start..start + seq.len());
            positions.extend(self.positions(seq));
        }
        let tokens = positions.len();
        let ids = Tensor::from_vec(seqs.concat(), (1, tokens), &device)?;
        let positions = Tensor::from_vec(positions, (1, tokens), &device)?;
        let types = ids.zeros_like()?;
        let mut xs =
            self.embeddings.forward(&ids, &positions, &types, &ids.ones_like()?, None, Mode::Eval)?.squeeze(0)?;
        for layer in &self.layers {
            xs = layer.forward_keys(&xs, Keys::Packed(&segments), Mode::Eval)?;
        }
        Ok((xs, segments))
    }

    /// Output of the embeddings and the bottom `layers` layers in inference mode (no dropout,
    /// no graph): what a frozen prefix of the encoder computes. [`Encoder::forward_from`] with
    /// `start = layers` finishes the pass.
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [batch, seq]` (u32) → `[batch, seq, hidden]`
    pub fn prefix(&self, input_ids: &Tensor, attention_mask: &Tensor, layers: usize) -> Result<Tensor> {
        let token_type_ids = input_ids.zeros_like()?;
        let batch = self.batch_on_device(input_ids, attention_mask, &token_type_ids)?;
        let xs = self.embeddings.forward(
            &batch.ids,
            &batch.positions,
            &batch.types,
            &batch.mask,
            batch.host(),
            Mode::Eval,
        )?;
        let attention_mask = &batch.mask;
        if let Some(modern) = &self.modern {
            let mut xs = xs.to_dtype(self.compute_dtype)?.detach();
            let context = self.modern_context(modern, attention_mask)?;
            for layer in modern.layers.iter().take(layers) {
                xs = layer.forward(&xs, &context, Mode::Eval)?.detach();
            }
            return Ok(xs);
        }
        // Between the layers, the stream dtype of inference (f32 on a GPU, whose inference
        // kernels add a bf16 product to an f32 residual); the output in the compute dtype, as
        // [`Encoder::forward_from`] takes it in training.
        let mut xs = xs.to_dtype(self.stream_dtype(&xs, Mode::Eval))?.detach();
        let pass = self.pass_keys(attention_mask, batch.host_mask.as_ref(), Mode::Eval)?;
        for layer in self.layers.iter().take(layers) {
            xs = layer.forward_keys(&xs, pass.keys(), Mode::Eval)?.detach();
        }
        crate::layers::cuda::twin::forget();
        Ok(xs.to_dtype(self.compute_dtype)?)
    }

    /// Runs layers `start..` on hidden states (the embeddings' output for `start = 0`), in the
    /// compute dtype; the output stays in it.
    ///
    /// # Shapes
    /// `hidden: [batch, seq, hidden]`, `attention_mask: [batch, seq]` (u32) → `[batch, seq, hidden]`
    pub fn forward_from(&self, hidden: &Tensor, attention_mask: &Tensor, start: usize, mode: Mode) -> Result<Tensor> {
        let host = host_mask(attention_mask, hidden.device());
        self.forward_layers(hidden, &attention_mask.to_device(hidden.device())?, host, start, mode)
    }

    /// [`Encoder::forward_from`] given the mask on the hidden states' device and, where the
    /// caller has it, the same mask on the CPU (`host`: read for the key lengths instead).
    ///
    /// # Shapes
    /// `hidden: [batch, seq, hidden]`, `attention_mask, host: [batch, seq]` (u32) →
    /// `[batch, seq, hidden]`
    fn forward_layers(
        &self,
        hidden: &Tensor,
        attention_mask: &Tensor,
        host: Option<&Tensor>,
        start: usize,
        mode: Mode,
    ) -> Result<Tensor> {
        let (batch, seq, _) = hidden.dims3()?;
        if attention_mask.dims() != [batch, seq] {
            return Err(ModelError::InvalidInput(format!(
                "hidden states {:?} and attention_mask {:?} disagree",
                hidden.dims(),
                attention_mask.dims()
            )));
        }
        if let Some(modern) = &self.modern {
            let context = self.modern_context(modern, attention_mask)?;
            let mut xs = hidden.to_dtype(self.compute_dtype)?;
            for layer in modern.layers.iter().skip(start) {
                xs = layer.forward(&xs, &context, mode)?;
            }
            return Ok(modern.final_norm.forward(&xs, mode)?);
        }
        let pass = self.pass_keys(attention_mask, host, mode)?;
        let mut xs = hidden.to_dtype(self.stream_dtype(hidden, mode))?;
        for layer in self.layers.iter().skip(start) {
            xs = layer.forward_keys(&xs, pass.keys(), mode)?;
        }
        // The last block end's bf16 copy (bf16 inference on a GPU) has no product to read it.
        crate::layers::cuda::twin::forget();
        Ok(xs)
    }

    /// ModernBERT's per-pass tables and biases.
    fn modern_context(&self, modern: &ModernStack, attention_mask: &Tensor) -> CResult<modern::ModernContext> {
        modern::ModernContext::new(&modern.settings, self.config.head_size(), attention_mask, self.compute_dtype)
    }

    /// dtype of the hidden states between layers: the compute dtype, except in inference on a
    /// GPU, where they stay f32 whatever the products' dtype (as PyTorch's autocast keeps its
    /// LayerNorm outputs, the residual stream, in f32; bf16 there costs 1e-2 of the logits).
    fn stream_dtype(&self, hidden: &Tensor, mode: Mode) -> DType {
        if hidden.device().is_cuda() && !mode.is_train() {
            DType::F32
        } else {
            self.compute_dtype
        }
    }

    /// Checks ids against the vocabulary and positions, and returns the position ids.
    fn validate_and_position(&self, input_ids: &Tensor, mask: &Tensor, types: &Tensor) -> Result<Tensor> {
        let cfg = &self.config;
        let (batch, seq) = input_ids.dims2()?;
        if mask.dims() != [batch, seq] || types.dims() != [batch, seq] {
            return Err(ModelError::InvalidInput(format!(
                "input_ids {:?}, attention_mask {:?} and token_type_ids {:?} must have one shape",
                input_ids.dims(),
                mask.dims(),
                types.dims()
            )));
        }
        if seq == 0 || batch == 0 {
            return Err(ModelError::InvalidInput("empty batch or empty sequence".into()));
        }
        let ids = input_ids.to_dtype(DType::U32)?.to_vec2::<u32>()?;
        self.check_sequence(seq, ids.iter().flatten())?;
        let max_type = types.max_all()?.to_dtype(DType::U32)?.to_scalar::<u32>()?;
        if !self.embeddings.has_token_types() && max_type > 0 {
            return Err(ModelError::InvalidInput(format!(
                "token type {max_type} given, but a {} encoder has no token types",
                self.config.model_type
            )));
        }
        if self.embeddings.has_token_types() && max_type as usize >= cfg.type_vocab_size {
            return Err(ModelError::InvalidInput(format!(
                "token type {max_type} is out of range for type_vocab_size {}",
                cfg.type_vocab_size
            )));
        }
        let positions: Vec<u32> = ids.iter().flat_map(|row| self.positions(row)).collect();
        Ok(Tensor::from_vec(positions, (batch, seq), input_ids.device())?)
    }

    /// Checks a sequence's length against the positions and its ids against the vocabulary.
    fn check_sequence<'a>(&self, len: usize, mut ids: impl Iterator<Item = &'a u32>) -> Result<()> {
        let cfg = &self.config;
        if len > cfg.max_sequence_length() {
            return Err(ModelError::InvalidInput(format!(
                "sequence of {len} tokens exceeds the model's {} positions",
                cfg.max_sequence_length()
            )));
        }
        if let Some(bad) = ids.find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(ModelError::InvalidInput(format!(
                "token id {bad} is out of range for vocab_size {}",
                cfg.vocab_size
            )));
        }
        Ok(())
    }

    /// Position ids of one sequence's row (padding included): 0, 1, … (BERT), or counting
    /// real tokens after `padding_idx` with padding at `padding_idx` (RoBERTa).
    fn positions(&self, row: &[u32]) -> Vec<u32> {
        match self.config.position_scheme() {
            PositionScheme::Absolute => (0..row.len() as u32).collect(),
            PositionScheme::PaddingOffset { padding_idx } => {
                let mut count = 0u32;
                row.iter()
                    .map(|&id| {
                        if id == padding_idx {
                            padding_idx
                        } else {
                            count += 1;
                            padding_idx + count
                        }
                    })
                    .collect()
            }
        }
    }
}

/// Additive attention bias: 0 where `mask` is 1, the dtype's minimum where it is 0
/// (transformers `get_extended_attention_mask`).
///
/// # Shapes
/// `mask: [batch, seq]` → `[batch, 1, 1, seq]`
pub fn mask_bias(mask: &Tensor, dtype: DType) -> CResult<Tensor> {
    let (b, s) = mask.dims2()?;
    let min = mask_minimum(dtype);
    let inverted = (1.0 - mask.to_dtype(DType::F32)?)?;
    (inverted * min)?.to_dtype(dtype)?.reshape((b, 1, 1, s))
}

/// The additive bias of a masked key: the dtype's most negative finite number.
pub(crate) fn mask_minimum(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.3895e38,
        _ => f32::MIN as f64,
    }
}
