//! FlashAttention-2 (`vendor/flash-attn`: bf16, heads of 32 and 64) for the GPU's attention,
//! the default of both passes where the GPU runs it ([`flash2_runs_on`]): inference
//! ([`FlashAttention2`]; `LONGREAD_CUDA_ATTENTION=materialized` for longread's kernels) and
//! training ([`FlashAttentionTrain`], with its backward kernel and dropout;
//! `LONGREAD_CUDA_TRAIN_ATTENTION=fused` for longread's op). The same two ops run cuDNN's fused
//! attention instead (`vendor/cudnn-attn`, the kernels PyTorch's SDPA runs on Hopper) with
//! `LONGREAD_CUDA_ATTENTION=cudnn` / `LONGREAD_CUDA_TRAIN_ATTENTION=cudnn` where cuDNN 9 opens
//! ([`Backend`]). q, k and v are read in place from the fused q/k/v product (its bias
//! added first), the scores never reach memory, and each chunk's keys end where its padding
//! starts ([`KeyLengths`]; the kernels' variable-length mode), so a half-empty last chunk costs
//! half. Each op runs on the CPU too, as f32 loops (`reference`): the reference of the GPU
//! tests and of CI's tests of what the ops compute.

#[cfg(feature = "cuda")]
mod cudnn;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod gradient_layout;
mod inference;
#[cfg(feature = "cuda")]
mod launch;
mod reference;
mod train;

use std::sync::atomic::{AtomicU8, Ordering};

use candle_core::{DType, Result, Tensor};

pub use inference::FlashAttention2;
pub use train::FlashAttentionTrain;

/// Where each sequence of a right-padded batch lies and how many of its keys are real: the
/// kernels' `cu_seqlens` (row starts, `[batch + 1]`, u32) and `seqused_k` (`[batch]`, u32);
/// for cuDNN each sequence's queries (`full`: `seq` each, `[batch]`, u32) and whether every key
/// is real (`all_real`: cuDNN then runs without its padding mask).
#[derive(Debug, Clone)]
pub struct KeyLengths {
    starts: Tensor,
    used: Tensor,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    full: Tensor,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    all_real: bool,
    seq: usize,
}

impl KeyLengths {
    /// From an attention mask whose every row is real tokens then padding (`1…1 0…0`, as
    /// longread's chunks are); `None` when a row is not (left padding, holes) or is all padding:
    /// the caller then masks keys by their bias. Reads the mask on the host (once per batch).
    ///
    /// # Shapes
    /// `mask: [batch, seq]` (any dtype; nonzero = a real token)
    pub fn right_padded(mask: &Tensor) -> Result<Option<Self>> {
        Self::right_padded_on(mask, mask.device())
    }

    /// As [`KeyLengths::right_padded`], the lengths on `device`: a mask on the CPU gives a GPU's
    /// lengths without reading anything back from it.
    ///
    /// # Shapes
    /// `mask: [batch, seq]`
    pub fn right_padded_on(mask: &Tensor, device: &candle_core::Device) -> Result<Option<Self>> {
        let (batch, seq) = mask.dims2()?;
        let rows = mask.ne(0u8)?.to_dtype(DType::U8)?.to_vec2::<u8>()?;
        let mut used = Vec::with_capacity(batch);
        for row in &rows {
            let real = row.iter().take_while(|&&m| m != 0).count();
            if real == 0 || row[real..].iter().any(|&m| m != 0) {
                return Ok(None);
            }
            used.push(real as u32);
        }
        let starts: Vec<u32> = (0..=batch).map(|i| (i * seq) as u32).collect();
        let all_real = used.iter().all(|&n| n as usize == seq);
        Ok(Some(Self {
            starts: Tensor::from_vec(starts, batch + 1, device)?,
            used: Tensor::from_vec(used, batch, device)?,
            full: Tensor::from_vec(vec![seq as u32; batch], batch, device)?,
            all_real,
            seq,
        }))
    }

    /// The padded length of each sequence.
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// Sequences in the batch.
    fn batch(&self) -> usize {
        self.used.elem_count()
    }

    /// `(rows, hidden, head_size)` of a q/k/v product `[batch · seq, 3 · hidden]` over these
    /// sequences, or an error naming `op` and what disagrees.
    fn dims(&self, op: &str, heads: usize, qkv: &candle_core::Layout) -> Result<(usize, usize, usize)> {
        let (rows, width) = qkv.shape().dims2()?;
        let hidden = width / 3;
        let head_size = hidden / heads.max(1);
        if width != 3 * hidden || head_size * heads != hidden || rows != self.batch() * self.seq || qkv.stride()[1] != 1
        {
            candle_core::bail!(
                "{op}: qkv {:?} (strides {:?}) does not fit {heads} heads over {} sequences of {}",
                qkv.shape(),
                qkv.stride(),
                self.batch(),
                self.seq
            );
        }
        Ok((rows, hidden, head_size))
    }

    /// Row starts and real keys on the host (for the CPU loops).
    fn host(&self) -> Result<(Vec<u32>, Vec<u32>)> {
        Ok((self.starts.to_vec1::<u32>()?, self.used.to_vec1::<u32>()?))
    }
}

/// The library that runs [`FlashAttention2`]'s and [`FlashAttentionTrain`]'s CUDA passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// FlashAttention-2's kernels (`vendor/flash-attn`): the default.
    Fa2,
    /// cuDNN's fused attention (`vendor/cudnn-attn`), where asked for and cuDNN 9 opens.
    Cudnn,
}

impl Backend {
    /// The name benchmark rows give it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Fa2 => "fa2",
            Backend::Cudnn => "cudnn",
        }
    }

    /// The backend of training's ops (`train`) or inference's: cuDNN where the environment
    /// variable names `cudnn` and cuDNN opens (else FlashAttention-2, with a warning once).
    pub fn chosen(train: bool) -> Self {
        let asked = if train { super::train_attention() } else { super::inference_attention() };
        if asked == "cudnn" && cudnn_opens(train) {
            Backend::Cudnn
        } else {
            Backend::Fa2
        }
    }

    fn code(self) -> u8 {
        match self {
            Backend::Fa2 => 1,
            Backend::Cudnn => 2,
        }
    }

    /// The name of the backend of [`Backend::code`] `code` (`None` for 0: none ran).
    fn named(code: u8) -> Option<&'static str> {
        match code {
            1 => Some(Backend::Fa2.name()),
            2 => Some(Backend::Cudnn.name()),
            _ => None,
        }
    }
}

/// Whether cuDNN opens (`LONGREAD_CUDNN_LIBRARY`, else `libcudnn.so.9` on the loader's path)
/// and has not failed its first call in training (`train`: forward and backward graphs) or in
/// inference: asked once; where it does not, a warning says why and FlashAttention-2 runs
/// instead.
fn cudnn_opens(train: bool) -> bool {
    #[cfg(feature = "cuda")]
    {
        static OPENS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let opens = *OPENS.get_or_init(|| match cudnn::open() {
            Ok(version) => {
                tracing::info!("cuDNN {version} runs the GPU's attention");
                true
            }
            Err(why) => {
                gave_up(format!("cuDNN does not open ({why})"));
                false
            }
        });
        opens && CUDNN_STATE[usize::from(train)].load(Ordering::Relaxed) != CUDNN_FAILED
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = train;
        false
    }
}

/// The sub-batches (ranges of sequences) cuDNN runs a call of `batch` sequences as. cuDNN
/// builds a plan per batch shape and pass (tens of milliseconds each; FlashAttention-2 takes
/// any shape at no cost), and real batches come in many sizes (each predict group's last batch,
/// each training step's kept group of documents). With `LONGREAD_CUDNN_SHAPES=buckets` a call
/// runs as sub-batches of powers of two, largest first, so that at most ⌊log₂ batch⌋ + 1 sizes
/// meet cuDNN per padded length; by default (`exact`) the batch runs whole.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn cudnn_batch_parts(batch: usize) -> Vec<std::ops::Range<usize>> {
    static MODE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    batch_parts(batch, super::env_choice(&MODE, "LONGREAD_CUDNN_SHAPES", &["buckets"], "exact") == "buckets")
}

/// [`cudnn_batch_parts`] for `batch` sequences, in powers of two where `buckets`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn batch_parts(batch: usize, buckets: bool) -> Vec<std::ops::Range<usize>> {
    if !buckets || batch == 0 {
        return std::iter::once(0..batch).collect();
    }
    let mut parts = Vec::new();
    let mut start = 0;
    while start < batch {
        let len = 1usize << (usize::BITS - 1 - (batch - start).leading_zeros());
        parts.push(start..start + len);
        start += len;
    }
    parts
}

/// cuDNN's record in this process, for inference and for training (whose graphs include a
/// backward pass): no call yet, a call that worked, or a first call that failed.
#[cfg(feature = "cuda")]
static CUDNN_STATE: [AtomicU8; 2] = [AtomicU8::new(0), AtomicU8::new(0)];
#[cfg(feature = "cuda")]
const CUDNN_WORKS: u8 = 1;
#[cfg(feature = "cuda")]
const CUDNN_FAILED: u8 = 2;

/// The outcome of a cuDNN call of training (`train`) or inference: its value, or — where cuDNN
/// has never worked for that use in this process (no usable CUDA runtime beside it, an engine
/// it does not have for this GPU, a backward graph it cannot build) — `None` after a warning,
/// and cuDNN is not asked again for that use (FlashAttention-2 runs instead); a failure after
/// cuDNN worked is an error.
#[cfg(feature = "cuda")]
fn cudnn_outcome<T>(result: Result<T>, train: bool) -> Result<Option<T>> {
    let state = &CUDNN_STATE[usize::from(train)];
    match result {
        Ok(value) => {
            state.store(CUDNN_WORKS, Ordering::Relaxed);
            ran(Backend::Cudnn, train);
            Ok(Some(value))
        }
        Err(e) if state.load(Ordering::Relaxed) != CUDNN_WORKS => {
            state.store(CUDNN_FAILED, Ordering::Relaxed);
            gave_up(format!("its first call in {} failed: {e}", if train { "training" } else { "inference" }));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Why cuDNN's attention is not running though it was asked for (cuDNN did not open, or its
/// first call failed), once that is known; `None` otherwise.
pub fn cudnn_unavailable() -> Option<String> {
    CUDNN_WHY.lock().ok()?.clone()
}

static CUDNN_WHY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Records and warns why cuDNN's attention gave way to FlashAttention-2.
#[cfg(feature = "cuda")]
fn gave_up(why: String) {
    tracing::warn!("cuDNN's attention was asked for, but {why}; FlashAttention-2 runs instead");
    if let Ok(mut slot) = CUDNN_WHY.lock() {
        *slot = Some(why);
    }
}

/// Which backend [`FlashAttention2`] or [`FlashAttentionTrain`] last ran on (for benchmark
/// rows), and which the training passes last ran on.
static RAN: AtomicU8 = AtomicU8::new(0);
static TRAIN_RAN: AtomicU8 = AtomicU8::new(0);

/// Records that the fused attention ran on `backend`, in training (`train`: a forward pass that
/// keeps what its backward pass needs) or inference.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn ran(backend: Backend, train: bool) {
    RAN.store(backend.code(), Ordering::Relaxed);
    if train {
        TRAIN_RAN.store(backend.code(), Ordering::Relaxed);
    }
}

/// The backend training's fused attention last ran on since the last call, if it ran (a
/// training run's evaluation, which runs inference's backend, does not count); resets.
pub fn fused_attention_ran_in_training() -> Option<&'static str> {
    Backend::named(TRAIN_RAN.swap(0, Ordering::Relaxed))
}

/// The backend the fused attention ran on (inference or training) since the last call, if it
/// ran (`fa2` or `cudnn`); resets.
pub fn fused_attention_ran() -> Option<&'static str> {
    Backend::named(RAN.swap(0, Ordering::Relaxed))
}

/// Whether bf16 attention of GPU inference runs [`FlashAttention2`] (`LONGREAD_CUDA_ATTENTION`:
/// `fa2` by default, or `cudnn`, [`Backend`]) where the GPU can run it ([`flash2_runs_on`]).
pub fn flash2_enabled() -> bool {
    matches!(super::inference_attention(), "fa2" | "cudnn")
}

/// Whether bf16 attention of GPU training runs [`FlashAttentionTrain`]
/// (`LONGREAD_CUDA_TRAIN_ATTENTION`: `fa2` by default, or `cudnn`, [`Backend`]) where the GPU
/// can run it ([`flash2_runs_on`]). Elsewhere (f32, other head sizes, the CPU) training keeps
/// `AttentionTrain`.
pub fn train_attention_fa2() -> bool {
    matches!(super::train_attention(), "fa2" | "cudnn")
}

/// Whether FlashAttention-2's kernels run on `device`, with their backward pass if `backward`:
/// the binary holds them as machine code for one compute capability
/// ([`longread_flash_attn::built_compute_cap`]: the same major version, an equal or higher
/// minor one), and the backward block shapes need 144 KB of shared memory per block (A100,
/// H100, H200; not consumer cards). Asked once per GPU. Not a GPU: true (the ops' CPU loops).
/// Where false, the attention falls back to longread's kernels (a warning where
/// `LONGREAD_CUDA_ATTENTION` or `LONGREAD_CUDA_TRAIN_ATTENTION` names `fa2`).
pub fn flash2_runs_on(device: &candle_core::Device, backward: bool) -> bool {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(cuda) = device {
        let gpu = support::of(cuda);
        return if backward { gpu.backward } else { gpu.forward };
    }
    let _ = (device, backward);
    true
}

/// The compute capability of a GPU, asked once (`None` where the driver does not say).
#[cfg(feature = "cuda")]
pub(crate) fn capability_of(device: &candle_core::CudaDevice) -> Option<(i32, i32)> {
    support::of(device).capability
}

/// The multiprocessors of a GPU, asked once (132 where the driver does not say).
#[cfg(feature = "cuda")]
pub(crate) fn multiprocessors_of(device: &candle_core::CudaDevice) -> usize {
    support::of(device).multiprocessors
}

/// `(forward, backward)` for a GPU of compute capability `capability` and `shared` bytes of
/// opt-in shared memory per block, with kernels built for `built`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn judge(capability: Option<(i32, i32)>, shared: Option<i32>, built: (u32, u32)) -> (bool, bool) {
    let forward = capability.is_some_and(|(major, minor)| {
        u32::try_from(major) == Ok(built.0) && u32::try_from(minor).is_ok_and(|m| m >= built.1)
    });
    let backward = forward && shared.and_then(|s| usize::try_from(s).ok()).is_some_and(|s| s >= BACKWARD_SHARED_MEMORY);
    (forward, backward)
}

/// Shared memory per block (bytes) FlashAttention-2's backward block shapes need
/// (FlashAttention's `run_mha_bwd_hdim32/64` choice; `-2` from the backward entry point below it).
const BACKWARD_SHARED_MEMORY: usize = 144 * 1024;

/// FlashAttention-2's deterministic backward on a GPU of `sms` multiprocessors for `blocks`
/// (sequences × heads) of `seq` keys: how many blocks split each sequence and head's key blocks
/// (of 128), each with a dq accumulator of its own — enough to give every multiprocessor a block
/// (FlashAttention's choice), at most one per key block.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn dq_splits_for(sms: usize, blocks: usize, seq: usize) -> usize {
    sms.div_ceil(blocks.max(1)).clamp(1, seq.div_ceil(128).max(1))
}

#[cfg(feature = "cuda")]
mod support {
    use std::sync::Mutex;

    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute;

    /// What the attention kernels need to know of a GPU.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Gpu {
        /// It runs FlashAttention-2's forward kernels ([`super::judge`]).
        pub forward: bool,
        /// And its backward ones.
        pub backward: bool,
        /// Its multiprocessors (132 if the driver does not say): [`super::dq_splits_for`].
        pub multiprocessors: usize,
        /// Its compute capability, if the driver says.
        pub capability: Option<(i32, i32)>,
    }

    /// [`Gpu`] per GPU ordinal, asked once.
    static KNOWN: Mutex<Vec<(usize, Gpu)>> = Mutex::new(Vec::new());

    /// What `device` is to the attention kernels.
    pub(super) fn of(device: &candle_core::CudaDevice) -> Gpu {
        let stream = device.cuda_stream();
        let context = stream.context();
        let ordinal = context.ordinal();
        let mut known = KNOWN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(&(_, gpu)) = known.iter().find(|(o, _)| *o == ordinal) {
            return gpu;
        }
        let capability = context.compute_capability().ok();
        let shared = context.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).ok();
        let support = super::judge(capability, shared, longread_flash_attn::built_compute_cap());
        if !support.0 || !support.1 {
            let built = longread_flash_attn::built_compute_cap();
            let note = format!(
                "FlashAttention-2 (built for compute capability {}.{}) on GPU {ordinal} (capability {capability:?}, \
                 {shared:?} bytes of shared memory per block): forward {}, backward {}; longread's attention kernels \
                 run instead",
                built.0, built.1, support.0, support.1
            );
            let asked = ["LONGREAD_CUDA_ATTENTION", "LONGREAD_CUDA_TRAIN_ATTENTION"]
                .iter()
                .any(|var| std::env::var(var).is_ok_and(|v| v == "fa2"));
            if asked {
                tracing::warn!("{note}");
            } else {
                tracing::debug!("{note}");
            }
        }
        let multiprocessors = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or(132);
        let gpu = Gpu { forward: support.0, backward: support.1, multiprocessors, capability };
        known.push((ordinal, gpu));
        gpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use candle_core::{Device, D};

    /// A training batch of 20 chunks × 12 heads fills an H100's 132 multiprocessors: one block
    /// walks all 4 key blocks; smaller batches split the key blocks, never beyond their count.
    #[test]
    fn deterministic_backward_splits_fill_the_gpu_up_to_the_key_blocks() {
        assert_eq!(dq_splits_for(132, 20 * 12, 512), 1);
        assert_eq!(dq_splits_for(132, 3 * 12, 512), 4);
        assert_eq!(dq_splits_for(132, 3 * 4, 200), 2, "200 keys are 2 blocks of 128");
        assert_eq!(dq_splits_for(132, 1, 64), 1);
        assert_eq!(dq_splits_for(132, 0, 512), 4, "no blocks: still a valid count");
        assert_eq!(dq_splits_for(108, 48, 512), 3, "an A100: 108 multiprocessors");
    }

    /// Bucketed, a batch runs as powers of two, largest first, covering every sequence once;
    /// by default whole.
    #[test]
    fn cudnn_sub_batches_are_powers_of_two_covering_the_batch() {
        let whole = |n: usize| std::iter::once(0..n).collect::<Vec<_>>();
        assert_eq!(batch_parts(500, false), whole(500));
        assert_eq!(batch_parts(500, true), vec![0..256, 256..384, 384..448, 448..480, 480..496, 496..500]);
        assert_eq!(batch_parts(20, true), vec![0..16, 16..20]);
        assert_eq!(batch_parts(64, true), whole(64));
        assert_eq!(batch_parts(1, true), whole(1));
        assert_eq!(batch_parts(0, true), whole(0));
        // Every size from 1 to 600 meets at most 10 part sizes in all.
        let sizes: std::collections::BTreeSet<usize> =
            (1..=600).flat_map(|b| batch_parts(b, true)).map(|p| p.len()).collect();
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
    }

    #[test]
    fn flash_attention_runs_only_where_its_machine_code_and_shared_memory_fit() {
        let h100 = (Some((9, 0)), Some(227 * 1024));
        assert_eq!(judge(h100.0, h100.1, (9, 0)), (true, true));
        assert_eq!(judge(h100.0, h100.1, (8, 0)), (false, false), "sm_80 code does not run on sm_90");
        assert_eq!(judge(Some((8, 6)), Some(99 * 1024), (8, 0)), (true, false), "a consumer Ampere card");
        assert_eq!(judge(Some((8, 0)), Some(163 * 1024), (8, 6)), (false, false), "a lower minor version");
        assert_eq!(judge(Some((10, 0)), Some(227 * 1024), (9, 0)), (false, false), "a newer major version");
        assert_eq!(judge(None, None, (9, 0)), (false, false), "an unanswered query");
    }

    /// candle's composition of masked attention over the same fused product: the heads split,
    /// `softmax(q·kᵀ · scale + key bias) · v`, the heads merged.
    pub(super) fn composed(qkv: &Tensor, mask: &Tensor, heads: usize, scale: f32) -> Tensor {
        let (batch, seq) = mask.dims2().unwrap();
        let hidden = qkv.dim(1).unwrap() / 3;
        let split = |i: usize| {
            qkv.narrow(1, i * hidden, hidden)
                .unwrap()
                .reshape((batch, seq, heads, hidden / heads))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let bias =
            ((1.0 - mask.to_dtype(DType::F32).unwrap()).unwrap() * -1e9).unwrap().reshape((batch, 1, 1, seq)).unwrap();
        let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale as f64).unwrap().broadcast_add(&bias).unwrap();
        let probs = candle_nn::ops::softmax(&scores, D::Minus1).unwrap();
        probs.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((batch * seq, hidden)).unwrap()
    }

    pub(super) fn mask_of(rows: &[Vec<u32>]) -> Tensor {
        let seq = rows[0].len();
        Tensor::from_vec(rows.concat(), (rows.len(), seq), &Device::Cpu).unwrap()
    }

    /// Masks that are not real tokens then padding, or rows without a real token, give `None`
    /// (the caller masks keys by their bias instead); any nonzero value is a real token.
    #[test]
    fn only_right_padded_masks_give_lengths() {
        assert!(KeyLengths::right_padded(&mask_of(&[vec![0, 1, 1], vec![1, 1, 1]])).unwrap().is_none());
        assert!(KeyLengths::right_padded(&mask_of(&[vec![1, 0, 1]])).unwrap().is_none());
        assert!(KeyLengths::right_padded(&mask_of(&[vec![1, 1, 0], vec![0, 0, 0]])).unwrap().is_none());
        let lengths = KeyLengths::right_padded(&mask_of(&[vec![2, 1, 0], vec![1, 1, 1]])).unwrap().unwrap();
        assert_eq!(lengths.host().unwrap(), (vec![0, 3, 6], vec![2, 3]));
        assert_eq!(lengths.seq(), 3);
        assert!(!lengths.all_real);
        let full = KeyLengths::right_padded_on(&mask_of(&[vec![1, 1], vec![1, 1]]), &Device::Cpu).unwrap().unwrap();
        assert_eq!(full.host().unwrap(), (vec![0, 2, 4], vec![2, 2]));
        assert!(full.all_real, "every key real: cuDNN runs without its padding mask");
        assert_eq!(full.full.to_vec1::<u32>().unwrap(), vec![2, 2]);
    }
}
