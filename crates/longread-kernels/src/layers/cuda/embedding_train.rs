//! Embedding lookups of training on the GPU route, with a backward pass that sums each id's
//! gradient rows in parallel.
//!
//! candle's lookup (`index_select`) has `index_add` as its backward pass, which on CUDA runs one
//! thread per column of the table (768 for roberta-base: six blocks on a GPU of 132
//! multiprocessors), each walking every looked-up position in turn: 10,240 dependent
//! read-modify-writes per 20-chunk batch and table. Here the positions are grouped by id on
//! the host (the ids are read back once per lookup's backward pass), and a kernel sums each
//! id's rows with a thread per (id, column), in the positions' order: deterministic, as the
//! bit-identical resumption of GPU runs needs.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

#[cfg(feature = "cuda")]
use super::launch;

/// `(table [vocab, cols] f32, ids [n] u32) → [n, cols]`, the rows of `table` at `ids`, with a
/// gradient for `table` that, as `nn.Embedding(padding_idx=…)`'s, leaves the row of
/// `padding_idx` out. The caller checks the ids against `vocab` (the encoder does).
#[derive(Debug, Clone, Copy)]
pub struct EmbeddingTrain {
    /// The id whose row gets no gradient.
    pub padding_idx: Option<u32>,
}

/// The positions of `ids` grouped by id, those of `skip` left out: `order` (positions sorted
/// by id, stably), `seg` (each id's range in `order`) and `uniq` (the ids), concatenated as one
/// u32 vector `[order (n'), seg (u + 1), uniq (u)]`; returns it, `n'` and `u`.
fn groups(ids: &[u32], skip: Option<u32>) -> (Vec<u32>, usize, usize) {
    let mut order: Vec<u32> = (0..ids.len() as u32).filter(|&j| Some(ids[j as usize]) != skip).collect();
    order.sort_by_key(|&j| ids[j as usize]);
    let (mut seg, mut uniq) = (Vec::new(), Vec::new());
    for (k, &j) in order.iter().enumerate() {
        if uniq.last() != Some(&ids[j as usize]) {
            seg.push(k as u32);
            uniq.push(ids[j as usize]);
        }
    }
    seg.push(order.len() as u32);
    let (n, u) = (order.len(), uniq.len());
    (order.into_iter().chain(seg).chain(uniq).collect(), n, u)
}

impl CustomOp2 for EmbeddingTrain {
    fn name(&self) -> &'static str {
        "embedding-train"
    }

    fn cpu_fwd(
        &self,
        table: &CpuStorage,
        table_l: &Layout,
        ids: &CpuStorage,
        ids_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (vocab, cols) = table_l.shape().dims2()?;
        let (CpuStorage::F32(table), CpuStorage::U32(ids), Some((t0, t1)), Some((i0, i1))) =
            (table, ids, table_l.contiguous_offsets(), ids_l.contiguous_offsets())
        else {
            candle_core::bail!("embedding-train: a contiguous f32 table and u32 ids");
        };
        let (table, ids) = (&table[t0..t1], &ids[i0..i1]);
        let mut out = Vec::with_capacity(ids.len() * cols);
        for &id in ids {
            if id as usize >= vocab {
                candle_core::bail!("embedding-train: id {id} is out of range for a table of {vocab} rows");
            }
            out.extend_from_slice(&table[id as usize * cols..][..cols]);
        }
        Ok((CpuStorage::F32(out), Shape::from((ids.len(), cols))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        table: &candle_core::CudaStorage,
        table_l: &Layout,
        ids: &candle_core::CudaStorage,
        ids_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let cols = table_l.shape().dims2()?.1;
        if table.dtype() != DType::F32 || ids.dtype() != DType::U32 {
            candle_core::bail!(
                "embedding-train: an f32 table and u32 ids, not {:?} and {:?}",
                table.dtype(),
                ids.dtype()
            );
        }
        let out = launch::embedding_gather((table, table_l), (ids, ids_l))?;
        Ok((out, Shape::from((ids_l.shape().elem_count(), cols))))
    }

    fn bwd(
        &self,
        table: &Tensor,
        ids: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (vocab, _) = table.dims2()?;
        let host = ids.to_vec1::<u32>()?;
        if let Some(bad) = host.iter().find(|&&id| id as usize >= vocab) {
            candle_core::bail!("embedding-train: id {bad} is out of range for a table of {vocab} rows");
        }
        let (grouped, positions, segments) = groups(&host, self.padding_idx);
        let grouped = Tensor::from_vec(grouped, positions + 2 * segments + 1, ids.device())?;
        let op = EmbeddingTrainGrad { vocab, positions, segments };
        Ok((Some(grad.contiguous()?.apply_op2_no_bwd(&grouped, &op)?), None))
    }
}

/// The backward pass of [`EmbeddingTrain`]: `(grad [n, cols], groups) → [vocab, cols]` f32.
#[derive(Debug, Clone, Copy)]
struct EmbeddingTrainGrad {
    vocab: usize,
    positions: usize,
    segments: usize,
}

impl CustomOp2 for EmbeddingTrainGrad {
    fn name(&self) -> &'static str {
        "embedding-train-grad"
    }

    /// The same sums as the kernel, in the same order (f32).
    fn cpu_fwd(
        &self,
        grad: &CpuStorage,
        grad_l: &Layout,
        groups: &CpuStorage,
        groups_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, cols) = grad_l.shape().dims2()?;
        let (Some((g0, g1)), Some((s0, s1)), CpuStorage::U32(groups)) =
            (grad_l.contiguous_offsets(), groups_l.contiguous_offsets(), groups)
        else {
            candle_core::bail!("embedding-train-grad: a contiguous gradient and u32 groups");
        };
        let grad: Vec<f32> = match grad {
            CpuStorage::F32(g) => g[g0..g1].to_vec(),
            CpuStorage::BF16(g) => g[g0..g1].iter().map(|v| v.to_f32()).collect(),
            _ => candle_core::bail!("embedding-train-grad: an f32 or bf16 gradient"),
        };
        let groups = &groups[s0..s1];
        let (order, rest) = groups.split_at(self.positions);
        let (seg, uniq) = rest.split_at(self.segments + 1);
        let mut out = vec![0f32; self.vocab * cols];
        for (s, &id) in uniq.iter().enumerate() {
            let row = &mut out[id as usize * cols..][..cols];
            for &j in &order[seg[s] as usize..seg[s + 1] as usize] {
                row.iter_mut().zip(&grad[j as usize * cols..][..cols]).for_each(|(o, g)| *o += g);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((self.vocab, cols))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        grad: &candle_core::CudaStorage,
        grad_l: &Layout,
        groups: &candle_core::CudaStorage,
        groups_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let cols = grad_l.shape().dims2()?.1;
        let out =
            launch::embedding_grad(self.vocab, (grad, grad_l), (groups, groups_l), (self.positions, self.segments))?;
        Ok((out, Shape::from((self.vocab, cols))))
    }
}

/// Rows of `table` at `ids` with [`EmbeddingTrain`] (GPU-route training; no gradient for the
/// row of `padding_idx`), or, with `LONGREAD_CUDA_EMBEDDING_GRAD=candle`, candle's
/// `index_select` as before, its padding rows' gradient blocked by a `where_cond` (kept to
/// compare the two on a GPU).
///
/// # Shapes
/// `table: [vocab, cols]`, `ids: [...]` (u32) → `[..., cols]`
pub fn embedding_lookup(table: &Tensor, ids: &Tensor, padding_idx: Option<u32>) -> Result<Tensor> {
    let cols = table.dim(1)?;
    let mut shape = ids.dims().to_vec();
    shape.push(cols);
    let flat = ids.flatten_all()?.to_dtype(DType::U32)?.contiguous()?;
    if super::train_embedding_kernel() && table.dtype() == DType::F32 {
        return table.contiguous()?.apply_op2(&flat, EmbeddingTrain { padding_idx })?.reshape(shape);
    }
    let rows = table.index_select(&flat, 0)?.reshape(shape)?;
    match padding_idx {
        Some(pad) if rows.track_op() => {
            let padding = ids.eq(pad)?.unsqueeze(ids.rank())?.broadcast_as(rows.shape())?;
            padding.where_cond(&rows.detach(), &rows)
        }
        _ => Ok(rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Values and the table's gradient equal candle's `index_select`'s, with repeated ids (in
    /// any order) and ids never looked up (zero rows); an id past the table is an error.
    #[test]
    fn the_op_is_index_select_values_and_gradient() {
        let table = Var::from_tensor(&Tensor::randn(0f32, 1.0, (7, 5), &Device::Cpu).unwrap()).unwrap();
        let ids = Tensor::from_vec(vec![3u32, 1, 3, 0, 6, 3, 1, 2], (2, 4), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (2, 4, 5), &Device::Cpu).unwrap();
        let ours = embedding_lookup(table.as_tensor(), &ids, None).unwrap();
        let theirs =
            table.as_tensor().index_select(&ids.flatten_all().unwrap(), 0).unwrap().reshape((2, 4, 5)).unwrap();
        let max = |t: Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(max((&ours - &theirs).unwrap()), 0.0);
        let grad = |y: &Tensor| (y * &w).unwrap().sum_all().unwrap().backward().unwrap().get(&table).unwrap().clone();
        let (g_ours, g_theirs) = (grad(&ours), grad(&theirs));
        assert!(max((&g_ours - &g_theirs).unwrap()) < 1e-6);
        assert_eq!(max(g_ours.get(4).unwrap()), 0.0, "id 4 is never looked up");
        let bad = Tensor::from_vec(vec![7u32], 1, &Device::Cpu).unwrap();
        let err = embedding_lookup(table.as_tensor(), &bad, None).unwrap_err().to_string();
        assert!(err.contains("out of range"), "{err}");
        // With a padding id, its row gets no gradient and the others the same.
        let padded = embedding_lookup(table.as_tensor(), &ids, Some(3)).unwrap();
        let g_padded = grad(&padded);
        assert_eq!(max(g_padded.get(3).unwrap()), 0.0, "the padding row");
        let others = [0, 1, 2, 4, 5, 6].map(|i| max((g_padded.get(i).unwrap() - g_theirs.get(i).unwrap()).unwrap()));
        assert!(others.iter().all(|&d| d < 1e-6), "{others:?}");
    }

    #[test]
    fn positions_are_grouped_by_id_in_order() {
        let (all, n, u) = groups(&[3, 1, 3, 0, 1], None);
        assert_eq!((n, u), (5, 3));
        // order: ids 0 (pos 3), 1 (pos 1, 4), 3 (pos 0, 2); seg; uniq.
        assert_eq!(all, [3, 1, 4, 0, 2, 0, 1, 3, 5, 0, 1, 3]);
        let (all, n, u) = groups(&[3, 1, 3, 0, 1], Some(1));
        assert_eq!((n, u), (3, 2));
        assert_eq!(all, [3, 0, 2, 0, 1, 3, 0, 3]);
    }
}
