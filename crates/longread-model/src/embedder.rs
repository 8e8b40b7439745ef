//! Sentence embeddings for many texts: tokenize, batch by length, encode, pool, normalise.
//! Same results as sentence-transformers' `encode` with a Transformer + Pooling (+ Normalize).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use longread_text::{pad_batch, Encoded, TextTokenizer};

use crate::checkpoint::{sentence_bert_config, sentence_modules, Checkpoint, LoadOptions, SentenceModules};
use crate::device::DeviceChoice;
use crate::encoder::Encoder;
use crate::error::{ModelError, Result};
use crate::mode::Mode;
use crate::precision::Precision;
use crate::sentence_pooling::{l2_normalize, SentencePooling};

/// Embeddings of a list of texts, in input order.
#[derive(Debug, Clone)]
pub struct Embeddings {
    /// One vector per text.
    pub vectors: Vec<Vec<f32>>,
    /// Token count of each text after truncation (special tokens included).
    pub token_counts: Vec<usize>,
    /// Which texts were cut to the maximum length.
    pub truncated: Vec<bool>,
}

impl Embeddings {
    /// Scales every vector to unit L2 norm (as sentence-transformers' Normalize module:
    /// `x / max(‖x‖, 1e-12)`), for fronts that choose per request.
    pub fn normalize(&mut self) {
        for v in &mut self.vectors {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            v.iter_mut().for_each(|x| *x /= norm);
        }
    }
}

/// How an [`Embedder`] pools and scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbedderOptions {
    /// How token vectors become one vector; `None`: as the model's sentence-transformers
    /// Pooling module says (mean when it has none).
    pub pooling: Option<SentencePooling>,
    /// Scale each embedding to unit L2 norm; `None`: when the model has sentence-transformers'
    /// Normalize module.
    pub normalize: Option<bool>,
    /// Where the encoder runs.
    pub device: DeviceChoice,
    /// Encoder precision (f32 or bf16); `None`: bf16 on a GPU (as text-embeddings-inference
    /// runs half precision there), f32 on the CPU.
    pub precision: Option<Precision>,
}

/// The pooling and normalizing of `options`, with the model's own where they leave them open
/// (sentence-transformers' modules), as `SentenceTransformer(dir).encode` computes: a pooling
/// mode longread does not compute, or a module it does not apply (a Dense projection), is an
/// error, where the vectors would otherwise differ without a word.
fn settings_for(dir: &Path, modules: &SentenceModules, options: EmbedderOptions) -> Result<(SentencePooling, bool)> {
    if let Some(kind) = modules.unapplied.first() {
        return Err(ModelError::InvalidInput(format!(
            "{}: its sentence-transformers modules include a {kind} module, which longread does not apply \
             (Transformer, Pooling and Normalize only): its embeddings would differ from sentence-transformers'",
            dir.join("modules.json").display()
        )));
    }
    let pooling = match options.pooling {
        Some(chosen) => chosen,
        None => modules.effective_pooling().map_err(|mode| {
            ModelError::InvalidInput(format!(
                "{}: the model's pooling is `{mode}`, which longread does not compute (mean or cls): choose \
                 mean or cls pooling to embed with it anyway (its vectors will differ from sentence-transformers')",
                dir.display()
            ))
        })?,
    };
    Ok((pooling, options.normalize.unwrap_or(modules.normalize)))
}

/// The sentence embedder every front uses.
pub type Embedder = SentenceEmbedder;

/// An encoder with its tokenizer, ready to embed texts.
#[derive(Debug)]
pub struct SentenceEmbedder {
    encoder: Encoder,
    tokenizer: TextTokenizer,
    pooling: SentencePooling,
    normalize: bool,
    /// Whether the model has sentence-transformers' Normalize module.
    has_normalize_module: bool,
    /// Whether texts are lowercased before tokenizing (`do_lower_case`).
    lowercase: bool,
    max_length: usize,
    pad_id: u32,
    device: Device,
}

impl SentenceEmbedder {
    /// Loads a checkpoint directory to embed on the device and in the precision of `options`
    /// (see [`SentenceEmbedder::load`]).
    pub fn open(dir: &Path, options: EmbedderOptions) -> Result<Self> {
        let device = options.device.resolve()?;
        let mut embedder = Self::load(dir, options, &device)?;
        match options.precision.unwrap_or_else(|| Precision::default_on(&device)) {
            // On a GPU the weights are prepared for inference (q/k/v fused into one product).
            Precision::F32 if device.is_cuda() => embedder.encoder.set_inference_dtype(DType::F32)?,
            Precision::F32 => {}
            Precision::Bf16 => embedder.encoder.set_inference_dtype(DType::BF16)?,
            Precision::Int8 => {
                return Err(ModelError::InvalidInput("embeddings are computed in f32 or bf16, not int8".into()))
            }
        }
        Ok(embedder)
    }

    /// Where the encoder runs.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How token vectors become one vector.
    pub fn pooling(&self) -> SentencePooling {
        self.pooling
    }

    /// Whether each vector is scaled to unit length.
    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    /// Whether the model has sentence-transformers' Normalize module (what `normalize: None`
    /// follows), for fronts that choose per call.
    pub fn has_normalize_module(&self) -> bool {
        self.has_normalize_module
    }

    /// Loads a checkpoint directory in f32 on `device`, pooling and normalizing as `options` say
    /// or else as the model's sentence-transformers modules do; texts are lowercased first when
    /// sentence-transformers' `do_lower_case` says so. The maximum length is, in order of
    /// precedence, sentence-transformers' `max_seq_length`, the tokenizer's truncation, the
    /// model's positions, never more than the positions allow.
    pub fn load(dir: &Path, options: EmbedderOptions, device: &Device) -> Result<Self> {
        let modules = sentence_modules(dir)?;
        let (pooling, normalize) = settings_for(dir, &modules, options)?;
        let sentence_config = sentence_bert_config(dir)?;
        let checkpoint = Checkpoint::open(dir)?;
        let mut tokenizer = TextTokenizer::from_file(checkpoint.files.require_tokenizer()?)?;
        let positions = checkpoint.config.max_sequence_length();
        let max_length =
            sentence_config.max_seq_length.or(tokenizer.truncation_max_length()).unwrap_or(positions).min(positions);
        tokenizer.set_max_length(max_length)?;
        let encoder = checkpoint.load_encoder(&LoadOptions::default(), device)?;
        Ok(Self {
            pad_id: checkpoint.config.pad_token_id,
            encoder,
            tokenizer,
            pooling,
            normalize,
            has_normalize_module: modules.normalize,
            lowercase: sentence_config.do_lower_case,
            max_length,
            device: device.clone(),
        })
    }

    /// The longest input in tokens; longer texts are truncated.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Size of the vectors.
    pub fn dimension(&self) -> usize {
        self.encoder.config().hidden_size
    }

    /// Embeds texts in batches of `batch_size`, longest first to limit padding;
    /// `on_batch(n)` is called after each batch with the number of texts done in it.
    pub fn embed(&self, texts: &[&str], batch_size: usize, on_batch: impl FnMut(usize)) -> Result<Embeddings> {
        self.embed_encoded(self.tokenize(texts)?, batch_size, on_batch)
    }

    /// Tokenizes texts as [`Embedder::embed`] does (lowercased when the model says so, cut to
    /// [`Embedder::max_length`]), so that a front can look at their lengths before embedding.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        Ok(if self.lowercase {
            let lowered: Vec<String> = texts.iter().map(|t| t.to_lowercase()).collect();
            self.tokenizer.encode_batch(&lowered.iter().map(String::as_str).collect::<Vec<_>>())?
        } else {
            self.tokenizer.encode_batch(texts)?
        })
    }

    /// Embeds texts tokenized by [`Embedder::tokenize`], as [`Embedder::embed`].
    pub fn embed_encoded(
        &self,
        encoded: Vec<Encoded>,
        batch_size: usize,
        mut on_batch: impl FnMut(usize),
    ) -> Result<Embeddings> {
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].ids.len()));
        let mut vectors = vec![Vec::new(); encoded.len()];
        for batch in order.chunks(batch_size.max(1)) {
            let seqs: Vec<&[u32]> = batch.iter().map(|&i| encoded[i].ids.as_slice()).collect();
            for (&i, v) in batch.iter().zip(self.embed_ids(&seqs)?) {
                vectors[i] = v;
            }
            on_batch(batch.len());
        }
        Ok(Embeddings {
            vectors,
            token_counts: encoded.iter().map(|e| e.ids.len()).collect(),
            truncated: encoded.iter().map(|e| e.truncated).collect(),
        })
    }

    /// Embeds one batch of token-id sequences: on the CPU packed end to end without padding
    /// (`Encoder::forward_packed`), elsewhere padded to the longest.
    ///
    /// # Shapes
    /// `seqs: batch × [len_i]` → `batch × [hidden]`
    pub fn embed_ids(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let packed =
            self.device.is_cpu() && self.encoder.compute_dtype() == DType::F32 && self.encoder.supports_packed();
        let mut pooled = if packed {
            let (hidden, segments) = self.encoder.forward_packed(seqs)?;
            self.pooling.forward_packed(&hidden, &segments)?
        } else {
            let (ids, mask, seq_len) = pad_batch(seqs, self.pad_id);
            // On the CPU: the encoder checks them there and copies them to its device once.
            let ids = Tensor::from_vec(ids, (seqs.len(), seq_len), &Device::Cpu)?;
            let mask = Tensor::from_vec(mask, (seqs.len(), seq_len), &Device::Cpu)?;
            let hidden = self.encoder.forward(&ids, &mask, Mode::Eval)?.to_dtype(DType::F32)?;
            self.pooling.forward(&hidden, &mask.to_device(&self.device)?)?
        };
        if self.normalize {
            pooled = l2_normalize(&pooled)?;
        }
        Ok(pooled.to_vec2::<f32>()?)
    }
}
