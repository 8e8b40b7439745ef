//! `longread bench`: times one workload in this process (encoder forward, a training step,
//! an optimizer step, a HAN training step) and reports the median and the peak memory, for
//! `scripts/bench_compare.py` and `scripts/bench_han.py` to set next to PyTorch's time on the
//! same workload.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use longread_classifier::Classifier;
use longread_model::DeviceChoice;
use longread_model::Precision;
use longread_train::bench::{
    peak_rss_bytes, run_han_step, run_kernels, run_predict, run_train_step, run_workload, EncoderSource, GpuTimeline,
    KernelShape, StepProfile, TrainStepSettings, Workload, HAN_SENTENCE_WORDS,
};

use crate::commands::predict::EncodingArgs;

/// Arguments of `longread bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to time.
    #[arg(long, value_enum)]
    workload: WorkloadArg,
    /// Encoder shape with random weights (seed 0; vocabulary 50,265): roberta-base (the
    /// BERT-base shape: 12 layers, hidden 768, 12 heads, FFN 3072), roberta-large, small, tiny.
    #[arg(long, default_value = "roberta-base")]
    preset: String,
    /// A pretrained encoder directory instead of --preset (e.g. ../shared/models/all-MiniLM-L6-v2);
    /// for `predict`, the classifier's model directory (required).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Batch as BATCHxTOKENS (deterministic ids, no padding); for han-step DOCUMENTSxSENTENCES,
    /// each sentence of 32 words (the default sizes of `train --arch han`; --preset and --model
    /// are not used); for predict DOCUMENTSxCHUNKS, each chunk full (the model's chunk size),
    /// e.g. 64x20.
    #[arg(long, default_value = "4x512")]
    shape: String,
    /// The predict workload's batch budget and precision, as for `predict`.
    #[command(flatten)]
    encoding: EncodingArgs,
    /// For --workload train: keep every chunk's graph instead of re-encoding chunk batches in
    /// the backward pass (faster, memory grows with the step's chunks).
    #[arg(long)]
    no_recompute: bool,
    /// Timed runs after one warm-up run; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    /// Encoder forward pass in inference mode (no dropout, no graph).
    EncoderForward,
    /// Forward (training mode, dropout) + backward of mean(last hidden state) + AdamW step over
    /// every encoder parameter.
    TrainStep,
    /// One AdamW step over every encoder parameter with given gradients.
    OptimizerStep,
    /// One HAN training step (forward with dropout, cross-entropy, backward, clipping, Adam)
    /// with the default sizes and a 12,290-word vocabulary, on the CPU (as `train --arch han`
    /// runs), or on a GPU when --device names one (cuda, cuda:N; `auto` is the CPU here): the
    /// measurement that decides whether the HAN's training should move to GPUs.
    HanStep,
    /// A classifier (--model) over DOCUMENTSxCHUNKS synthetic documents on --device: chunk
    /// vectors, pooling and head, as `predict` runs them without tokenization (--precision and
    /// --max-batch-tokens apply to this workload alone). Reports
    /// documents/s; with LONGREAD_PROFILE=1 also the time of each step (each waited for on its
    /// own: slower overall, for the shares).
    Predict,
    /// A classifier's (--model) whole training step over DOCUMENTSxCHUNKS synthetic documents
    /// on --device, as `train` runs it: forward with dropout, pooling, head, cross-entropy,
    /// backward into every parameter (embeddings included), clipping to norm 1, AdamW.
    /// --precision f32 (default) or bf16 (bf16 products over f32 master weights),
    /// --max-batch-tokens as for `train`, --no-recompute. Reports documents/s and, on a GPU,
    /// the peak GPU memory of the timed steps.
    Train,
    /// The building blocks of one bf16 layer of --preset's shape in GPU inference (the four
    /// products, the f32-to-bf16 cast, the bias and bias + GELU passes, FlashAttention-2, the
    /// residual LayerNorm) and training's attention forward + backward with dropout 0.1
    /// (LONGREAD_CUDA_TRAIN_ATTENTION picks its backend), each timed alone on random data at
    /// --shape SEQUENCESxTOKENS (e.g.
    /// 128x512), with the TFLOP/s or GB/s it reaches; GPU only (--device cuda).
    /// scripts/gpu_bench_kernels_torch.py times PyTorch's counterparts.
    Kernels,
}

/// Runs `longread bench`.
pub fn run(args: BenchArgs, device: DeviceChoice) -> Result<()> {
    let (batch, tokens) = parse_shape(&args.shape)?;
    if args.workload == WorkloadArg::Predict {
        return run_predict_bench(&args, batch, tokens, device);
    }
    if args.workload == WorkloadArg::Train {
        return run_train_bench(&args, batch, tokens, device);
    }
    if args.workload == WorkloadArg::Kernels {
        return run_kernels_bench(&args, batch, tokens, device);
    }
    let (source, name) = match &args.model {
        Some(dir) => (EncoderSource::Dir(dir.clone()), dir.display().to_string()),
        None => (EncoderSource::Preset(args.preset.clone()), args.preset.clone()),
    };
    let encoder = |workload| {
        run_workload(&source, workload, batch, tokens, args.repeat).with_context(|| format!("benchmarking {name}"))
    };
    // The encoder workloads are the CPU comparisons with PyTorch (scripts/bench_compare.py); the
    // HAN step follows a named GPU.
    let run_on = match args.workload {
        WorkloadArg::HanStep => device.resolve_named()?,
        _ => longread_model::device::host(),
    };
    let (result, name) = match args.workload {
        WorkloadArg::EncoderForward => (encoder(Workload::EncoderForward)?, name),
        WorkloadArg::TrainStep => (encoder(Workload::TrainStep)?, name),
        WorkloadArg::OptimizerStep => (encoder(Workload::OptimizerStep)?, name),
        WorkloadArg::HanStep => (
            run_han_step(batch, tokens, args.repeat, &run_on).context("benchmarking the HAN step")?,
            format!("HAN ({HAN_SENTENCE_WORDS} words per sentence)"),
        ),
        WorkloadArg::Predict | WorkloadArg::Train | WorkloadArg::Kernels => unreachable!("handled above"),
    };
    let peak = peak_rss_bytes();
    let what = args.workload.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
    if args.json {
        let mut line = serde_json::to_value(&result)?;
        line["workload"] = what.into();
        line["encoder"] = name.into();
        line["batch"] = batch.into();
        line["tokens"] = tokens.into();
        line["device"] = longread_model::device::describe(&run_on).into();
        line["peak_rss_bytes"] = peak.into();
        println!("{line}");
    } else {
        println!(
            "{what} {name} {batch}x{tokens} on {}, {} threads: {:.3} s (median of {}), peak RSS {}",
            longread_model::device::describe(&run_on),
            result.threads,
            result.seconds,
            result.runs.len(),
            peak.map_or("unknown".into(), |b| format!("{:.0} MiB", b as f64 / (1 << 20) as f64))
        );
    }
    Ok(())
}

/// `bench --workload kernels`: one layer's GPU blocks, one JSON object each or a table.
fn run_kernels_bench(args: &BenchArgs, sequences: usize, seq: usize, device: DeviceChoice) -> Result<()> {
    let shape = KernelShape::of_preset(&args.preset, sequences, seq)?;
    let device = device.resolve_named()?;
    let rows = run_kernels(&device, shape, args.repeat).context("benchmarking the GPU kernels")?;
    let name = longread_model::device::describe(&device);
    for row in &rows {
        if args.json {
            let mut line = serde_json::to_value(row)?;
            line["side"] = "longread".into();
            line["device"] = name.clone().into();
            line["preset"] = args.preset.clone().into();
            println!("{line}");
        } else {
            let rate = match (row.tflops, row.gbps) {
                (Some(t), _) => format!("{t:.0} TFLOP/s"),
                (None, Some(g)) => format!("{g:.0} GB/s"),
                (None, None) => String::new(),
            };
            println!("{:<44} {:<36} {:>9.3} ms  {rate}", row.kernel, row.shape, row.seconds * 1e3);
        }
    }
    Ok(())
}

/// `bench --workload predict`: documents/s of a classifier on `device`.
fn run_predict_bench(args: &BenchArgs, docs: usize, chunks: usize, device: DeviceChoice) -> Result<()> {
    let Some(dir) = &args.model else { bail!("--workload predict needs --model (a classifier's model directory)") };
    let classifier = Classifier::load(dir, args.encoding.options(device))
        .with_context(|| format!("loading model {}", dir.display()))?;
    longread_model::device::reset_peak_memory(classifier.device());
    let _ = longread_model::layers::cuda::fused_attention_ran();
    let result = run_predict(&classifier, docs, chunks, args.repeat).context("benchmarking predict")?;
    let peak_gpu_bytes = longread_model::device::peak_memory_bytes(classifier.device());
    let device = longread_model::device::describe(classifier.device());
    let (chunk_size, _) = classifier.chunk_layout().unwrap_or((0, 0));
    let docs_per_s = docs as f64 / result.seconds;
    if args.json {
        let mut line = serde_json::to_value(&result)?;
        line["workload"] = "predict".into();
        line["model"] = dir.display().to_string().into();
        line["device"] = device.into();
        line["precision"] = serde_json::to_value(classifier.precision())?;
        line["max_batch_tokens"] = classifier.max_batch_tokens().into();
        line["docs"] = docs.into();
        line["chunks_per_doc"] = chunks.into();
        line["chunk_tokens"] = chunk_size.into();
        line["docs_per_s"] = docs_per_s.into();
        line["tokens_per_s"] = (docs_per_s * (chunks * chunk_size) as f64).into();
        line["peak_gpu_bytes"] = peak_gpu_bytes.into();
        if classifier.device().is_cuda() {
            line["gpu_attention"] = longread_model::layers::cuda::inference_attention_ran().into();
        }
        if longread_model::profile::enabled() {
            let steps: Vec<serde_json::Value> = longread_model::profile::report()
                .into_iter()
                .map(|(step, seconds, calls)| serde_json::json!({"step": step, "seconds": seconds, "calls": calls}))
                .collect();
            line["profile"] = steps.into();
        }
        println!("{line}");
    } else {
        println!(
            "predict {} {docs}x{chunks} chunks of {chunk_size} on {device}, {}: {:.3} s (median of {}; first run {:.3} s), {:.1} documents/s{}",
            dir.display(),
            classifier.precision().name(),
            result.seconds,
            result.runs.len(),
            result.warmup_seconds,
            docs_per_s,
            peak_gpu(peak_gpu_bytes)
        );
    }
    Ok(())
}

/// `bench --workload train`: documents/s and peak memory of a classifier's training step.
fn run_train_bench(args: &BenchArgs, docs: usize, chunks: usize, choice: DeviceChoice) -> Result<()> {
    let Some(dir) = &args.model else { bail!("--workload train needs --model (a classifier's model directory)") };
    let device = choice.resolve()?;
    let bf16 = match args.encoding.precision {
        None | Some(Precision::F32) => false,
        Some(Precision::Bf16) => true,
        Some(other) => bail!("--workload train takes --precision f32 or bf16, not {other:?}"),
    };
    let max_batch_tokens = args.encoding.max_batch_tokens.map(|n| n as usize);
    let settings =
        TrainStepSettings { docs, chunks, bf16, recompute: !args.no_recompute, max_batch_tokens, repeat: args.repeat };
    let result = run_train_step(dir, settings, &device)
        .with_context(|| format!("benchmarking a training step of {}", dir.display()))?;
    let described = longread_model::device::describe(&device);
    let precision = if bf16 { "bf16" } else { "f32" };
    if args.json {
        let mut line = serde_json::to_value(&result)?;
        line["workload"] = "train".into();
        line["model"] = dir.display().to_string().into();
        line["device"] = described.into();
        line["precision"] = precision.into();
        line["recompute"] = (!args.no_recompute).into();
        line["docs"] = docs.into();
        line["chunks_per_doc"] = chunks.into();
        line["peak_rss_bytes"] = peak_rss_bytes().into();
        println!("{line}");
    } else {
        println!(
            "train {} {docs}x{chunks} chunks on {described}, {precision}, batches of up to {} tokens{}: {:.3} s per step (median of {}; first step {:.3} s), {:.2} documents/s{}",
            dir.display(),
            result.max_batch_tokens,
            match (args.no_recompute, result.kept_documents) {
                (true, _) => ", no recompute".to_string(),
                (false, 0) => String::new(),
                (false, kept) => format!(", {kept} of {docs} documents encoded once (they fit a batch)"),
            },
            result.timing.seconds,
            result.timing.runs.len(),
            result.timing.warmup_seconds,
            result.docs_per_s,
            peak_gpu(result.peak_gpu_bytes)
        );
        if let (Some(host), Some(head)) = (&result.host, &result.head_start) {
            println!(
                "forward + backward: {:.4} s in the step (the host queued it in {}); {:.4} s of GPU time queued behind a hold of {:.3} s (the host queued it in {})",
                host.gradients_s,
                seconds_or_unknown(host.queued_s),
                head.gpu_s,
                head.hold_s,
                seconds_or_unknown(head.host_s)
            );
        }
        if let Some(profile) = &result.profile {
            print_train_profile(profile);
        }
    }
    Ok(())
}

/// `0.0123 s`, or `an unknown time` where no wait was noted.
fn seconds_or_unknown(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "an unknown time".into(), |s| format!("{s:.4} s"))
}

/// The parts of a profiled training step as tables for people (`LONGREAD_PROFILE=1`).
fn print_train_profile(profile: &StepProfile) {
    println!(
        "parts (each waited for on its own): forward {:.3} s, forward + backward {:.3} s, gradient norm {:.4} s, AdamW {:.4} s",
        profile.forward_s, profile.gradients_s, profile.grad_norm_s, profile.optimizer_s
    );
    let total: f64 = profile.ops.iter().map(|r| r.seconds).sum();
    println!("ops of one more forward + backward, {total:.3} s in all (the 25 longest):");
    println!(
        "{:<9} {:<32} {:<5} {:>9} {:>6} {:>7} {:>14}",
        "phase", "op", "dtype", "seconds", "share", "calls", "elements"
    );
    for row in profile.ops.iter().take(25) {
        println!(
            "{:<9} {:<32} {:<5} {:>9.4} {:>5.1}% {:>7} {:>14}",
            row.phase,
            row.op,
            row.dtype,
            row.seconds,
            100.0 * row.seconds / total.max(f64::MIN_POSITIVE),
            row.calls,
            row.elements
        );
    }
    let timelines =
        [("at its own pace", &profile.timeline), ("behind a hold of the GPU", &profile.timeline_head_start)];
    for (how, timeline) in timelines {
        if let Some(t) = timeline {
            print_gpu_timeline(how, t);
        }
    }
}

/// A [`GpuTimeline`] as a table for people: each kind of op's GPU time and the GPU's possible
/// wait for the host before it.
fn print_gpu_timeline(how: &str, t: &GpuTimeline) {
    println!(
        "forward + backward on the GPU's clock, {how}: {:.4} s of GPU time, of which up to {:.4} s waiting for the host; host {:.4} s (the 25 longest):",
        t.gpu_s, t.waited_s, t.host_s
    );
    println!("{:<9} {:<32} {:<5} {:>9} {:>9} {:>7}", "phase", "op", "dtype", "GPU s", "waited s", "calls");
    for row in t.ops.iter().take(25) {
        println!(
            "{:<9} {:<32} {:<5} {:>9.4} {:>9.4} {:>7}",
            row.phase, row.op, row.dtype, row.gpu_s, row.waited_s, row.calls
        );
    }
}

/// `BATCHxTOKENS` → (batch, tokens), both at least 1.
fn parse_shape(text: &str) -> Result<(usize, usize)> {
    let parsed = text.split_once(['x', 'X']).and_then(|(b, t)| Some((b.trim().parse().ok()?, t.trim().parse().ok()?)));
    match parsed {
        Some((b, t)) if b > 0 && t > 0 => Ok((b, t)),
        _ => bail!("--shape {text}: expected BATCHxTOKENS, e.g. 4x512"),
    }
}

/// ", peak GPU memory N GiB" when the device reported it; nothing on the CPU.
fn peak_gpu(bytes: Option<u64>) -> String {
    bytes.map_or(String::new(), |b| format!(", peak GPU memory {:.2} GiB", b as f64 / (1u64 << 30) as f64))
}
