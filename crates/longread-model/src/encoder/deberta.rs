//! DeBERTa-v2/v3's disentangled attention: besides content-to-content scores, each query scores
//! the relative position of every key (c2p) and each key the relative position of every query
//! (p2c), through one table of relative-position embeddings shared by all layers (normalised
//! once per pass, log buckets beyond `position_buckets / 2`). Everything else is BERT's layer.
//! Reference: transformers `models/deberta_v2/modeling_deberta_v2.py` (`DisentangledSelfAttention`,
//! `make_log_bucket_position`, `build_relative_position`, `DebertaV2Encoder.get_rel_embedding`,
//! `get_attention_mask`).

use candle_core::{DType, Device, Result, Tensor};
use serde_json::Value;

use crate::config::EncoderConfig;

/// DeBERTa-v2's settings beyond BERT's keys, with transformers' defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DebertaSettings {
    /// `relative_attention` (default false): the c2p/p2c terms and the relative table.
    pub relative_attention: bool,
    /// c2p in `pos_att_type` (a list, or `"p2c|c2p"`).
    pub c2p: bool,
    /// p2c in `pos_att_type`.
    pub p2c: bool,
    /// `share_att_key`: the relative table goes through the content query/key projections
    /// (else through `pos_query_proj`/`pos_key_proj`).
    pub share_att_key: bool,
    /// `position_biased_input` (default true): absolute position embeddings are added.
    pub position_biased_input: bool,
    /// `position_buckets` (≤ 0: none).
    pub position_buckets: i64,
    /// `max_relative_positions` (< 1: `max_position_embeddings`).
    pub max_relative_positions: i64,
    /// `norm_rel_ebd` contains `layer_norm`: the table is normalised by `encoder.LayerNorm`.
    pub norm_rel_ebd: bool,
    /// `conv_kernel_size` (DeBERTa-v2 xlarge's convolution; not supported when > 0).
    pub conv_kernel_size: i64,
}

impl DebertaSettings {
    /// The settings of `cfg` (a DeBERTa-v2 config).
    pub fn of(cfg: &EncoderConfig) -> Self {
        let extra = &cfg.extra;
        let flag = |key: &str, default: bool| extra.get(key).and_then(Value::as_bool).unwrap_or(default);
        let int = |key: &str, default: i64| extra.get(key).and_then(Value::as_i64).unwrap_or(default);
        let types: Vec<String> = match extra.get("pos_att_type") {
            Some(Value::String(s)) => s.split('|').map(|t| t.trim().to_lowercase()).collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_lowercase).collect(),
            _ => Vec::new(),
        };
        let norm_rel_ebd = extra
            .get("norm_rel_ebd")
            .and_then(Value::as_str)
            .is_some_and(|s| s.to_lowercase().split('|').any(|t| t.trim() == "layer_norm"));
        let max_relative = int("max_relative_positions", -1);
        Self {
            relative_attention: flag("relative_attention", false),
            c2p: types.iter().any(|t| t == "c2p"),
            p2c: types.iter().any(|t| t == "p2c"),
            share_att_key: flag("share_att_key", false),
            position_biased_input: flag("position_biased_input", true),
            position_buckets: int("position_buckets", -1),
            max_relative_positions: if max_relative < 1 { cfg.max_position_embeddings as i64 } else { max_relative },
            norm_rel_ebd,
            conv_kernel_size: int("conv_kernel_size", 0),
        }
    }

    /// A message naming what longread does not support, or `None`.
    pub fn problem(&self) -> Option<String> {
        (self.conv_kernel_size > 0).then(|| {
            "conv_kernel_size > 0 (DeBERTa-v2's convolution layer, as in deberta-v2-xlarge) is not supported".into()
        })
    }

    /// Half the rows of the relative table: `position_buckets`, else `max_relative_positions`.
    pub fn span(&self) -> usize {
        if self.position_buckets > 0 {
            self.position_buckets as usize
        } else {
            self.max_relative_positions.max(1) as usize
        }
    }

    /// `1 + [c2p] + [p2c]`: scores are divided by `sqrt(head_size · factor)`.
    pub fn scale_factor(&self) -> usize {
        if !self.relative_attention {
            return 1;
        }
        1 + usize::from(self.c2p) + usize::from(self.p2c)
    }

    /// The bucketed relative position `query − key` (transformers `build_relative_position`
    /// with `make_log_bucket_position`, f32 arithmetic as there).
    pub fn relative_position(&self, query: usize, key: usize) -> i64 {
        let relative = query as i64 - key as i64;
        if self.position_buckets <= 0 || self.max_relative_positions <= 0 {
            return relative;
        }
        let mid = self.position_buckets / 2;
        let abs = if relative < mid && relative > -mid { mid - 1 } else { relative.abs() };
        if abs <= mid {
            return relative;
        }
        let log_ratio = (abs as f32 / mid as f32).ln() / ((self.max_relative_positions - 1) as f32 / mid as f32).ln();
        let log_pos = (log_ratio * (mid - 1) as f32).ceil() + mid as f32;
        (log_pos * relative.signum() as f32) as i64
    }
}

/// What every layer of one pass shares: the relative table (normalised), the gather indexes of
/// the c2p and p2c terms, and the pairwise mask.
#[derive(Debug)]
pub(crate) struct RelativeContext {
    /// `[2·span, hidden]`, rows `0..2·span` of `encoder.rel_embeddings` (after its LayerNorm).
    pub(crate) table: Option<Tensor>,
    /// `[seq·seq]`: for score `(i, j)`, the flat index `i·2span + c2p(i, j)` into
    /// `q·posKᵀ` viewed as `[seq·2span]`.
    pub(crate) c2p_index: Tensor,
    /// `[seq·seq]`: for score `(i, j)`, `j·2span + p2c(j, i)` into `k·posQᵀ`.
    pub(crate) p2c_index: Tensor,
    /// `[batch, 1, seq, seq]` (u8): 1 where query and key are both tokens; scores elsewhere are
    /// filled with the dtype's minimum (as transformers fills, not adds: a padding row sees every
    /// key alike, and no gradient passes a masked score).
    pub(crate) pair_keep: Tensor,
    pub(crate) settings: DebertaSettings,
}

impl RelativeContext {
    /// # Shapes
    /// `attention_mask: [batch, seq]` (u32), `table: [2·span, hidden]`
    pub(crate) fn new(
        settings: &DebertaSettings,
        table: Option<Tensor>,
        attention_mask: &Tensor,
        device: &Device,
    ) -> Result<Self> {
        let (batch, seq) = attention_mask.dims2()?;
        let span = settings.span() as i64;
        let clamp = |x: i64| x.clamp(0, 2 * span - 1) as u32;
        let mut c2p = Vec::with_capacity(seq * seq);
        let mut p2c = Vec::with_capacity(seq * seq);
        for i in 0..seq {
            for j in 0..seq {
                c2p.push(i as u32 * 2 * span as u32 + clamp(settings.relative_position(i, j) + span));
                p2c.push(j as u32 * 2 * span as u32 + clamp(-settings.relative_position(j, i) + span));
            }
        }
        let real = attention_mask.to_dtype(DType::U32)?.to_vec2::<u32>()?;
        let mut pair = Vec::with_capacity(batch * seq * seq);
        for row in &real {
            for &q in row {
                pair.extend(row.iter().map(|&k| u8::from(q != 0 && k != 0)));
            }
        }
        Ok(Self {
            table,
            c2p_index: Tensor::from_vec(c2p, seq * seq, device)?,
            p2c_index: Tensor::from_vec(p2c, seq * seq, device)?,
            pair_keep: Tensor::from_vec(pair, (batch, 1, seq, seq), device)?,
            settings: settings.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_buckets_match_transformers() {
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "deberta-v2", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "position_buckets": 8, "max_relative_positions": 64, "relative_attention": true,
            "pos_att_type": "p2c|c2p"
        }))
        .unwrap();
        let s = DebertaSettings::of(&cfg);
        assert!(s.c2p && s.p2c && s.relative_attention && s.position_biased_input);
        assert_eq!((s.span(), s.scale_factor()), (8, 3));
        // make_log_bucket_position(torch.arange(-40, 41), 8, 64) at these offsets.
        let cases = [(0, 0), (3, 3), (-3, -3), (4, 4), (5, 5), (-6, -5), (8, 5), (20, 6), (40, 7), (-40, -7)];
        for (relative, want) in cases {
            let (q, k) = if relative >= 0 { (relative as usize, 0) } else { (0, (-relative) as usize) };
            assert_eq!(s.relative_position(q, k), want, "relative {relative}");
        }
    }
}
