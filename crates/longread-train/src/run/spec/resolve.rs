//! A [`TrainSpec`] resolved once: the defaults that depend on the kind of run filled in (so
//! that training_args.json records what the run used), every number checked, and the
//! [`TrainPlan`] made — the kind of run with only the settings that apply to it. A flag given
//! that belongs to a group the kind does not have is refused, naming the flag and the kind.

use super::groups::{BowSpec, EncoderTrainSpec, HanSpec, LoopSpec};
use super::{Arch, ScheduleArg, TrainPrecision, TrainSpec};
use crate::error::Result;
use crate::trainer::Keep;
use longread_classifier::evaluate::ThresholdMetric;

/// What a run trains, with only the settings that apply to it ([`TrainSpec::plan`]); the run's
/// data, output, seed and labels are the [`TrainSpec`]'s own fields.
#[derive(Debug, Clone, Copy)]
pub enum TrainPlan<'a> {
    /// The bag-of-words baseline: no training loop, no encoder.
    Bow(&'a BowSpec),
    /// The HAN, trained from scratch.
    Han {
        /// Its training loop.
        training: &'a LoopSpec,
        /// Its own settings.
        han: &'a HanSpec,
    },
    /// A classifier on a transformer encoder (hierarchical or single-chunk sequence).
    Encoder {
        /// Its training loop.
        training: &'a LoopSpec,
        /// The encoder settings.
        encoder: &'a EncoderTrainSpec,
        /// With --wide-bow, the bag of words beside it.
        wide: Option<&'a BowSpec>,
    },
}

/// The clap ids of the flags of the group `T`.
#[cfg(feature = "clap")]
fn ids_of<T: clap::Args>() -> Vec<String> {
    T::augment_args(clap::Command::new("ids")).get_arguments().map(|a| a.get_id().to_string()).collect()
}

/// `--some-flag` for the clap id `some_flag`.
#[cfg(feature = "clap")]
fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

impl TrainSpec {
    /// The kind of run and its settings (after [`TrainSpec::resolve_defaults`]).
    pub fn plan(&self) -> TrainPlan<'_> {
        match self.arch {
            Some(Arch::Bow) => TrainPlan::Bow(&self.bow),
            Some(Arch::Han) => TrainPlan::Han { training: &self.training, han: &self.han },
            _ => TrainPlan::Encoder {
                training: &self.training,
                encoder: &self.encoder,
                wide: self.encoder.wide_bow.then_some(&self.bow),
            },
        }
    }

    /// The first flag given of a group the kind `arch` does not have (HAN and bag of words:
    /// no encoder flags; bag of words: no training-loop flags; encoder models and the HAN: no
    /// bag-of-words flags unless --wide-bow; only the HAN: HAN flags).
    fn flag_of_another_kind(&self, arch: Option<Arch>) -> Option<String> {
        #[cfg(feature = "clap")]
        {
            let (han, bow) = (arch == Some(Arch::Han), arch == Some(Arch::Bow));
            let mut refused: Vec<String> = Vec::new();
            if han || bow {
                refused.extend(ids_of::<EncoderTrainSpec>());
            }
            if bow {
                refused.extend(ids_of::<LoopSpec>());
            }
            if !bow && !self.encoder.wide_bow {
                refused.extend(ids_of::<BowSpec>());
            }
            if !han {
                refused.extend(ids_of::<HanSpec>());
            }
            self.given.iter().find(|g| refused.contains(g)).map(|id| flag(id))
        }
        #[cfg(not(feature = "clap"))]
        {
            let _ = arch;
            None
        }
    }

    /// Checks the flags of `--arch bow`, which trains no network: no training-loop, encoder or
    /// HAN flag applies.
    fn check_bow(&self) -> Result<()> {
        if self.model.is_some() {
            bail!("--model does not apply to --arch bow, which learns from the training data's words alone");
        }

        if self.encoder.wide_bow {
            bail!("--wide-bow adds a bag of words to an encoder model; --arch bow is the bag of words alone");
        }
        if let Some(flag) = self.flag_of_another_kind(Some(Arch::Bow)) {
            bail!(
                "{flag} does not apply to --arch bow (TF-IDF + logistic regression, C chosen by --cv folds; see \
                 --c-values, --ngram-max, --min-df, --char-ngrams)"
            );
        }
        if self.bow.ngram_max == 0 || self.bow.min_df == 0 {
            bail!("--ngram-max and --min-df must be at least 1");
        }
        if let Some(range @ [lo, hi]) = self.bow.char_ngrams {
            if !longread_bow::model::char_ngrams_in_range(range) {
                let longest = longread_bow::model::MAX_CHAR_NGRAM;
                bail!("--char-ngrams {lo}-{hi}: give 1 <= MIN <= MAX <= {longest}, e.g. 2-5");
            }
        }
        if self.is_multi_label() && !matches!(self.class_weights.as_str(), "none" | "balanced") {
            bail!(
                "--class-weights {}: a multi-label bag of words weighs each label's own fit: none or balanced",
                self.class_weights
            );
        }
        if let Some(metric) = self.tune_threshold.filter(|m| self.is_multi_label() && *m != ThresholdMetric::MacroF1) {
            bail!(
                "--tune-threshold {}: a multi-label model's thresholds maximize each label's F1 (and so macro-F1): \
                 give --tune-threshold macro-f1",
                metric.name()
            );
        }
        if self.bow.c_values.is_empty() || self.bow.c_values.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
            bail!("--c-values {:?}: give numbers above 0, e.g. --c-values 0.1,1,10", self.bow.c_values);
        }
        Ok(())
    }

    /// Whether the run trains the single-chunk sequence classifier: `--arch sequence`, or a
    /// model made by `init --arch sequence` (its config.json says so).
    fn trains_sequence(&self) -> bool {
        self.arch == Some(Arch::Sequence) || self.model_config()["longread"]["architecture"] == "sequence"
    }

    /// The config.json of --model as JSON (`null` when there is none or it does not parse:
    /// loading the model says why).
    fn model_config(&self) -> serde_json::Value {
        let Some(dir) = self.model.as_deref() else { return serde_json::Value::Null };
        let config = std::fs::read_to_string(dir.join("config.json")).ok();
        config.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
    }

    /// Checks the flags of a multi-label hierarchical or sequence model: its loss weighs labels
    /// with --pos-weight, and what this version does for one label per document only is refused
    /// by name.
    fn check_multi_label_encoder(&self) -> Result<()> {
        if self.class_weights != "none" {
            bail!(
                "--class-weights {}: a multi-label encoder model weighs each label's positive documents with \
                 --pos-weight auto|none|FILE",
                self.class_weights
            );
        }
        if let Some(metric) = self.tune_threshold.filter(|m| *m != ThresholdMetric::MacroF1) {
            bail!(
                "--tune-threshold {}: a multi-label model's thresholds maximize each label's F1 (and so macro-F1): \
                 give --tune-threshold macro-f1",
                metric.name()
            );
        }
        Ok(())
    }

    /// A `--model` that names no local path but a Hugging Face Hub id (`org/name`) is
    /// downloaded (with the `hub` feature) and replaced by its directory in the cache. Called
    /// after [`Self::resolve_defaults`], so that a refused flag is not preceded by a download.
    pub fn resolve_hub_model(&mut self) -> Result<()> {
        if let Some(model) = self.model.as_deref() {
            self.model = Some(longread_model::checkpoint::local_or_hub(model)?);
        }
        Ok(())
    }

    /// Fills in the flags whose defaults depend on the kind of run (so that
    /// training_args.json records what the run used) and refuses flags that do not apply to it.
    pub fn resolve_defaults(&mut self) -> Result<()> {
        if !self.is_multi_label() && self.given.iter().any(|g| g == "label_separator") {
            bail!("--label-separator reads multi-label data: add --multi-label");
        }
        // A model made by `init --multi-label` trains on label sets without being told again.
        self.multi_label |= self.model_config()["longread"]["multi_label"] == true;
        if self.pos_weight.is_some() && (self.is_bow() || !self.is_multi_label()) {
            bail!(
                "--pos-weight weighs the positive documents of a multi-label encoder model's labels: add \
                 --multi-label (a multi-label bag of words weighs its labels with --class-weights balanced)"
            );
        }
        if self.is_multi_label() && !self.is_bow() {
            self.check_multi_label_encoder()?;
        }
        if self.is_bow() {
            return self.check_bow();
        }
        let han = self.is_han();
        if self.encoder.wide_bow && han {
            bail!(
                "--wide-bow applies to encoder models; for a HAN beside a bag of words, build an ensemble of the two"
            );
        }
        if han && self.model.is_some() {
            bail!(
                "--model does not apply to --arch han, which trains every parameter from scratch on one label \
                 column (to start its word vectors from an encoder, use --word-vectors ENCODER)"
            );
        }
        if let Some(flag) = self.flag_of_another_kind(self.arch) {
            if self.bow_flag(&flag) {
                bail!("{flag} applies only to --arch bow or with --wide-bow");
            }
            if han {
                bail!(
                    "{flag} does not apply to --arch han, which has no encoder and trains every parameter from \
                     scratch on one label column (to start its word vectors from an encoder, use --word-vectors \
                     ENCODER)"
                );
            }
            bail!("{flag} applies only to --arch han");
        }
        if !han && self.model.is_none() {
            bail!("--model is required (a model made by `longread init`, or a pretrained encoder)");
        }
        // Defaults chosen on data: head-only runs take seconds an epoch and stop
        // early (hyperpartisan, MiniLM and MPNet heads, 3 seeds each: 30 epochs with patience
        // 8 kept epochs 3–17; 3 epochs undertrained, 30 without early stopping overfit); the
        // single-chunk baseline trained to a loss of 1.05 in 3 epochs at 2e-5 on transcripts,
        // and scored better with 6 at 5e-5.
        let head_only = self.encoder.freeze_base && !han;
        let sequence = !han && self.trains_sequence();
        let (epochs, patience, lr) = match (han, head_only, sequence) {
            (true, _, _) => (30, 3, 1e-3),
            (false, true, _) => (30, 8, 2e-5),
            (false, false, true) => (6, 0, 5e-5),
            (false, false, false) => (3, 0, 2e-5),
        };
        let pick = |for_han, other| if han { for_han } else { other };
        let t = &mut self.training;
        t.epochs = Some(t.epochs.unwrap_or(epochs));
        t.batch_size = Some(t.batch_size.unwrap_or(if han { 32 } else { 4 }));
        t.lr = Some(t.lr.unwrap_or(lr));
        t.weight_decay = Some(t.weight_decay.unwrap_or(pick(0.0, 0.01)));
        t.warmup_ratio = Some(t.warmup_ratio.unwrap_or(pick(0.0, 0.1)));
        t.schedule = Some(t.schedule.unwrap_or(if han { ScheduleArg::Constant } else { ScheduleArg::Linear }));
        t.max_grad_norm = Some(t.max_grad_norm.unwrap_or(pick(0.5, 1.0)));
        t.patience = Some(t.patience.unwrap_or(patience));
        let e = &self.encoder;
        if e.precision == TrainPrecision::Int8 && !e.freeze_base {
            bail!(
                "--precision int8 trains the head only: give --freeze-base (int8 products have no backward pass; to \
                 fine-tune the encoder use --precision f32 or bf16)"
            );
        }
        if self.dev.is_some() && self.given.iter().any(|g| g == "dev_split") {
            bail!(
                "--dev-split holds part of the training data out as the dev set; with --dev given it would be \
                 ignored: drop one of the two"
            );
        }
        if self.trains_without_dev() {
            self.settle_without_dev()?;
        }
        if (self.tune_threshold.is_some() || self.calibrate) && (self.cv.is_some() || self.trains_without_dev()) {
            let why = match self.cv {
                Some(_) => "--cv trains one model per fold, each with its own dev set",
                None => "--dev-split 0 holds out no dev set",
            };
            let (flag, command) = match self.calibrate {
                true => ("--calibrate calibrates", "calibrate"),
                false => ("--tune-threshold tunes", "threshold"),
            };
            bail!(
                "{flag} on the run's dev set, but {why}: do it to the final model with `longread {command} --model \
                 OUT --data DEV.jsonl`, or with `--out-of-fold CV_OUT`: the predictions of the --cv run that chose \
                 its settings"
            );
        }
        let e = &self.encoder;
        if e.train_embeddings && e.freeze_bottom > 0 {
            bail!(
                "--train-embeddings contradicts --freeze-bottom, which freezes the embeddings with the bottom layers"
            );
        }
        self.validate_numbers()
    }

    /// A run without a dev set (`--dev-split 0`) keeps its last epoch and never stops early;
    /// the flags that choose an epoch by the dev metric are refused, saying so.
    fn settle_without_dev(&mut self) -> Result<()> {
        let given = |id: &str| self.given.iter().any(|g| g == id);
        let why = "--dev-split 0 trains on every document and holds out no dev set";
        if given("keep") && self.training.keep == Keep::Best {
            bail!("--keep best picks the epoch with the best dev metric, but {why}: drop --keep (the last epoch's model is kept)");
        }
        if given("patience") && self.training.patience.is_some_and(|p| p > 0) {
            bail!("--patience stops when the dev metric stops improving, but {why}: set --epochs instead");
        }
        for id in ["metric", "patience_min_steps"] {
            if given(id) {
                bail!("--{} applies to the dev set, but {why}", id.replace('_', "-"));
            }
        }
        self.training.keep = Keep::Last;
        self.training.patience = Some(0);
        Ok(())
    }

    /// Whether `flag` is one of the bag of words' own.
    fn bow_flag(&self, flag: &str) -> bool {
        #[cfg(feature = "clap")]
        {
            ids_of::<BowSpec>().iter().any(|id| self::flag(id) == flag)
        }
        #[cfg(not(feature = "clap"))]
        {
            let _ = flag;
            false
        }
    }

    /// Refuses numbers outside their meaningful range, naming the flag.
    fn validate_numbers(&self) -> Result<()> {
        let t = &self.training;
        let positive = [("--lr", t.lr), ("--head-lr", self.encoder.head_lr)];
        for (name, value) in positive {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                bail!("{name} {v}: a learning rate must be a number above 0");
            }
        }
        let in_range = |name: &str, v: f64, ok: bool, range: &str| -> Result<()> {
            if !(v.is_finite() && ok) {
                bail!("{name} {v}: must be in {range}");
            }
            Ok(())
        };
        if let Some(v) = t.warmup_ratio {
            in_range("--warmup-ratio", v, (0.0..=1.0).contains(&v), "[0, 1]")?;
        }
        let decay = self.encoder.layer_lr_decay;
        in_range("--layer-lr-decay", decay, decay > 0.0 && decay <= 1.0, "(0, 1]")?;
        if let Some(v) = t.max_grad_norm {
            in_range("--max-grad-norm", v, v >= 0.0, "[0, ∞) (0 turns clipping off)")?;
        }
        if let Some(v) = t.weight_decay {
            in_range("--weight-decay", v, v >= 0.0, "[0, ∞)")?;
        }
        if self.dev.is_none() {
            let range = "[0, 1) (0 holds out no dev set: every document trains)";
            in_range("--dev-split", t.dev_split, (0.0..1.0).contains(&t.dev_split), range)?;
        }
        in_range("--adam-beta1", t.adam_beta1, (0.0..1.0).contains(&t.adam_beta1), "[0, 1)")?;
        in_range("--adam-beta2", t.adam_beta2, (0.0..1.0).contains(&t.adam_beta2), "[0, 1)")?;
        in_range("--adam-epsilon", t.adam_epsilon, t.adam_epsilon > 0.0, "(0, ∞)")?;
        if self.is_han() {
            let h = &self.han;
            in_range("--dropout", h.dropout, (0.0..1.0).contains(&h.dropout), "[0, 1)")?;
            in_range("--attention-penalty", h.attention_penalty, h.attention_penalty >= 0.0, "[0, ∞)")?;
            let p = h.length_percentile;
            in_range("--length-percentile", p, p > 0.0 && p <= 100.0, "(0, 100]")?;
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "clap"))]
mod tests {
    use super::*;
    use crate::run::flags::spec_from_flags;

    /// `--train t --out o` plus `extra`, resolved.
    fn resolved(extra: &[&str]) -> std::result::Result<TrainSpec, String> {
        let mut flags: Vec<String> = ["--train", "t.jsonl", "--out", "o"].iter().map(|s| s.to_string()).collect();
        flags.extend(extra.iter().map(|s| s.to_string()));
        let mut spec = spec_from_flags(&flags)?;
        spec.resolve_defaults().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    /// A value that parses for the flag with clap id `id` (its default when it has one).
    fn some_value(id: &str) -> Vec<String> {
        let args = [ids_of::<LoopSpec>(), ids_of::<EncoderTrainSpec>(), ids_of::<HanSpec>(), ids_of::<BowSpec>()];
        assert!(args.iter().flatten().any(|a| a == id), "{id} is a flag of a group");
        let value = match id {
            "schedule" => "linear",
            "metric" => "accuracy",
            "keep" => "best",
            "precision" => "f32",
            "unfreeze" => "0:head",
            "char_ngrams" => "2-4",
            "task" | "task_weight" => "label=label",
            "resume" | "vector_cache" | "word_vectors" | "freeze_task" => "x",
            "dev_split" | "lr" | "head_lr" | "dropout" | "warmup_ratio" => "0.5",
            "adam_beta1" | "adam_beta2" | "layer_lr_decay" => "0.9",
            _ => "1",
        };
        let flag = flag(id);
        let bare = ["freeze_base", "no_cache", "train_embeddings", "no_recompute", "wide_bow"];
        match bare.contains(&id) {
            true => vec![flag],
            false => vec![flag, value.to_string()],
        }
    }

    /// Every flag of a group a kind lacks is refused by name, whichever it is: the groups,
    /// not a list, decide (the bag of words once took --adam-beta1 silently, and the HAN an
    /// explicit --layer-lr-decay 1.0).
    #[test]
    fn every_flag_of_a_group_the_kind_lacks_is_refused_by_name() {
        let kinds: [(&[&str], Vec<String>); 3] = [
            (&["--arch", "bow"], [ids_of::<LoopSpec>(), ids_of::<EncoderTrainSpec>(), ids_of::<HanSpec>()].concat()),
            (&["--arch", "han"], [ids_of::<EncoderTrainSpec>(), ids_of::<BowSpec>()].concat()),
            (&["--model", "m"], [ids_of::<HanSpec>(), ids_of::<BowSpec>()].concat()),
        ];
        for (kind, refused) in kinds {
            assert!(refused.len() >= 10, "{kind:?}");
            for id in refused {
                let mut args: Vec<&str> = kind.to_vec();
                let value = some_value(&id);
                args.extend(value.iter().map(String::as_str));
                let err = resolved(&args).err().unwrap_or_else(|| panic!("{kind:?} took {}", flag(&id)));
                assert!(err.contains(&flag(&id)), "{kind:?} {id}: {err}");
            }
        }
        // With --wide-bow an encoder model takes the bag of words' flags.
        let spec = resolved(&["--model", "m", "--wide-bow", "--c-values", "1"]).unwrap();
        assert!(matches!(spec.plan(), TrainPlan::Encoder { wide: Some(bow), .. } if bow.c_values == [1.0]));
    }

    /// `--dev` and `--dev-split` together are refused (the split was silently ignored); each
    /// alone is taken, and the split's default does not count as given.
    #[test]
    fn a_dev_file_and_a_dev_split_together_are_refused() {
        let err = resolved(&["--model", "m", "--dev", "d.jsonl", "--dev-split", "0.2"]).expect_err("refused");
        assert!(err.contains("--dev-split") && err.contains("--dev given"), "{err}");
        assert!(resolved(&["--model", "m", "--dev", "d.jsonl"]).is_ok());
        assert!(resolved(&["--model", "m", "--dev-split", "0.2"]).is_ok());
    }

    /// `--dev-split 0` holds out nothing: the last epoch is kept and nothing stops early
    /// (--freeze-base's patience 8 included); the flags that pick epochs by the dev metric are
    /// refused by name, as is a negative or whole split.
    #[test]
    fn a_run_without_a_dev_set_keeps_its_last_epoch_and_refuses_dev_flags() {
        let spec = resolved(&["--model", "m", "--freeze-base", "--dev-split", "0"]).unwrap();
        assert!(spec.trains_without_dev());
        assert_eq!((spec.training.keep, spec.training.patience), (Keep::Last, Some(0)));
        let han = resolved(&["--arch", "han", "--dev-split", "0"]).unwrap();
        assert_eq!((han.training.keep, han.training.patience), (Keep::Last, Some(0)));
        for extra in [&["--keep", "last"][..], &["--patience", "0"]] {
            assert!(resolved(&[&["--model", "m", "--dev-split", "0"], extra].concat()).is_ok(), "{extra:?}");
        }
        for (flag, value) in
            [("--keep", "best"), ("--patience", "3"), ("--metric", "accuracy"), ("--patience-min-steps", "5")]
        {
            let err = resolved(&["--model", "m", "--dev-split", "0", flag, value]).expect_err(flag);
            assert!(err.contains(flag) && err.contains("no dev set"), "{err}");
        }
        let err = resolved(&["--model", "m", "--dev-split", "1"]).expect_err("a whole split");
        assert!(err.contains("--dev-split 1: must be in [0, 1)"), "{err}");
        assert!(!resolved(&["--model", "m", "--dev", "d.jsonl"]).unwrap().trains_without_dev());
        assert_eq!(resolved(&["--model", "m"]).unwrap().training.keep, Keep::Best, "a dev split by default");
    }

    /// Counts of zero are refused by name, `--max-batch-tokens 0` too (it ran as one chunk a
    /// batch while the run's first line said "batches of up to 0 tokens").
    #[test]
    fn zero_counts_are_refused_by_name() {
        let config = |extra: &[&str]| {
            let spec = resolved(&[&["--model", "m"], extra].concat()).unwrap();
            spec.config(&[0, 1], &["a".into(), "b".into()], &["label".into()]).map(drop).map_err(|e| e.to_string())
        };
        assert_eq!(config(&[]), Ok(()));
        assert!(config(&["--max-batch-tokens", "1"]).is_ok());
        let err = config(&["--max-batch-tokens", "0"]).unwrap_err();
        assert!(err.contains("--max-batch-tokens must be at least 1"), "{err}");
        let err = config(&["--grad-accum", "0"]).unwrap_err();
        assert!(err.contains("--grad-accum must be at least 1"), "{err}");
    }

    #[test]
    fn each_kind_plans_with_its_own_defaults() {
        let han = resolved(&["--arch", "han"]).unwrap();
        let TrainPlan::Han { training, han: h } = han.plan() else { panic!("a HAN plan") };
        assert_eq!((training.epochs, training.batch_size, training.lr), (Some(30), Some(32), Some(1e-3)));
        assert_eq!(h.gru_hidden, 50);
        let head = resolved(&["--model", "m", "--freeze-base"]).unwrap();
        let TrainPlan::Encoder { training, encoder, wide } = head.plan() else { panic!("an encoder plan") };
        assert_eq!(
            (training.epochs, training.patience, encoder.freeze_base, wide.is_none()),
            (Some(30), Some(8), true, true)
        );
        assert!(matches!(resolved(&["--arch", "bow"]).unwrap().plan(), TrainPlan::Bow(_)));
    }
}
