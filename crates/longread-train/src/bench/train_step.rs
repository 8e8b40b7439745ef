//! `longread bench --workload train`: the hierarchical classifier's whole training step on
//! `docs × chunks × chunk_size` deterministic token ids, as ../shared/gpu/anchor_torch.py's
//! `train` times PyTorch's: forward with dropout through every chunk, pooling, head,
//! cross-entropy, backward into every parameter (embeddings included), clipping to norm 1,
//! AdamW. On a GPU also the peak memory of the timed steps.

use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use longread_model::hierarchical::predictor::{chunk_batches, gather_chunk_vectors};
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::{DropoutRng, Mode};
use longread_text::ChunkedDocument;

use crate::bench::{synthetic_documents, BenchResult};
use crate::clip::{clip_factor, grad_norm};
use crate::error::Result;
use crate::loss::TaskLoss;
use crate::optim::{AdamW, AdamWConfig, ParamGroup};
use crate::prefix::{encode_batch, Prefix};
use crate::recompute::{batch_gradients, BatchSettings, StepPlan};
use crate::schedule::{Decay, Schedule};
use crate::trainer::Stepper;

/// How the timed step runs.
#[derive(Debug, Clone, Copy)]
pub struct TrainStepSettings {
    /// Documents per step.
    pub docs: usize,
    /// Full chunks per document.
    pub chunks: usize,
    /// bf16 encoder products over f32 master weights (`train --precision bf16`), else f32.
    pub bf16: bool,
    /// Chunk-level recomputation (`train`'s default) instead of keeping the whole graph.
    pub recompute: bool,
    /// Most tokens per encoder batch; `None`: `train`'s default for the device and model
    /// ([`longread_model::device::train_batch_tokens`]).
    pub max_batch_tokens: Option<usize>,
    /// Timed steps after one untimed warm-up step.
    pub repeat: usize,
}

/// A timed training step and its memory.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainStepResult {
    /// The steps' timings (median, runs).
    #[serde(flatten)]
    pub timing: BenchResult,
    /// Documents per second at the median step.
    pub docs_per_s: f64,
    /// Peak GPU memory of the timed steps in bytes (`None` on the CPU).
    pub peak_gpu_bytes: Option<u64>,
    /// On a GPU, the peak `train`'s default budget assumes for this step
    /// ([`longread_model::device::TrainFootprint::peak_bytes`] of [`held_tokens`]): beside
    /// `peak_gpu_bytes`, how well that estimate holds on this card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_peak_gpu_bytes: Option<u64>,
    /// The last step's loss (finite, or the step is an error).
    pub loss: f32,
    /// How many of the step's documents were encoded once with their graph (they fit one
    /// batch, with recomputation on) and how many by chunk batches (recomputed, or with
    /// `--no-recompute` the whole graph kept): `recompute.rs`'s `StepPlan`.
    pub kept_documents: usize,
    /// See [`Self::kept_documents`].
    pub chunked_documents: usize,
    /// On a GPU, which of the training route's choices were switched off: `probs-registers` with
    /// `LONGREAD_CUDA_PROBS_KERNEL=rows`, `embedding-pieces` with
    /// `LONGREAD_CUDA_EMBEDDING_GRAD=unsplit`, `qkv-bias-epilogue` with
    /// `LONGREAD_CUDA_TRAIN_QKV_BIAS=separate`, `cast-accumulate` with
    /// `LONGREAD_CAST_ACCUMULATE=off`, `pool-cache` with `LONGREAD_CUDA_POOL=release`,
    /// `deterministic-backward` with `LONGREAD_CUDA_ATTENTION_BWD=fast`, `adamw-one-launch` with
    /// `LONGREAD_CUDA_ADAMW=per-tensor`, `cudnn-packed-grads` with `LONGREAD_CUDNN_GRADS=dense`
    /// (cuDNN's attention gradients in dense blocks, interleaved after), `joined-leaves` with
    /// `LONGREAD_JOINED_LEAVES=off` (the joined q/k/v and block-end weights back-propagated
    /// through in every group), `product-op` with `LONGREAD_CUDA_TRAIN_PRODUCT=candle` (candle's
    /// product of a transposed weight, whose gradient is copied back into the weight's layout),
    /// `gelu-bias-sum` with `LONGREAD_CUDA_GELU_BIAS_GRAD=apart` (the GELU's gradient written,
    /// then summed for its bias by a pass of its own), `norm-grad-shared-sums` with
    /// `LONGREAD_CUDA_NORM_GRAD_SUMS=registers` (the block end's backward kernel keeping its
    /// running sums in registers); empty: the default route, all on. Absent on the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_separate: Option<Vec<&'static str>>,
    /// On a GPU, the training attention's kernels that ran: `fa2` (FlashAttention-2, the
    /// default in bf16 with heads of 32 or 64), `cudnn` (`LONGREAD_CUDA_TRAIN_ATTENTION=cudnn`),
    /// else `longread`. Absent on the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_attention: Option<&'static str>,
    /// Most tokens per encoder batch (given, or `train`'s default for the device and model).
    pub max_batch_tokens: usize,
    /// On a GPU, the host's share of the median step: when `queued_s` is far below
    /// `gradients_s`, the GPU's own work set the pace; when close to it, either the GPU waited
    /// for the host to queue its work (launches, the graph's bookkeeping) or the GPU's launch
    /// queue was full and held the host back — the figure cannot tell which. Absent on the CPU
    /// (where each op runs as it is queued).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostShare>,
    /// On a GPU, the same forward and backward passes queued behind a hold of the GPU
    /// ([`HeadStart`]): the GPU's own time for them, beside [`HostShare::gradients_s`], which
    /// also holds any time the GPU spent waiting for the host. Absent on the CPU, or with
    /// `LONGREAD_BENCH_HEAD_START=off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_start: Option<HeadStart>,
    /// With LONGREAD_PROFILE=1, one more step timed in parts (each waited for on its own):
    /// seconds of the chunks' training-mode forward alone (graph built, no backward), of
    /// `batch_gradients` (forward, loss, backward; recomputation as set), of the gradient
    /// norm, and of the AdamW update; then the named steps of that forward and a table of
    /// every kind of op of one more `batch_gradients` (each op waited for on its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<StepProfile>,
}

/// The parts of one training step (see [`TrainStepResult::profile`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepProfile {
    /// Encoding every chunk in training mode, building the graph, without the backward pass.
    pub forward_s: f64,
    /// Loss and gradients of the whole batch (`batch_gradients`).
    pub gradients_s: f64,
    /// The global gradient norm (clipping).
    pub grad_norm_s: f64,
    /// The AdamW update of every parameter.
    pub optimizer_s: f64,
    /// The named steps of the training-mode forward above (`longread_model::profile::timed`:
    /// projections, attention, output blocks), longest first.
    pub forward_steps: Vec<StepTime>,
    /// One more `batch_gradients` with every op timed on its own (candle's `op_profile`):
    /// the forward ops that build the graph and each backward node, longest first.
    pub ops: Vec<OpRow>,
    /// On a GPU, one more `batch_gradients` at its own pace with a CUDA event after each op
    /// (candle's `op_profile::start_timeline`): each kind of op's GPU time, not inflated by
    /// waits, and where the GPU waited for the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<GpuTimeline>,
    /// The same queued behind a hold of the GPU ([`HeadStart`]): the ops' GPU times with the
    /// host out of the way (as long as the driver's launch queue holds the host's lead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline_head_start: Option<GpuTimeline>,
}

/// A forward and backward pass on the GPU's clock (see [`StepProfile::timeline`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuTimeline {
    /// GPU seconds from the start to the last op.
    pub gpu_s: f64,
    /// Of those, the seconds the GPU may have waited for the host (an upper bound).
    pub waited_s: f64,
    /// Host seconds from the start to the last op queued.
    pub host_s: f64,
    /// Rows by kind of op, most GPU time first.
    pub ops: Vec<SpanRow>,
}

/// One kind of op on a [`GpuTimeline`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpanRow {
    /// `forward` or `backward`.
    pub phase: &'static str,
    /// The op's kind.
    pub op: String,
    /// The dtype of its output (backward: of the node).
    pub dtype: &'static str,
    /// GPU seconds from the previous op's end to this one's, in all.
    pub gpu_s: f64,
    /// Of those, the seconds the GPU may have waited for the host (an upper bound).
    pub waited_s: f64,
    /// How many times.
    pub calls: usize,
}

impl GpuTimeline {
    fn of(t: candle_core::op_profile::Timeline) -> Self {
        let ops = t
            .rows
            .into_iter()
            .map(|r| SpanRow {
                phase: r.phase,
                op: r.op,
                dtype: r.dtype.as_str(),
                gpu_s: r.gpu_seconds,
                waited_s: r.waited_seconds,
                calls: r.calls,
            })
            .collect();
        Self { gpu_s: t.gpu_seconds, waited_s: t.waited_seconds, host_s: t.host_seconds, ops }
    }
}

/// Runs `passes` on a GPU timeline (after a hold of the GPU for `hold`, when given).
fn timed_on_the_gpu(
    device: &Device,
    hold: Option<Duration>,
    passes: impl FnOnce() -> Result<()>,
) -> Result<GpuTimeline> {
    use candle_core::op_profile;
    behind_a_hold(device, hold)?;
    op_profile::start_timeline(device, hold.unwrap_or_default())?;
    let ran = passes();
    let timeline = op_profile::finish_timeline();
    ran?;
    Ok(GpuTimeline::of(timeline?))
}

/// A named step's total time (see [`StepProfile::forward_steps`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepTime {
    /// The step's name.
    pub step: &'static str,
    /// Seconds in all.
    pub seconds: f64,
    /// How many times it ran.
    pub calls: usize,
}

/// One kind of op in one phase (see [`StepProfile::ops`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpRow {
    /// `forward` or `backward`.
    pub phase: &'static str,
    /// The op's kind (`matmul`, `add`, `to_dtype from f32`, `custom attention-probs`, ...).
    pub op: String,
    /// The dtype of its output (backward: of the node whose gradient it computed).
    pub dtype: &'static str,
    /// Seconds in all.
    pub seconds: f64,
    /// How many times.
    pub calls: usize,
    /// Elements of the outputs (nodes), summed.
    pub elements: usize,
}

/// Loads `model_dir` (a classifier directory) trainable on `device` and times its step.
pub fn run_train_step(
    model_dir: &std::path::Path,
    settings: TrainStepSettings,
    device: &Device,
) -> Result<TrainStepResult> {
    let mut model = HierarchicalClassifier::load(model_dir, true, device)?;
    model.set_precision(if settings.bf16 { DType::BF16 } else { DType::F32 })?;
    let footprint = model.train_footprint(settings.bf16);
    let max_batch_tokens =
        settings.max_batch_tokens.unwrap_or_else(|| longread_model::device::train_batch_tokens(device, footprint));
    let _ = longread_model::layers::cuda::fused_attention_ran();
    let (chunk_size, vocab) = (model.config().longread.chunking().chunk_size, model.config().encoder.vocab_size);
    let documents = synthetic_documents(settings.docs, settings.chunks, chunk_size, vocab);
    let docs: Vec<&ChunkedDocument> = documents.iter().collect();
    let classes = model.labels().len().max(1);
    let labels = vec![(0..settings.docs).map(|d| Some(d % classes)).collect::<Vec<_>>()];
    let named = model.named_vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let parameters = vars.iter().map(|v| v.elem_count()).sum();
    let group = ParamGroup { name: "all".into(), lr: 2e-5, weight_decay: 0.01, params: named };
    let mut optimizer = AdamW::new(vec![group], AdamWConfig::default())?;
    let rng = DropoutRng::new(1);
    let batch = BatchSettings {
        max_batch_tokens,
        recompute: settings.recompute,
        loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
        prefix: Prefix::None,
    };
    // The trainer's own stepping (clipping to norm 1, the NaN/inf guard), at a constant rate.
    let schedule = Schedule { warmup_steps: 0, total_steps: settings.repeat + 1, decay: Decay::Constant };
    let mut stepper = Stepper::from_schedule(schedule, 1.0, 1);
    let mut steps_done = 0;
    let mut step = || -> Result<(f64, f32, HostShare)> {
        let started = Instant::now();
        let _ = longread_model::profile::take_first_wait();
        let out = batch_gradients(&model, &docs, &labels, &vars, &rng, batch, device)?;
        let share = HostShare {
            queued_s: longread_model::profile::take_first_wait().map(|t| (t - started).as_secs_f64()),
            gradients_s: started.elapsed().as_secs_f64(),
        };
        // One non-finite step is an error (a limit of 1 skipped step in a row).
        stepper.step(&mut optimizer, &out.grads, out.loss as f64, 1, steps_done, |g| g.lr)?;
        device.synchronize()?;
        steps_done += 1;
        Ok((started.elapsed().as_secs_f64(), out.loss, share))
    };
    let (warmup, _, _) = step()?;
    longread_model::device::reset_peak_memory(device);
    let mut runs = Vec::with_capacity(settings.repeat.max(1));
    let mut shares = Vec::with_capacity(settings.repeat.max(1));
    let mut loss = 0.0;
    // With LONGREAD_HOST_PROFILE=FILE, the host's CPU time by function over the timed steps.
    let host_profile = crate::bench::HostProfile::start();
    for _ in 0..settings.repeat.max(1) {
        let (seconds, l, share) = step()?;
        runs.push(seconds);
        shares.push(share);
        loss = l;
    }
    if let Some(profile) = host_profile {
        profile.finish()?;
    }
    let host = device.is_cuda().then(|| HostShare::median(&shares)).flatten();
    let peak_gpu_bytes = longread_model::device::peak_memory_bytes(device);
    let head_start = match (host, head_start_wanted()) {
        (Some(host), true) => {
            let hold = hold_for(host.gradients_s);
            let runs = (0..settings.repeat.max(1))
                .map(|_| {
                    head_start_run(hold, device, || {
                        batch_gradients(&model, &docs, &labels, &vars, &rng, batch, device).map(drop)
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            HeadStart::median(runs)
        }
        _ => None,
    };
    let profile = if longread_model::profile::enabled() {
        let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
            device.synchronize()?;
            let started = Instant::now();
            f()?;
            device.synchronize()?;
            Ok(started.elapsed().as_secs_f64())
        };
        longread_model::profile::reset();
        let forward_s = timed(&mut || {
            let (refs, batches) = chunk_batches(&docs, max_batch_tokens);
            let vectors = gather_chunk_vectors(&docs, &refs, &batches, |batch| {
                encode_batch(&model, &docs, &refs, batch, Prefix::None, Mode::Train(&rng))
            })?;
            drop(vectors);
            Ok(())
        })?;
        let forward_steps = longread_model::profile::report()
            .into_iter()
            .map(|(step, seconds, calls)| StepTime { step, seconds, calls })
            .collect();
        let mut out = None;
        let gradients_s = timed(&mut || {
            out = Some(batch_gradients(&model, &docs, &labels, &vars, &rng, batch, device)?);
            Ok(())
        })?;
        let out = out.expect("set by the timed closure");
        let mut norm = 0.0;
        let grad_norm_s = timed(&mut || {
            norm = grad_norm(out.grads.values())?;
            Ok(())
        })?;
        let optimizer_s = timed(&mut || {
            let factor = clip_factor(norm, 1.0) as f32;
            optimizer.step_scaled(factor, |v| out.grads.get(&v.as_tensor().id()).cloned())
        })?;
        candle_core::op_profile::start(device)?;
        let profiled = batch_gradients(&model, &docs, &labels, &vars, &rng, batch, device);
        let ops = candle_core::op_profile::finish()
            .into_iter()
            .map(|row| OpRow {
                phase: row.phase,
                op: row.op,
                dtype: row.dtype.as_str(),
                seconds: row.seconds,
                calls: row.calls,
                elements: row.elements,
            })
            .collect();
        drop(profiled?);
        let (timeline, timeline_head_start) = if device.is_cuda() {
            let passes = || batch_gradients(&model, &docs, &labels, &vars, &rng, batch, device).map(drop);
            let hold = hold_for(gradients_s);
            (Some(timed_on_the_gpu(device, None, passes)?), Some(timed_on_the_gpu(device, Some(hold), passes)?))
        } else {
            (None, None)
        };
        Some(StepProfile {
            forward_s,
            gradients_s,
            grad_norm_s,
            optimizer_s,
            forward_steps,
            ops,
            timeline,
            timeline_head_start,
        })
    } else {
        None
    };
    let timing = BenchResult::of_runs(runs, parameters, None, warmup);
    let docs_per_s = settings.docs as f64 / timing.seconds;
    let gpu_separate = device.is_cuda().then(|| {
        use longread_model::layers::cuda as ops;
        [
            ("probs-registers", ops::train_probs_in_registers()),
            ("embedding-pieces", ops::embedding_grad_in_pieces()),
            ("qkv-bias-epilogue", ops::train_qkv_bias_in_product()),
            ("cast-accumulate", ops::cast_accumulate_in_place()),
            ("pool-cache", longread_model::device::gpu_pool_caches()),
            ("deterministic-backward", ops::attention_backward_deterministic()),
            ("adamw-one-launch", ops::adamw_multi_kernel()),
            ("cudnn-packed-grads", ops::cudnn_packed_gradients()),
            ("joined-leaves", longread_model::layers::weight_casts::joined_leaves_wanted()),
            ("product-op", ops::train_product_op()),
            ("gelu-bias-sum", ops::gelu_bias_grad_fused()),
            ("norm-grad-shared-sums", ops::norm_grad_sums_shared()),
        ]
        .into_iter()
        .filter_map(|(name, fused)| (!fused).then_some(name))
        .collect()
    });
    // What ran, not what was asked for: FlashAttention-2 (or cuDNN) applies to bf16 on GPUs that run it.
    let gpu_attention =
        device.is_cuda().then(|| longread_model::layers::cuda::fused_attention_ran().unwrap_or("longread"));
    let plan = StepPlan::new(&docs, max_batch_tokens, settings.recompute);
    let held = held_tokens(&docs, &plan, max_batch_tokens, settings.recompute);
    let estimated_peak_gpu_bytes = device.is_cuda().then(|| footprint.peak_bytes(held));
    Ok(TrainStepResult {
        timing,
        docs_per_s,
        peak_gpu_bytes,
        estimated_peak_gpu_bytes,
        loss,
        kept_documents: plan.kept.iter().map(Vec::len).sum(),
        chunked_documents: plan.chunked.len(),
        gpu_separate,
        gpu_attention,
        max_batch_tokens,
        host,
        head_start,
        profile,
    })
}

/// The GPU's own time for a training step's forward and backward passes, apart from the host's
/// (`layers::cuda::gpu_clock`): the GPU is held busy while the host queues the passes behind
/// the hold, then runs them with all of their work queued. When `gpu_s` is well below the
/// step's [`HostShare::gradients_s`], the GPU waited for the host in the ordinary step (many
/// small kernels, each queued slower than it runs); when close to it, the GPU's own work set
/// the pace.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HeadStart {
    /// Seconds of GPU time from the hold's end to the passes' end (the loss read back
    /// included: one small copy).
    pub gpu_s: f64,
    /// Seconds the host took to queue the passes while the GPU was held (from the start until
    /// it first waited for a result): its own pace, with no GPU to wait for — unless the
    /// driver's queue of launches filled, which holds the host back as the GPU drains it.
    pub host_s: Option<f64>,
    /// Seconds the GPU was held before the passes.
    pub hold_s: f64,
}

impl HeadStart {
    /// The run with the median `gpu_s` (`None` without runs).
    fn median(mut runs: Vec<HeadStart>) -> Option<HeadStart> {
        runs.sort_by(|a, b| a.gpu_s.total_cmp(&b.gpu_s));
        runs.get(runs.len() / 2).copied()
    }
}

/// Whether a GPU training bench also times the step with a head start (unless
/// `LONGREAD_BENCH_HEAD_START=off`).
fn head_start_wanted() -> bool {
    std::env::var("LONGREAD_BENCH_HEAD_START").map_or(true, |v| v != "off")
}

/// A hold of the GPU longer than the host takes to queue passes that took `passes_s` in an
/// ordinary step (1.5 times that, plus 20 ms), so that the GPU never waits for them.
fn hold_for(passes_s: f64) -> Duration {
    Duration::from_secs_f64(1.5 * passes_s + 0.02)
}

/// Waits for the GPU, then (with `hold`) queues a hold of it: what the host queues next runs
/// after the hold, with the host ahead.
fn behind_a_hold(device: &Device, hold: Option<Duration>) -> Result<()> {
    device.synchronize()?;
    if let Some(hold) = hold {
        longread_model::layers::cuda::hold_gpu(device, hold)?;
    }
    Ok(())
}

/// Runs `passes` queued behind a hold of the GPU for `hold` and times them on the GPU's clock.
fn head_start_run(hold: Duration, device: &Device, passes: impl FnOnce() -> Result<()>) -> Result<HeadStart> {
    use longread_model::layers::cuda::GpuMark;
    behind_a_hold(device, Some(hold))?;
    let start = GpuMark::now(device)?;
    let _ = longread_model::profile::take_first_wait();
    let started = Instant::now();
    passes()?;
    let host_s = longread_model::profile::take_first_wait().map(|t| (t - started).as_secs_f64());
    let end = GpuMark::now(device)?;
    Ok(HeadStart { gpu_s: start.seconds_until(&end)?, host_s, hold_s: hold.as_secs_f64() })
}

/// How long the host took to queue a step's forward and backward passes, beside how long the
/// GPU took to finish them (see [`TrainStepResult::host`]).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HostShare {
    /// Seconds from the step's start until the host had queued every group's forward and
    /// backward pass and first waited for a result (the loss read back).
    pub queued_s: Option<f64>,
    /// Seconds from the step's start until that result came: the forward and backward passes
    /// done on the device.
    pub gradients_s: f64,
}

impl HostShare {
    /// The run with the median `gradients_s` (`None` without runs, or where no wait was noted).
    fn median(shares: &[HostShare]) -> Option<HostShare> {
        let mut sorted: Vec<HostShare> = shares.to_vec();
        sorted.sort_by(|a, b| a.gradients_s.total_cmp(&b.gradients_s));
        sorted.get(sorted.len() / 2).copied().filter(|s| s.queued_s.is_some())
    }
}

/// The most batch tokens (padded: chunks × longest chunk) whose graph a step over `docs` holds
/// at once: without recomputation every document's; with it the largest kept group, or a
/// recomputed document's chunk batch (at most `max_batch_tokens`).
pub fn held_tokens(docs: &[&ChunkedDocument], plan: &StepPlan, max_batch_tokens: usize, recompute: bool) -> usize {
    let padded = |members: &mut dyn Iterator<Item = &ChunkedDocument>| {
        let (chunks, longest) = members
            .fold((0, 0), |(n, l), d| (n + d.chunks.len(), d.chunks.iter().map(|c| c.ids.len()).fold(l, usize::max)));
        chunks * longest
    };
    if !recompute {
        return docs.iter().map(|d| padded(&mut std::iter::once(*d))).sum();
    }
    let kept = plan.kept.iter().map(|group| padded(&mut group.iter().map(|&i| docs[i]))).max().unwrap_or(0);
    let chunked =
        plan.chunked.iter().map(|&i| padded(&mut std::iter::once(docs[i])).min(max_batch_tokens)).max().unwrap_or(0);
    kept.max(chunked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kept groups hold their padded tokens, recomputed documents one batch, the whole graph
    /// every document's.
    #[test]
    fn held_tokens_follow_the_plan() {
        let documents = synthetic_documents(4, 20, 512, 100);
        let docs: Vec<&ChunkedDocument> = documents.iter().collect();
        let held = |budget: usize, recompute: bool| {
            held_tokens(&docs, &StepPlan::new(&docs, budget, recompute), budget, recompute)
        };
        assert_eq!(held(10_240, true), 10_240, "each document is one kept group");
        assert_eq!(held(20_480, true), 20_480, "two documents a group");
        assert_eq!(held(4_096, true), 4_096, "recomputed in batches of the budget");
        assert_eq!(held(65_536, false), 40_960, "the whole step");
        assert_eq!(held(65_536, true), 40_960, "all four in one kept group");
    }
}
