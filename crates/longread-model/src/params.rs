//! Parameter counts by part of the model, read from tensor names and shapes alone.

use serde::Serialize;

/// Parameters per part, as the seed scripts report them.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ParameterBreakdown {
    /// Word, position and token-type embeddings and their LayerNorm.
    pub embeddings: usize,
    /// All transformer layers.
    pub encoder_layers: usize,
    /// Parameters per transformer layer, bottom first.
    pub per_layer: Vec<usize>,
    /// BERT's pooler, or longread's attention pooling over chunks.
    pub pooler_attention: usize,
    /// Classification / LM heads and the document LayerNorm.
    pub classifier: usize,
    /// The heads of further tasks of a multi-task model (`tasks.NAME.…`: pooling, LayerNorm,
    /// classifier).
    pub task_heads: usize,
    /// Anything else.
    pub other: usize,
    /// Sum of everything.
    pub total: usize,
    /// Parameters a training run would update.
    pub trainable: usize,
}

impl ParameterBreakdown {
    /// Groups `(name, shape)` pairs; `encoder_prefix` is `""`, `"bert"` or `"roberta"`;
    /// `is_trainable` says which tensors are updated.
    pub fn from_tensors<'a>(
        tensors: impl IntoIterator<Item = (&'a str, &'a [usize])>,
        encoder_prefix: &str,
        num_layers: usize,
        is_trainable: impl Fn(&str) -> bool,
    ) -> Self {
        let mut b = Self { per_layer: vec![0; num_layers], ..Self::default() };
        for (name, shape) in tensors {
            let n: usize = shape.iter().product();
            let local = if encoder_prefix.is_empty() {
                name
            } else {
                name.strip_prefix(encoder_prefix).and_then(|s| s.strip_prefix('.')).unwrap_or(name)
            };
            if local.starts_with("embeddings.") {
                b.embeddings += n;
            } else if let Some(rest) = local.strip_prefix("encoder.layer.") {
                b.encoder_layers += n;
                if let Some(slot) =
                    rest.split('.').next().and_then(|i| i.parse::<usize>().ok()).and_then(|i| b.per_layer.get_mut(i))
                {
                    *slot += n;
                }
            } else if local.starts_with("tasks.") {
                b.task_heads += n;
            } else if local.starts_with("pooler.") {
                b.pooler_attention += n;
            } else if ["classifier.", "norm.", "lm_head.", "heads."].iter().any(|p| local.starts_with(p)) {
                b.classifier += n;
            } else {
                b.other += n;
            }
            b.total += n;
            if is_trainable(name) {
                b.trainable += n;
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_prefix() {
        let shapes: Vec<(String, Vec<usize>)> = vec![
            ("bert.embeddings.word_embeddings.weight".into(), vec![10, 4]),
            ("bert.encoder.layer.0.attention.self.query.weight".into(), vec![4, 4]),
            ("bert.encoder.layer.1.output.dense.bias".into(), vec![4]),
            ("bert.pooler.dense.weight".into(), vec![4, 4]),
            ("classifier.out_proj.weight".into(), vec![3, 4]),
            ("tasks.topic.classifier.out_proj.weight".into(), vec![2, 4]),
        ];
        let b =
            ParameterBreakdown::from_tensors(shapes.iter().map(|(n, s)| (n.as_str(), s.as_slice())), "bert", 2, |n| {
                !n.contains("embeddings")
            });
        assert_eq!((b.embeddings, b.encoder_layers, b.pooler_attention, b.classifier), (40, 20, 16, 12));
        assert_eq!(b.per_layer, vec![16, 4]);
        assert_eq!(b.task_heads, 8);
        assert_eq!((b.total, b.trainable), (96, 56));
    }
}
