//! Inference's embeddings on a GPU as one kernel (`embedding_layer_norm_regs` in `kernels.cu`):
//! the word, position and token-type rows of each token summed, LayerNorm, and in bf16
//! inference the output's bf16 copy for the first layer's product ([`super::twin`]). The
//! composition it replaces ran three lookups, two additions and LayerNorm, each a pass over the
//! `[tokens, hidden]` activations. Tested on the CPU under emulation
//! (`tests/kernels_emulated.rs`) and on a GPU by `cuda_f32_equals_cpu_f32_on_every_encoder_model`
//! (the roberta-base-shaped and MiniLM models: widths the kernel takes).

use candle_core::{Result, Tensor};

/// The tables and LayerNorm of an encoder's embeddings.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddingTables<'a> {
    /// `[vocab, n]` f32.
    pub word: &'a Tensor,
    /// `[positions, n]` f32.
    pub position: &'a Tensor,
    /// `[types, n]` f32, where the model has token types.
    pub types: Option<&'a Tensor>,
    /// LayerNorm's γ and β, `[n]` f32.
    pub affine: (&'a Tensor, &'a Tensor),
    /// LayerNorm's epsilon.
    pub eps: f64,
}

impl EmbeddingTables<'_> {
    /// `LayerNorm(word[ids] + position[positions] (+ types[type_ids]))` as one kernel on a GPU,
    /// with the bf16 copy kept for the next product when `bf16_copy` ([`super::twin`]); `None`
    /// off the GPU or where the kernel does not take the width (the caller composes). The ids
    /// must have been checked against the tables.
    ///
    /// # Shapes
    /// `ids, positions, type_ids: [batch, seq]` (u32) → `[batch, seq, n]` (f32)
    pub fn forward(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        type_ids: &Tensor,
        bf16_copy: bool,
    ) -> Result<Option<Tensor>> {
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (ids, positions, type_ids, bf16_copy);
            Ok(None)
        }
        #[cfg(feature = "cuda")]
        {
            self.forward_cuda(ids, positions, type_ids, bf16_copy)
        }
    }

    #[cfg(feature = "cuda")]
    fn forward_cuda(&self, ids: &Tensor, positions: &Tensor, type_ids: &Tensor, copy: bool) -> Result<Option<Tensor>> {
        use candle_core::{DType, Storage};
        if !ids.device().is_cuda() {
            return Ok(None);
        }
        let (batch, seq) = ids.dims2()?;
        let n = self.word.dim(1)?;
        let u32_ids = |t: &Tensor| t.to_dtype(DType::U32)?.contiguous();
        let (ids, positions, type_ids) = (u32_ids(ids)?, u32_ids(positions)?, u32_ids(type_ids)?);
        let types = self.types.unwrap_or(self.word);
        let tensors = [self.word, self.position, types, &ids, &positions, &type_ids, self.affine.0, self.affine.1];
        let contiguous = tensors.iter().map(|t| t.contiguous()).collect::<Result<Vec<_>>>()?;
        let made = {
            let guards: Vec<_> = contiguous.iter().map(|t| t.storage_and_layout()).collect();
            let mut cuda = Vec::with_capacity(guards.len());
            for (storage, layout) in &guards {
                let Storage::Cuda(s) = &**storage else { return Ok(None) };
                cuda.push((s, *layout));
            }
            let inputs = super::launch::EmbeddingNormInputs {
                tables: [cuda[0], cuda[1], cuda[2]],
                has_types: self.types.is_some(),
                ids: [cuda[3], cuda[4], cuda[5]],
                affine: [cuda[6], cuda[7]],
                eps: self.eps as f32,
            };
            super::launch::embedding_layer_norm(&inputs, copy)?
        };
        let Some((out, copy)) = made else { return Ok(None) };
        let out = super::untracked(out, (batch, seq, n));
        if let Some(copy) = copy {
            super::twin::keep(&out, super::untracked(copy, (batch, seq, n)));
        }
        Ok(Some(out))
    }
}
