//! One entry point for every model directory longread writes (hierarchical, single-chunk
//! sequence, HAN, bag of words, ensembles, wide-and-deep): load it, classify documents, get
//! [`Prediction`]s; with the batching queue the server drives, evaluation, ensembles and model
//! summaries. The CLI, the server and the Python package call this and never look at the model
//! kind. Above `longread-model` (encoders and model kinds) and `longread-bow`.
#![deny(missing_docs)]

pub mod calibrated;
pub mod calibration;
pub mod decision;
pub mod ensemble;
pub mod evaluate;
pub mod kinds;
pub mod label_calibration;
pub mod model_kind;
pub mod multilabel_eval;
pub mod out_of_fold;
pub mod prediction;
pub mod queue;
mod route;
pub mod summary;
pub mod units;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use longread_bow::BowModel;
use longread_text::{ChunkedDocument, Chunker, Document, TextTokenizer};

use ensemble::Ensemble;
use kinds::encoder::EncoderModel;
use kinds::whole::WholeText;
use kinds::{DocumentModel, Prepared, PreparedDocument};
use longread_model::device::{self, DeviceChoice};
use longread_model::error::{ModelError, Result};
use longread_model::han::HanClassifier;
use longread_model::hierarchical::{HierarchicalClassifier, TaskSpec};
pub use longread_model::Precision;
pub use model_kind::ModelKind;
pub use prediction::{
    argmax, ChunkEvidence, DocError, DocResult, Evidence, LabelScores, MemberPrediction, Parts, Prediction,
    PredictionLine, SentenceEvidence, TaskPrediction, TermEvidence, WordEvidence,
};

/// How a [`Classifier`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassifierOptions {
    /// Encoder precision (encoder models only; a HAN accepts only f32). `None`: bf16 on a GPU,
    /// f32 on the CPU.
    pub precision: Option<Precision>,
    /// Most tokens (chunks × padded length) per encoder batch; chunks of several documents
    /// share batches, longest first. `None`: the device's default
    /// ([`device::default_batch_tokens`]: 2,048 on the CPU; on a GPU 65,536 to 256,000 by its
    /// memory).
    pub max_batch_tokens: Option<usize>,
    /// Where the encoder runs (HAN and bag-of-words models always run on the CPU).
    pub device: DeviceChoice,
    /// Occlusion evidence: every chunk's [`ChunkEvidence::occlusion`], the head run again
    /// without each chunk in turn (hierarchical models only; the cost grows with the square of
    /// a document's chunks, and documents over [`MAX_OCCLUSION_CHUNKS`] get none).
    pub occlusion: bool,
}

/// Documents of more chunks than this get no occlusion evidence: its cost grows with the
/// square of the chunks (on 2 CPU cores, 1,023 chunks of MiniLM added 4–6 s to the 60 s of
/// encoding them; BENCHMARKS.md, "Occlusion").
pub const MAX_OCCLUSION_CHUNKS: usize = 2048;

impl ClassifierOptions {
    /// The precision these options give on `device`.
    pub fn precision_on(&self, device: &Device) -> Precision {
        self.precision.unwrap_or_else(|| Precision::default_on(device))
    }

    /// The options with every default decided for `device` (what [`Classifier::options`]
    /// reports); refuses a zero batch budget and int8 on a GPU.
    fn resolved(self, device: &Device) -> Result<Self> {
        let max_batch_tokens = self.max_batch_tokens.unwrap_or_else(|| device::default_batch_tokens(device));
        if max_batch_tokens == 0 {
            return Err(ModelError::InvalidInput("max_batch_tokens must be at least 1".into()));
        }
        let precision = self.precision_on(device);
        if precision == Precision::Int8 && !device.is_cpu() {
            return Err(ModelError::InvalidInput(
                "precision int8 is a CPU mode; on a GPU use bf16 (the default there) or f32".into(),
            ));
        }
        Ok(Self { precision: Some(precision), max_batch_tokens: Some(max_batch_tokens), ..self })
    }

    /// The resolved batch budget (after [`Classifier::load`]).
    fn batch_tokens(&self) -> usize {
        self.max_batch_tokens.unwrap_or(2048)
    }
}

/// Documents are scored in groups of about this many encoder chunks (or HAN documents), so
/// that memory stays bounded whatever the input size.
const GROUP_CHUNKS: usize = 256;
/// Documents per HAN forward pass.
const HAN_BATCH: usize = 32;

/// A loaded model that classifies documents.
pub struct Classifier {
    /// The model, of whichever kind (the only place that knows: [`Classifier::load`]).
    model: Box<dyn DocumentModel>,
    options: ClassifierOptions,
    dir: PathBuf,
    /// Where the encoder runs.
    device: Device,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier").field("dir", &self.dir).field("tasks", &self.tasks()).finish_non_exhaustive()
    }
}

impl Classifier {
    /// Loads any model directory made by `longread init` or `longread train`.
    /// A model with a calibration (`calibration.json`, [`decision::Temperature`]) gives its
    /// calibrated probabilities; one with a tuned decision rule (`decision.json`, see
    /// [`decision`]) labels by it.
    pub fn load(dir: &Path, options: ClassifierOptions) -> Result<Self> {
        let kind = ModelKind::of(dir);
        // Models without an encoder run on the CPU whatever the device asked for.
        let device = if kind.has_encoder() { options.device.resolve()? } else { longread_model::device::host() };
        let classifier = Self::load_on(dir, kind, options, device)?;
        let decision = decision::Decision::load(dir, classifier.labels())?;
        if let Some(why) = decision.as_ref().and_then(|d| d.check_fits(classifier.multi_label()).err()) {
            return Err(ModelError::InvalidInput(format!("{}: {why}", dir.join(decision::DECISION_FILE).display())));
        }
        let temperature = decision::Temperature::load(dir)?;
        if let Some(why) =
            temperature.as_ref().and_then(|t| t.check(classifier.labels(), classifier.multi_label()).err())
        {
            return Err(ModelError::InvalidInput(format!("{}: {why}", dir.join(decision::CALIBRATION_FILE).display())));
        }
        let Self { model, options, dir, device } = classifier;
        Ok(Self { model: decision::Adjusted::wrap(model, temperature, decision), options, dir, device })
    }

    /// [`Classifier::load`] of a directory of `kind` on a resolved device.
    fn load_on(dir: &Path, kind: ModelKind, options: ClassifierOptions, device: Device) -> Result<Self> {
        let options = options.resolved(&device)?;
        let no_occlusion = |what: &str| {
            ModelError::InvalidInput(format!(
                "occlusion reads a hierarchical model without each of its chunks; {} is {what}",
                dir.display()
            ))
        };
        if options.occlusion {
            match kind {
                ModelKind::Ensemble => return Err(no_occlusion("an ensemble")),
                ModelKind::Bow => return Err(no_occlusion("a bag-of-words model")),
                ModelKind::Han => return Err(no_occlusion("a HAN (its sentences carry attention)")),
                _ => {}
            }
        }
        if kind == ModelKind::Ensemble {
            let ensemble = Ensemble::load(dir, options)?;
            return Ok(Self { model: Box::new(ensemble), options, dir: dir.to_owned(), device });
        }
        if kind == ModelKind::Bow {
            let model = BowModel::load(dir).map_err(|e| ModelError::InvalidInput(e.to_string()))?;
            let model = Box::new(WholeText::new(model, options.batch_tokens()));
            return Self::without_encoder(model, "a bag-of-words model", options, dir);
        }
        if kind == ModelKind::Han {
            let model = HanClassifier::load(dir, &longread_model::device::host())?;
            let model = Box::new(WholeText::new(model, options.batch_tokens()));
            return Self::without_encoder(model, "a HAN (f32 only)", options, dir);
        }
        let mut model = HierarchicalClassifier::load(dir, false, &device)?;
        match options.precision_on(&device) {
            // On a GPU the weights are prepared for inference (q/k/v fused into one product).
            Precision::F32 if device.is_cuda() => model.set_precision(DType::F32)?,
            Precision::F32 => {}
            Precision::Bf16 if !device.is_cpu() => model.set_precision(DType::BF16)?,
            Precision::Bf16 => {
                tracing::warn!(
                    "precision bf16 on the CPU is slower than f32 (candle has no fast bf16 CPU matmul); \
                     int8 is the fast reduced-precision mode"
                );
                model.set_precision(DType::BF16)?
            }
            Precision::Int8 => model.set_int8(true)?,
        }
        let tokenizer = TextTokenizer::from_file(model.tokenizer_path())?;
        let chunker = Chunker::new(tokenizer, model.config().longread.chunking())?;
        let wide = model.config().longread.wide;
        let precision = options.precision_on(&device);
        if options.occlusion {
            if model.config().longread.architecture != longread_model::hierarchical::Architecture::Hierarchical {
                return Err(no_occlusion("a single-chunk sequence classifier"));
            }
            if wide.is_some() {
                return Err(no_occlusion("a wide-and-deep model (its bag of words reads the whole text)"));
            }
        }
        let mut model = EncoderModel::new(model, chunker, device.clone(), options.batch_tokens(), precision);
        model.occlusion = options.occlusion;
        let deep = Self { model: Box::new(model), options, dir: dir.to_owned(), device };
        match wide {
            None => Ok(deep),
            Some(wide) => Self::wide_and_deep(deep, wide.scale),
        }
    }

    /// A wide-and-deep model (`train --wide-bow`): its encoder model `deep` and the bag of
    /// words in its `wide/`, combined as trained (see [`Ensemble::wide_and_deep`]).
    fn wide_and_deep(deep: Self, scale: f64) -> Result<Self> {
        let dir = deep.dir.join(longread_model::hierarchical::WIDE_DIR);
        let bow = BowModel::load(&dir).map_err(|e| ModelError::InvalidInput(e.to_string()))?;
        let options = ClassifierOptions { precision: Some(Precision::F32), ..deep.options };
        let bow = Box::new(WholeText::new(bow, options.batch_tokens()));
        let wide = Self::without_encoder(bow, "a bag-of-words model", options, &dir)?;
        let (options, dir, device) = (deep.options, deep.dir.clone(), deep.device.clone());
        let model = Box::new(Ensemble::wide_and_deep(deep, wide, scale)?);
        Ok(Self { model, options, dir, device })
    }

    /// Reads and keeps chunk vectors in `dir` (see [`VectorCache`]): documents already encoded
    /// by the same encoder weights, chunking and precision — by another model on the same
    /// frozen encoder, or an earlier run — skip the encoder. Models without an encoder (HAN,
    /// bag of words) ignore it.
    pub fn set_vector_cache(&mut self, dir: &Path) -> Result<()> {
        self.model.set_vector_cache(dir)
    }

    /// A model without an encoder (HAN, bag of words): one task, f32 only (`what` names it
    /// in the error).
    fn without_encoder(
        model: Box<dyn DocumentModel>,
        what: &str,
        options: ClassifierOptions,
        dir: &Path,
    ) -> Result<Self> {
        let precision = options.precision_on(&longread_model::device::host());
        if precision != Precision::F32 {
            return Err(ModelError::InvalidInput(format!(
                "precision {precision:?} applies to encoder models; {} is {what}",
                dir.display()
            )));
        }
        Ok(Self { model, options, dir: dir.to_owned(), device: longread_model::device::host() })
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Labels of the primary task, in id order.
    pub fn labels(&self) -> &[String] {
        &self.tasks()[0].labels
    }

    /// Every task, the primary one first (one for all but multi-task models).
    pub fn tasks(&self) -> &[TaskSpec] {
        self.model.tasks()
    }

    /// Whether a document carries any number of the labels, each decided on its own: its
    /// predictions give [`Prediction::labels`], and its probabilities need not sum to 1.
    pub fn multi_label(&self) -> bool {
        self.model.multi_label()
    }

    /// The options it runs with, every default decided (precision and batch budget `Some`).
    pub fn options(&self) -> ClassifierOptions {
        self.options
    }

    /// Where its encoder runs (the CPU for models without one).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The precision its encoder runs in (f32 for models without one).
    pub fn precision(&self) -> Precision {
        self.options.precision_on(&self.device)
    }

    /// Most tokens per encoder batch.
    pub fn max_batch_tokens(&self) -> usize {
        self.options.batch_tokens()
    }

    /// Units (encoder chunks, HAN documents) per group of documents scored together: about
    /// 256, or for an encoder as many chunks as one encoder batch holds where that is more — a
    /// GPU's budget of 256,000 tokens holds 500 chunks of 512, so that a group fills its batch
    /// (and is read back once) rather than halving it.
    pub fn group_units(&self) -> usize {
        match self.chunk_layout() {
            Some((chunk, _)) => GROUP_CHUNKS.max(self.max_batch_tokens() / chunk.max(1)),
            None => GROUP_CHUNKS,
        }
    }

    /// What a prediction's evidence is made of: `"chunk"`, `"sentence"`, or `"none"` (a
    /// bag of words reads no parts; an ensemble shows its first member's that has some).
    pub fn evidence_unit(&self) -> &'static str {
        self.model.evidence_unit()
    }

    /// Classifies texts; a text that cannot be classified (empty, no words) gets its own
    /// error and the others go on.
    pub fn classify(&self, texts: &[&str]) -> Result<Vec<DocResult>> {
        let documents: Vec<Document> = texts.iter().enumerate().map(|(i, t)| Document::new(i, *t)).collect();
        let mut results = Vec::with_capacity(texts.len());
        self.classify_documents(&documents, |_, result| {
            results.push(result);
            Ok::<(), ModelError>(())
        })?;
        Ok(results)
    }

    /// Classifies documents already tokenized and cut into chunks (benchmarks and callers with
    /// their own tokenization): encoder models only, every document in one group.
    pub fn classify_chunked(&self, documents: Vec<ChunkedDocument>) -> Result<Vec<DocResult>> {
        if self.chunk_layout().is_none() {
            return Err(ModelError::InvalidInput("only encoder models classify pre-chunked documents".into()));
        }
        let prepared = documents.into_iter().map(|d| Ok(PreparedDocument::new(Prepared::Chunks(d)))).collect();
        Ok(self.score_prepared(prepared)?.into_iter().map(prediction::finite_or_error).collect())
    }

    /// An encoder model's chunk size in tokens (special tokens included) and vocabulary size
    /// (`None` for other kinds): what [`Classifier::classify_chunked`]'s callers need.
    pub fn chunk_layout(&self) -> Option<(usize, usize)> {
        self.model.chunk_layout()
    }
}
