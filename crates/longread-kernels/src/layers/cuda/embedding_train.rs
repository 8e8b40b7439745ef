//! Embedding lookups of training on the GPU route, with a backward pass that sums each id's
//! gradient rows in parallel.
//!
//! candle's lookup (`index_select`) has `index_add` as its backward pass, which on CUDA runs one
//! thread per column of the table (768 for roberta-base: six blocks on a GPU of 132
//! multiprocessors), each walking every looked-up position in turn: 10,240 dependent
//! read-modify-writes per 20-chunk batch and table. Here the positions are grouped by id on
//! the host, and a kernel sums each id's rows with a thread per (id, column), in the positions'
//! order: deterministic, as the bit-identical resumption of GPU runs needs. An id looked up
//! more than 32 times (RoBERTa's one token-type id: every position of the batch; a position id:
//! once per chunk) is summed in two stages: pieces of about √count positions each, in parallel,
//! then the pieces in order ([`groups`]). Before, one block walked the 40,960 positions of a
//! 4 × 20 × 512 step's token-type table alone: ~5 ms of an 85 ms step on an H200 (a profile of
//! 2026-11-28). The grouping is
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
/// device: one u32 vector laid out as [`Grouping::flat`] says.
#[derive(Debug, Clone)]
pub struct GroupedIds {
    groups: Tensor,
    counts: GroupCounts,
}

/// The sizes of a [`Grouping`]: positions summed, pieces they are summed in, distinct ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GroupCounts {
    pub positions: usize,
    pub pieces: usize,
    pub ids: usize,
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
        let grouping = groups(host, padding_idx, super::embedding_grad_in_pieces());
        let counts = grouping.counts();
        let flat = grouping.flat();
        let len = flat.len();
        Ok(Self { groups: Tensor::from_vec(flat, len, device)?, counts })
    }
}

/// The positions of a batch's ids grouped by id for the table's gradient, in pieces: row
/// `uniq[s]` of the gradient is the sum, in order, of pieces `first[s] .. first[s + 1]`, and
/// piece `p` the sum, in order, of the lookup gradient's rows `order[k]` for `k` in
/// `piece[p] .. piece[p + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grouping {
    /// The positions sorted by id (stably), the skipped id's left out.
    order: Vec<u32>,
    /// Each piece's range in `order` (pieces + 1 offsets).
    piece: Vec<u32>,
    /// Each id's range of pieces (ids + 1 offsets).
    first: Vec<u32>,
    /// The ids, ascending.
    uniq: Vec<u32>,
}

impl Grouping {
    /// The grouping of positions `order` sorted by id, whose ids `uniq` start at `seg` (ids + 1
    /// offsets), each id cut into pieces of [`piece_len`] of the most frequent id's count
    /// (one piece per id when not `split`).
    fn in_pieces(order: Vec<u32>, seg: &[u32], uniq: Vec<u32>, split: bool) -> Self {
        let most = seg.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let len = if split { piece_len(most as usize) } else { usize::MAX };
        let (mut piece, mut first) = (Vec::new(), Vec::with_capacity(uniq.len() + 1));
        for w in seg.windows(2) {
            first.push(piece.len() as u32);
            piece.extend((w[0]..w[1]).step_by(len));
        }
        first.push(piece.len() as u32);
        piece.push(order.len() as u32);
        Grouping { order, piece, first, uniq }
    }

    fn counts(&self) -> GroupCounts {
        GroupCounts { positions: self.order.len(), pieces: self.piece.len() - 1, ids: self.uniq.len() }
    }

    /// One u32 vector for the device: `[order (n), piece (p + 1), first (u + 1), uniq (u),
    /// 0 .. p]`, the last the pieces' own indices (the second stage reads them as its order).
    fn flat(self) -> Vec<u32> {
        let pieces = self.piece.len() as u32 - 1;
        self.order.into_iter().chain(self.piece).chain(self.first).chain(self.uniq).chain(0..pieces).collect()
    }
}

/// The positions of `ids` grouped by id, those of `skip` left out, each id's positions cut
/// into pieces of [`piece_len`] of the most frequent id's count (one piece per id when no id
/// is looked up more than 32 times, or when not `split`). A counting sort (stable: each id's
/// positions in order), linear in the ids and the largest id: the host does this at the start
/// of every training batch's forward pass, where a comparison sort of 40,960 word ids took
/// ~1.3 ms while the GPU waited.
fn groups(ids: &[u32], skip: Option<u32>, split: bool) -> Grouping {
    let kept = |id: u32| Some(id) != skip;
    let span = ids.iter().copied().filter(|&id| kept(id)).max().map_or(0, |id| id as usize + 1);
    // starts[id]: where id's positions begin in `order`, then (while filling) where its next goes.
    let mut starts = vec![0u32; span + 1];
    for &id in ids.iter().filter(|&&id| kept(id)) {
        starts[id as usize + 1] += 1;
    }
    let (mut seg, mut uniq) = (Vec::new(), Vec::new());
    for id in 0..span {
        if starts[id + 1] > 0 {
            seg.push(starts[id]);
            uniq.push(id as u32);
        }
        starts[id + 1] += starts[id];
    }
    let total = starts[span] as usize;
    seg.push(total as u32);
    let mut order = vec![0u32; total];
    for (j, &id) in ids.iter().enumerate().filter(|&(_, &id)| kept(id)) {
        let next = &mut starts[id as usize];
        order[*next as usize] = j as u32;
        *next += 1;
    }
    Grouping::in_pieces(order, &seg, uniq, split)
}

/// Positions per piece when the most frequent id is looked up `most` times: √most (the two
/// stages then each add about √most rows in turn), at least 32 (fewer repeats stay one piece).
fn piece_len(most: usize) -> usize {
    (most as f64).sqrt().ceil().max(32.0) as usize
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
        let op = EmbeddingTrainGrad { vocab, counts: grouped.counts };
        Ok((Some(grad.contiguous()?.apply_op2_no_bwd(&grouped.groups, &op)?), None))
    }
}

/// The backward pass of [`EmbeddingTrain`]: `(grad [n, cols], groups) → [vocab, cols]` f32.
#[derive(Debug, Clone, Copy)]
struct EmbeddingTrainGrad {
    vocab: usize,
    counts: GroupCounts,
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
        let GroupCounts { positions: n, pieces: p, ids: u } = self.counts;
        let groups = &groups[s0..s1];
        if groups.len() != n + 2 * p + 2 * u + 2 {
            candle_core::bail!("embedding-train-grad: {} grouped values for {:?}", groups.len(), self.counts);
        }
        let (order, rest) = groups.split_at(n);
        let (piece, rest) = rest.split_at(p + 1);
        let (first, rest) = rest.split_at(u + 1);
        let uniq = &rest[..u];
        // Row sums in the kernels' order: each piece's positions, then each id's pieces.
        let sum_rows = |rows: &[f32], picks: &mut dyn Iterator<Item = usize>, out: &mut [f32]| {
            for j in picks {
                out.iter_mut().zip(&rows[j * cols..][..cols]).for_each(|(o, g)| *o += g);
            }
        };
        let mut partial = vec![0f32; p * cols];
        for q in 0..p {
            let mut picks = order[piece[q] as usize..piece[q + 1] as usize].iter().map(|&j| j as usize);
            sum_rows(&grad, &mut picks, &mut partial[q * cols..][..cols]);
        }
        let mut out = vec![0f32; self.vocab * cols];
        for (s, &id) in uniq.iter().enumerate() {
            let mut picks = first[s] as usize..first[s + 1] as usize;
            sum_rows(&partial, &mut picks, &mut out[id as usize * cols..][..cols]);
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
        let out = launch::embedding_grad(self.vocab, (grad, grad_l), (groups, groups_l), self.counts)?;
        Ok((out, Shape::from((self.vocab, cols))))
    }
}

/// Rows of `table` at `ids` with [`EmbeddingTrain`] (GPU-route training; no gradient for the
/// row of `padding_idx`); `host_ids`, the same ids on the CPU where the caller made them there,
/// are grouped for the backward pass now (if `table` is trained), so that it reads nothing
/// back from the GPU. Tables that are not f32 take candle's `index_select`, the padding row's
/// gradient blocked by a `where_cond`.
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
    if table.dtype() == DType::F32 {
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
    use crate::seeded::Normals;
    use candle_core::{Device, Var};

    /// Values and the table's gradient equal candle's `index_select`'s, with repeated ids (in
    /// any order) and ids never looked up (zero rows); an id past the table is an error.
    #[test]
    fn the_op_is_index_select_values_and_gradient() {
        let normals = Normals::new(335);
        let table = Var::from_tensor(&normals.tensor(0f32, 1.0, (7, 5), &Device::Cpu).unwrap()).unwrap();
        let ids = Tensor::from_vec(vec![3u32, 1, 3, 0, 6, 3, 1, 2], (2, 4), &Device::Cpu).unwrap();
        let w = normals.tensor(0f32, 1.0, (2, 4, 5), &Device::Cpu).unwrap();
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
        let normals = Normals::new(363);
        let table = Var::from_tensor(&normals.tensor(0f32, 1.0, (7, 5), &Device::Cpu).unwrap()).unwrap();
        let ids = Tensor::from_vec(vec![3u32, 1, 3, 0, 6, 3, 1, 2], (2, 4), &Device::Cpu).unwrap();
        let w = normals.tensor(0f32, 1.0, (2, 4, 5), &Device::Cpu).unwrap();
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
        let grouping = groups(&[3, 1, 3, 0, 1], None, true);
        assert_eq!(grouping.counts(), GroupCounts { positions: 5, pieces: 3, ids: 3 });
        // order: ids 0 (pos 3), 1 (pos 1, 4), 3 (pos 0, 2); one piece per id; the ids; 0 .. 3.
        assert_eq!(grouping.flat(), [3, 1, 4, 0, 2, 0, 1, 3, 5, 0, 1, 2, 3, 0, 1, 3, 0, 1, 2]);
        let grouping = groups(&[3, 1, 3, 0, 1], Some(1), true);
        assert_eq!(grouping.counts(), GroupCounts { positions: 3, pieces: 2, ids: 2 });
        assert_eq!(grouping.flat(), [3, 0, 2, 0, 1, 3, 0, 1, 2, 0, 3, 0, 1]);
        assert_eq!(groups(&[], None, true).counts(), GroupCounts { positions: 0, pieces: 0, ids: 0 });
    }

    /// The counting sort orders and segments the positions as a stable comparison sort does
    /// (the grouping it replaced; the pieces are cut by the same code), on word-like ids (many,
    /// spread over a large table), position-like ones (runs) and one repeated id, with and
    /// without a skipped id.
    #[test]
    fn the_counting_sort_groups_as_a_stable_sort() {
        fn by_comparison(ids: &[u32], skip: Option<u32>, split: bool) -> Grouping {
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
            Grouping::in_pieces(order, &seg, uniq, split)
        }
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let words: Vec<u32> = (0..5_000).map(|_| rng.random_range(0..3_000)).collect();
        let positions: Vec<u32> = (0..5_000).map(|i| 2 + (i % 512) as u32).collect();
        let one = vec![7u32; 3_000];
        for ids in [&words, &positions, &one] {
            for skip in [None, Some(1), Some(2), Some(7)] {
                for split in [false, true] {
                    assert_eq!(
                        groups(ids, skip, split),
                        by_comparison(ids, skip, split),
                        "skip {skip:?}, split {split}"
                    );
                }
            }
        }
        assert_eq!(groups(&[4, 4], Some(4), true), by_comparison(&[4, 4], Some(4), true), "every id skipped");
    }

    /// An id looked up many times (a token-type id: every position) is cut into pieces of
    /// about √count, the others stay one piece each, and the pieces cover every position once,
    /// in order.
    #[test]
    fn a_frequent_id_is_summed_in_pieces() {
        assert_eq!((piece_len(0), piece_len(32), piece_len(1024), piece_len(40_960)), (32, 32, 32, 203));
        let mut ids = vec![0u32; 10_240];
        ids[7] = 5;
        ids[9] = 5;
        let unsplit = groups(&ids, None, false);
        assert_eq!(unsplit.counts(), GroupCounts { positions: 10_240, pieces: 2, ids: 2 });
        assert_eq!((unsplit.piece, unsplit.first), (vec![0, 10_238, 10_240], vec![0, 1, 2]));
        let grouping = groups(&ids, None, true);
        let GroupCounts { positions, pieces, ids: u } = grouping.counts();
        assert_eq!((positions, u), (10_240, 2));
        // √10,238 → pieces of 102: 101 for id 0, one for id 5.
        assert_eq!(pieces, 10_238usize.div_ceil(102) + 1);
        assert_eq!(grouping.first, [0, pieces as u32 - 1, pieces as u32]);
        assert!(grouping.piece.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= 102), "{:?}", grouping.piece);
        assert_eq!((grouping.piece[0], *grouping.piece.last().unwrap()), (0, 10_240));
    }

    /// Through the two stages the gradient is index_select's, for a table whose ids repeat a
    /// lot (pieces) and a little (one piece each), with a padding id, in f32 and from bf16.
    #[test]
    fn the_gradient_in_pieces_is_index_selects() {
        let normals = Normals::new(431);
        let table = Var::from_tensor(&normals.tensor(0f32, 1.0, (6, 4), &Device::Cpu).unwrap()).unwrap();
        let ids: Vec<u32> = (0..3000u32).map(|i| if i % 50 == 0 { 1 + i % 4 } else { 0 }).collect();
        let ids = Tensor::from_vec(ids, (3, 1000), &Device::Cpu).unwrap();
        let w = normals.tensor(0f32, 1.0, (3, 1000, 4), &Device::Cpu).unwrap();
        let max = |t: Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        for (padding, dtype) in [(None, DType::F32), (Some(2), DType::F32), (None, DType::BF16)] {
            let grad = |y: Tensor| {
                let y = (y.to_dtype(dtype).unwrap() * w.to_dtype(dtype).unwrap()).unwrap();
                y.to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap().get(&table).unwrap().clone()
            };
            let ours = grad(embedding_lookup(table.as_tensor(), &ids, Some(&ids), padding).unwrap());
            let flat = ids.flatten_all().unwrap();
            let theirs = grad(table.as_tensor().index_select(&flat, 0).unwrap().reshape((3, 1000, 4)).unwrap());
            for row in 0..6 {
                let diff = max((ours.get(row).unwrap() - theirs.get(row).unwrap()).unwrap());
                let scale = max(theirs.get(row).unwrap()).max(1.0);
                if Some(row as u32) == padding {
                    assert_eq!(max(ours.get(row).unwrap()), 0.0, "the padding row");
                } else {
                    assert!(diff <= 1e-5 * scale, "{dtype:?}, padding {padding:?}, row {row}: {diff}");
                }
            }
        }
    }
}
