//! The training configuration a resolved [`TrainSpec`] makes.

use super::{name_value, MetricArg, OrRun, ScheduleArg, TrainSpec};
use crate::error::Result;
use crate::groups::{Freezing, GroupSettings};
use crate::schedule::Decay;
use crate::trainer::{balanced_class_weights, CacheSettings, Metric, TrainConfig};
use crate::unfreeze::UnfreezeSchedule;
use crate::AdamWConfig;

/// The largest weight `--pos-weight auto` gives a label's positive documents: a label on 1 of
/// 700 documents would otherwise weigh 700 times, and its few documents' gradients swamp the
/// others'.
pub const MAX_AUTO_POS_WEIGHT: f32 = 10.0;

impl TrainSpec {
    /// The training configuration; `train_labels` (the primary task's, where present) and
    /// `labels` resolve `--class-weights`, `tasks` (names in task order) the task flags.
    pub fn config(&self, train_labels: &[usize], labels: &[String], tasks: &[String]) -> Result<TrainConfig> {
        let (task_weights, frozen_tasks) = self.task_settings(tasks)?;
        let (epochs, batch_size) = (self.training.epochs.unwrap_or(1), self.training.batch_size.unwrap_or(1));
        if epochs == 0 || batch_size == 0 || self.training.grad_accum == 0 {
            bail!("--epochs, --batch-size and --grad-accum must be at least 1");
        }
        if self.encoder.max_batch_tokens == Some(0) {
            bail!("--max-batch-tokens must be at least 1 (a batch holds at least one chunk, whatever the budget)");
        }
        let class_weights = self.loss_class_weights(train_labels, labels)?;
        let unfreeze = self.encoder.unfreeze.as_deref().map(UnfreezeSchedule::parse).transpose()?;
        let lr = self.training.lr.unwrap_or_default();
        let starts_frozen = self.encoder.freeze_base
            || unfreeze
                .as_ref()
                .and_then(|u| u.phases().first())
                .is_some_and(|&(e, w)| e == 0 && w == crate::unfreeze::Unfreeze::Head);
        Ok(TrainConfig {
            epochs,
            batch_size,
            grad_accum: self.training.grad_accum,
            max_grad_norm: self.training.max_grad_norm.unwrap_or_default(),
            decay: match self.training.schedule.unwrap_or(ScheduleArg::Linear) {
                ScheduleArg::Linear => Decay::Linear,
                ScheduleArg::Cosine => Decay::Cosine,
                ScheduleArg::Constant => Decay::Constant,
            },
            warmup_ratio: self.training.warmup_ratio.unwrap_or_default(),
            warmup_steps: self.training.warmup_steps,
            save_every_steps: self.training.save_every_steps,
            save_every_seconds: 600.0,
            seed: self.seed,
            max_batch_tokens: self.encoder.max_batch_tokens.unwrap_or(512),
            recompute: !self.encoder.no_recompute,
            class_weights,
            pos_weight: None,
            metric: match self.training.metric {
                MetricArg::MacroF1 => Metric::MacroF1,
                MetricArg::WeightedF1 => Metric::WeightedF1,
                MetricArg::Accuracy => Metric::Accuracy,
                MetricArg::MicroF1 => Metric::MicroF1,
                MetricArg::RocAuc => Metric::RocAuc,
                MetricArg::DevLoss => Metric::DevLoss,
            },
            keep: self.training.keep,
            patience: self.training.patience.unwrap_or_default(),
            patience_min_steps: self.training.patience_min_steps,
            freezing: Freezing {
                train_embeddings: self.encoder.train_embeddings,
                freeze_base: self.encoder.freeze_base,
                freeze_bottom: self.encoder.freeze_bottom,
            },
            unfreeze,
            task_weights,
            frozen_tasks,
            cache: CacheSettings {
                enabled: !self.encoder.no_cache,
                memory_limit: self.encoder.cache_memory.saturating_mul(1 << 20),
                spill_dir: self.out.clone(),
                vectors: self.encoder.vector_cache.clone(),
                variant: format!("{:?}", self.encoder.precision),
            },
            groups: GroupSettings {
                lr,
                head_lr: self.encoder.head_lr.unwrap_or(if starts_frozen { 1e-3 } else { lr }),
                weight_decay: self.training.weight_decay.unwrap_or_default(),
                layer_lr_decay: self.encoder.layer_lr_decay,
            },
            adamw: AdamWConfig {
                beta1: self.training.adam_beta1,
                beta2: self.training.adam_beta2,
                eps: self.training.adam_epsilon,
            },
            max_bad_steps: self.training.max_bad_steps,
            stop_after_epoch: self.training.stop_after_epoch,
        })
    }

    /// Each task's loss weight (`--task-weight`) and the tasks whose heads stay frozen
    /// (`--freeze-task`), for the model's `tasks` (names in task order).
    fn task_settings(&self, tasks: &[String]) -> Result<(Vec<f64>, Vec<usize>)> {
        let task_index = |flag: &str, name: &str| {
            tasks
                .iter()
                .position(|t| t == name)
                .or_run(|| format!("{flag} {name}: the model has no such task (its tasks: {})", tasks.join(", ")))
        };
        let mut task_weights = vec![1.0; tasks.len()];
        for text in &self.encoder.task_weight {
            let (name, w) = name_value("--task-weight", text)?;
            let w: f64 = w
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .or_run(|| format!("--task-weight {text}: the weight must be a non-negative number"))?;
            task_weights[task_index("--task-weight", name)?] = w;
        }
        if task_weights.iter().all(|&w| w == 0.0) {
            bail!("--task-weight: at least one task needs a weight above 0");
        }
        let frozen_tasks = self
            .encoder
            .freeze_task
            .iter()
            .map(|name| task_index("--freeze-task", name))
            .collect::<Result<Vec<_>>>()?;
        Ok((task_weights, frozen_tasks))
    }

    /// A multi-label model's `--pos-weight` for the training label `sets` (one per document):
    /// none; auto, negatives / positives per label capped at [`MAX_AUTO_POS_WEIGHT`] (1 for a
    /// label no document carries); or a JSON file of label → weight (others weigh 1).
    pub(crate) fn pos_weights(&self, sets: &[Vec<usize>], labels: &[String]) -> Result<Option<Vec<f32>>> {
        let Some(given) = self.pos_weight.as_deref() else { return Ok(None) };
        Ok(match given {
            "none" => None,
            "auto" => {
                let mut positives = vec![0usize; labels.len()];
                for &l in sets.iter().flatten() {
                    positives[l] += 1;
                }
                let n = sets.len();
                Some(
                    positives
                        .iter()
                        .map(|&p| if p == 0 { 1.0 } else { ((n - p) as f32 / p as f32).min(MAX_AUTO_POS_WEIGHT) })
                        .collect(),
                )
            }
            file => {
                let path = std::path::Path::new(file);
                let text = std::fs::read_to_string(path)
                    .or_run(|| format!("--pos-weight {file}: not auto or none, and no readable file of that name"))?;
                let given: std::collections::BTreeMap<String, f64> = serde_json::from_str(&text).map_err(|e| {
                    crate::error::TrainError::Run(format!(
                        "--pos-weight {file}: expected a JSON object of label → weight, e.g. {{\"3\": 4.0}} ({e})"
                    ))
                })?;
                let mut weights = vec![1f32; labels.len()];
                for (label, &w) in &given {
                    let Some(i) = labels.iter().position(|l| l == label) else {
                        bail!(
                            "--pos-weight {file}: \"{label}\" is not a label of the model ({})",
                            longread_text::labelled::label_list(labels)
                        );
                    };
                    if !(w.is_finite() && w > 0.0) {
                        bail!("--pos-weight {file}: the weight of \"{label}\" must be a number above 0 (got {w})");
                    }
                    weights[i] = w as f32;
                }
                Some(weights)
            }
        })
    }

    /// The loss's class weights (`--class-weights`): none, balanced over `train_labels`, or
    /// one given per label.
    pub(crate) fn loss_class_weights(&self, train_labels: &[usize], labels: &[String]) -> Result<Option<Vec<f32>>> {
        Ok(match self.class_weights.as_str() {
            "none" => None,
            "balanced" => Some(balanced_class_weights(train_labels, labels.len())),
            list => {
                let w: Vec<f32> = list
                    .split(',')
                    .map(|x| x.trim().parse::<f32>())
                    .collect::<std::result::Result<_, _>>()
                    .or_run(|| format!("--class-weights {list}: expected none, balanced or numbers"))?;
                if w.len() != labels.len() || w.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    bail!(
                        "--class-weights needs {} non-negative numbers, one per label ({})",
                        labels.len(),
                        longread_text::labelled::label_list(labels)
                    );
                }
                // All zero (or zero on every label the training data has): every step's loss was
                // 0/0, each skipped as NaN, and the run "completed" untrained.
                if train_labels.iter().all(|&l| w[l] == 0.0) {
                    bail!(
                        "--class-weights {list}: the training documents' labels all weigh 0, which leaves no loss to \
                         train on (give a label a weight above 0)"
                    );
                }
                Some(w)
            }
        })
    }
}
