//! Where tensors live: the one place that turns a device choice (`--device auto|cpu|cuda[:N]`,
//! `LONGREAD_DEVICE`, Python's `device=`) into a candle [`Device`], and the defaults that follow
//! from it (precision, batch budget). Fronts pass the choice down; nothing else names a device.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

use crate::error::{ModelError, Result};

/// A device as the user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The first GPU when longread was built with `cuda` and one is visible, else the CPU.
    #[default]
    Auto,
    /// The CPU (all cores, or `--threads`).
    Cpu,
    /// NVIDIA GPU number N (`cuda` = `cuda:0`).
    Cuda(usize),
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("device {s:?}: expected auto, cpu, cuda or cuda:N (N = 0, 1, ...)");
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n.parse().map(Self::Cuda).map_err(|_| bad()),
                None => Err(bad()),
            },
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl serde::Serialize for DeviceChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DeviceChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl DeviceChoice {
    /// The device to run on: the CPU, or GPU N (one shared handle per GPU, so that tensors made
    /// by different models in one process can meet). `cuda` without the `cuda` build feature,
    /// or without that GPU, is an error that says which.
    pub fn resolve(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Auto if cuda_device_count() > 0 => cuda::device(0),
            Self::Auto => Ok(Device::Cpu),
            Self::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(ModelError::Device(format!(
                        "device cuda:{n} asked for, but this longread was built without the `cuda` feature \
                         (build it with scripts/build_cuda.sh, or use the CPU: --device cpu, device=\"cpu\")"
                    )));
                }
                let count = cuda_device_count();
                if n >= count {
                    return Err(ModelError::Device(format!(
                        "device cuda:{n} asked for, but {} (use the CPU: --device cpu, device=\"cpu\")",
                        match count {
                            0 => "no CUDA GPU is visible (driver, CUDA_VISIBLE_DEVICES)".to_string(),
                            1 => "only cuda:0 is visible".to_string(),
                            c => format!("only cuda:0 to cuda:{} are visible", c - 1),
                        }
                    )));
                }
                cuda::device(n)
            }
        }
    }

    /// The device named, with `auto` meaning the [`host`]: for work that runs on the CPU unless
    /// a GPU is asked for by name (`bench --workload han-step`, which times the HAN on a GPU
    /// only to decide whether its training should move there).
    pub fn resolve_named(self) -> Result<Device> {
        match self {
            Self::Auto => Ok(host()),
            named => named.resolve(),
        }
    }
}

/// The host: where the parts that never run on a GPU live — the HAN and the bag of words (their
/// recurrent and sparse work is CPU work), files read or written (checkpoints, optimizer state,
/// word vectors) and models built only to be saved (`init`, presets). The one other place besides
/// [`DeviceChoice::resolve`] that names a device.
pub fn host() -> Device {
    Device::Cpu
}

/// How many CUDA GPUs this build can use (0 without the `cuda` feature or without a driver).
pub fn cuda_device_count() -> usize {
    cuda::device_count()
}

/// A device as people read it: `cpu`, or `cuda:0 (NVIDIA H200)`.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => cuda::describe(device),
        other => format!("{:?}", other.location()),
    }
}

/// The most GPU memory in use at once since the last [`reset_peak_memory`] (or since the
/// GPU was opened), in bytes: the high-water mark of the device's memory pool, which every
/// tensor comes from (as `torch.cuda.max_memory_allocated`, without the CUDA context). `None`
/// on the CPU, or where the driver does not say.
pub fn peak_memory_bytes(device: &Device) -> Option<u64> {
    match device {
        Device::Cuda(_) => cuda::peak_memory_bytes(device),
        _ => None,
    }
}

/// GPU memory the process holds from the driver, in bytes: tensors in use and what the pool
/// keeps for reuse (as `torch.cuda.memory_reserved`). `None` on the CPU.
pub fn reserved_memory_bytes(device: &Device) -> Option<u64> {
    match device {
        Device::Cuda(_) => cuda::reserved_memory_bytes(device),
        _ => None,
    }
}

/// Whether a GPU's memory pool keeps what tensors free across synchronisations, as PyTorch's
/// caching allocator does (the default), or, with `LONGREAD_CUDA_POOL=release`, gives it back
/// to the driver at each one (the driver's default; kept to compare the two on a GPU).
pub fn gpu_pool_caches() -> bool {
    std::env::var("LONGREAD_CUDA_POOL").map_or(true, |v| v != "release")
}

/// Starts a new [`peak_memory_bytes`] measurement (the peak is set to what is in use now).
pub fn reset_peak_memory(device: &Device) {
    if device.is_cuda() {
        cuda::reset_peak_memory(device);
    }
}

/// Tokens (chunks × padded length) per encoder batch when the user does not say: 2,048 on the
/// CPU (its caches); on a GPU as many as a quarter of its memory holds in f32 inference, from
/// 65,536 (128 chunks of 512) to 256,000 (500 chunks; [`gpu_batch_tokens`]).
pub fn default_batch_tokens(device: &Device) -> usize {
    match device {
        Device::Cpu => 2048,
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => gpu_batch_tokens(cuda::total_memory_bytes(device)),
        _ => gpu_batch_tokens(None),
    }
}

/// Inference's peak GPU memory per batch token, in the costlier precision: f32, whose attention
/// keeps the scores (13.6 GiB for 256,000 tokens of roberta-base on an H200; bf16 with
/// FlashAttention-2 took 5.0 GiB, BENCHMARKS.md "GPU").
const GPU_BYTES_PER_TOKEN: u64 = 58 * 1024;

/// The GPU batch budget for a card of `total` bytes: what a quarter of it holds at
/// [`GPU_BYTES_PER_TOKEN`], in whole chunks of 512, between 65,536 tokens (the budget of every
/// card before; an 8 GB card stays there) and 256,000 (bf16 predict on an H200: 160 documents/s
/// against 139 at 65,536). `None` (the driver did not say): 65,536.
pub fn gpu_batch_tokens(total: Option<u64>) -> usize {
    let Some(total) = total else { return 65_536 };
    let tokens = usize::try_from(total / 4 / GPU_BYTES_PER_TOKEN).unwrap_or(usize::MAX);
    (tokens / 512 * 512).clamp(65_536, 256_000)
}

/// What training's memory depends on: the model's parameters (f32 weights, gradients and two
/// AdamW moments each), its layers and hidden size (the activations one token keeps per layer)
/// and whether activations are bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainFootprint {
    /// Parameters of the model (trainable or not: an upper bound).
    pub parameters: u64,
    /// Transformer layers of the encoder.
    pub layers: u64,
    /// Hidden size of the encoder.
    pub hidden: u64,
    /// bf16 activations (`--precision bf16`); else f32.
    pub bf16: bool,
}

impl TrainFootprint {
    /// The peak memory this estimates for a step that holds the graph of `tokens` batch tokens
    /// at once (what [`gpu_train_batch_tokens`] keeps within half the card).
    pub fn peak_bytes(&self, tokens: usize) -> u64 {
        self.state_bytes().saturating_add((tokens as u64).saturating_mul(self.token_bytes()))
    }

    /// Bytes of weights, gradients and AdamW moments (f32 each).
    fn state_bytes(&self) -> u64 {
        self.parameters.saturating_mul(16)
    }

    /// Peak bytes one batch token adds: 32 bytes per layer and hidden unit in bf16, twice that
    /// in f32, fitted to the bf16 steps measured on an H200 on 2026-11-27 (BENCHMARKS.md "GPU"):
    /// with the state's 16 bytes a parameter it puts roberta-base at 2.99, 4.68 and 13.11 GiB for
    /// batches of 4,096, 10,240 and 40,960 tokens (measured 2.89, 4.41 and 11.71) and
    /// roberta-large at 12.79 GiB for 10,240 (measured 12.74): a bound within 12%. Those steps
    /// still held a second copy of the gradients at each part's end (0.47 GiB for roberta-base;
    /// gone since `backward_into`, commit 993a2be), so the bound is looser now, until remeasured.
    fn token_bytes(&self) -> u64 {
        let per_unit = if self.bf16 { 32 } else { 64 };
        self.layers.saturating_mul(self.hidden).saturating_mul(per_unit)
    }
}

/// Training's tokens per encoder batch when the user does not say: 512 on the CPU (one chunk:
/// the least memory; BENCHMARKS.md "Training step"); on a GPU what half its memory holds
/// beside the model's state ([`gpu_train_batch_tokens`]).
pub fn train_batch_tokens(device: &Device, footprint: TrainFootprint) -> usize {
    match device {
        Device::Cpu => 512,
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => gpu_train_batch_tokens(cuda::total_memory_bytes(device), footprint),
        _ => gpu_train_batch_tokens(None, footprint),
    }
}

/// The training batch budget for a card of `total` bytes: the tokens whose activations fit in
/// half of it beside the model's weights, gradients and AdamW moments, in whole chunks of 512,
/// from 512 to 65,536 (the largest budget measured, BENCHMARKS.md "GPU"). One batch's graph is
/// held at a time, so this is the memory plateau: a roberta-base-shaped model in bf16 gets
/// 65,536 on an 80 GB card, 36,864 on a 24 GB one, 7,680 on an 8 GB one. `None` (the driver
/// did not say): 10,240, measured at 4.41 GiB on an H200 (2026-11-27).
pub fn gpu_train_batch_tokens(total: Option<u64>, footprint: TrainFootprint) -> usize {
    let Some(total) = total else { return 10_240 };
    let free = (total / 2).saturating_sub(footprint.state_bytes());
    let tokens = usize::try_from(free / footprint.token_bytes().max(1)).unwrap_or(usize::MAX);
    (tokens / 512 * 512).clamp(512, 65_536)
}

/// The server's batch budget when the user does not say: 8,192 tokens on the CPU (chunks of
/// concurrent requests share a batch), 65,536 on a GPU.
pub fn serving_batch_tokens(device: &Device) -> usize {
    if device.is_cpu() {
        8192
    } else {
        65_536
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use candle_core::cuda_backend::cudarc;
    use candle_core::Device;
    use cudarc::driver::{result, CudaContext};

    use crate::error::{ModelError, Result};

    /// GPUs opened so far: candle tells devices apart by handle, so each GPU is opened once.
    static DEVICES: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();

    pub(super) fn device_count() -> usize {
        // SAFETY: only tries to open the driver library (libcuda); no CUDA call is made.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return 0;
        }
        result::init().and_then(|_| result::device::get_count()).map_or(0, |n| n.max(0) as usize)
    }

    /// The CUDA libraries candle loads when it opens a GPU (it panics on a missing one).
    fn check_libraries() -> Result<()> {
        // SAFETY: each only tries to open a shared library; no function of it is called.
        let present = unsafe {
            [
                ("libcublas", cudarc::cublas::sys::is_culib_present()),
                ("libcurand", cudarc::curand::sys::is_culib_present()),
            ]
        };
        match present.iter().find(|(_, found)| !found) {
            Some((name, _)) => Err(ModelError::Device(format!(
                "{name} (CUDA 13) was not found: put the CUDA libraries' folder on LD_LIBRARY_PATH \
                 (README \"GPU\"), or use the CPU: --device cpu, device=\"cpu\""
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn device(n: usize) -> Result<Device> {
        let mut devices = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(device) = devices.get(&n) {
            return Ok(device.clone());
        }
        check_libraries()?;
        let device = Device::new_cuda(n).map_err(|e| ModelError::Device(format!("opening cuda:{n}: {e}")))?;
        allocate_as_a_cache(&device);
        // f32 matrix products on tensor cores (TF32), as PyTorch with allow_tf32: `--precision
        // f32` on a GPU trades the last mantissa bits for ~8× the speed.
        candle_core::cuda_backend::set_gemm_reduced_precision_f32(true);
        devices.insert(n, device.clone());
        Ok(device)
    }

    /// The device's default memory pool (candle allocates with `cuMemAllocAsync` from it).
    fn memory_pool(device: &Device) -> Option<cudarc::driver::sys::CUmemoryPool> {
        use cudarc::driver::sys;
        let ctx = device.as_cuda_device().ok()?.cuda_stream().context().clone();
        ctx.bind_to_thread().ok()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: writes one pool handle for a device of a live context.
        let status = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
        (status == sys::CUresult::CUDA_SUCCESS && !pool.is_null()).then_some(pool)
    }

    /// Makes the GPU's allocations behave as PyTorch's caching allocator does, unless
    /// `LONGREAD_CUDA_POOL=release`:
    /// - the memory pool keeps what tensors free, up to three quarters of the card (its
    ///   release threshold; the driver's default is 0: at each synchronisation — each read-back
    ///   of a loss, a gradient norm or a document's scores — the pool handed every freed byte
    ///   back and the next batch mapped its gigabytes afresh). Not all of the card: beyond three
    ///   quarters the pool still trims at synchronisations, so that memory a workload freed in
    ///   one shape of blocks can serve another's allocations on a nearly full card;
    /// - no CUDA events per tensor: cudarc creates (and later destroys) two with each
    ///   allocation, used only to order a tensor's uses across streams of a context that has
    ///   several; candle's device has one stream, whose order is enough.
    ///
    /// Both are set before longread allocates a tensor. Memory in use (what
    /// [`super::peak_memory_bytes`] reports) is unchanged; what the process holds stays at its
    /// peak, as with PyTorch.
    fn allocate_as_a_cache(device: &Device) {
        use cudarc::driver::sys;
        if !super::gpu_pool_caches() {
            return;
        }
        let Ok(cuda) = device.as_cuda_device() else { return };
        // SAFETY: one stream (candle's) carries every tensor's work, so no use needs ordering
        // across streams; slices made before this keep their events, unused either way.
        unsafe { cuda.disable_event_tracking() };
        let Some(pool) = memory_pool(device) else { return };
        let keep = total_memory_bytes(device).map_or(u64::MAX, |total| total / 4 * 3);
        let status = set_pool_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, keep);
        if status != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("the GPU memory pool keeps releasing memory at each synchronisation: {status:?}");
        }
    }

    /// A byte-count attribute of the device's memory pool (used or reserved, current or high).
    fn pool_attribute(device: &Device, attribute: cudarc::driver::sys::CUmemPool_attribute) -> Option<u64> {
        use cudarc::driver::sys;
        let pool = memory_pool(device)?;
        let mut value: u64 = 0;
        // SAFETY: the byte-count attributes are cuuint64_t, written into `value`.
        let status = unsafe { sys::cuMemPoolGetAttribute(pool, attribute, (&mut value as *mut u64).cast()) };
        (status == sys::CUresult::CUDA_SUCCESS).then_some(value)
    }

    /// Sets a cuuint64_t attribute of a memory pool (the release threshold, or a high-water mark
    /// back to 0).
    fn set_pool_attribute(
        pool: cudarc::driver::sys::CUmemoryPool,
        attribute: cudarc::driver::sys::CUmemPool_attribute,
        mut value: u64,
    ) -> cudarc::driver::sys::CUresult {
        // SAFETY: the attributes passed here are cuuint64_t, read from `value`.
        unsafe { cudarc::driver::sys::cuMemPoolSetAttribute(pool, attribute, (&mut value as *mut u64).cast()) }
    }

    /// Bytes the device's memory pool holds from the driver (in use or kept for reuse).
    pub(super) fn reserved_memory_bytes(device: &Device) -> Option<u64> {
        pool_attribute(device, cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The GPU's memory in bytes, as the driver reports it.
    pub(super) fn total_memory_bytes(device: &Device) -> Option<u64> {
        let ctx = device.as_cuda_device().ok()?.cuda_stream().context().clone();
        ctx.total_mem().ok().map(|bytes| bytes as u64)
    }

    pub(super) fn peak_memory_bytes(device: &Device) -> Option<u64> {
        pool_attribute(device, cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    pub(super) fn reset_peak_memory(device: &Device) {
        use cudarc::driver::sys;
        let Some(pool) = memory_pool(device) else { return };
        let _ = device.synchronize();
        // USED_MEM_HIGH may only be set to 0 (it then restarts from the current use).
        let _ = set_pool_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0);
    }

    pub(super) fn describe(device: &Device) -> String {
        let ordinal = match device.location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => gpu_id,
            _ => 0,
        };
        let name = CudaContext::new(ordinal).ok().and_then(|c| c.name().ok());
        match name {
            Some(name) => format!("cuda:{ordinal} ({name})"),
            None => format!("cuda:{ordinal}"),
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use candle_core::Device;

    use crate::error::{ModelError, Result};

    pub(super) fn device_count() -> usize {
        0
    }

    pub(super) fn device(n: usize) -> Result<Device> {
        Err(ModelError::Device(format!("cuda:{n}: built without the `cuda` feature")))
    }

    pub(super) fn describe(_: &Device) -> String {
        "cuda".into()
    }

    pub(super) fn peak_memory_bytes(_: &Device) -> Option<u64> {
        None
    }

    pub(super) fn reset_peak_memory(_: &Device) {}

    pub(super) fn reserved_memory_bytes(_: &Device) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_print_back() {
        for (text, choice) in [
            ("auto", DeviceChoice::Auto),
            ("cpu", DeviceChoice::Cpu),
            ("CUDA", DeviceChoice::Cuda(0)),
            ("cuda:3", DeviceChoice::Cuda(3)),
        ] {
            assert_eq!(text.parse::<DeviceChoice>().unwrap(), choice);
            assert_eq!(choice.to_string().parse::<DeviceChoice>().unwrap(), choice);
        }
        for bad in ["", "tpu", "cuda:", "cuda:-1", "cuda:x"] {
            let err = bad.parse::<DeviceChoice>().unwrap_err();
            assert!(err.contains("expected auto, cpu, cuda or cuda:N"), "{bad}: {err}");
        }
    }

    #[test]
    fn gpu_batch_budgets_grow_with_the_card_between_two_bounds() {
        let gib = |g: u64| Some(g << 30);
        assert_eq!(gpu_batch_tokens(None), 65_536, "an unknown card keeps the old budget");
        assert_eq!(gpu_batch_tokens(gib(8)), 65_536, "an 8 GB card keeps the old budget");
        assert_eq!(gpu_batch_tokens(gib(24)), 108_032, "24 GB: a quarter holds 108,032 tokens of f32");
        assert_eq!(gpu_batch_tokens(gib(80)), 256_000, "an H100: the measured best");
        assert_eq!(gpu_batch_tokens(gib(141)), 256_000, "an H200");
        for g in [8, 12, 16, 24, 40, 48, 80] {
            let tokens = gpu_batch_tokens(gib(g));
            assert!(tokens.is_multiple_of(512), "{g} GiB: whole chunks");
            assert!(tokens as u64 * GPU_BYTES_PER_TOKEN <= (g << 30) / 4 || tokens == 65_536, "{g} GiB: {tokens}");
        }
        assert_eq!(default_batch_tokens(&Device::Cpu), 2048);
    }

    /// Training's GPU budget: half the card beside the state, whole chunks, between 512 and
    /// 65,536; smaller for larger models and for f32; the CPU keeps 512.
    #[test]
    fn training_budgets_fit_half_the_card_beside_the_model() {
        let gib = |g: u64| Some(g << 30);
        let base = TrainFootprint { parameters: 125_000_000, layers: 12, hidden: 768, bf16: true };
        let large = TrainFootprint { parameters: 355_000_000, layers: 24, hidden: 1024, bf16: true };
        assert_eq!(gpu_train_batch_tokens(gib(80), base), 65_536, "an H100: the largest budget measured");
        assert_eq!(gpu_train_batch_tokens(gib(24), base), 36_864);
        assert_eq!(gpu_train_batch_tokens(gib(8), base), 7_680);
        assert_eq!(gpu_train_batch_tokens(gib(24), large), 8_704);
        assert_eq!(gpu_train_batch_tokens(gib(8), large), 512, "the state alone fills half the card");
        assert_eq!(gpu_train_batch_tokens(None, base), 10_240, "an unknown card: the measured budget");
        let f32 = TrainFootprint { bf16: false, ..base };
        assert!(gpu_train_batch_tokens(gib(24), f32) < gpu_train_batch_tokens(gib(24), base));
        for g in [8, 12, 16, 24, 40, 48, 80, 141] {
            for footprint in [base, large, f32] {
                let tokens = gpu_train_batch_tokens(gib(g), footprint);
                assert!(tokens.is_multiple_of(512) && (512..=65_536).contains(&tokens), "{g} GiB: {tokens}");
                let peak = footprint.peak_bytes(tokens);
                assert!(peak <= (g << 30) / 2 || tokens == 512, "{g} GiB, {footprint:?}: {tokens} tokens");
            }
        }
        assert_eq!(train_batch_tokens(&Device::Cpu, large), 512);
    }

    #[test]
    fn cpu_resolves_to_the_cpu_and_auto_to_what_is_there() {
        assert!(DeviceChoice::Cpu.resolve().unwrap().is_cpu());
        let auto = DeviceChoice::Auto.resolve().unwrap();
        assert_eq!(auto.is_cuda(), cuda_device_count() > 0);
    }

    /// Asking for a GPU that is not there is one error that says why, never a panic.
    #[test]
    fn a_missing_gpu_is_a_clear_error() {
        let n = cuda_device_count();
        let err = DeviceChoice::Cuda(n).resolve().unwrap_err().to_string();
        if cfg!(feature = "cuda") {
            assert!(err.contains("visible"), "{err}");
        } else {
            assert!(err.contains("without the `cuda` feature"), "{err}");
        }
    }
}
