//! Phases of a run: what trains (gradual unfreezing) and the caches of what does not.

use candle_core::{Device, Tensor, Var};
use longread_model::hierarchical::{chunk_groups, HierarchicalClassifier, VectorCache, CACHE_GROUP_CHUNKS};
use longread_text::ChunkedDocument;

use crate::error::Result;
use crate::groups::{frozen_layers, param_groups, Freezing};
use crate::prefix::{open_store, Prefix, PrefixCache, Storage};
use crate::trainer::{PhaseLog, Progress, Split, TrainConfig};

/// What trains during a phase, and the caches of what does not.
pub(super) struct Phase {
    /// What is frozen.
    pub(super) freezing: Freezing,
    /// Trainable variables.
    pub(super) vars: Vec<Var>,
    /// Frozen layers above the embeddings (`None` when the embeddings train).
    pub(super) frozen: Option<usize>,
    /// Chunk vectors, when only the head trains.
    pub(super) vectors: Option<(Vec<Tensor>, Vec<Tensor>)>,
    /// Outputs of the frozen layers (train, dev), when some but not all are frozen.
    pub(super) prefix: Option<(PrefixCache, PrefixCache)>,
}

impl Phase {
    /// How the training documents' chunks are encoded (`doc_ids` index the training split).
    pub(super) fn train_prefix<'a>(&'a self, doc_ids: &'a [usize]) -> Prefix<'a> {
        match (&self.prefix, self.frozen) {
            (Some((cache, _)), _) => Prefix::Cached { cache, doc_ids },
            (None, Some(layers)) => Prefix::Frozen { layers },
            (None, None) => Prefix::None,
        }
    }
}

/// Everything about the run that does not change between epochs.
pub(super) struct Run<'a> {
    pub(super) model: &'a HierarchicalClassifier,
    pub(super) train: &'a Split<'a>,
    pub(super) dev: &'a Split<'a>,
    pub(super) cfg: &'a TrainConfig,
    pub(super) device: &'a Device,
    pub(super) named: Vec<(String, Var)>,
    pub(super) num_layers: usize,
}

impl Run<'_> {
    /// What is frozen during the epoch after `done` completed ones.
    pub(super) fn freezing_at(&self, done: usize) -> Freezing {
        match &self.cfg.unfreeze {
            Some(s) => s.freezing_at(done, self.cfg.freezing, self.num_layers),
            None => self.cfg.freezing,
        }
    }

    /// Parameter groups under `freezing`, without the heads of frozen tasks.
    pub(super) fn groups(&self, freezing: Freezing) -> Vec<crate::optim::ParamGroup> {
        let tasks = self.model.config().tasks();
        let frozen: Vec<String> = self
            .cfg
            .frozen_tasks
            .iter()
            .filter(|&&t| t > 0)
            .filter_map(|&t| tasks.get(t).map(|spec| format!("tasks.{}.", spec.name)))
            .collect();
        let primary_frozen = self.cfg.frozen_tasks.contains(&0);
        let mut groups = param_groups(&self.named, self.num_layers, freezing, self.cfg.groups);
        for g in &mut groups {
            g.params.retain(|(name, _)| {
                let in_frozen_task = frozen.iter().any(|p| name.starts_with(p.as_str()));
                let primary_head = !name.starts_with("encoder:") && !name.starts_with("tasks.");
                !(in_frozen_task || primary_frozen && primary_head)
            });
        }
        groups.retain(|g| !g.params.is_empty());
        groups
    }

    /// Sets up a phase: its variables and caches.
    pub(super) fn phase(&self, freezing: Freezing, on_progress: &mut impl FnMut(Progress)) -> Result<Phase> {
        let groups = self.groups(freezing);
        let vars: Vec<Var> = groups.iter().flat_map(|g| g.params.iter().map(|(_, v)| v.clone())).collect();
        let frozen = frozen_layers(freezing, self.num_layers);
        let mut phase = Phase { freezing, vars, frozen, vectors: None, prefix: None };
        // Caches hold what frozen layers compute: none without one (or with caching off).
        let Some(k) = frozen.filter(|&k| k >= 1 && self.cfg.cache.enabled) else {
            return Ok(phase);
        };
        let total: usize = self.train.docs.iter().chain(self.dev.docs).map(|d| d.chunks.len()).sum();
        let mut done = 0;
        let mut tick = |n: usize| {
            done += n;
            on_progress(Progress::Caching { done, total });
        };
        let tokens = self.cfg.max_batch_tokens;
        // bf16 on a GPU: the caches are filled on the encoder's inference path, weights cast once.
        let copy = self.model.gpu_inference_copy()?;
        let model = copy.as_ref().unwrap_or(self.model);
        if k >= self.num_layers {
            let device = self.device;
            let cache = match &self.cfg.cache.vectors {
                Some(dir) => Some(VectorCache::open(dir, model, &self.cfg.cache.variant)?),
                None => None,
            };
            let mut encode = |docs: &[ChunkedDocument]| -> Result<Vec<Tensor>> {
                let docs: Vec<&ChunkedDocument> = docs.iter().collect();
                let Some(cache) = &cache else {
                    return Ok(model.encode_documents_cached(&docs, tokens, device, None, &mut tick)?);
                };
                // Group by group, so that a stop asked for (Ctrl-C) ends the fill between
                // groups; what the cache holds is kept and read back by the next run.
                let total: usize = docs.iter().map(|d| d.chunks.len()).sum();
                let (mut vectors, mut done) = (Vec::with_capacity(docs.len()), 0);
                let sizes: Vec<usize> = docs.iter().map(|d| d.chunks.len()).collect();
                for range in chunk_groups(&sizes, CACHE_GROUP_CHUNKS) {
                    crate::interrupt::check_filling("filling the chunk-vector cache", done, total)?;
                    done += sizes[range.clone()].iter().sum::<usize>();
                    let group = &docs[range];
                    vectors.extend(model.encode_documents_cached(group, tokens, device, Some(cache), &mut tick)?);
                }
                Ok(vectors)
            };
            phase.vectors = Some((encode(self.train.docs)?, encode(self.dev.docs)?));
        } else {
            let c = &self.cfg.cache;
            let store = match &c.vectors {
                Some(dir) => Some(open_store(model, dir, k, &c.variant)?),
                None => None,
            };
            let mut build = |docs: &[ChunkedDocument], memory_limit: usize| {
                let storage = Storage { memory_limit, spill_dir: &c.spill_dir, store: store.as_ref() };
                PrefixCache::build(model, docs, k, tokens, storage, self.device, &mut tick)
            };
            let train = build(self.train.docs, c.memory_limit)?;
            let dev = build(self.dev.docs, c.memory_limit.saturating_sub(train.bytes_in_memory()))?;
            phase.prefix = Some((train, dev));
        }
        Ok(phase)
    }

    pub(super) fn phase_log(&self, phase: &Phase, epoch: usize) -> PhaseLog {
        let trains = match phase.frozen {
            Some(k) if k >= self.num_layers => "pooling and head (encoder frozen)".to_string(),
            Some(0) => "all encoder layers (embeddings frozen), pooling and head".to_string(),
            Some(k) => format!("top {} of {} encoder layers, pooling and head", self.num_layers - k, self.num_layers),
            None => "embeddings, all encoder layers, pooling and head".to_string(),
        };
        let cache = match (&phase.vectors, &phase.prefix) {
            (Some(_), _) => "chunk vectors".to_string(),
            (None, Some((t, d))) => {
                let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
                let memory = mib((t.bytes_in_memory() + d.bytes_in_memory()) as u64);
                let mut line =
                    format!("outputs of embeddings + {} frozen layers: {memory:.1} MiB in memory", t.layers());
                match &self.cfg.cache.vectors {
                    Some(dir) => {
                        let reused = t.chunks_reused() + d.chunks_reused();
                        line += &format!(", the rest read from {} ({reused} chunks reused)", dir.display());
                    }
                    None => line += &format!(", {:.1} MiB on disk", mib(t.bytes_on_disk() + d.bytes_on_disk())),
                }
                line
            }
            (None, None) => String::new(),
        };
        PhaseLog {
            epoch,
            trains,
            trainable_parameters: phase.vars.iter().map(|v| v.elem_count()).sum(),
            total_parameters: self.named.iter().map(|(_, v)| v.elem_count()).sum(),
            cache,
        }
    }
}
