//! Embedding lookups of training on the GPU route, with a backward pass that sums each id's
//! gradient rows in parallel.
//!
//! candle's lookup (`index_select`) has `index_add` as its backward pass, which on CUDA runs one
//! thread per column of the table (768 for roberta-base: six blocks on a GPU of 132
//! multiprocessors), each walking every looked-up position in turn: 10,240 dependent
//! read-modify-writes per 20-chunk batch and table. Here the positions are grouped by id on
//! the host, and a kernel sums each id's rows with a thread per (id, column), in the positions'
//! order: deterministic, as the bit-identical resumption of GPU runs needs. The grouping is
//! made in the forward pass from the batch's ids as the host made them, where the caller has
//! them ([`embedding_lookup`]'s `host_ids`), and copied to the GPU while it works; else the
//! backward pass reads the ids back, which waits for all the work queued before it (every
//! layer's backward pass): three waits per encoder batch, one per table.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

#[cfg(feature = "cuda")]
use super::launch;

/// `(table [vocab, cols] f32, ids [n] u32) → [n, cols]`, the rows of `table` at `ids`, with a
/// gradient for `table` that, as `nn.Embedding(padding_idx=…)`'s, leaves the row of
/// `padding_idx` out. The caller checks the ids against `vocab` (the encoder does).
#[derive(Debug, Clone)]
pub struct EmbeddingTrain {
    /// The id whose row gets no gradient.
    pub padding_idx: Option<u32>,
    /// The positions grouped by id, made from the ids on the host ([`GroupedIds::of`]);
    /// `None`: the backward pass reads the ids back and groups them then.
    pub grouped: Option<GroupedIds>,
}

/// A batch's positions grouped by id for [`EmbeddingTrain`]'s backward pass, on the table's
/// device: `[order (positions), seg (segments + 1), uniq (segments)]` u32 ([`groups`]).
#[derive(Debug, Clone)]
pub struct GroupedIds {
    groups: Tensor,
    positions: usize,
    segments: usize,
}

impl GroupedIds {
    /// Groups `ids` (on the CPU: no wait for a GPU) by id, `padding_idx`'s positions left out,
    /// checked against a table of `vocab` rows, and copies the groups to `device`.
    ///
    /// # Shapes
    /// `ids: [...]` (u32, on the CPU)
    pub fn of(ids: &Tensor, padding_idx: Option<u32>, vocab: usize, device: &candle_core::Device) -> Result<Self> {
        if !ids.device().is_cpu() {
            candle_core::bail!("embedding-train: the ids to group must be on the CPU");
        }
        let host = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1::<u32>()?;
        Self::of_host(&host, padding_idx, vocab, device)
    }

    /// [`Self::of`] from the ids as a vector.
    fn of_host(host: &[u32], padding_idx: Option<u32>, vocab: usize, device: &candle_core::Device) -> Result<Self> {
        if let Some(bad) = host.iter().find(|&&id| id as usize >= vocab) {
            candle_core::bail!("embedding-train: id {bad} is out of range for a table of {vocab} rows");
        }
        let (grouped, positions, segments) = groups(host, padding_idx);
        let groups = Tensor::from_vec(grouped, positions + 2 * segments + 1, device)?;
        Ok(Self { groups, positions, segments })
    }
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
        let read_back;
        let grouped = match &self.grouped {
            Some(grouped) => grouped,
            None => {
                // Waits for the device to finish all the work queued before.
                read_back = GroupedIds::of_host(&ids.to_vec1::<u32>()?, self.padding_idx, vocab, ids.device())?;
                &read_back
            }
        };
        let op = EmbeddingTrainGrad { vocab, positions: grouped.positions, segments: grouped.segments };
        Ok((Some(grad.contiguous()?.apply_op2_no_bwd(&grouped.groups, &op)?), None))
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
/// row of `padding_idx`); `host_ids`, the same ids on the CPU where the caller made them there,
/// are grouped for the backward pass now (if `table` is trained), so that it reads nothing
/// back from the GPU. With `LONGREAD_CUDA_EMBEDDING_GRAD=candle`, candle's
/// `index_select` as before, its padding rows' gradient blocked by a `where_cond` (kept to
/// compare the two on a GPU).
///
/// # Shapes
/// `table: [vocab, cols]`, `ids, host_ids: [...]` (u32) → `[..., cols]`
pub fn embedding_lookup(
    table: &Tensor,
    ids: &Tensor,
    host_ids: Option<&Tensor>,
    padding_idx: Option<u32>,
) -> Result<Tensor> {
    let (vocab, cols) = table.dims2()?;
    let mut shape = ids.dims().to_vec();
    shape.push(cols);
    let flat = ids.flatten_all()?.to_dtype(DType::U32)?.contiguous()?;
    if super::train_embedding_kernel() && table.dtype() == DType::F32 {
        let grouped = match host_ids {
            Some(host) if table.track_op() => {
                if host.dims() != ids.dims() {
                    candle_core::bail!("embedding-train: host ids {:?} for ids {:?}", host.dims(), ids.dims());
                }
                Some(GroupedIds::of(host, padding_idx, vocab, table.device())?)
            }
            _ => None,
        };
        return table.contiguous()?.apply_op2(&flat, EmbeddingTrain { padding_idx, grouped })?.reshape(shape);
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
        let ours = embedding_lookup(table.as_tensor(), &ids, None, None).unwrap();
        let theirs =
            table.as_tensor().index_select(&ids.flatten_all().unwrap(), 0).unwrap().reshape((2, 4, 5)).unwrap();
        let max = |t: Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(max((&ours - &theirs).unwrap()), 0.0);
        let grad = |y: &Tensor| (y * &w).unwrap().sum_all().unwrap().backward().unwrap().get(&table).unwrap().clone();
        let (g_ours, g_theirs) = (grad(&ours), grad(&theirs));
        assert!(max((&g_ours - &g_theirs).unwrap()) < 1e-6);
        assert_eq!(max(g_ours.get(4).unwrap()), 0.0, "id 4 is never looked up");
        let bad = Tensor::from_vec(vec![7u32], 1, &Device::Cpu).unwrap();
        let err = embedding_lookup(table.as_tensor(), &bad, None, None).unwrap_err().to_string();
        assert!(err.contains("out of range"), "{err}");
        // With a padding id, its row gets no gradient and the others the same.
        let padded = embedding_lookup(table.as_tensor(), &ids, None, Some(3)).unwrap();
        let g_padded = grad(&padded);
        assert_eq!(max(g_padded.get(3).unwrap()), 0.0, "the padding row");
        let others = [0, 1, 2, 4, 5, 6].map(|i| max((g_padded.get(i).unwrap() - g_theirs.get(i).unwrap()).unwrap()));
        assert!(others.iter().all(|&d| d < 1e-6), "{others:?}");
    }

    /// Grouped from host ids in the forward pass, the table's gradient is the one the backward
    /// pass makes by reading the ids (with and without a padding id); a frozen table groups
    /// nothing; bad host ids are errors.
    #[test]
    fn ids_grouped_on_the_host_give_the_same_gradient() {
        let table = Var::from_tensor(&Tensor::randn(0f32, 1.0, (7, 5), &Device::Cpu).unwrap()).unwrap();
        let ids = Tensor::from_vec(vec![3u32, 1, 3, 0, 6, 3, 1, 2], (2, 4), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (2, 4, 5), &Device::Cpu).unwrap();
        let grad = |y: &Tensor| {
            let g = (y * &w).unwrap().sum_all().unwrap().backward().unwrap().get(&table).unwrap().clone();
            g.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        for padding in [None, Some(3)] {
            let read_back = embedding_lookup(table.as_tensor(), &ids, None, padding).unwrap();
            let grouped = embedding_lookup(table.as_tensor(), &ids, Some(&ids), padding).unwrap();
            assert_eq!(grad(&grouped), grad(&read_back), "padding {padding:?}");
        }
        // The backward pass sums by the groups made in the forward pass (here, on purpose, of
        // other ids than those looked up): it does not read the ids again.
        let other = Tensor::from_vec(vec![0u32, 0, 5, 5, 6, 2, 2, 2], (2, 4), &Device::Cpu).unwrap();
        let op =
            EmbeddingTrain { padding_idx: None, grouped: Some(GroupedIds::of(&other, None, 7, &Device::Cpu).unwrap()) };
        let rows = table.as_tensor().apply_op2(&ids.flatten_all().unwrap(), op).unwrap().reshape((2, 4, 5)).unwrap();
        let of_other = embedding_lookup(table.as_tensor(), &other, None, None).unwrap();
        assert_eq!(grad(&rows), grad(&of_other));
        let frozen = table.as_tensor().detach();
        assert!(embedding_lookup(&frozen, &ids, Some(&ids), None).is_ok());
        let bad = Tensor::from_vec(vec![7u32; 8], (2, 4), &Device::Cpu).unwrap();
        let err = embedding_lookup(table.as_tensor(), &ids, Some(&bad), None).unwrap_err().to_string();
        assert!(err.contains("out of range"), "{err}");
        let short = Tensor::from_vec(vec![1u32; 4], (1, 4), &Device::Cpu).unwrap();
        let err = embedding_lookup(table.as_tensor(), &ids, Some(&short), None).unwrap_err().to_string();
        assert!(err.contains("host ids"), "{err}");
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
