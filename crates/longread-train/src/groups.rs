//! Which parameters train, with which learning rate and weight decay.
//!
//! - Freezing: embeddings frozen unless `train_embeddings`; `freeze_base` freezes the whole
//!   encoder; `freeze_bottom K` freezes the embeddings and layers 0..K. The pooling layer and
//!   head always train.
//! - Learning rates: head parameters get `head_lr`; encoder layer l (1-based, of N) gets
//!   `lr · decay^(N − l)`, the embeddings `lr · decay^(N + 1)` (layer-wise decay; 1 = none).
//! - Weight decay: none on biases and LayerNorm weights.

use candle_core::Var;

use crate::optim::ParamGroup;

/// What is frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Freezing {
    /// Train the embeddings too (frozen by default).
    pub train_embeddings: bool,
    /// Freeze the whole encoder: only pooling and head train.
    pub freeze_base: bool,
    /// Freeze the embeddings and the bottom K layers.
    pub freeze_bottom: usize,
}

/// Learning rates and decay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupSettings {
    /// Base learning rate of the encoder.
    pub lr: f64,
    /// Learning rate of pooling + head.
    pub head_lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Layer-wise learning-rate decay (1 = none).
    pub layer_lr_decay: f64,
}

/// Where a parameter sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Embeddings,
    Layer(usize),
    Head,
}

fn place(name: &str) -> Place {
    match name.strip_prefix("encoder:") {
        None => Place::Head,
        Some(local) if local.starts_with("embeddings.") => Place::Embeddings,
        Some(local) => local
            .strip_prefix("encoder.layer.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|i| i.parse().ok())
            .map_or(Place::Embeddings, Place::Layer),
    }
}

/// True when the parameter trains under `freezing`.
pub fn is_trainable(name: &str, freezing: Freezing) -> bool {
    trains(place(name), freezing)
}

/// The freezing rule, by place.
fn trains(place: Place, freezing: Freezing) -> bool {
    match place {
        Place::Head => true,
        _ if freezing.freeze_base => false,
        Place::Embeddings => freezing.train_embeddings && freezing.freeze_bottom == 0,
        Place::Layer(i) => i >= freezing.freeze_bottom,
    }
}

/// The frozen bottom of the encoder under `freezing`: `None` when the embeddings train,
/// else the number of frozen layers above them (`num_layers` when only the head trains).
pub fn frozen_layers(freezing: Freezing, num_layers: usize) -> Option<usize> {
    if trains(Place::Embeddings, freezing) {
        return None;
    }
    Some((0..num_layers).take_while(|&i| !trains(Place::Layer(i), freezing)).count())
}

/// Biases and LayerNorm weights get no weight decay (the classifier's `norm.`, a task's
/// `tasks.NAME.norm.`, the encoder's `LayerNorm`, the LM head's `layer_norm`).
fn no_decay(name: &str) -> bool {
    name.ends_with(".bias")
        || name.contains("LayerNorm")
        || name.contains("layer_norm")
        || name.starts_with("norm.")
        || name.contains(".norm.")
}

/// Groups the trainable parameters of `named` (from `HierarchicalClassifier::named_vars`).
pub fn param_groups(
    named: &[(String, Var)],
    num_layers: usize,
    freezing: Freezing,
    s: GroupSettings,
) -> Vec<ParamGroup> {
    let mut groups: Vec<ParamGroup> = Vec::new();
    for (name, var) in named.iter().filter(|(n, _)| is_trainable(n, freezing)) {
        let (label, lr) = match place(name) {
            Place::Head => ("head".to_string(), s.head_lr),
            Place::Embeddings => ("embeddings".to_string(), s.lr * s.layer_lr_decay.powi(num_layers as i32 + 1)),
            Place::Layer(i) => (format!("layer.{i}"), s.lr * s.layer_lr_decay.powi((num_layers - 1 - i) as i32)),
        };
        let (suffix, wd) = if no_decay(name) { ("no_decay", 0.0) } else { ("decay", s.weight_decay) };
        let group_name = format!("{label}.{suffix}");
        match groups.iter_mut().find(|g| g.name == group_name) {
            Some(g) => g.params.push((name.clone(), var.clone())),
            None => groups.push(ParamGroup {
                name: group_name,
                lr,
                weight_decay: wd,
                params: vec![(name.clone(), var.clone())],
            }),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn var() -> Var {
        Var::from_tensor(&Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu).unwrap()).unwrap()
    }

    fn named() -> Vec<(String, Var)> {
        [
            "encoder:embeddings.word_embeddings.weight",
            "encoder:encoder.layer.0.attention.self.query.weight",
            "encoder:encoder.layer.1.attention.self.query.weight",
            "encoder:encoder.layer.1.output.LayerNorm.weight",
            "encoder:encoder.layer.1.output.dense.bias",
            "pooler.projection.weight",
            "norm.weight",
            "tasks.topic.norm.weight",
            "tasks.topic.pooler.projection.weight",
            "lm_head.layer_norm.weight",
        ]
        .iter()
        .map(|n| (n.to_string(), var()))
        .collect()
    }

    const S: GroupSettings = GroupSettings { lr: 1.0, head_lr: 5.0, weight_decay: 0.01, layer_lr_decay: 0.5 };

    fn lr_of(groups: &[ParamGroup], name: &str) -> Option<(f64, f64)> {
        groups.iter().find(|g| g.params.iter().any(|(n, _)| n == name)).map(|g| (g.lr, g.weight_decay))
    }

    #[test]
    fn default_freezes_embeddings_and_decays_layer_rates() {
        let g = param_groups(&named(), 2, Freezing::default(), S);
        assert_eq!(lr_of(&g, "encoder:embeddings.word_embeddings.weight"), None);
        assert_eq!(lr_of(&g, "encoder:encoder.layer.1.attention.self.query.weight"), Some((1.0, 0.01)));
        assert_eq!(lr_of(&g, "encoder:encoder.layer.0.attention.self.query.weight"), Some((0.5, 0.01)));
        assert_eq!(lr_of(&g, "encoder:encoder.layer.1.output.LayerNorm.weight"), Some((1.0, 0.0)));
        assert_eq!(lr_of(&g, "encoder:encoder.layer.1.output.dense.bias"), Some((1.0, 0.0)));
        assert_eq!(lr_of(&g, "pooler.projection.weight"), Some((5.0, 0.01)));
        assert_eq!(lr_of(&g, "norm.weight"), Some((5.0, 0.0)));
        assert_eq!(lr_of(&g, "tasks.topic.norm.weight"), Some((5.0, 0.0)), "a task's LayerNorm");
        assert_eq!(lr_of(&g, "lm_head.layer_norm.weight"), Some((5.0, 0.0)), "the LM head's LayerNorm");
        assert_eq!(lr_of(&g, "tasks.topic.pooler.projection.weight"), Some((5.0, 0.01)));
        let with_emb = param_groups(&named(), 2, Freezing { train_embeddings: true, ..Freezing::default() }, S);
        assert_eq!(lr_of(&with_emb, "encoder:embeddings.word_embeddings.weight"), Some((0.125, 0.01)));
    }

    #[test]
    fn freeze_base_and_bottom() {
        let g = param_groups(&named(), 2, Freezing { freeze_base: true, ..Freezing::default() }, S);
        assert!(g.iter().all(|g| g.name.starts_with("head")));
        let g =
            param_groups(&named(), 2, Freezing { freeze_bottom: 1, train_embeddings: true, ..Freezing::default() }, S);
        assert_eq!(lr_of(&g, "encoder:encoder.layer.0.attention.self.query.weight"), None);
        assert_eq!(lr_of(&g, "encoder:embeddings.word_embeddings.weight"), None);
        assert!(lr_of(&g, "encoder:encoder.layer.1.attention.self.query.weight").is_some());
    }

    #[test]
    fn frozen_layers_follow_the_flags() {
        assert_eq!(frozen_layers(Freezing::default(), 6), Some(0));
        assert_eq!(frozen_layers(Freezing { train_embeddings: true, ..Freezing::default() }, 6), None);
        assert_eq!(frozen_layers(Freezing { freeze_bottom: 4, ..Freezing::default() }, 6), Some(4));
        assert_eq!(frozen_layers(Freezing { freeze_base: true, ..Freezing::default() }, 6), Some(6));
    }
}
