//! The hierarchical classifier: encoder → chunk vectors → pooling over chunks → head.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use crate::checkpoint::{fresh_var_builder, Checkpoint, LoadOptions};
use crate::encoder::Encoder;
use crate::error::{ModelError, Result};
use crate::hierarchical::chunk_pooler::{first_chunk_only, masked_mean, max_over_chunks, ChunkPooler};
use crate::hierarchical::config::{
    validate_task_name, Architecture, ChunkPooling, ClassifierConfig, LongreadSection, TaskSpec,
};
use crate::hierarchical::head::ClassificationHead;
use crate::hierarchical::sequence_head::SequenceHead;
use crate::layers::Dropout;
use crate::mode::Mode;
use crate::model_dir::{io, write_replacing, write_temporary_dir, write_weights_file};
use crate::variables;

/// One task's head: pooling over chunks, LayerNorm and classifier, or for the single-chunk
/// baseline transformers' sequence-classification head.
#[derive(Clone)]
enum TaskHead {
    Pooled { pooler: ChunkPooler, head: ClassificationHead },
    Sequence(SequenceHead),
}

impl TaskHead {
    /// Loads (or, from a fresh builder, creates) one task's head under `vb`.
    fn load(vb: candle_nn::VarBuilder, config: &ClassifierConfig, labels: usize) -> Result<Self> {
        let (h, std, s) = (config.encoder.hidden_size, config.encoder.initializer_range, &config.longread);
        if s.architecture == Architecture::Sequence {
            return Ok(Self::Sequence(SequenceHead::load(vb, &config.encoder, labels, s.classifier_dropout)?));
        }
        let pooler = ChunkPooler::load(vb.pp("pooler"), s, h, labels, std)?;
        let head = ClassificationHead::load(vb, config, labels)?;
        Ok(Self::Pooled { pooler, head })
    }
}

/// A long-document classifier (model directory format v1), with one head per task.
pub struct HierarchicalClassifier {
    encoder: Encoder,
    /// One per task, the primary task first.
    heads: Vec<TaskHead>,
    chunk_dropout: Dropout,
    config: ClassifierConfig,
    tokenizer_path: PathBuf,
    /// tokenizer.json as read at load time: saving copies these bytes, so a model can be saved
    /// after the directory it came from was replaced (training checkpoints are).
    tokenizer_json: Vec<u8>,
    /// Variables by canonical name (`embeddings.…` for the encoder, `pooler.…` etc. for the
    /// head), present when the model was built to be trained or saved.
    vars: Option<(VarMap, VarMap)>,
    /// A wide-and-deep model's bag of words as its files (path inside the model directory,
    /// contents), written with the model; empty without a wide side or when loaded for
    /// inference only (which cannot be saved).
    wide_files: Vec<(&'static str, Vec<u8>)>,
}

/// The files of a wide-and-deep model's bag of words: (name in a bag-of-words directory,
/// path inside the model directory).
const WIDE_FILES: [(&str, &str); 3] = [
    ("vocabulary.txt", "wide/vocabulary.txt"),
    ("model.safetensors", "wide/model.safetensors"),
    ("bow.json", "wide/bow.json"),
];

impl std::fmt::Debug for HierarchicalClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HierarchicalClassifier")
            .field("config", &self.config)
            .field("trainable", &self.vars.is_some())
            .finish_non_exhaustive()
    }
}

/// Output of [`HierarchicalClassifier::classify`].
#[derive(Debug, Clone)]
pub struct Classified {
    /// Logits `[labels]`.
    pub logits: Tensor,
    /// Contribution of each chunk `[n_chunks]`.
    pub attention: Tensor,
    /// Label-wise attention: each label's chunk weights `[labels, n_chunks]`; `None` otherwise.
    pub label_attention: Option<Tensor>,
}

impl HierarchicalClassifier {
    /// Creates the model directory `out` (which must not exist) of a new classifier on the
    /// pretrained encoder in `encoder_dir` (see [`HierarchicalClassifier::init`]), after checking
    /// its chunking settings against the encoder's tokenizer; CPU.
    pub fn create(
        encoder_dir: &Path,
        labels: Vec<String>,
        section: LongreadSection,
        seed: u64,
        out: &Path,
    ) -> Result<Self> {
        let model = Self::init(encoder_dir, labels, section, seed, &crate::device::host())?;
        let tokenizer = longread_text::TextTokenizer::from_file(model.tokenizer_path())?;
        longread_text::Chunker::new(tokenizer, model.config().longread.chunking())?;
        model.save(out)?;
        Ok(model)
    }

    /// Loads a model directory made by `longread init` or `longread train`.
    /// With `trainable`, every tensor becomes a variable (needed to train or save).
    pub fn load(dir: &Path, trainable: bool, device: &Device) -> Result<Self> {
        let checkpoint = Checkpoint::open(dir)?;
        let config = ClassifierConfig::from_file(&checkpoint.files.config, checkpoint.config.clone())?;
        let tokenizer_path = checkpoint.files.require_tokenizer()?.to_owned();
        let vars = trainable.then(|| (VarMap::new(), VarMap::new()));
        let options = |v: Option<&VarMap>| LoadOptions { trainable: v.cloned(), ..LoadOptions::default() };
        let encoder = checkpoint.load_encoder(&options(vars.as_ref().map(|v| &v.0)), device)?;
        let head_vb = checkpoint.var_builder("", &options(vars.as_ref().map(|v| &v.1)), device);
        let mut model = Self::assemble(encoder, head_vb, config, tokenizer_path, vars)?;
        // Kept only to be saved again, and only a trainable model can be saved: a classifier
        // loads the bag of words itself.
        if trainable && model.config.longread.wide.is_some() {
            model.wide_files = read_wide_files(dir)?;
        }
        Ok(model)
    }

    /// A new classifier on a pretrained encoder; the pooler and head are initialised as
    /// transformers does (normal(0, initializer_range), zero bias, LayerNorm 1/0) from `seed`.
    pub fn init(
        encoder_dir: &Path,
        labels: Vec<String>,
        section: LongreadSection,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        let checkpoint = Checkpoint::open(encoder_dir)?;
        let config = ClassifierConfig::new(checkpoint.config.clone(), section, labels);
        config
            .longread
            .validate(&config.encoder)
            .map_err(|message| ModelError::InvalidConfig { path: checkpoint.files.config.clone(), message })?;
        if config.labels.len() < 2 {
            return Err(ModelError::InvalidInput("a classifier needs at least 2 labels".into()));
        }
        let tokenizer_path = checkpoint.files.require_tokenizer()?.to_owned();
        let vars = (VarMap::new(), VarMap::new());
        let options = LoadOptions { trainable: Some(vars.0.clone()), ..LoadOptions::default() };
        let encoder = checkpoint.load_encoder(&options, device)?;
        let head_vb = fresh_var_builder(&config.encoder.model_type, seed, Some(vars.1.clone()), DType::F32, device);
        let model = Self::assemble(encoder, head_vb, config, tokenizer_path, Some(vars))?;
        model.start_from_pretrained_pooler(&checkpoint, device)?;
        Ok(model)
    }

    /// A BERT single-chunk baseline starts from the encoder checkpoint's pooler when it has one
    /// (`pooler.dense.*`, or `bert.pooler.dense.*` in a `*For…` checkpoint), as transformers'
    /// `BertForSequenceClassification.from_pretrained` does.
    fn start_from_pretrained_pooler(&self, checkpoint: &Checkpoint, device: &Device) -> Result<()> {
        let config = &self.config;
        let bert_pooler = config.encoder.family().sequence_head() == crate::encoder::SequenceHeadStyle::BertPooler;
        if config.longread.architecture != Architecture::Sequence || !bert_pooler {
            return Ok(());
        }
        let Some((_, head_vars)) = &self.vars else { return Ok(()) };
        let ours = SequenceHead::bert_pooler(&config.encoder);
        let prefix = checkpoint.encoder_prefix();
        let theirs = if prefix.is_empty() { "pooler.dense".to_string() } else { format!("{prefix}.pooler.dense") };
        if !["weight", "bias"].iter().all(|part| checkpoint.store.contains(&format!("{theirs}.{part}"))) {
            return Ok(());
        }
        let data = head_vars.data().lock().unwrap_or_else(|p| p.into_inner());
        for part in ["weight", "bias"] {
            let name = format!("{theirs}.{part}");
            let var = data
                .get(&format!("{ours}.{part}"))
                .ok_or_else(|| ModelError::InvalidInput(format!("the sequence head has no variable {ours}.{part}")))?;
            var.set(&checkpoint.store.load(&name, device)?.to_dtype(DType::F32)?)?;
        }
        Ok(())
    }

    fn assemble(
        encoder: Encoder,
        vb: candle_nn::VarBuilder,
        config: ClassifierConfig,
        tokenizer_path: PathBuf,
        vars: Option<(VarMap, VarMap)>,
    ) -> Result<Self> {
        let heads = config
            .tasks()
            .iter()
            .enumerate()
            .map(|(t, spec)| {
                let vb = if t == 0 { vb.clone() } else { vb.pp("tasks").pp(&spec.name) };
                TaskHead::load(vb, &config, spec.labels.len())
            })
            .collect::<Result<Vec<_>>>()?;
        let chunk_dropout = Dropout::new(config.longread.hidden_dropout);
        let tokenizer_json = std::fs::read(&tokenizer_path).map_err(io(&tokenizer_path))?;
        Ok(Self { encoder, heads, chunk_dropout, config, tokenizer_path, tokenizer_json, vars, wide_files: Vec::new() })
    }

    /// Makes this a wide-and-deep model: a bag of words (fitted on the training documents, with
    /// the primary task's labels `labels` in the same order), given as its model directory's
    /// files (`longread_bow::BowModel::files`), is kept in the model directory's `wide/`, and
    /// its log-probabilities times `scale` are added to the primary task's logits wherever the
    /// model is loaded as a classifier (`longread-classifier`). Trainers add them themselves (see
    /// `longread-train`'s logit offsets): [`Self::classify`] gives the deep side's logits alone.
    pub fn set_wide(&mut self, files: Vec<(&'static str, Vec<u8>)>, labels: &[String], scale: f64) -> Result<()> {
        if labels != self.labels() {
            return Err(ModelError::InvalidInput(format!(
                "the wide bag of words has labels {labels:?}, the model {:?}: they must be the same, in the same order",
                self.labels()
            )));
        }
        let mut section = self.config.longread.clone();
        section.wide = Some(crate::hierarchical::WideSection { scale });
        section.validate(&self.config.encoder).map_err(ModelError::InvalidInput)?;
        self.wide_files = files
            .into_iter()
            .map(|(name, bytes)| {
                let path = WIDE_FILES.iter().find(|(n, _)| *n == name).map(|(_, p)| *p);
                path.map(|p| (p, bytes))
                    .ok_or_else(|| ModelError::InvalidInput(format!("unexpected bag-of-words file {name}")))
            })
            .collect::<Result<_>>()?;
        self.config.longread = section;
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

    /// Label names in id order.
    pub fn labels(&self) -> &[String] {
        &self.config.labels
    }

    /// The tokenizer.json this model was loaded with.
    pub fn tokenizer_path(&self) -> &Path {
        &self.tokenizer_path
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Runs the encoder in `dtype`: `BF16` for mixed precision (bf16 activations and matmuls,
    /// f32 master weights, LayerNorm, softmax, pooling and heads in f32), `F32` (the default)
    /// for full precision.
    pub fn set_precision(&mut self, dtype: DType) -> Result<()> {
        if !matches!(dtype, DType::F32 | DType::BF16) {
            return Err(ModelError::InvalidInput(format!("precision {dtype:?} is not supported (f32 or bf16)")));
        }
        if self.vars.is_none() {
            // Inference only: the dense weights are cast once, not at every product.
            self.encoder.set_inference_dtype(dtype)?;
        } else {
            self.encoder.set_compute_dtype(dtype);
        }
        Ok(())
    }

    /// For inference passes of a model in bf16 training on a GPU (the dev set, the caches of
    /// frozen layers): a copy whose encoder keeps its dense weights cast to bf16, so that those
    /// passes run the GPU's bf16 inference path (FlashAttention-2, the fused q/k/v product) as
    /// `predict` does, rather than f32 products of the f32 master weights. The copy reads the
    /// weights as they are now (cast again for each use), trains nothing and cannot be saved.
    /// `None` elsewhere (the CPU, f32, a model loaded for inference): use the model itself.
    pub fn gpu_inference_copy(&self) -> Result<Option<Self>> {
        let encoder = &self.encoder;
        if self.vars.is_none() || !encoder.device().is_cuda() || encoder.compute_dtype() != DType::BF16 {
            return Ok(None);
        }
        let mut copy = Self {
            encoder: self.encoder.clone(),
            heads: self.heads.clone(),
            chunk_dropout: self.chunk_dropout,
            config: self.config.clone(),
            tokenizer_path: self.tokenizer_path.clone(),
            tokenizer_json: Vec::new(),
            vars: None,
            wide_files: Vec::new(),
        };
        copy.encoder.set_inference_dtype(DType::BF16)?;
        Ok(Some(copy))
    }

    /// The device the model's weights live on.
    pub fn device(&self) -> &Device {
        self.encoder.device()
    }

    /// Runs the encoder's dense layers with int8 products (`--precision int8`, inference only:
    /// they have no backward pass) or, with `false`, in f32 again.
    pub fn set_int8(&mut self, on: bool) -> Result<()> {
        Ok(self.encoder.quantize_int8(on)?)
    }

    /// One vector per chunk, on the model's device; `ids` and `mask` there or on the CPU (which
    /// spares a GPU a read-back: [`Encoder::forward`]).
    ///
    /// # Shapes
    /// `ids, mask: [chunks, seq]` (u32) → `[chunks, hidden]`
    pub fn chunk_vectors(&self, ids: &Tensor, mask: &Tensor, mode: Mode) -> Result<Tensor> {
        let hidden = self.encoder.forward(ids, mask, mode)?;
        self.pool_chunk_tokens(&hidden, &mask.to_device(hidden.device())?)
    }

    /// One vector per chunk from the output of the encoder's bottom `start` layers
    /// ([`Encoder::prefix`]): the remaining layers run in `mode`, then chunk pooling; `mask` on
    /// the states' device or on the CPU (no read-back for the key lengths then).
    ///
    /// # Shapes
    /// `prefix: [chunks, seq, hidden]`, `mask: [chunks, seq]` (u32) → `[chunks, hidden]`
    pub fn chunk_vectors_from(&self, prefix: &Tensor, mask: &Tensor, start: usize, mode: Mode) -> Result<Tensor> {
        let hidden = self.encoder.forward_from(prefix, mask, start, mode)?;
        self.pool_chunk_tokens(&hidden, &mask.to_device(hidden.device())?)
    }

    /// Chunk pooling (`cls` or masked mean) of the last hidden states.
    ///
    /// # Shapes
    /// `hidden: [chunks, seq, hidden]`, `mask: [chunks, seq]` → `[chunks, hidden]`
    fn pool_chunk_tokens(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        // Pooling and the heads run in f32 whatever the encoder's compute dtype.
        Ok(match self.config.longread.chunk_pooling {
            // A copy of the rows, so that the full hidden states can be freed: `contiguous`
            // keeps the view (and all `[chunks, seq, hidden]` behind it) when there is one chunk.
            ChunkPooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?.to_dtype(DType::F32)?.force_contiguous()?,
            ChunkPooling::Mean => masked_mean(&hidden.to_dtype(DType::F32)?, mask)?,
        })
    }

    /// Pools one document's chunk vectors and classifies it.
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → logits `[labels]`, attention `[n_chunks]`
    pub fn classify(&self, chunks: &Tensor, mode: Mode) -> Result<Classified> {
        self.classify_task(chunks, 0, mode)
    }

    /// Pools one document's chunk vectors with task `task`'s pooling and classifies it with
    /// that task's head (task 0 is the primary task, see [`ClassifierConfig::tasks`]).
    ///
    /// # Shapes
    /// `chunks: [n_chunks, hidden]` → logits `[task labels]`, attention `[n_chunks]`
    pub fn classify_task(&self, chunks: &Tensor, task: usize, mode: Mode) -> Result<Classified> {
        let head = self.heads.get(task).ok_or_else(|| {
            ModelError::InvalidInput(format!("task {task} does not exist (the model has {})", self.heads.len()))
        })?;
        match head {
            TaskHead::Pooled { pooler, head } => {
                let x = self.chunk_dropout.forward(chunks, mode)?;
                if pooler.scores_chunks() {
                    // Per-label maxima of the chunks' outputs; for an ordinal head, the highest
                    // chunk score, turned into label probabilities.
                    let (outputs, attention) = max_over_chunks(&head.outputs(&x, mode)?)?;
                    let logits = head.ordinal_logits(&outputs.unsqueeze(0)?)?.squeeze(0)?;
                    return Ok(Classified { logits, attention, label_attention: None });
                }
                let pooled = pooler.forward(&x, mode)?;
                let logits = match pooled.label_attention {
                    Some(_) => head.label_wise(&pooled.vector, mode)?,
                    None => head.forward(&pooled.vector, mode)?,
                };
                Ok(Classified { logits, attention: pooled.attention, label_attention: pooled.label_attention })
            }
            TaskHead::Sequence(head) => {
                // One chunk by construction (max_chunks 1); the head applies its own dropout.
                Ok(Classified {
                    logits: head.forward(&chunks.get(0)?, mode)?,
                    attention: first_chunk_only(chunks.dim(0)?, chunks.device())?,
                    label_attention: None,
                })
            }
        }
    }

    /// Whether task `task` is multi-label (one sigmoid per label): the primary task of a
    /// model made with `multi_label` (see [`LongreadSection::multi_label`]).
    pub fn is_multi_label(&self, task: usize) -> bool {
        task == 0 && self.config.longread.multi_label
    }

    /// Number of tasks (heads).
    pub fn task_count(&self) -> usize {
        self.heads.len()
    }

    /// Adds a task with a new head (pooling, LayerNorm, classifier) initialised as `init`
    /// does, from `seed`. The model must have been loaded as trainable.
    pub fn add_task(&mut self, spec: TaskSpec, seed: u64, device: &Device) -> Result<()> {
        let Some((_, head_vars)) = &self.vars else {
            return Err(ModelError::InvalidInput("adding a task needs a model loaded as trainable".into()));
        };
        if self.config.longread.architecture == Architecture::Sequence {
            return Err(ModelError::InvalidInput(
                "a single-chunk (sequence) model has one task: transformers' layout has one head".into(),
            ));
        }
        let mut tasks = self.config.tasks();
        if tasks.iter().any(|t| t.name == spec.name) {
            return Err(ModelError::InvalidInput(format!("the model already has a task \"{}\"", spec.name)));
        }
        validate_task_name(&spec.name).map_err(ModelError::InvalidInput)?;
        if spec.labels.len() < 2 {
            return Err(ModelError::InvalidInput(format!("task \"{}\" needs at least 2 labels", spec.name)));
        }
        let vb = fresh_var_builder(&self.config.encoder.model_type, seed, Some(head_vars.clone()), DType::F32, device);
        self.heads.push(TaskHead::load(vb.pp("tasks").pp(&spec.name), &self.config, spec.labels.len())?);
        tasks.push(spec);
        self.config.set_tasks(tasks);
        Ok(())
    }

    /// Renames the primary task (task 0) and sets the data column of any task; tasks after the
    /// first keep their names (their tensor names contain them).
    pub fn rename_task(&mut self, task: usize, name: &str, column: &str) -> Result<()> {
        let mut tasks = self.config.tasks();
        validate_task_name(name).map_err(ModelError::InvalidInput)?;
        let Some(current) = tasks.get(task).map(|t| t.name.clone()) else {
            return Err(ModelError::InvalidInput(format!("task {task} does not exist")));
        };
        if task > 0 && current != name {
            return Err(ModelError::InvalidInput(format!("task \"{current}\" cannot be renamed")));
        }
        if tasks.iter().enumerate().any(|(i, t)| i != task && t.name == name) {
            return Err(ModelError::InvalidInput(format!("the model already has a task \"{name}\"")));
        }
        tasks[task].name = name.into();
        tasks[task].column = column.into();
        self.config.set_tasks(tasks);
        Ok(())
    }

    /// Every variable (encoder and head), when loaded as trainable; empty otherwise.
    pub fn trainable_vars(&self) -> Vec<candle_core::Var> {
        self.named_vars().into_iter().map(|(_, v)| v).collect()
    }

    /// What training this model takes in memory ([`crate::device::train_batch_tokens`]): its
    /// variables (all of them: an upper bound), layers and hidden size, with bf16 activations or
    /// f32.
    pub fn train_footprint(&self, bf16: bool) -> crate::device::TrainFootprint {
        crate::device::TrainFootprint {
            parameters: self.named_vars().iter().map(|(_, v)| v.elem_count() as u64).sum(),
            layers: self.config.encoder.num_hidden_layers as u64,
            hidden: self.config.encoder.hidden_size as u64,
            bf16,
        }
    }

    /// Every variable by canonical name: encoder ones as `encoder:embeddings.…`, head ones by
    /// their file names (`pooler.…`, `norm.…`, `classifier.…`), sorted by name.
    pub fn named_vars(&self) -> Vec<(String, candle_core::Var)> {
        variables::named_vars(self.vars.as_ref())
    }

    /// All tensors under their file names: the encoder's with the `bert.`/`roberta.` prefix.
    pub fn named_tensors(&self) -> Result<HashMap<String, Tensor>> {
        variables::named_tensors(self.vars.as_ref(), self.config.encoder.weight_prefix(), self.config.encoder.family())
    }

    /// Writes the model directory (config.json, model.safetensors, tokenizer.json) atomically:
    /// into a temporary sibling directory, synced, then renamed to `out`, which must not exist.
    pub fn save(&self, out: &Path) -> Result<()> {
        if out.exists() {
            return Err(ModelError::OutputExists { path: out.to_owned() });
        }
        let tmp = self.write_temporary(out, &[])?;
        std::fs::rename(&tmp, out).map_err(|source| ModelError::Io { path: out.to_owned(), source })
    }

    /// Replaces `dir/model.safetensors` with the current weights atomically (temporary file in
    /// the same directory, synced, renamed): a kill at any moment leaves a loadable file.
    pub fn save_weights(&self, dir: &Path) -> Result<()> {
        write_weights_file(dir, &self.named_tensors()?)
    }

    /// Writes the model and `extra` files (name, contents) as a new version of `out`: assembled
    /// in a temporary sibling, then swapped in; the previous version is removed only after the
    /// new one is in place.
    pub fn save_replacing(&self, out: &Path, extra: &[(&str, &[u8])]) -> Result<()> {
        let own = self.model_files();
        let mut files: Vec<(&str, &[u8])> = own.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        files.extend_from_slice(extra);
        write_replacing(out, &self.named_tensors()?, &files)
    }

    /// The model directory's files besides the weights: config.json and tokenizer.json. The
    /// tokenizer is written rather than copied: a copy would keep the source's permissions
    /// (read-only in a shared folder), and a later save over it would fail.
    pub fn model_files(&self) -> Vec<(&'static str, Vec<u8>)> {
        let config = serde_json::to_string_pretty(&self.config.to_json()).unwrap_or_default() + "\n";
        let mut files = vec![("config.json", config.into_bytes()), ("tokenizer.json", self.tokenizer_json.clone())];
        files.extend(self.wide_files.iter().cloned());
        files
    }

    /// Writes everything into a synced temporary directory beside `out`; returns its path.
    fn write_temporary(&self, out: &Path, extra: &[(&str, &[u8])]) -> Result<PathBuf> {
        let own = self.model_files();
        let mut files: Vec<(&str, &[u8])> = own.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        files.extend_from_slice(extra);
        write_temporary_dir(out, &self.named_tensors()?, &files)
    }
}

/// A wide-and-deep model's bag-of-words files from `dir/wide/`.
fn read_wide_files(dir: &Path) -> Result<Vec<(&'static str, Vec<u8>)>> {
    WIDE_FILES
        .iter()
        .map(|&(_, path)| {
            let file = dir.join(path);
            let bytes = std::fs::read(&file).map_err(|source| ModelError::Io { path: file.clone(), source })?;
            Ok((path, bytes))
        })
        .collect()
}
